"""Compaction execution: rewrite a task's fragments into new data files (committed by ``commit``).

Execution streams: the task's fragments are read in consecutive groups of about 32k rows /
8 MiB (:mod:`.source`: every column, live rows; the next groups are read in a background thread
while the current one is written), and the rows are cut into new fragments of exactly the sizes
the plan fixed; memory is bounded by a few groups plus one group's copy and the file writer's
buffers, never by the task. New fragments
carry id 0 and are written with the dataset's own storage version (a version lance_ops cannot
write is refused before anything is written). The dataset is opened at the task's read
version, whose fragments must be the task's byte for byte.

Row ids
  * With stable row ids, each new fragment carries the row ids of the rows it received: the old
    fragments' ``RowIdSequence`` s with deleted rows masked out, concatenated and sliced to the
    new sizes. The created-at / last-updated-at version sequences are carried over the same way
    (missing ones count as version 1, last-updated defaulting to created-at, as upstream), so
    ``take_by_row_id`` and ``_rowid`` give the same rows before and after.
  * Without stable row ids a row id is the row address, which changes. New fragments carry id 0
    here; when an index covers the rewritten fragments the commit reserves their ids first
    (ReserveFragments) and remaps the index (ADR 0011); a task over fragments an index kind
    without a remapper covers is refused here too, before anything is written.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterator, Sequence, cast

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.errors import LanceOpsError, RetryableCommitConflictError, UnsupportedError
from lance_ops.io.base import ObjectStore
from lance_ops.table import deletion, rowids, versions
from lance_ops.table.manifest import naming
from lance_ops.table.paths import resolve_inside
from lance_ops.table.write import write_fragments

from lance_ops.maintenance.compaction.indices import RUNNABLE_ACTIONS, check_fragments_remappable
from lance_ops.maintenance.compaction.source import TaskReader
from lance_ops.maintenance.compaction.model import (
    RewriteResult,
    RewriteTask,
    same_fragment,
)

log = logging.getLogger(__name__)

class _RowSource:
    """Hands out batches totalling exactly ``n`` rows from a stream of tables."""

    def __init__(self, tables: Iterator[pa.Table]):
        self._tables = tables
        self._pending: list[pa.RecordBatch] = []

    def _refill(self) -> bool:
        for table in self._tables:
            batches = [b for b in table.to_batches() if b.num_rows]
            if batches:
                self._pending.extend(batches)
                return True
        return False

    def take(self, n: int) -> Iterator[pa.RecordBatch]:
        left = n
        while left > 0:
            if not self._pending and not self._refill():
                raise LanceOpsError(f"the source fragments ran out of rows ({left} of {n} missing)")
            batch = self._pending.pop(0)
            if batch.num_rows > left:
                self._pending.insert(0, batch.slice(left))
                batch = batch.slice(0, left)
            left -= batch.num_rows
            yield batch

    def exhausted(self) -> bool:
        return not self._pending and not self._refill()


# --- row ids and version sequences ----------------------------------------------------------------
def _row_id_sequence(store: ObjectStore, base: str, frag: table_pb2.DataFragment) -> rowids.RowIdSequence:
    which = frag.WhichOneof("row_id_sequence")
    where = f"fragment {frag.id} row ids"
    if which == "inline_row_ids":
        seq = rowids.RowIdSequence.from_bytes(frag.inline_row_ids, where)
    elif which == "external_row_ids":
        ext = frag.external_row_ids
        path = resolve_inside(store, base, ext.path, what=f"external row-id path of fragment {frag.id}",
                              where=store.uri(base))
        seq = rowids.RowIdSequence.from_bytes(store.read_range(path, ext.offset, ext.size), store.uri(path))
    else:
        raise LanceOpsError(f"{where}: the dataset uses stable row ids but fragment {frag.id} has none")
    if len(seq) != frag.physical_rows:
        raise LanceOpsError(f"{where}: {len(seq)} row ids for {frag.physical_rows} physical rows")
    return seq


def _version_arrays(store: ObjectStore, base: str, frag: table_pb2.DataFragment) -> tuple[np.ndarray, np.ndarray]:
    n = frag.physical_rows
    created = rowids.read_fragment_versions(store, base, frag, "created")
    if created is None:
        created = np.ones(n, dtype=np.uint64)
    updated = rowids.read_fragment_versions(store, base, frag, "updated")
    if updated is None:
        updated = created
    if created.size != n or updated.size != n:
        raise LanceOpsError(f"fragment {frag.id}: version sequences do not cover its {n} physical rows")
    return created, updated


def _carry_row_ids(task: RewriteTask, store: ObjectStore, base: str, new_fragments: list[table_pb2.DataFragment],
                   deleted: dict[int, np.ndarray] | None = None) -> None:
    """Give the new fragments the row ids and version sequences of the rows they received.

    ``deleted``: the deleted offsets the source reader already read (fragment id -> offsets);
    the deletion files of the other fragments are read here."""
    sequences, created, updated = [], [], []
    known = deleted or {}
    for proto in task.fragments:
        seq = _row_id_sequence(store, base, proto)
        c, u = _version_arrays(store, base, proto)
        if proto.HasField("deletion_file"):
            dead = known.get(proto.id)
            if dead is None:
                dead = deletion.read_deletion_offsets(store, base, proto.id, proto.deletion_file)
            seq = seq.mask(dead)
            keep = np.ones(proto.physical_rows, dtype=bool)
            keep[dead.astype(np.int64)] = False
            c, u = c[keep], u[keep]
        sequences.append(seq)
        created.append(c)
        updated.append(u)
    sizes = [f.physical_rows for f in new_fragments]
    chunks = rowids.RowIdSequence.rechunk(sequences, sizes)
    all_created = np.concatenate(created) if created else np.empty(0, np.uint64)
    all_updated = np.concatenate(updated) if updated else np.empty(0, np.uint64)
    start = 0
    for frag, seq, size in zip(new_fragments, chunks, sizes):
        frag.inline_row_ids = seq.to_bytes()
        frag.inline_created_at_versions = rowids.encode_version_sequence(all_created[start:start + size])
        frag.inline_last_updated_at_versions = rowids.encode_version_sequence(all_updated[start:start + size])
        start += size


# --- execution -----------------------------------------------------------------------------------
def _delete_data_files(store: ObjectStore, base: str, paths: Sequence[str]) -> None:
    """Remove uncommitted data files we wrote (and their statistics sidecars), best effort."""
    try:
        from lance_ops.table.stats.store import stats_path
    except ImportError:  # pragma: no cover - statistics are optional
        stats_path = None  # type: ignore[assignment]
    for path in paths:
        targets = [store.join(base, naming.DATA_DIR, path)]
        if stats_path is not None:
            targets.append(stats_path(store, base, path))
        for target in targets:
            try:
                if target is targets[0] or store.exists(target):
                    store.delete(target)
            except Exception:  # noqa: BLE001 - best effort; cleanup_old_versions removes orphans later
                log.warning("could not remove orphan file %s", store.uri(target), exc_info=True)


def _open_read_version(task: RewriteTask, store: ObjectStore, base: str) -> Any:
    """The dataset at the task's read version; its fragments must be the task's, byte for byte."""
    from lance_ops.errors import DatasetNotFoundError
    from lance_ops.table.dataset import LanceDataset

    uri = store.uri(base)
    try:
        ds = LanceDataset(uri, task.read_version, _store=(store, base))
    except DatasetNotFoundError as exc:
        # retryable: compact_files re-plans from the newest version (issue 16)
        raise RetryableCommitConflictError(
            f"{uri}: the compaction task was planned at version {task.read_version}, which no longer "
            "exists (cleaned up?); re-plan the compaction"
        ) from exc
    current = {f.id: f for f in ds.manifest.fragments}
    for frag in task.fragments:
        if frag.id not in current or not same_fragment(current[frag.id], frag):
            raise LanceOpsError(
                f"{uri}: fragment {frag.id} of the compaction task differs from version "
                f"{task.read_version}'s; the task does not belong to this dataset"
            )
    if list(ds.manifest.fields) != list(task.fields):
        raise LanceOpsError(f"{uri}: the task's schema differs from version {task.read_version}'s")
    check_fragments_remappable(ds, [f.id for f in task.fragments], "this compaction task")
    return ds


def execute_task(task: RewriteTask, store: ObjectStore, base: str, *, storage_options: Any = None) -> RewriteResult:
    """Rewrite ``task``'s fragments into new data files; returns the (uncommitted) result."""
    t0 = time.perf_counter()
    where = store.uri(base)
    version = versions.normalize(task.data_storage_version)
    versions.require_writable(version, where)
    if task.kind not in ("compact", "materialize"):
        raise LanceOpsError(f"{where}: unknown compaction task kind {task.kind!r}")
    if task.index_action not in RUNNABLE_ACTIONS:
        names = ", ".join(f"{i.get('name')} ({i.get('kind')})" for i in task.indices) or "?"
        raise UnsupportedError(
            f"{where}: the compaction task over fragments {[f.id for f in task.fragments]} touches index(es) "
            f"{names} ({task.index_action}); lance_ops cannot remap that index kind yet (ADR 0011), so it is "
            "held back and never executed. Nothing was written.")
    if sum(task.output_rows) != sum(task.live_rows or task.output_rows):
        raise LanceOpsError(f"{where}: task output sizes do not add up to its live rows")
    view = _open_read_version(task, store, base)
    schema = view.storage_schema
    stats = {"rows_read": 0, "bytes_read": 0}
    reader = TaskReader(view, task.fragments, task.live_rows, stats, keep_deleted=task.stable_row_ids)
    source = _RowSource(reader.tables())
    new_fragments: list[table_pb2.DataFragment] = []
    try:
        for size in task.output_rows:
            batches = pa.RecordBatchReader.from_batches(schema, source.take(size))
            # (legacy datasets: the rewritten files keep the dataset's dictionary values)
            written = write_fragments(batches, store, base, list(task.fields), storage_options=storage_options,
                                      max_rows_per_file=size, version=version,
                                      dictionaries=view.manifest_file.dictionaries or None)
            if len(written) != 1 or written[0].physical_rows != size:
                raise LanceOpsError(f"{where}: expected one new fragment of {size} rows, wrote "
                                    f"{[f.physical_rows for f in written]}")
            new_fragments.extend(written)
        if not source.exhausted():
            raise LanceOpsError(f"{where}: the source fragments hold more live rows than the plan counted")
        if task.stable_row_ids:
            _carry_row_ids(task, store, base, new_fragments, reader.deleted)
    except BaseException:
        _delete_data_files(store, base, [df.path for f in new_fragments for df in f.files])
        raise
    metrics = {
        "fragments_removed": len(task.fragments),
        "fragments_added": len(new_fragments),
        "files_removed": sum(len(f.files) + f.HasField("deletion_file") for f in task.fragments),
        "files_added": sum(len(f.files) for f in new_fragments),
        "rows_read": stats["rows_read"],
        "rows_written": sum(f.physical_rows for f in new_fragments),
        "bytes_read": stats["bytes_read"],
        # the writer's own count of the bytes it wrote (ending position of each file)
        "bytes_written": sum(df.file_size_bytes for f in new_fragments for df in f.files),
        "rewrite_seconds": time.perf_counter() - t0,
    }
    originals = []
    for f in task.fragments:
        copy = table_pb2.DataFragment()
        copy.CopyFrom(f)
        originals.append(copy)
    return RewriteResult(task.read_version, originals, new_fragments, metrics, task.kind)


def discard_results(uri_or_store: Any, results: Sequence[RewriteResult], *, storage_options: Any = None, base: str | None = None) -> int:
    """Delete the data files of results that will never be committed; returns how many.

    Only call this when the results are known not to be part of any committed version (e.g.
    after a RetryableCommitConflictError from their own commit). Otherwise leave them to
    ``cleanup_old_versions``.
    """
    if isinstance(uri_or_store, str):
        from lance_ops.io import open_store

        store, base = open_store(uri_or_store, storage_options)
    else:
        store = uri_or_store
    paths = [p for r in results for p in r.new_data_files]
    _delete_data_files(store, cast(str, base), paths)
    return len(paths)
