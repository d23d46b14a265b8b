"""Publish a transaction as the next dataset version, safely against concurrent writers.

Each attempt: catch up with versions committed since our read version (checking each one's
transaction against ours with :mod:`lance_ops.table.conflicts`), write the transaction file, build
the manifest on top of the newest version, and publish it with put-if-absent. Losing the race
(the manifest name already exists) means another writer won: back off and try again on top of
it. Writers never overwrite a manifest, so no commit is ever half-applied or silently lost.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

import numpy as np

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CommitRetriesExhaustedError,
    DatasetNotFoundError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    StorageError,
)
from lance_ops.table import conflicts, deletion, feature_flags, naming
from lance_ops.table.manifest import (
    ManifestFile,
    decode_dictionaries,
    dictionary_fields,
    encode_manifest,
    place_dictionaries,
    read_manifest,
    write_manifest,
)
from lance_ops.table.fragment_stats import fill_fragment_stats
from lance_ops.table.idempotency import (  # noqa: F401 - IDEMPOTENCY_KEY, find_idempotent_commit re-exported
    IDEMPOTENCY_KEY,
    find_idempotent_commit,
    find_in_versions,
    kind_of,
)
from lance_ops.table.index_files import complete_index_metadata
from lance_ops.table.manifest_builder import build_manifest
from lance_ops.table.transaction_file import load_transaction, write_transaction_file

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 20  # upstream CommitConfig default


@dataclass
class CommitOptions:
    """How a commit behaves; the defaults follow upstream."""

    max_retries: int = DEFAULT_MAX_RETRIES
    enable_v2_manifest_paths: bool = True
    data_storage_version: str = "2.0"
    enable_stable_row_ids: bool = False
    #: base of the exponential backoff between attempts, seconds
    backoff_base: float = 0.02
    backoff_cap: float = 2.0
    write_version_hint: bool = True


@dataclass
class CommitContext:
    """What the commit needs to know beyond the transaction itself."""

    #: manifest the transaction was planned against (None: the dataset does not exist yet)
    read: ManifestFile | None
    #: for a Delete: fragment id -> row offsets this delete adds (enables deletion rebases)
    deleted_offsets: dict[int, np.ndarray] = field(default_factory=dict)
    #: legacy (v0.1) datasets: field id -> dictionary values of the schema the commit writes
    #: (needed by an Overwrite with dictionary fields; other operations keep the current values)
    dictionaries: dict | None = None


def _backoff(options: CommitOptions, attempt: int) -> None:
    delay = min(options.backoff_cap, options.backoff_base * (2 ** attempt))
    time.sleep(delay * (0.5 + random.random()))


def _fragment_map(manifest: table_pb2.Manifest | None) -> dict[int, table_pb2.DataFragment]:
    return {} if manifest is None else {f.id: f for f in manifest.fragments}


def _deleted_between(store, base, before: ManifestFile | None, txn, ) -> dict[int, np.ndarray]:
    """For a committed Delete: fragment id -> offsets it newly deleted (vs the version before it)."""
    out: dict[int, np.ndarray] = {}
    if txn is None or txn.WhichOneof("operation") != "delete":
        return out
    old = _fragment_map(before.manifest if before else None)
    for frag in txn.delete.updated_fragments:
        now = deletion.read_deletion_offsets(
            store, base, frag.id, frag.deletion_file if frag.HasField("deletion_file") else None
        )
        prev_frag = old.get(frag.id)
        prev = deletion.read_deletion_offsets(
            store, base, frag.id,
            prev_frag.deletion_file if prev_frag is not None and prev_frag.HasField("deletion_file") else None,
        )
        out[frag.id] = np.setdiff1d(now, prev, assume_unique=True)
    return out


def _rebase_deletions(store, base, txn, latest: table_pb2.Manifest, fragment_ids, ctx: CommitContext) -> None:
    """Merge our new deletions into the newest deletion vectors of ``fragment_ids``."""
    current = _fragment_map(latest)
    d = txn.delete
    keep = [f for f in d.updated_fragments if f.id not in fragment_ids]
    for frag_id in sorted(fragment_ids):
        newest = current[frag_id]
        old_file = newest.deletion_file if newest.HasField("deletion_file") else None
        merged = deletion.merge_deletions(
            deletion.read_deletion_offsets(store, base, frag_id, old_file), ctx.deleted_offsets[frag_id]
        )
        if merged.size >= newest.physical_rows:
            d.deleted_fragment_ids.append(frag_id)
            continue
        updated = table_pb2.DataFragment()
        updated.CopyFrom(newest)
        updated.deletion_file.CopyFrom(
            deletion.write_deletion_file(store, base, frag_id, txn.read_version, merged, old_file)
        )
        keep.append(updated)
    del d.updated_fragments[:]
    d.updated_fragments.extend(keep)


def _catch_up(store, base, txn, ctx: CommitContext, current: ManifestFile | None, latest_version: int):
    """Check every version after ``current`` up to ``latest_version``; returns the newest ManifestFile."""
    for version in range(current.version + 1 if current else 1, latest_version + 1):
        loc = naming.find_version(store, base, version)
        if loc is None:
            raise CommitOutcomeUnknownError(f"{store.uri(base)}: version {version} vanished while committing")
        theirs_file = read_manifest(store, loc.path)
        # Never rebuild on top of a version whose writer features we do not understand.
        feature_flags.check_writer_flags(theirs_file.manifest.writer_feature_flags, store.uri(loc.path))
        theirs = load_transaction(store, base, theirs_file)
        their_deleted = (
            _deleted_between(store, base, current, theirs)
            if txn.WhichOneof("operation") == "delete" and ctx.deleted_offsets else None
        )
        outcome = conflicts.check(
            txn, theirs, our_deleted=ctx.deleted_offsets or None, their_deleted=their_deleted
        )
        if outcome.verdict == conflicts.Verdict.INCOMPATIBLE:
            raise CommitConflictError(
                f"{store.uri(base)}: commit conflicts with version {version}: {outcome.reason}"
            )
        if outcome.verdict == conflicts.Verdict.RETRYABLE:
            raise RetryableCommitConflictError(
                f"{store.uri(base)}: preempted by concurrent version {version} ({outcome.reason}); "
                "re-read the dataset and retry"
            )
        if outcome.verdict == conflicts.Verdict.REBASE:
            _rebase_deletions(store, base, txn, theirs_file.manifest, outcome.rebase_fragments, ctx)
        current = theirs_file
    return current


def _new_dictionaries(txn, current: ManifestFile | None, restored: ManifestFile | None,
                      ctx: CommitContext) -> dict:
    """Dictionary values the new version's manifest file carries (legacy datasets only).

    They belong to the schema: an Overwrite brings its own (``ctx.dictionaries``, from the data it
    wrote), a Restore those of the restored version, every other operation keeps the current ones.
    """
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        inherited: dict = {}
    elif op == "restore":
        inherited = restored.dictionaries if restored is not None else {}
    else:
        inherited = current.dictionaries if current is not None else {}
    return {**inherited, **(ctx.dictionaries or {})}


def _published(store, path: str, txn_uuid: str) -> ManifestFile | None:
    """Our manifest, if the ambiguous write actually landed."""
    try:
        mf = read_manifest(store, path)
    except Exception:  # noqa: BLE001 - we only want to know whether it is ours
        return None
    return mf if mf.transaction is not None and mf.transaction.uuid == txn_uuid else None


def _publish(store, base, version, path, manifest, txn, v2: bool, index_section=None, dictionaries=None) -> int:
    """Write the manifest so that exactly one writer can own ``version``."""
    if getattr(store, "ddb_table_name", None):
        from lance_ops.table import external_store

        data = encode_manifest(manifest, txn, index_section, dictionaries)
        external_store.commit(store, base, version, data, v2)
        return len(data)
    return write_manifest(store, path, manifest, txn, index_section, dictionaries=dictionaries)


def _carried_indices(txn, current: ManifestFile | None, restored: ManifestFile | None):
    """The index section the new version keeps: indices survive every op but Overwrite/Restore."""
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        return None
    if op == "restore":
        return restored.index_section if restored is not None else None
    return current.index_section if current is not None else None


#: data file footer numbers -> the storage version they belong to
_FILE_VERSIONS = {(0, 1): "0.1", (0, 2): "0.1", (0, 3): "2.0", (2, 0): "2.0", (2, 1): "2.1", (2, 2): "2.2",
                  (2, 3): "2.3"}


def _new_fragments(txn: transaction_pb2.Transaction):
    op = txn.WhichOneof("operation")
    if op == "append":
        yield from txn.append.fragments
    elif op == "overwrite":
        yield from txn.overwrite.fragments
    elif op == "rewrite":
        yield from txn.rewrite.new_fragments
        for group in txn.rewrite.groups:
            yield from group.new_fragments
    elif op == "update":
        yield from txn.update.new_fragments


def _check_data_file_versions(manifest, txn: transaction_pb2.Transaction, where: str) -> None:
    """Refuse (before anything of the commit is written) new data files whose format version is
    not the dataset's: pylance cannot open a dataset mixing them ("mixed data-file-version
    capability is not enabled")."""
    want = manifest.data_format.version
    if not want:
        return
    want = {"legacy": "0.1", "stable": "2.2"}.get(want, want)
    for frag in _new_fragments(txn):
        for df in frag.files:
            got = _FILE_VERSIONS.get((df.file_major_version, df.file_minor_version))
            if got is not None and got != want:
                raise SchemaMismatchError(
                    f"{where}: data file {df.path!r} (fragment {frag.id}) is Lance file version {got}, but the "
                    f"dataset stores {want}; write the fragments with data_storage_version={want!r}. Nothing "
                    "was committed.")


def commit_transaction(
    store,
    base: str,
    transaction: transaction_pb2.Transaction,
    ctx: CommitContext,
    options: CommitOptions | None = None,
) -> ManifestFile:
    """Commit ``transaction`` and return the new version's ManifestFile.

    Raises CommitConflictError (incompatible), RetryableCommitConflictError (preempted: redo the
    operation), CommitRetriesExhaustedError (lost the race too often) or CommitOutcomeUnknownError
    (the store failed so that we cannot tell whether the commit landed).
    """
    options = options or CommitOptions()
    txn = transaction_pb2.Transaction()
    txn.CopyFrom(transaction)
    if not txn.uuid:
        txn.uuid = naming.new_transaction_uuid()
    key = txn.transaction_properties.get(IDEMPOTENCY_KEY)

    scheme = naming.detect_scheme(store, base)
    v2 = options.enable_v2_manifest_paths if scheme is None else scheme == naming.NamingScheme.V2
    current = ctx.read
    if current is not None:
        feature_flags.check_writer_flags(current.manifest.writer_feature_flags, store.uri(current.path or base))
    restored = restored_file = None
    if txn.WhichOneof("operation") == "restore":
        loc = naming.find_version(store, base, txn.restore.version)
        if loc is None:
            raise DatasetNotFoundError(f"{store.uri(base)}: version {txn.restore.version} does not exist")
        restored_file = read_manifest(store, loc.path)
        restored = restored_file.manifest

    for attempt in range(options.max_retries + 1):
        latest = naming.latest_version(store, base)
        if latest is not None and (current is None or latest.version > current.version):
            if key:
                earlier = find_in_versions(store, base, key, kind_of(txn),
                                           (current.version if current else 0) + 1, latest.version)
                if earlier is not None:
                    return earlier
            current = _catch_up(store, base, txn, ctx, current, latest.version)
        elif latest is None and current is not None:
            raise DatasetNotFoundError(f"{store.uri(base)}: the dataset disappeared while committing")

        version = current.version + 1 if current else 1
        manifest = build_manifest(
            current.manifest if current else None, txn, version=version, transaction_file="",
            data_storage_version=options.data_storage_version,
            enable_stable_row_ids=options.enable_stable_row_ids, restored=restored,
        )
        _check_data_file_versions(manifest, txn, store.uri(base))
        fill_fragment_stats(store, base, manifest)  # old datasets: as pylance's commit fills them
        # legacy datasets: the dictionary values go into the manifest file (offsets set here too);
        # missing values are refused here, before anything of this attempt is written
        dictionaries = _new_dictionaries(txn, current, restored_file, ctx)
        prefix = place_dictionaries(manifest, dictionaries) if dictionary_fields(manifest) else b""
        manifest.transaction_file = write_transaction_file(store, base, txn)
        path = store.join(base, naming.manifest_path(version, v2))
        index_section = complete_index_metadata(store, base, _carried_indices(txn, current, restored_file))
        try:
            size = _publish(store, base, version, path, manifest, txn, v2, index_section, dictionaries)
        except AlreadyExistsError:
            mine = _published(store, path, txn.uuid)
            if mine is not None:  # a retried request of ours landed
                return mine
            log.info("lost the race for version %d of %s (attempt %d)", version, store.uri(base), attempt + 1)
            _backoff(options, attempt)
            continue
        except (StorageError, OSError) as exc:
            mine = _published(store, path, txn.uuid)
            if mine is not None:
                return mine
            raise CommitOutcomeUnknownError(
                f"{store.uri(path)}: writing the manifest failed ({exc}); the commit of version "
                f"{version} may or may not have landed — re-open the dataset to find out"
            ) from exc
        if options.write_version_hint:
            try:
                naming.write_version_hint(store, base, version)
            except (StorageError, OSError):
                pass  # the hint is an optimisation only
        stored = decode_dictionaries(manifest, prefix, path=path) if prefix else {}
        return ManifestFile(manifest, txn, index_section, path, size, stored)
    raise CommitRetriesExhaustedError(
        f"{store.uri(base)}: lost the commit race {options.max_retries + 1} times; giving up"
    )
