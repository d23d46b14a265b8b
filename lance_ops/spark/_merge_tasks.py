"""Executor-side work of the Spark merge job (``lance_ops.spark.merge``).

Three task kinds, each only writes new files and returns metadata (never commits):

* :class:`TargetKeysTask` reads the target's key columns, fragment by fragment, with each row's
  fragment id and offset (and its stable row id);
* :class:`WriteDeletionsTask` gets the matched (fragment, offset) pairs grouped by fragment and
  writes each fragment's new deletion file (old deletions merged in);
* :class:`WriteMergedRowsTask` writes the new fragments of a partition of the joined source:
  updated rows first (with the row ids they keep), then inserted rows.

They are classes in an importable module so that Spark pickles them by reference.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from lance_ops.table.dataset import LanceDataset

#: columns the merge adds to the joined rows (names no dataset column is expected to have)
FRAGMENT_COL, OFFSET_COL, ROW_ID_COL = "__lance_ops_merge_frag", "__lance_ops_merge_off", "__lance_ops_merge_rowid"
#: rows a deletion task returns per fragment
DELETIONS_DDL = "fragment_id long, matched long, removed boolean, fragment string"
DELETIONS_SCHEMA = pa.schema([("fragment_id", pa.int64()), ("matched", pa.int64()), ("removed", pa.bool_()),
                              ("fragment", pa.string())])
_OPEN: dict[tuple[Any, ...], "LanceDataset"] = {}


def open_version(uri: str, storage_options: Mapping[str, Any] | None, version: int) -> "LanceDataset":
    """The dataset at ``version`` (kept per Python worker: the tasks of one job share it)."""
    from lance_ops.table.dataset import LanceDataset

    cache_key = (uri, version, tuple(sorted((storage_options or {}).items())))
    ds = _OPEN.get(cache_key)
    if ds is None:
        if len(_OPEN) > 8:
            _OPEN.clear()
        ds = _OPEN[cache_key] = LanceDataset(uri, version, dict(storage_options or {}) or None)
    return ds


class TargetKeysTask:
    """``mapInArrow`` function: fragment ids in, each fragment's key columns out with
    ``FRAGMENT_COL``/``OFFSET_COL`` (and ``ROW_ID_COL`` for stable row ids), as ``schema``."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None, version: int, on: Sequence[str],
                 schema: pa.Schema, stable: bool) -> None:
        self.uri, self.storage_options, self.version = uri, dict(storage_options or {}), int(version)
        self.on, self.schema, self.stable = list(on), schema, bool(stable)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lance_ops.table import scan

        ds = open_version(self.uri, self.storage_options, self.version)
        by_id = {f.fragment_id: f for f in ds.get_fragments()}
        for batch in batches:
            for fid in batch.column(0).to_pylist():
                task = scan.fragment_task(ds, by_id[int(fid)], self.on, with_row_id=self.stable,
                                          with_row_address=True)
                table = scan.execute(ds, task)
                addr = table.column("_rowaddr").to_numpy().astype(np.uint64)
                arrays = [table.column(k).combine_chunks().cast(self.schema.field(k).type) for k in self.on]
                arrays += [pa.array((addr >> np.uint64(32)).astype(np.int64)),
                           pa.array((addr & np.uint64(0xFFFFFFFF)).astype(np.int64))]
                if self.stable:
                    arrays.append(pa.array(table.column("_rowid").to_numpy().astype(np.int64)))
                out = pa.Table.from_arrays(arrays, schema=self.schema)
                yield from out.to_batches(max_chunksize=1 << 16)


class WriteDeletionsTask:
    """``mapInArrow`` function: matched (fragment, offset) pairs in (a fragment's pairs all in one
    partition), one row per fragment out: matches, whether no live row is left, and the
    fragment's proto with its new deletion file (base64)."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None, version: int) -> None:
        self.uri, self.storage_options, self.version = uri, dict(storage_options or {}), int(version)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lance_ops.errors import AmbiguousMergeError
        from lance_ops.table import deletion
        from lance_ops.table.commit.staging import fragment_to_b64

        parts: dict[int, list[np.ndarray]] = {}
        for batch in batches:
            frags = batch.column(0).to_numpy()
            offs = batch.column(1).to_numpy()
            for fid in np.unique(frags):
                parts.setdefault(int(fid), []).append(offs[frags == fid])
        if not parts:
            return
        ds = open_version(self.uri, self.storage_options, self.version)
        by_id = {f.fragment_id: f for f in ds.get_fragments()}
        ids, matched, removed, protos = [], [], [], []
        for fid in sorted(parts):
            offsets = np.concatenate(parts[fid])
            unique = np.unique(offsets).astype(np.uint32)
            if unique.size != offsets.size:  # (the driver checks first; never write a doubled row)
                raise AmbiguousMergeError(f"Ambiguous merge inserts are prohibited: multiple source rows match "
                                          f"the same target row (fragment {fid})")
            frag = by_id[fid]
            merged = deletion.merge_deletions(frag.deleted_offsets, unique)
            proto = frag.proto.__class__()
            proto.CopyFrom(frag.proto)
            gone = merged.size >= frag.physical_rows
            if not gone:
                old = frag.proto.deletion_file if frag.proto.HasField("deletion_file") else None
                written = deletion.write_deletion_file(ds.store, ds.base, fid, ds.version, merged, old)
                assert written is not None  # (merged is not empty)
                proto.deletion_file.CopyFrom(written)
            ids.append(fid)
            matched.append(int(unique.size))
            removed.append(gone)
            protos.append(fragment_to_b64(proto))
        yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), pa.array(matched, pa.int64()),
                                          pa.array(removed, pa.bool_()), pa.array(protos, pa.string())],
                                         schema=DELETIONS_SCHEMA)


class WriteMergedRowsTask:
    """``mapInArrow`` function: a partition of the joined source (dataset columns, then
    ``FRAGMENT_COL``, non-null for updated rows, which come first, and ``ROW_ID_COL``) in, its
    new fragments out (``_tasks.FRAGMENT_ROWS_DDL``). With stable row ids each new fragment
    lists the ids of its updated rows (a prefix of its rows); the commit numbers the others."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None, fields_b64: list[str],
                 schema_metadata: Mapping[str, str], max_rows_per_file: int, data_storage_version: str,
                 names: Sequence[str], stable: bool) -> None:
        self.uri, self.storage_options = uri, dict(storage_options or {})
        self.fields_b64, self.schema_metadata = list(fields_b64), dict(schema_metadata or {})
        self.max_rows_per_file, self.data_storage_version = int(max_rows_per_file), data_storage_version
        self.names, self.stable = list(names), bool(stable)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lance_ops.errors import LanceOpsError
        from lance_ops.spark._tasks import FRAGMENT_ROWS_SCHEMA, task_context, write_partition
        from lance_ops.table import rowids
        from lance_ops.table.commit.staging import fragment_to_b64

        kept: list[np.ndarray] = []
        inserting = [False]

        def rows() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                if not batch.num_rows:
                    continue
                updated = np.asarray(batch.column(FRAGMENT_COL).is_valid().to_numpy(zero_copy_only=False), bool)
                n = int(updated.sum())
                if (inserting[0] and n) or bool(updated[n:].any()):
                    raise LanceOpsError("merge: updated rows must precede inserted rows in a write task")
                inserting[0] = inserting[0] or n < batch.num_rows
                if self.stable and n:
                    kept.append(batch.column(ROW_ID_COL).slice(0, n).to_numpy(zero_copy_only=False).astype(np.uint64))
                yield pa.RecordBatch.from_arrays([batch.column(c) for c in self.names], names=self.names)

        fragments = write_partition(rows(), uri=self.uri, storage_options=self.storage_options,
                                    fields_b64=self.fields_b64, schema_metadata=self.schema_metadata,
                                    max_rows_per_file=self.max_rows_per_file,
                                    data_storage_version=self.data_storage_version)
        if self.stable and kept:
            ids, start = np.concatenate(kept), 0
            for frag in fragments:
                part = ids[start:start + frag.physical_rows]
                start += frag.physical_rows
                if part.size:
                    frag.inline_row_ids = rowids.encode_row_ids(part)
        ctx = task_context()
        n = len(fragments)
        yield pa.RecordBatch.from_arrays([
            pa.array([ctx.partitionId() if ctx is not None else 0] * n, pa.int32()),
            pa.array(list(range(n)), pa.int32()),
            pa.array([ctx.attemptNumber() if ctx is not None else 0] * n, pa.int32()),
            pa.array([f.physical_rows for f in fragments], pa.int64()),
            pa.array([fragment_to_b64(f) for f in fragments], pa.string()),
        ], schema=FRAGMENT_ROWS_SCHEMA)
