"""The source rows of a compaction task: every column of its fragments' live rows, in order.

Compaction copies whole fragments, so it reads them differently from a scan (ADR 0034):

* The task's fragments are cut into consecutive groups of about ``GROUP_ROWS`` rows /
  ``GROUP_BYTES`` bytes (a bigger fragment is a group of its own); one table of live rows comes
  out per group. A background thread reads the next group while the current one is written.
* A fragment whose one data file stores every column of a blob-free schema is read *directly*:
  its (cached, manifest-checked) file reader returns all physical rows and the deletion vector
  is applied as one boolean mask. Data files are opened on a small thread pool on a remote
  store (their I/O overlaps; on local disk one after the other), a group's deletion vectors
  are read together (ADR 0051); readers that can decode many files of one
  layout at once (``read_all_of``) do so for consecutive small files of a group.
* Any other fragment (several data files, blob columns, missing columns) is read through the
  scan planner as before.

A deletion file is always applied when the manifest names one, also when it records no count
(very old writers): its rows are never resurrected. Each fragment's live rows must equal what
the plan counted, else LanceOpsError (the deletion file or metadata is inconsistent).
Memory: ``PREFETCH + 1`` groups (the one being written and those read ahead) plus one group's copy;
each file's reader leaves the view's reader cache once its group is read (ADR 0048).
"""
from __future__ import annotations

import itertools
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.errors import LanceOpsError
from lance_ops.format import blob_v2
from lance_ops.format.v2_0 import batch as v20_batch
from lance_ops.format.v2_0.reader import LanceFileReader as V20Reader
from lance_ops.table import deletion, scan
from lance_ops.table.fragment import LanceFragment, forget_readers
from lance_ops.table.manifest import naming
from lance_ops.table.paths import dataset_where

#: consecutive source fragments are gathered until a group holds this many rows or bytes: small
#: enough that the writer's encoding of one group overlaps the reading of the next ones and that
#: the last group's encoding (not overlapped) is short, large enough to read many small files
#: together (ADR 0041)
GROUP_ROWS = 32 * 1024
GROUP_BYTES = 8 << 20
#: groups read ahead of the one being written (a bounded queue: memory is a few groups)
PREFETCH = 2
#: data files opened / read side by side (file reads, numpy and Arrow release the GIL)
_WORKERS = max(2, min(4, os.cpu_count() or 1))
#: on a remote store only files up to this size are decoded together (their bytes came with the
#: footer read that opened them, ADR 0022); bigger ones are read one per thread
_BATCH_FILE_BYTES = 64 * 1024
#: a group of tables whose chunks average fewer rows than this is copied into one chunk per column
_COMBINE_BELOW_ROWS = 8192


def source_file_size(view: Any, df: table_pb2.DataFile) -> int:
    """Bytes of one source data file: the size the manifest records, else (older manifests
    record none) the size the store reports. The store's request counters are per store
    object, shared by concurrent tasks, so they cannot attribute bytes to one task."""
    if df.file_size_bytes:
        return int(df.file_size_bytes)
    store, base = view.store, view.base
    return int(store.size(store.join(base, naming.DATA_DIR, df.path)))


def groups(fragments: Sequence[table_pb2.DataFragment], live_rows: Sequence[int]
           ) -> list[list[tuple[table_pb2.DataFragment, int | None]]]:
    """The fragments (with their planned live rows, None when the plan has none), cut into
    consecutive groups of about ``GROUP_ROWS`` rows / ``GROUP_BYTES`` bytes."""
    expected: list[int | None] = list(live_rows) or [None] * len(fragments)
    out: list[list[tuple[table_pb2.DataFragment, int | None]]] = []
    current: list[tuple[table_pb2.DataFragment, int | None]] = []
    rows = size = 0
    for proto, n in zip(fragments, expected):
        current.append((proto, n))
        rows += proto.physical_rows
        size += sum(df.file_size_bytes for df in proto.files)
        if rows >= GROUP_ROWS or size >= GROUP_BYTES:
            out.append(current)
            current, rows, size = [], 0, 0
    if current:
        out.append(current)
    return out


@dataclass(eq=False)
class _Source:
    """One source fragment, opened: its reader and column names when it is read directly
    (None: through the scan planner), and its live-row mask (None: nothing deleted)."""

    proto: table_pb2.DataFragment
    expected: int | None
    frag: LanceFragment
    reader: Any
    names: tuple[str, ...]
    mask: np.ndarray | None

    @property
    def live(self) -> int:
        return self.proto.physical_rows if self.mask is None else int(np.count_nonzero(self.mask))

    def batch_key(self, remote: bool) -> Any:
        """Equal keys of consecutive sources: decoded together (None: read on its own)."""
        if self.reader is None or _read_together(type(self.reader)) is None:
            return None
        if remote and sum(df.file_size_bytes or _BATCH_FILE_BYTES + 1 for df in self.proto.files) > _BATCH_FILE_BYTES:
            return None
        return (type(self.reader), self.names)


class TaskReader:
    """Reads a task's fragments (of the dataset ``view`` at the task's read version) group by group."""

    def __init__(self, view: Any, fragments: Sequence[table_pb2.DataFragment], live_rows: Sequence[int],
                 stats: dict[str, int], *, keep_deleted: bool = False) -> None:
        self._view = view
        self._schema: pa.Schema = view.storage_schema  # extension columns as stored, as the writer takes them
        self._ids = [view.top_field_ids[name] for name in self._schema.names]
        # blob columns (bytes, descriptors, side files) are the scan's business
        self._direct_ok = not any(blob_v2.has_blobs(f) for f in self._schema)
        self._remote = getattr(view.store, "scheme", "") != "file"
        self._groups = groups(fragments, live_rows)
        self._stats = stats
        self._where = dataset_where(view)
        #: with ``keep_deleted``: fragment id -> its deleted offsets, as read here (sorted unique),
        #: for the directly read fragments that have a deletion file; the stable row ids are
        #: carried over from them without reading the deletion files again
        self.deleted: dict[int, np.ndarray] | None = {} if keep_deleted else None

    # --- one fragment --------------------------------------------------------------------------
    def _open(self, item: tuple[table_pb2.DataFragment, int | None]) -> _Source:
        proto, expected = item
        frag = LanceFragment(self._view, proto)
        reader: Any = None
        names: tuple[str, ...] = ()
        if self._direct_ok and len(proto.files) == 1:
            located = frag.locate_fields(self._ids)  # opens the file and checks it against the manifest
            if len(located) == len(self._ids) and all(index == 0 for index, _ in located.values()):
                reader = frag.data_file_reader(0)
                names = tuple(located[fid][1] for fid in self._ids)
        return _Source(proto, expected, frag, reader, names, None)

    def _mask_deleted(self, sources: Sequence[_Source]) -> None:
        """Give the directly read sources with a deletion file their live-row masks: the group's
        deletion vectors read together (``deletion.read_deletion_vectors``: one directory check,
        one decode per file length; the same offsets and errors as one file at a time). Applied
        even when a deletion file records no count (0: very old writers)."""
        todo = [s for s in sources if s.reader is not None and s.proto.HasField("deletion_file")]
        if not todo:
            return
        view = self._view
        vectors = deletion.read_deletion_vectors(view.store, view.base, [s.proto for s in todo], self._where)
        for src, dead in zip(todo, vectors):
            if self.deleted is not None:
                self.deleted[src.proto.id] = dead
            if dead.size:
                mask = np.ones(src.proto.physical_rows, dtype=bool)
                mask[dead] = False
                src.mask = mask

    def _conform(self, table: pa.Table, names: Sequence[str]) -> pa.Table:
        """A file's columns ``names`` as the dataset schema's columns (names, types)."""
        columns = []
        for name, field in zip(names, self._schema):
            col = table.column(name)
            columns.append(col if col.type == field.type else col.cast(field.type))
        return pa.Table.from_arrays(columns, schema=self._schema)

    def _read_one(self, src: _Source, task: Any) -> pa.Table:
        """One fragment's live rows (``task``: its scan task when it is not read directly)."""
        if src.reader is None:
            return scan.execute(self._view, task) if task is not None else self._schema.empty_table()
        table = self._conform(src.reader.read_all(columns=list(src.names)), src.names)
        self._check_physical(table, [src])
        return table if src.mask is None else table.filter(pa.array(src.mask))

    def _read_batch(self, sources: Sequence[_Source]) -> pa.Table:
        """Consecutive fragments with one file layout, decoded together; their live rows."""
        readers = [s.reader for s in sources]
        read_all_of = _read_together(type(readers[0]))
        assert read_all_of is not None  # (batch_key groups only such readers)
        table = self._conform(read_all_of(readers, list(sources[0].names)), sources[0].names)
        self._check_physical(table, sources)
        if all(s.mask is None for s in sources):
            return table
        mask = np.concatenate([np.ones(s.proto.physical_rows, dtype=bool) if s.mask is None else s.mask
                               for s in sources])
        return table.filter(pa.array(mask))

    def _check_physical(self, table: pa.Table, sources: Sequence[_Source]) -> None:
        want = sum(s.proto.physical_rows for s in sources)
        if table.num_rows != want:
            ids = [s.proto.id for s in sources]
            raise LanceOpsError(f"{self._view.uri}: fragments {ids} read {table.num_rows} rows, their manifest "
                                f"records {want} physical rows")

    def _check_live(self, src: _Source, live: int) -> None:
        if src.expected is not None and live != src.expected:
            raise LanceOpsError(
                f"fragment {src.proto.id}: read {live} live rows but the plan counted "
                f"{src.expected}; its deletion file or metadata is inconsistent")

    # --- one group -----------------------------------------------------------------------------
    def _load(self, group: list[tuple[table_pb2.DataFragment, int | None]], pool: ThreadPoolExecutor) -> list[pa.Table]:
        """The group's live rows, as tables in fragment order."""
        # on a remote store the files are opened side by side (their I/O overlaps); on local disk
        # opening is Python over small buffers that holds the GIL: one after the other in this
        # thread costs less CPU than handing the GIL between pool threads (ADR 0051)
        sources = (list(pool.map(self._open, group)) if self._remote and len(group) > 1
                   else [self._open(item) for item in group])
        self._mask_deleted(sources)
        runs: list[list[_Source]] = []
        for key, same in itertools.groupby(sources, key=lambda s: s.batch_key(self._remote)):
            members = list(same)
            if key is None or len(members) == 1:
                runs.extend([s] for s in members)
            else:
                runs.append(members)
        # the fragments not read directly are planned together (every column, blob v2 as written)
        planned = [s.proto for s in sources if s.reader is None]
        tasks = {t.fragment_id: t for t in scan.plan(self._view, self._schema.names, fragments=planned,
                                                     blob_handling="logical")} if planned else {}
        # single fragments are read on the pool while batches decode here
        singles: dict[int, Future] = {}
        if len(runs) > 1:
            singles = {i: pool.submit(self._read_one, run[0], tasks.get(run[0].proto.id))
                       for i, run in enumerate(runs) if len(run) == 1}
        try:
            tables = []
            for i, run in enumerate(runs):
                if len(run) > 1:
                    table = self._read_batch(run)
                    for src in run:
                        self._check_live(src, src.live)
                else:
                    table = singles[i].result() if i in singles else self._read_one(run[0], tasks.get(run[0].proto.id))
                    self._check_live(run[0], table.num_rows)
                tables.append(table)
        finally:
            for fut in singles.values():
                fut.cancel()
            # each file is read once: its reader (a small file's reader holds the file whole) would
            # otherwise stay in the view's cache, up to a thousand of them, until the task ends
            for proto, _ in group:
                forget_readers(self._view, proto)
        return tables

    def _account(self, group: list[tuple[table_pb2.DataFragment, int | None]], tables: list[pa.Table]) -> pa.Table:
        # counted here, in the consuming thread, in group order
        self._stats["rows_read"] += sum(t.num_rows for t in tables)
        self._stats["bytes_read"] += sum(source_file_size(self._view, df) for proto, _ in group for df in proto.files)
        return _one_table(tables)

    def tables(self, prefetch: int = PREFETCH) -> Iterator[pa.Table]:
        """The live rows, one table per group, in order. The next ``prefetch`` groups are read in a
        background thread while the current one is consumed (``prefetch=0``: no thread)."""
        with ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="lance-ops-compact-io") as pool:
            jobs = iter(self._groups)
            if prefetch <= 0:
                for group in jobs:
                    yield self._account(group, self._load(group, pool))
                return
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lance-ops-compact-read") as reader:
                yield from _prefetched(jobs, lambda g: reader.submit(self._load, g, pool), self._account, prefetch)


def _read_together(reader_type: type) -> Callable[[Sequence[Any], list[str]], pa.Table] | None:
    """The function decoding many files of ``reader_type`` (one layout) at once, or None: the
    2.1+ reader's ``read_all_of``; for 2.0 files ``v2_0.batch.read_all_of`` (ADR 0037)."""
    together = getattr(reader_type, "read_all_of", None)
    if together is not None:
        return together
    if issubclass(reader_type, V20Reader):
        return v20_batch.read_all_of
    return None


def _prefetched(jobs: Iterator[Any], submit: Callable[[Any], Future], finish: Callable[[Any, Any], pa.Table],
                prefetch: int) -> Iterator[pa.Table]:
    """``finish(job, result)`` of each job in order, the next ``prefetch`` jobs submitted ahead."""
    pending: deque[tuple[Any, Future]] = deque()
    try:
        for job in itertools.islice(jobs, prefetch):
            pending.append((job, submit(job)))
        while pending:
            job, fut = pending.popleft()
            loaded = fut.result()
            nxt = next(jobs, None)
            if nxt is not None:
                pending.append((nxt, submit(nxt)))
            table = finish(job, loaded)
            del loaded
            yield table
    finally:
        for _, fut in pending:
            fut.cancel()


def _one_table(tables: list[pa.Table]) -> pa.Table:
    """A group's tables as one table; copied into one chunk per column when its chunks are
    small (many small fragments: far fewer, larger batches for the writer), else kept as is."""
    if len(tables) == 1:
        table = tables[0]
    else:
        table = pa.concat_tables(tables)
    chunks = table.column(0).num_chunks if table.num_columns else 0
    if chunks <= 1 or table.num_rows >= chunks * _COMBINE_BELOW_ROWS:
        return table
    try:
        return table.combine_chunks()
    except pa.ArrowException:  # e.g. dictionary columns whose chunks do not share a dictionary
        return table
