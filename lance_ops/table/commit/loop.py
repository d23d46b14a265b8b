"""Publish a transaction as the next dataset version, safely against concurrent writers.

Each attempt: catch up with versions committed since our read version (checking each one's
transaction against ours with :mod:`lance_ops.table.commit.conflicts`), write the transaction file, build
the manifest on top of the newest version, and publish it with put-if-absent. Losing the race
(the manifest name already exists) means another writer won: back off and try again on top of
it. Writers never overwrite a manifest, so no commit is ever half-applied or silently lost.

Outcomes are never guessed. When the store fails so that we cannot tell whether our manifest
landed (an error after the write, a failed or truncated read of the name we wrote), the version
is remembered as *uncertain*: the next attempt's catch-up compares every newer version's
transaction uuid with ours (a match means ours landed: it is returned, never committed again),
and a write that can neither be confirmed nor ruled out ends in CommitOutcomeUnknownError.
Versions removed by a concurrent cleanup while we catch up are judged together with the next
version that still exists, from the two manifests (see :func:`_check_gap`), so deletes, updates
and compactions rebase over them instead of failing.

Publishing at ``latest + 1`` with put-if-absent is only safe while no newer version can have
been committed and removed since we listed: ``_versions/`` is listed again right before the
put, and cleanup keeps every version superseded less than its minimum age (5 minutes by
default) ago, far longer than that listing-to-publish window. An empty listing is never taken for "no versions" when we know better
(``locate.latest_version(known=...)``). Since a cleanup may be configured with a shorter age (tests:
0) and a request can be slow, a successful put is also checked afterwards
(:mod:`lance_ops.table.commit.standing`, ADR 0024): a manifest that landed below the latest is
withdrawn and the commit tried again, never acknowledged.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CommitRetriesExhaustedError,
    DatasetNotFoundError,
    DurabilityError,
    LanceOpsError,
    ObjectNotFoundError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    StorageError,
)
from lance_ops.format.version import FileVersion
from lance_ops.table import deletion, versions
from lance_ops.table.commit import conflicts
from lance_ops.table.manifest import feature_flags
from lance_ops.table.manifest import naming
from lance_ops.table.manifest import index_rewrite
from lance_ops.table.commit import locate
from lance_ops.table.commit import standing
from lance_ops.table.manifest.codec import (
    ManifestFile,
    decode_dictionaries,
    dictionary_fields,
    encode_manifest,
    place_dictionaries,
    read_manifest,
    write_manifest,
)
from lance_ops.table.stats.fragments import fill_fragment_stats
from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY, find_in_versions, kind_of
from lance_ops.table.commit.properties import DEFAULT_MAX_RETRIES, CommitProperties
from lance_ops.table.index_files import complete_index_metadata
from lance_ops.table.manifest.builder import build_manifest
from lance_ops.table.paths import check_message_paths
from lance_ops.table.commit.transaction_file import load_transaction, write_transaction_file

if TYPE_CHECKING:
    import pyarrow as pa

    from lance_ops.io import ObjectStore

log = logging.getLogger(__name__)

#: failed manifest writes (not found afterwards) retried at the same version before giving up
MAX_STORE_FAILURES = 3
#: reads of the manifest we may have written, before its outcome counts as uncertain
_CHECK_READS = 3


@dataclass
class CommitOptions:
    """How a commit behaves; the defaults follow upstream."""

    max_retries: int = DEFAULT_MAX_RETRIES
    enable_v2_manifest_paths: bool = True
    #: storage version a new dataset (or an overwrite) records; the dataset's own for other operations
    data_storage_version: str = versions.DEFAULT
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
    dictionaries: dict[int, pa.Array] | None = None


def _backoff(options: CommitOptions, attempt: int) -> None:
    delay = min(options.backoff_cap, options.backoff_base * (2 ** attempt))
    time.sleep(delay * (0.5 + random.random()))


def _fragment_map(manifest: table_pb2.Manifest | None) -> dict[int, table_pb2.DataFragment]:
    return {} if manifest is None else {f.id: f for f in manifest.fragments}


def _their_deletions(
    store: ObjectStore, base: str, ours: transaction_pb2.Transaction, theirs: transaction_pb2.Transaction | None
) -> dict[int, np.ndarray]:
    """For a committed Delete: fragment id -> every offset deleted in the fragments both touch.

    Our new offsets were live at our read version, so they overlap the other delete's iff they
    meet its (cumulative) vector: the version before it is not needed (cleanup may have removed
    it and its deletion files).
    """
    out: dict[int, np.ndarray] = {}
    if theirs is None or theirs.WhichOneof("operation") != "delete":
        return out
    mine = {f.id for f in ours.delete.updated_fragments} | set(ours.delete.deleted_fragment_ids)
    for frag in theirs.delete.updated_fragments:
        if frag.id in mine:
            out[frag.id] = deletion.read_deletion_offsets(
                store, base, frag.id, frag.deletion_file if frag.HasField("deletion_file") else None)
    return out


def _rebase_deletions(store: ObjectStore, base: str, txn: transaction_pb2.Transaction, latest: table_pb2.Manifest,
                      fragment_ids: set[int], ctx: CommitContext) -> None:
    """Merge our new deletions into the newest deletion vectors of ``fragment_ids``."""
    current = _fragment_map(latest)
    d = txn.delete
    keep = [f for f in d.updated_fragments if f.id not in fragment_ids]
    emptied = []  # applied only once every read succeeded (a read may fail under cleanup)
    for frag_id in sorted(fragment_ids):
        newest = current[frag_id]
        old_file = newest.deletion_file if newest.HasField("deletion_file") else None
        merged = deletion.merge_deletions(
            deletion.read_deletion_offsets(store, base, frag_id, old_file), ctx.deleted_offsets[frag_id]
        )
        if merged.size >= newest.physical_rows:
            emptied.append(frag_id)
            continue
        updated = table_pb2.DataFragment()
        updated.CopyFrom(newest)
        updated.deletion_file.CopyFrom(
            deletion.write_deletion_file(store, base, frag_id, txn.read_version, merged, old_file)
        )
        keep.append(updated)
    d.deleted_fragment_ids.extend(emptied)
    del d.updated_fragments[:]
    d.updated_fragments.extend(keep)


def _txn_uuid(mf: ManifestFile, txn: transaction_pb2.Transaction | None) -> str | None:
    """The uuid of the transaction that produced ``mf`` (inline copy, else its file's name)."""
    if txn is not None and txn.uuid:
        return txn.uuid
    parsed = naming.parse_transaction_file_name(mf.manifest.transaction_file)
    return parsed[1] if parsed else None


def _schema_key(manifest: table_pb2.Manifest) -> list[tuple[int, int, str, str]]:
    return [(f.id, f.parent_id, f.name, f.logical_type) for f in manifest.fields]


def _index_ids(mf: ManifestFile) -> set[bytes]:
    section = mf.index_section
    return set() if section is None else {bytes(i.uuid.uuid) for i in section.indices}


def _check_gap(store: ObjectStore, base: str, txn: transaction_pb2.Transaction, ctx: CommitContext,
               before: ManifestFile, after: ManifestFile) -> conflicts.Outcome:
    """Verdict for committing ``txn`` on ``after`` when versions between ``before`` and ``after``
    were removed (by cleanup) and their transactions cannot be read.

    The two manifests are compared instead: an Append (or fragment reservation) only needs the
    schema unchanged; a Delete, Update, Rewrite or DataReplacement needs every fragment it
    touches to be there with the same data files and (except for deletes on other rows, which
    REBASE) the same deletion vector; a Rewrite also needs the same indices. Anything else is
    RETRYABLE: re-read the dataset and redo the operation. Never a guess that could lose rows.
    """
    op = txn.WhichOneof("operation")
    label = f"{op} over versions {before.version + 1}..{after.version - 1} removed by cleanup"
    if op in ("restore", "overwrite"):
        return conflicts.Outcome(conflicts.Verdict.OK)
    schema_same = _schema_key(before.manifest) == _schema_key(after.manifest)
    if op in ("append", "reserve_fragments", "update_bases"):
        if schema_same:
            return conflicts.Outcome(conflicts.Verdict.OK)
        return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: the schema changed")
    if op not in ("delete", "update", "rewrite", "data_replacement"):
        return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: cannot be checked")
    if not schema_same:
        return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: the schema changed")
    if op == "rewrite" and _index_ids(before) != _index_ids(after):
        return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: the indices changed")
    old, new = _fragment_map(before.manifest), _fragment_map(after.manifest)
    emptied = set(txn.delete.deleted_fragment_ids) if op == "delete" else set()
    rebase: set[int] = set()
    for frag_id in sorted(conflicts.touched_fragments(txn)):
        a, b = old.get(frag_id), new.get(frag_id)
        if a is None or b is None:
            return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: fragment {frag_id} was removed")
        if [(f.path, list(f.fields)) for f in a.files] != [(f.path, list(f.fields)) for f in b.files]:
            return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: fragment {frag_id} was rewritten")
        if a.deletion_file == b.deletion_file and a.physical_rows == b.physical_rows:
            continue
        ours = ctx.deleted_offsets.get(frag_id)
        if op != "delete" or frag_id in emptied or ours is None:
            return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: fragment {frag_id} changed")
        theirs = deletion.read_deletion_offsets(
            store, base, frag_id, b.deletion_file if b.HasField("deletion_file") else None)
        if np.intersect1d(ours, theirs).size:
            return conflicts.Outcome(conflicts.Verdict.RETRYABLE, f"{label}: rows of fragment {frag_id} "
                                                                  "were deleted concurrently")
        rebase.add(frag_id)
    if rebase:
        return conflicts.Outcome(conflicts.Verdict.REBASE, label, rebase_fragments=rebase)
    return conflicts.Outcome(conflicts.Verdict.OK)


def _apply(store: ObjectStore, base: str, txn: transaction_pb2.Transaction, ctx: CommitContext,
           outcome: conflicts.Outcome, theirs_file: ManifestFile, version: int) -> None:
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


@dataclass
class _State:
    """What one commit carries from attempt to attempt."""

    current: ManifestFile | None
    #: a version our manifest may have landed at (see the module doc)
    uncertain: int | None = None
    #: failed manifest writes so far
    store_failures: int = 0


def _catch_up(store: ObjectStore, base: str, txn: transaction_pb2.Transaction, ctx: CommitContext,
              current: ManifestFile | None, latest_version: int,
              state: _State | None = None) -> tuple[ManifestFile | None, ManifestFile | None]:
    """Check every version after ``current`` up to ``latest_version``.

    Returns ``(newest ManifestFile, ours)``: ``ours`` is the version carrying our transaction
    uuid if one does (an earlier attempt landed after all), else None. Versions that vanished
    (cleanup) are judged together with the next one that exists (:func:`_check_gap`); if the
    uncertain version of ``state`` (one we may have written) vanished, the outcome is unknown;
    once it is read and is not ours, it is cleared.
    """
    uncertain = state.uncertain if state is not None else None
    version = current.version + 1 if current else 1
    gap: list[int] = []
    relists = 0
    missing: ObjectNotFoundError | None = None  # the last file found missing in a listed version
    while True:
        if version > latest_version:
            if not gap:
                return current, None
            # the versions we were told about went away: newer ones replaced them
            newest = locate.latest_version(store, base, known=version - 1)
            relists += 1
            if newest is None or newest.version < version or relists > 3:
                if missing is not None:
                    raise missing
                raise RetryableCommitConflictError(
                    f"{store.uri(base)}: versions {gap[0]}..{gap[-1]} vanished while committing and no newer "
                    "version was found; re-read the dataset and retry")
            latest_version = newest.version
            continue
        loc = locate.find_version(store, base, version)
        theirs_file = None
        if loc is not None:
            try:
                theirs_file = read_manifest(store, loc.path)
            except ObjectNotFoundError:
                theirs_file = None
        if theirs_file is None or loc is None:  # (loc is None implies theirs_file is None)
            if version == uncertain:
                raise CommitOutcomeUnknownError(
                    f"{store.uri(base)}: version {version}, which this commit may have written, was removed "
                    "before it could be checked; the commit may or may not have landed — re-open the dataset "
                    "to find out")
            gap.append(version)
            version += 1
            continue
        # Never rebuild on top of a version whose writer features we do not understand.
        feature_flags.check_writer_flags(theirs_file.manifest.writer_feature_flags, store.uri(loc.path))
        theirs = load_transaction(store, base, theirs_file)
        if _txn_uuid(theirs_file, theirs) == txn.uuid:
            return theirs_file, theirs_file  # ours landed (an earlier attempt's response was lost)
        if version == uncertain and state is not None:  # (uncertain is None without a state)
            state.uncertain = uncertain = None  # read, and not ours
        try:
            if current is not None and gap:
                log.info("%s: versions %d..%d were removed while committing; checking against version %d",
                         store.uri(base), gap[0], gap[-1], version)
                outcome = _check_gap(store, base, txn, ctx, current, theirs_file)
            else:
                if theirs is None and locate.find_version(store, base, version) is None:
                    raise ObjectNotFoundError(f"{store.uri(loc.path)}: removed while reading")
                their_deleted = (
                    _their_deletions(store, base, txn, theirs)
                    if txn.WhichOneof("operation") == "delete" and ctx.deleted_offsets else None
                )
                outcome = conflicts.check(
                    txn, theirs, our_deleted=ctx.deleted_offsets or None, their_deleted=their_deleted
                )
            _apply(store, base, txn, ctx, outcome, theirs_file, version)
        except ObjectNotFoundError as exc:
            # a file of this version was removed by cleanup while we read it (the version is
            # going away): judge it together with the next version that exists
            missing = exc
            gap.append(version)
            version += 1
            continue
        current = theirs_file
        gap = []
        version += 1


def _new_dictionaries(txn: transaction_pb2.Transaction, current: ManifestFile | None,
                      restored: ManifestFile | None, ctx: CommitContext) -> dict[int, pa.Array]:
    """Dictionary values the new version's manifest file carries (legacy datasets only).

    They belong to the schema: an Overwrite brings its own (``ctx.dictionaries``, from the data it
    wrote), a Restore those of the restored version, every other operation keeps the current ones.
    """
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        inherited: Mapping[int, pa.Array] = {}
    elif op == "restore":
        inherited = restored.dictionaries if restored is not None else {}
    else:
        inherited = current.dictionaries if current is not None else {}
    return {**inherited, **(ctx.dictionaries or {})}


class _Landed(enum.Enum):
    OURS = "ours"          # our manifest is there
    THEIRS = "theirs"      # another writer's manifest is there: we lost the race
    ABSENT = "absent"      # nothing is there (the store said "not found")
    UNKNOWN = "unknown"    # it could not be read: it may or may not be ours


def _check_landed(store: ObjectStore, path: str, txn_uuid: str) -> tuple[_Landed, ManifestFile | None]:
    """Whether the manifest at ``path`` (our ambiguous write) is ours. A failed or truncated read
    is UNKNOWN, never "not ours": treating it as a lost race would commit the transaction twice."""
    for attempt in range(_CHECK_READS):
        try:
            mf = read_manifest(store, path)
        except ObjectNotFoundError:
            return _Landed.ABSENT, None
        except (LanceOpsError, OSError) as exc:  # I/O error, truncated body, garbled bytes
            log.info("could not read back %s (%s); try %d of %d", store.uri(path), exc, attempt + 1, _CHECK_READS)
            time.sleep(0.05 * (2 ** attempt))
            continue
        if _txn_uuid(mf, mf.transaction) == txn_uuid:
            return _Landed.OURS, mf
        return _Landed.THEIRS, None
    return _Landed.UNKNOWN, None


def _publish(store: ObjectStore, base: str, version: int, path: str, manifest: table_pb2.Manifest,
             txn: transaction_pb2.Transaction, v2: bool, index_section: table_pb2.IndexSection | None = None,
             dictionaries: Mapping[int, pa.Array] | None = None) -> int:
    """Write the manifest so that exactly one writer can own ``version``."""
    if locate.has_external_store(store):
        from lance_ops.table.commit import dynamodb

        data = encode_manifest(manifest, txn, index_section, dictionaries)
        dynamodb.commit(store, base, version, data, v2)
        return len(data)
    return write_manifest(store, path, manifest, txn, index_section, dictionaries=dictionaries)


def _carried_indices(txn: transaction_pb2.Transaction, current: ManifestFile | None,
                     restored: ManifestFile | None) -> table_pb2.IndexSection | None:
    """The index section the new version keeps: indices survive every op but Overwrite/Restore."""
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        return None
    if op == "restore":
        return restored.index_section if restored is not None else None
    if op == "rewrite" and current is not None:
        stable = bool(current.manifest.reader_feature_flags & feature_flags.FLAG_STABLE_ROW_IDS)
        return index_rewrite.apply_rewrite(current.index_section, txn, stable_row_ids=stable)
    if op == "create_index":
        return index_rewrite.apply_create_index(current.index_section if current is not None else None, txn)
    return current.index_section if current is not None else None


def _new_fragments(txn: transaction_pb2.Transaction) -> Iterator[table_pb2.DataFragment]:
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


def _check_data_file_versions(manifest: table_pb2.Manifest, txn: transaction_pb2.Transaction, where: str) -> None:
    """Refuse (before anything of the commit is written) new data files whose format version is
    not the dataset's: pylance cannot open a dataset mixing them ("mixed data-file-version
    capability is not enabled")."""
    want = manifest.data_format.version
    if not want:
        return
    want = str(FileVersion.lookup(want) or want)  # the dataset's version, as its messages spell it
    for frag in _new_fragments(txn):
        for df in frag.files:
            numbers = (df.file_major_version, df.file_minor_version)
            got = FileVersion.from_manifest(*numbers) if numbers != (0, 0) else None  # (0, 0): not set
            if got is not None and got != FileVersion.lookup(want):
                raise SchemaMismatchError(
                    f"{where}: data file {df.path!r} (fragment {frag.id}) is Lance file version {got}, but the "
                    f"dataset stores {want}; write the fragments with data_storage_version={want!r}. Nothing "
                    "was committed.")


def _attempt(store: ObjectStore, base: str, txn: transaction_pb2.Transaction, ctx: CommitContext,
             options: CommitOptions, state: _State, restored: table_pb2.Manifest | None,
             restored_file: ManifestFile | None, key: str | None, v2: bool, attempt: int) -> ManifestFile | None:
    """One commit attempt: the committed (or found) version, or None to try again."""
    current = state.current
    latest = locate.latest_version(store, base, known=current.version if current is not None else None)
    if latest is not None and (current is None or latest.version > current.version):
        if key:
            earlier = find_in_versions(store, base, key, kind_of(txn),
                                       (current.version if current else 0) + 1, latest.version)
            if earlier is not None:
                return earlier
        current, ours = _catch_up(store, base, txn, ctx, current, latest.version, state)
        if ours is not None:
            return ours
        state.current = current
    elif latest is None and current is not None:
        raise DatasetNotFoundError(f"{store.uri(base)}: the dataset disappeared while committing")

    version = current.version + 1 if current else 1
    # an Append keeps the previous fragments as they are: one pass over them answers the builder's
    # and the statistics check's questions, which then look only at the new fragments (ADR 0052)
    facts = current.fragment_facts() \
        if current is not None and txn.WhichOneof("operation") == "append" else None
    manifest = build_manifest(
        current.manifest if current else None, txn, version=version, transaction_file="",
        data_storage_version=options.data_storage_version,
        enable_stable_row_ids=options.enable_stable_row_ids, restored=restored, previous_facts=facts,
    )
    _check_data_file_versions(manifest, txn, store.uri(base))
    settled = len(facts.ids) if facts is not None and not facts.needs_stats else 0
    fill_fragment_stats(store, base, manifest, settled)  # old datasets: as pylance's commit fills them
    # legacy datasets: the dictionary values go into the manifest file (offsets set here too);
    # missing values are refused here, before anything of this attempt is written
    dictionaries = _new_dictionaries(txn, current, restored_file, ctx)
    prefix = place_dictionaries(manifest, dictionaries) if dictionary_fields(manifest) else b""
    with store.deferred_sync():  # made durable with the manifest, by the publish's barrier (ADR 0036)
        manifest.transaction_file = write_transaction_file(store, base, txn)
    path = store.join(base, naming.manifest_path(version, v2))
    index_section = complete_index_metadata(store, base, _carried_indices(txn, current, restored_file))
    # List once more right before publishing: put-if-absent cannot tell "nobody has this version
    # yet" from "a cleanup removed it after newer ones came" (a publish there would land below
    # the latest, invisible). This keeps that window to one request, far below cleanup's minimum
    # age for superseded versions however long the catch-up took.
    if current is not None:
        fresh = locate.latest_version(store, base, known=current.version)
        if fresh is not None and fresh.version > current.version:
            log.info("version %d of %s appeared while preparing the commit; catching up", fresh.version,
                     store.uri(base))
            return None
    prior = state.uncertain  # an earlier attempt's write may have landed
    try:
        size = _publish(store, base, version, path, manifest, txn, v2, index_section, dictionaries)
    except AlreadyExistsError:
        landed, mine = _check_landed(store, path, txn.uuid)
        if landed == _Landed.OURS:  # a retried request of ours landed
            return mine if _settled(store, base, version, path, manifest, current, state, prior, options,
                                    attempt) else None
        if landed == _Landed.UNKNOWN:
            state.uncertain = version
        log.info("lost the race for version %d of %s (attempt %d)", version, store.uri(base), attempt + 1)
        _backoff(options, attempt)
        return None
    except DurabilityError:  # the files could not be made durable: nothing was linked, and no retry can help
        raise
    except (StorageError, OSError) as exc:
        landed, mine = _check_landed(store, path, txn.uuid)
        if landed == _Landed.OURS:
            return mine if _settled(store, base, version, path, manifest, current, state, prior, options,
                                    attempt) else None
        if landed == _Landed.THEIRS:
            _backoff(options, attempt)
            return None
        # ABSENT: not there now, but a request still in flight might land later; UNKNOWN: unreadable.
        # Either way the next attempt (at this version, or catching up over it) settles it by uuid.
        state.uncertain = version
        state.store_failures += 1
        if state.store_failures >= MAX_STORE_FAILURES:
            raise CommitOutcomeUnknownError(
                f"{store.uri(path)}: writing the manifest failed {state.store_failures} times (last: {exc}); the "
                f"commit of version {version} may or may not have landed — re-open the dataset to find out"
            ) from exc
        log.warning("writing %s failed (%s); the manifest is %s, retrying", store.uri(path), exc, landed.value)
        _backoff(options, attempt)
        return None
    if not _settled(store, base, version, path, manifest, current, state, prior, options, attempt):
        return None
    if options.write_version_hint:
        try:
            with store.deferred_sync():  # a hint: no fsync of its own (the next barrier takes it along)
                naming.write_version_hint(store, base, version)
        except (StorageError, OSError):
            pass  # the hint is an optimisation only
    stored = decode_dictionaries(manifest, prefix, path=path) if prefix else {}
    return ManifestFile(manifest, txn, index_section, path, size, stored)


def _settled(store: ObjectStore, base: str, version: int, path: str, manifest: table_pb2.Manifest,
             current: ManifestFile | None, state: _State, prior: int | None, options: CommitOptions,
             attempt: int) -> bool:
    """Whether the manifest we just wrote at ``version`` is part of the history (acknowledge it),
    or False after withdrawing it as an orphan (try again on top of the latest).

    See :mod:`lance_ops.table.commit.standing`: put-if-absent also succeeds in a slot a cleanup
    emptied after newer versions came; such a version is below the latest and nobody sees it.
    Raises CommitOutcomeUnknownError when that cannot be decided, or when an earlier attempt of
    ours may have landed (``prior``) and the orphan could hide its fate.
    """
    if current is None or locate.has_external_store(store):
        return True  # a new dataset's version 1; DynamoDB-backed commits are ordered by the table
    state.uncertain = version  # a failed listing below leaves the outcome unknown
    where, why = standing.standing(store, base, version, manifest, current.manifest)
    state.uncertain = prior
    if where in (standing.Standing.LATEST, standing.Standing.FOLLOWED):
        return True
    uri = store.uri(path)
    if where == standing.Standing.UNKNOWN or prior is not None:
        raise CommitOutcomeUnknownError(
            f"{uri}: written, but newer versions exist ({why}); the commit of version {version} may or may "
            "not be part of the dataset's history — re-open the dataset to find out")
    log.warning("%s: written after version %d had been committed and cleaned up (%s); it is not part of the "
                "history: withdrawing it and committing again", uri, version, why)
    try:
        store.delete(path)
    except (StorageError, OSError) as exc:
        raise RetryableCommitConflictError(
            f"{uri}: preempted: the version was committed and cleaned up by others while our request was "
            f"in flight, and our invisible copy could not be withdrawn ({exc}); nothing was committed — "
            "re-read the dataset and retry") from exc
    _backoff(options, attempt)
    return False


def commit_transaction(
    store: ObjectStore,
    base: str,
    transaction: transaction_pb2.Transaction,
    ctx: CommitContext,
    options: CommitOptions | None = None,
    *,
    properties: CommitProperties | None = None,
) -> ManifestFile:
    """Commit ``transaction`` and return the new version's ManifestFile.

    ``properties`` (the writer's :class:`CommitProperties`) are added to the transaction's
    properties, and their ``max_retries`` bounds the lost commit races retried.

    Raises CommitConflictError (incompatible), RetryableCommitConflictError (preempted: redo the
    operation), CommitRetriesExhaustedError (lost the race too often) or CommitOutcomeUnknownError
    (the store failed so that we cannot tell whether the commit landed).
    """
    options = options or CommitOptions()
    txn = transaction_pb2.Transaction()
    txn.CopyFrom(transaction)
    if properties is not None:
        txn.transaction_properties.update(properties.transaction_properties())
        options = dataclasses.replace(options, max_retries=properties.max_retries)
    check_message_paths(txn, where=f"{store.uri(base)}: transaction to commit")  # nothing unsafe lands
    if not txn.uuid:
        txn.uuid = naming.new_transaction_uuid()
    key = txn.transaction_properties.get(IDEMPOTENCY_KEY)

    current = ctx.read
    # the naming scheme of the version we read, if any: an empty listing must not make a V1
    # dataset get a V2 name (a mixed directory nobody can open)
    parsed = naming.parse_manifest_name(current.path) if current is not None and current.path else None
    scheme = parsed[1] if parsed is not None else naming.detect_scheme(store, base)
    v2 = options.enable_v2_manifest_paths if scheme is None else scheme == naming.NamingScheme.V2
    if current is not None:
        feature_flags.check_writer_flags(current.manifest.writer_feature_flags, store.uri(current.path or base))
    restored = restored_file = None
    if txn.WhichOneof("operation") == "restore":
        loc = locate.find_version(store, base, txn.restore.version)
        if loc is None:
            raise DatasetNotFoundError(f"{store.uri(base)}: version {txn.restore.version} does not exist")
        restored_file = read_manifest(store, loc.path)
        restored = restored_file.manifest

    state = _State(current)
    for attempt in range(options.max_retries + 1):
        try:
            result = _attempt(store, base, txn, ctx, options, state, restored, restored_file, key, v2, attempt)
        except (CommitOutcomeUnknownError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if state.uncertain is None:
                raise
            raise CommitOutcomeUnknownError(
                f"{store.uri(base)}: the manifest of version {state.uncertain} may have been written but could not be "
                f"checked ({type(exc).__name__}: {exc}); the commit may or may not have landed — re-open the "
                "dataset to find out") from exc
        if result is not None:
            return result
    if state.uncertain is not None:
        raise CommitOutcomeUnknownError(
            f"{store.uri(base)}: gave up after {options.max_retries + 1} attempts; the manifest of version "
            f"{state.uncertain} may or may not have landed — re-open the dataset to find out")
    raise CommitRetriesExhaustedError(
        f"{store.uri(base)}: lost the commit race {options.max_retries + 1} times; giving up"
    )
