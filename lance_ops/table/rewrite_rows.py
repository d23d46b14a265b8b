"""The Update transaction of rewritten rows, shared by ``merge_insert`` and ``update``.

pylance 14 commits both as ``Update`` (mode REWRITE_ROWS): the old copies of the rewritten rows
(and rows a merge deletes) are marked in new deletion vectors of their fragments (a fragment left
without live rows is removed), and the new rows go to new fragments, the rewritten rows first.
With stable row ids a new fragment's transaction lists the row ids of its rewritten rows only; the
commit gives its other rows fresh ids (``manifest/builder.py``). Index fragment bitmaps are left
as they are (pylance leaves them: the old fragments stay covered, the new ones are not).
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np
import pyarrow as pa

from lance_ops.io.per_process import kept_pool
from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import (
    DatasetNotFoundError,
    ObjectNotFoundError,
    RetryableCommitConflictError,
    StagedResultError,
    UnsupportedError,
)
from lance_ops.format.version import FileVersion
from lance_ops.io.local import LocalStore
from lance_ops.table import deletion, rowids
from lance_ops.table.commit import idempotency
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.commit.staging import StagedResult
from lance_ops.table.manifest import feature_flags
from lance_ops.table.manifest.codec import ManifestFile
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.manifest import naming
from lance_ops.table.snapshot import DatasetSnapshot
from lance_ops.table.write import as_storage_types, to_reader, write_fragments

#: deletion files written at once to an object store (a shared pool: see :func:`_writer_pool`)
_WRITERS = 8
_POOL = kept_pool(_WRITERS, "lance-ops-update")
#: the transaction property holding a keyed rewrite's result (what a retry under the key returns)
RESULT_PROPERTY = "lance_ops.rewrite_rows.result"
#: rows per new data file (pylance's default ``max_rows_per_file``)
MAX_ROWS_PER_FILE = 1024 * 1024


class RewriteTarget(DatasetSnapshot, Protocol):
    """What a row rewrite (merge-insert, update) needs of the dataset version it plans against
    (``LanceDataset`` is one; a Protocol, as importing ``LanceDataset`` would make a loop)."""

    @property
    def data_storage_version(self) -> str:
        """The dataset's file version."""
        ...

    def get_fragments(self) -> list[LanceFragment]:
        """The fragments of this version, in manifest order."""
        ...

    def reopen_latest(self) -> Any:
        """The newest version of this dataset, as a new object of the same class."""
        ...

    def move_to(self, mf: ManifestFile) -> None:
        """Make this object the snapshot of ``mf``, a version just committed."""
        ...


@dataclass
class RowsRewrite:
    """What a row rewrite changes: offsets to delete per fragment, and the new rows (rewritten
    rows first, with their row ids when the dataset keeps stable ones, then inserted rows)."""

    #: fragment id -> physical offsets (uint32, sorted unique) newly deleted there
    deleted: dict[int, np.ndarray] = field(default_factory=dict)
    #: tables of rewritten rows, in order
    rewritten: list[pa.Table] = field(default_factory=list)
    #: their row ids (stable row ids), one array per table of ``rewritten``
    rewritten_ids: list[np.ndarray] = field(default_factory=list)
    #: tables of inserted rows, in order
    inserted: list[pa.Table] = field(default_factory=list)

    def delete(self, fragment_id: int, offsets: np.ndarray) -> None:
        """Add ``offsets`` of fragment ``fragment_id`` to the rows deleted."""
        if offsets.size == 0:
            return
        old = self.deleted.get(fragment_id)
        new = offsets.astype(np.uint32)
        merged = np.sort(new if old is None else np.concatenate([old, new]), kind="stable")  # (radix sort)
        if merged.size > 1:
            keep = np.empty(merged.size, dtype=bool)
            keep[0] = True
            np.not_equal(merged[1:], merged[:-1], out=keep[1:])
            merged = merged[keep]
        self.deleted[fragment_id] = merged


def _writer_pool() -> ThreadPoolExecutor:
    """The pool writing deletion files to object stores, kept between calls (starting threads per
    call cost more than the writes of a small merge); re-created in a forked child. It holds no
    data between calls."""
    return _POOL.get()


def refuse_unwritable(dataset: RewriteTarget, what: str) -> None:
    """Refuse (before writing anything) datasets whose rows lance_ops cannot rewrite."""
    if FileVersion.parse(dataset.data_storage_version) is FileVersion.LEGACY:
        raise UnsupportedError(f"{dataset.uri}: {what} of a legacy (0.1) dataset is not supported; nothing was written")


def _new_rows(dataset: RewriteTarget, tables: Iterable[pa.Table]) -> pa.Table:
    """``tables`` as one table in the dataset's column order and types."""
    schema = dataset.storage_schema
    parts = [t.select(schema.names).cast(schema) if t.schema != schema else t for t in tables if t.num_rows]
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts)


def build_transaction(dataset: RewriteTarget, fragments: Iterable[LanceFragment], change: RowsRewrite,
                      preserving_fields: Iterable[int]) -> tuple[transaction_pb2.Transaction, CommitContext]:
    """Write the new deletion files and data files of ``change`` and return its Update transaction."""
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=dataset.version)
    update = txn.update
    update.SetInParent()
    update.update_mode = transaction_pb2.Transaction.Update.REWRITE_ROWS
    update.fields_for_preserving_frag_bitmap.extend(preserving_fields)
    by_id = {f.fragment_id: f for f in fragments}
    to_write: list[tuple[LanceFragment, np.ndarray]] = []
    for frag_id in sorted(change.deleted):
        frag = by_id[frag_id]
        merged = deletion.merge_deletions(frag.deleted_offsets, change.deleted[frag_id])
        if merged.size >= frag.physical_rows:
            update.removed_fragment_ids.append(frag_id)
        else:
            to_write.append((frag, merged))

    def write(item: tuple[LanceFragment, np.ndarray]) -> table_pb2.DeletionFile:
        frag, merged = item
        old = frag.proto.deletion_file if frag.proto.HasField("deletion_file") else None
        with dataset.store.deferred_sync():  # (per thread: a pool's threads defer too)
            proto = deletion.write_deletion_file(dataset.store, dataset.base, frag.fragment_id, dataset.version,
                                                 merged, old)
        assert proto is not None  # (merged is not empty)
        return proto

    # a local file is written in a fraction of a millisecond: threads (their start-up and hand-offs)
    # only pay where each write is a request (object stores), and then on the shared pool
    if len(to_write) > 1 and not isinstance(dataset.store, LocalStore):
        written = list(_writer_pool().map(write, to_write))
    else:
        written = [write(item) for item in to_write]
    for (frag, _), proto in zip(to_write, written):
        updated = update.updated_fragments.add()
        updated.CopyFrom(frag.proto)
        updated.deletion_file.CopyFrom(proto)

    rows = _new_rows(dataset, [*change.rewritten, *change.inserted])
    if rows.num_rows:
        # the new files become durable with the manifest: the commit's barrier fsyncs them (and their
        # directories) together, instead of one fsync each as they close (ADR 0036)
        with dataset.store.deferred_sync():
            new = write_fragments(as_storage_types(to_reader(rows)), dataset.store, dataset.base,
                                  list(dataset.manifest.fields), storage_options=dataset.storage_options,
                                  max_rows_per_file=MAX_ROWS_PER_FILE, version=dataset.data_storage_version,
                                  allow_external_blob_outside_bases=True)
        if dataset.has_stable_row_ids:
            kept = (np.concatenate(change.rewritten_ids).astype(np.uint64) if change.rewritten_ids
                    else np.zeros(0, np.uint64))
            start = 0
            for frag_proto in new:
                ids = kept[start:start + frag_proto.physical_rows]
                start += frag_proto.physical_rows
                if ids.size:
                    frag_proto.inline_row_ids = rowids.encode_row_ids(ids)
        update.new_fragments.extend(new)
    return txn, CommitContext(dataset.manifest_file)


def run(dataset: RewriteTarget, plan: Callable[[Any], tuple[transaction_pb2.Transaction, CommitContext, Any]],
        operation: str, *, conflict_retries: int = 10, properties: CommitProperties | None = None) -> Any:
    """Plan (``plan(version) -> (transaction, context, result)``) and commit a row rewrite
    (``update``, ``merge_insert``), re-planning on the newest version when a concurrent commit
    preempts it (up to ``conflict_retries`` times, as pylance); ``dataset`` moves to the new
    version. Returns the plan's result. ``properties`` (an idempotency key, extra transaction
    properties) go on the commit; by default only the operation's. With a key already committed
    (an Airflow retry) nothing is planned: the dataset moves to that version and its recorded
    result is returned."""
    properties = properties or CommitProperties.from_keywords(operation)
    key = properties.idempotency_key
    if key:
        # the key ledger knows keys of versions cleanup removed (table/commit/idempotency.py)
        earlier = idempotency.lookup(dataset.store, dataset.base, key, "update")
        if earlier is not None:
            mf = idempotency.manifest_of(dataset.store, dataset.base, earlier)
            dataset.move_to(mf if mf is not None else dataset.reopen_latest().manifest_file)
            return json.loads(earlier.properties.get(RESULT_PROPERTY) or "{}")
    ds: Any = dataset
    for attempt in range(conflict_retries + 1):
        feature_flags.check_writer_flags(ds.manifest.writer_feature_flags, ds.uri)
        try:
            txn, ctx, result = plan(ds)
            txn.read_version = ds.version
            if key:  # a retry under the key reports what this commit did
                txn.transaction_properties[RESULT_PROPERTY] = json.dumps(result, sort_keys=True)
            mf = commit_transaction(ds.store, ds.base, txn, ctx,
                                    CommitOptions(data_storage_version=ds.data_storage_version),
                                    properties=properties)
        except RetryableCommitConflictError:
            if attempt == conflict_retries:
                raise
            ds = ds.reopen_latest()
            continue
        dataset.move_to(mf)
        if key:
            idempotency.remember(dataset.store, dataset.base, mf)
            if mf.transaction is not None and mf.transaction.uuid != txn.uuid:  # an earlier try won
                return json.loads(mf.transaction.transaction_properties.get(RESULT_PROPERTY) or "{}")
        return result
    raise AssertionError("unreachable")


def staged_update_transaction(result: StagedResult, read: ManifestFile) -> transaction_pb2.Transaction:
    """The ``Update`` (REWRITE_ROWS) transaction of a staged merge (``operation == "update"``, as
    the Spark merge job stages it), planned against ``read`` (its read version's manifest)."""
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=read.version)
    update = txn.update
    update.SetInParent()
    update.update_mode = transaction_pb2.Transaction.Update.REWRITE_ROWS
    update.fields_for_preserving_frag_bitmap.extend(f.id for f in read.manifest.fields if f.parent_id == -1)
    update.removed_fragment_ids.extend(sorted(int(i) for i in result.removed_fragment_ids))
    update.updated_fragments.extend(sorted(result.updated_fragments, key=lambda f: f.id))
    update.new_fragments.extend(result.fragments)
    return txn


def _check_deletion_files(store: Any, base: str, result: StagedResult) -> None:
    for frag in result.updated_fragments:
        path = deletion.deletion_file_path(store, base, frag.id, frag.deletion_file)
        try:
            store.size(path)
        except (ObjectNotFoundError, FileNotFoundError):
            raise StagedResultError(
                f"{store.uri(path)}: deletion file of the merge staged under key {result.key!r} is missing "
                "(removed by cleanup as abandoned?); nothing was committed. Re-run the merge job") from None


def commit_staged_update(store: Any, base: str, uri: str, result: StagedResult,
                         counts: dict[str, int]) -> tuple[ManifestFile, bool]:
    """Commit a staged merge once, against its read version (its data and deletion files are
    checked first); ``counts`` (pylance's result dict) are recorded under :data:`RESULT_PROPERTY`
    so that a re-run under the key returns them. Returns the version and whether it is an earlier
    commit under the same key (nothing new landed). A concurrent commit that changed the same
    fragments raises RetryableCommitConflictError: a stage cannot be re-planned, the job that
    staged it must plan again on the newest version (nothing was committed)."""
    from lance_ops.table.dataset import open_manifest

    try:
        read = open_manifest(store, base, result.read_version, uri)
    except DatasetNotFoundError:
        raise RetryableCommitConflictError(
            f"{uri}: version {result.read_version}, which the merge staged under key {result.key!r} was planned "
            "against, no longer exists; nothing was committed. Re-run the merge job to plan it again") from None
    feature_flags.check_writer_flags(read.manifest.writer_feature_flags, uri)
    _check_deletion_files(store, base, result)
    txn = staged_update_transaction(result, read)
    properties = CommitProperties.from_keywords(
        "merge_insert", idempotency_key=result.key or None,
        transaction_properties={RESULT_PROPERTY: json.dumps(counts, sort_keys=True)})
    mf = commit_transaction(store, base, txn, CommitContext(read),
                            CommitOptions(data_storage_version=result.data_storage_version), properties=properties)
    if result.key:
        idempotency.remember(store, base, mf)
    return mf, mf.transaction is not None and mf.transaction.uuid != txn.uuid
