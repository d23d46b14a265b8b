"""The scan planner (ADR 0005): every read of a dataset's fragments is planned here, then executed.

:func:`plan` turns ``(dataset, columns, filter)`` into one :class:`FragmentScanTask` per fragment
to read, in manifest order: fragments and pages whose statistics rule the filter out are pruned at
planning time (:func:`lance_ops.table.stats.prune.scan_ranges`), so a task names only the physical
row ranges left to read. :func:`execute` reads one task (what ``LanceDataset.scan_fragment`` did).

A task is a small picklable value (the fragment's manifest record, which also names its deletion
file; the projected columns and their field ids; the row ranges; the compiled filter) so a Spark
driver can plan and ship tasks to executors; :meth:`FragmentScanTask.describe` is its JSON form.

Dataset scans (``to_table``, ``to_batches``, ``count_rows``, ``scanner``), takes, deletes, the
Spark data source, compaction and the statistics rebuild all read fragments through this module.
"""
from __future__ import annotations

import itertools
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import table_pb2
from lance_ops.errors import InvalidArgumentError
from lance_ops.format import blob_v2
from lance_ops.io.local import LocalStore
from lance_ops.table.stats import prune as stats_prune
from lance_ops.table.filters import Filter, compile_filter
from lance_ops.table.batch_rows import filter_table, read_together
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.snapshot import DatasetSnapshot

__all__ = [
    "ROW_ID", "ROW_ADDR", "FragmentScanTask", "plan", "iter_plan", "fragment_task", "execute",
    "execute_many", "resolve_columns", "output_names", "output_field", "output_schema",
]

ROW_ID = "_rowid"
ROW_ADDR = "_rowaddr"
_POSITION = "__lance_ops_position"
#: read the other columns only for matching rows when at most this fraction of rows match
_LATE_MATERIALIZE_FRACTION = 0.25


@dataclass(eq=False)
class FragmentScanTask:
    """One fragment's read: which rows, which columns, which filter.

    ``fragment`` is the fragment's manifest record (data files, deletion file, row ids) at
    ``version``. ``columns`` are the output columns in order (``_rowid``/``_rowaddr`` may be among
    them; with ``with_row_id``/``with_row_address`` they are appended), ``field_ids`` the
    top-level field ids of its data columns. Rows: all live rows (``ranges`` and ``offsets``
    None), the live rows within the physical ``ranges`` (an ``(n, 2)`` array of ``[start, end)``,
    what statistics pruning left), or exactly the physical ``offsets`` (takes: any order, none
    deleted). ``filter`` is applied to those rows.
    """

    fragment: table_pb2.DataFragment
    version: int
    columns: tuple[str, ...]
    field_ids: tuple[int, ...]
    filter: Filter | None = None
    ranges: np.ndarray | None = None
    offsets: np.ndarray | None = None
    with_row_id: bool = False
    with_row_address: bool = False
    blob_handling: str = "blobs_descriptions"

    @property
    def fragment_id(self) -> int:
        """The id of the fragment this task reads."""
        return int(self.fragment.id)

    @property
    def deletion_file(self) -> table_pb2.DeletionFile | None:
        """The fragment's deletion vector reference (None: no row deleted)."""
        return self.fragment.deletion_file if self.fragment.HasField("deletion_file") else None

    @property
    def planned_rows(self) -> int:
        """Physical rows this task covers before deletions and the filter (an upper bound)."""
        if self.offsets is not None:
            return int(len(self.offsets))
        if self.ranges is not None:
            return int((self.ranges[:, 1] - self.ranges[:, 0]).sum())
        return int(self.fragment.physical_rows)

    def split(self, max_rows: int) -> list["FragmentScanTask"]:
        """This task cut at every multiple of ``max_rows`` physical rows (a Spark partition each);
        pieces with no planned rows are left out. Tasks of explicit ``offsets`` are not split."""
        n = int(self.fragment.physical_rows)
        if self.offsets is not None or max_rows <= 0 or n <= max_rows:
            return [self]
        ranges = self.ranges if self.ranges is not None else np.array([[0, n]], dtype=np.int64)
        out = []
        for start in range(0, n, max_rows):
            end = min(n, start + max_rows)
            lo, hi = np.maximum(ranges[:, 0], start), np.minimum(ranges[:, 1], end)
            keep = lo < hi
            if not keep.any():
                continue
            out.append(replace(self, ranges=_frozen(np.stack([lo[keep], hi[keep]], axis=1))))
        return out

    def describe(self) -> dict[str, Any]:
        """The task as JSON-serialisable values (for logs, plans and tests)."""
        df = self.deletion_file
        return {
            "fragment_id": self.fragment_id,
            "version": int(self.version),
            "physical_rows": int(self.fragment.physical_rows),
            "data_files": [f.path for f in self.fragment.files],
            "deletion_file": None if df is None else {
                "file_type": table_pb2.DeletionFile.DeletionFileType.Name(df.file_type),
                "read_version": int(df.read_version), "id": int(df.id),
                "num_deleted_rows": int(df.num_deleted_rows)},
            "columns": list(self.columns),
            "field_ids": list(self.field_ids),
            "filter": None if self.filter is None else self.filter.sql,
            "ranges": None if self.ranges is None else self.ranges.tolist(),
            "offsets": None if self.offsets is None else self.offsets.tolist(),
            "with_row_id": self.with_row_id,
            "with_row_address": self.with_row_address,
            "blob_handling": self.blob_handling,
        }

    # the generated protobuf classes do not pickle: the fragment travels as its bytes
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["fragment"] = self.fragment.SerializeToString()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        frag = table_pb2.DataFragment()
        frag.ParseFromString(state["fragment"])
        self.__dict__.update(state, fragment=frag)

    def __repr__(self) -> str:
        rows = "all" if self.ranges is None and self.offsets is None else self.planned_rows
        return (f"FragmentScanTask(fragment={self.fragment_id}, version={self.version}, "
                f"columns={list(self.columns)}, filter={self.filter!r}, rows={rows})")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# --- columns -----------------------------------------------------------------------------------
def resolve_columns(ds: DatasetSnapshot, columns: Sequence[str] | str | None) -> list[str]:
    """The columns a scan of ``columns`` outputs (None: every column of the schema);
    InvalidArgumentError naming the unknown ones."""
    if columns is None:
        return [f.name for f in ds.storage_schema]
    if isinstance(columns, str):
        columns = [columns]
    known = ds.top_field_ids
    unknown = [c for c in columns if c not in known and c not in (ROW_ID, ROW_ADDR)]
    if unknown:
        raise InvalidArgumentError(f"{ds.uri}: unknown column(s) {unknown}; the dataset has {list(known)}")
    return list(columns)


def output_names(out_columns: Iterable[str], with_row_id: bool, with_row_address: bool) -> list[str]:
    """Result column names: the requested ones in the order given (``_rowid``/``_rowaddr`` may be
    among them), then ``_rowid`` and ``_rowaddr`` when asked for by flag and not already listed."""
    names = list(out_columns)
    if with_row_id and ROW_ID not in names:
        names.append(ROW_ID)
    if with_row_address and ROW_ADDR not in names:
        names.append(ROW_ADDR)
    return names


def output_field(ds: DatasetSnapshot, name: str, blobs: str) -> pa.Field:
    """The field of column ``name`` as a read with ``blob_handling=blobs`` returns it."""
    f = ds.storage_schema.field(name)
    if not blob_v2.has_blobs(f):
        return f
    return blob_v2.binary_field(f) if blobs == "all_binary" else blob_v2.described_field(f)


def output_schema(ds: DatasetSnapshot, out_columns: Iterable[str], with_row_id: bool, with_row_address: bool,
                  blobs: str = "blobs_descriptions") -> pa.Schema:
    """The schema of a scan's result (with the dataset's schema metadata)."""
    special = {ROW_ID: pa.field(ROW_ID, pa.uint64()), ROW_ADDR: pa.field(ROW_ADDR, pa.uint64())}
    fields = [special[c] if c in special else output_field(ds, c, blobs)
              for c in output_names(out_columns, with_row_id, with_row_address)]
    return pa.schema(fields, metadata=ds.storage_schema.metadata)


# --- planning ----------------------------------------------------------------------------------
def _compile(ds: DatasetSnapshot, filter: str | pc.Expression | Filter | None) -> Filter | None:
    return filter if isinstance(filter, Filter) else compile_filter(filter, ds.storage_schema)


def _fragment_id(f: int | LanceFragment | table_pb2.DataFragment) -> int:
    if isinstance(f, LanceFragment):
        return f.fragment_id
    if isinstance(f, table_pb2.DataFragment):
        return int(f.id)
    return int(f)


def fragment_task(ds: DatasetSnapshot, fragment: LanceFragment | table_pb2.DataFragment,
                  columns: Sequence[str], filter: str | pc.Expression | Filter | None = None, *,
                  ranges: np.ndarray | None = None, offsets: np.ndarray | None = None,
                  with_row_id: bool = False, with_row_address: bool = False,
                  blob_handling: str = "blobs_descriptions") -> FragmentScanTask:
    """The task reading ``fragment`` of ``ds`` as given, with no statistics pruning (takes and
    deletes, which choose their rows themselves). ``columns`` must exist (see
    :func:`resolve_columns`)."""
    proto = fragment.proto if isinstance(fragment, LanceFragment) else fragment
    ids = ds.top_field_ids
    filt = _compile(ds, filter)
    if filt is not None and filt.constant is True:
        filt = None
    return FragmentScanTask(
        fragment=proto, version=ds.version, columns=tuple(columns),
        field_ids=tuple(ids[c] for c in columns if c in ids), filter=filt,
        ranges=None if ranges is None else _frozen(np.asarray(ranges, dtype=np.int64).reshape(-1, 2)),
        offsets=None if offsets is None else np.asarray(offsets, dtype=np.uint64),
        with_row_id=with_row_id, with_row_address=with_row_address, blob_handling=blob_handling)


def iter_plan(ds: DatasetSnapshot, columns: Sequence[str] | str | None = None,
              filter: str | pc.Expression | Filter | None = None, *,
              fragments: Iterable[int | LanceFragment | table_pb2.DataFragment] | None = None,
              with_row_id: bool = False, with_row_address: bool = False,
              blob_handling: str = "blobs_descriptions", prune: bool = True) -> Iterator[FragmentScanTask]:
    """:func:`plan`, one task at a time (a streaming scan plans fragment k when it gets there)."""
    out_columns = resolve_columns(ds, columns)
    filt = _compile(ds, filter)
    if filt is not None and filt.constant is False:
        return
    if filt is not None and filt.constant is True:
        filt = None
    wanted = None if fragments is None else {_fragment_id(f) for f in fragments}
    ids = ds.top_field_ids
    field_ids = tuple(ids[c] for c in out_columns if c in ids)
    for proto in ds.manifest.fragments:
        if wanted is not None and proto.id not in wanted:
            continue
        ranges = None
        if prune and filt is not None:
            # fragment and page statistics: what cannot match is not read
            ranges = stats_prune.scan_ranges(ds, LanceFragment(ds, proto), filt)
            if ranges is not None and len(ranges) == 0:
                continue
        yield FragmentScanTask(fragment=proto, version=ds.version, columns=tuple(out_columns),
                               field_ids=field_ids, filter=filt,
                               ranges=None if ranges is None else _frozen(ranges),
                               with_row_id=with_row_id, with_row_address=with_row_address,
                               blob_handling=blob_handling)


def plan(ds: DatasetSnapshot, columns: Sequence[str] | str | None = None,
         filter: str | pc.Expression | Filter | None = None, *,
         fragments: Iterable[int | LanceFragment | table_pb2.DataFragment] | None = None,
         with_row_id: bool = False, with_row_address: bool = False,
         blob_handling: str = "blobs_descriptions", prune: bool = True) -> list[FragmentScanTask]:
    """The tasks of a scan of ``ds``, in manifest order: ``columns`` (None: all; ``_rowid`` /
    ``_rowaddr`` allowed) of the live rows matching ``filter`` (SQL text, a pyarrow expression or
    a compiled :class:`Filter`), of the ``fragments`` given (ids or fragments; None: all).

    A fragment the statistics rule out gets no task; the others carry the row ranges of the pages
    that may match (``prune=False``: no statistics are consulted). A filter that is constantly
    false plans nothing.
    """
    return list(iter_plan(ds, columns, filter, fragments=fragments, with_row_id=with_row_id,
                          with_row_address=with_row_address, blob_handling=blob_handling, prune=prune))


# --- execution ---------------------------------------------------------------------------------
def execute(ds: DatasetSnapshot, task: FragmentScanTask) -> pa.Table:
    """The rows of ``task`` read from ``ds`` (the dataset at ``task.version``): its live rows
    matching its filter, as its columns then the row ids/addresses asked for by flag.

    With a filter, the filter's columns are read first; the other output columns are then read
    only for the matching rows ("late materialisation") when few rows match, which is what
    makes selective scans cheap.
    """
    started = _start(ds, task)
    if isinstance(started, pa.Table):
        return started
    assert task.filter is not None
    return _finish(ds, started, filter_table(started.probe, task.filter.expression))


#: a filtered scan evaluates its filter once per group of fragments holding about this many rows
_FILTER_GROUP_ROWS = 1 << 16
_TASK = "__lance_ops_task"
#: fragments read side by side by :func:`execute_many` from a remote store (requests overlap)
_WORKERS = max(2, min(4, os.cpu_count() or 1))
#: ... and from a local directory: reads come from the page cache and decoding small files is mostly
#: Python holding the GIL, so a second reading thread only contends with the consumer (measured on
#: 2 cores, 2,000 small fragments: 1 thread 10-30 % faster in wall and CPU than 2; big files equal)
_LOCAL_WORKERS = 1
#: at most this many tasks, of at most about this many planned rows together, are read ahead
_WINDOW_TASKS = 32
_WINDOW_ROWS = 1 << 18


def _workers(ds: DatasetSnapshot) -> int:
    """Threads reading ahead for a scan of ``ds`` (see ``_WORKERS`` / ``_LOCAL_WORKERS``)."""
    return _LOCAL_WORKERS if isinstance(ds.store, LocalStore) else _WORKERS


def execute_many(ds: DatasetSnapshot, tasks: Iterable[FragmentScanTask]) -> Iterator[pa.Table]:
    """:func:`execute` of each of ``tasks``, in order, yielding the same tables.

    Tasks are read a few at a time on a small thread pool (a window of at most ``_WINDOW_TASKS``
    tasks and about ``_WINDOW_ROWS`` rows ahead of the consumer: one large fragment at a time, many
    small ones; two pieces of one fragment never at once). Filtered tasks are probed, then their
    filter is evaluated once over a group of them (about ``_FILTER_GROUP_ROWS`` rows): evaluating
    a pyarrow expression has a fixed cost of milliseconds, which dominated scans of many small
    fragments.
    """
    it = iter(tasks)
    head = list(itertools.islice(it, 2))
    if len(head) < 2:
        yield from _grouped(ds, (_start(ds, t) for t in head), None)
        return
    pool = ThreadPoolExecutor(max_workers=_workers(ds), thread_name_prefix="lance-ops-scan")
    try:
        yield from _grouped(ds, _started(ds, itertools.chain(head, it), pool), pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _started(ds: DatasetSnapshot, tasks: Iterable[FragmentScanTask],
             pool: ThreadPoolExecutor) -> Iterator["pa.Table | _Probe"]:
    """:func:`_start` of each task, in order, computed on ``pool`` a window ahead; runs of small
    fragments are started as one batch (:func:`_start_batch`)."""
    window: deque[tuple[list[FragmentScanTask], Future]] = deque()
    in_window: dict[int, int] = {}  # fragment id -> its tasks in the window
    rows = 0
    for batch in _batches(ds, tasks):
        size = sum(t.planned_rows for t in batch)
        fids = [t.fragment_id for t in batch]
        while window and (rows + size > _WINDOW_ROWS or len(window) >= _WINDOW_TASKS
                          or any(f in in_window for f in fids)):
            done, fut = window.popleft()
            for t in done:
                rows -= t.planned_rows
                left = in_window.pop(t.fragment_id) - 1
                if left:
                    in_window[t.fragment_id] = left
            yield from fut.result()
        window.append((batch, pool.submit(_start_batch, ds, batch)))
        for f in fids:
            in_window[f] = in_window.get(f, 0) + 1
        rows += size
    while window:
        yield from window.popleft()[1].result()


#: fragments of at most this many rows stored in one 2.x data file are read in batches: 2.1+ files
#: are planned and decoded together (``LanceFileReaderV21.read_all_of``), and the rows of a batch
#: are masked by their deletion vectors and cut into per-task tables at once; takes (tasks of
#: explicit offsets, no filter) of one-file fragments of any size are batched the same way
#: (``take_all_of``)
_BATCH_FILE_ROWS = 1 << 14
#: a batch holds at most this many tasks and about this many rows
_BATCH_TASKS = 128
_BATCH_ROWS = 1 << 15


def _batches(ds: DatasetSnapshot, tasks: Iterable[FragmentScanTask]) -> Iterator[list[FragmentScanTask]]:
    """``tasks`` in order, in lists: runs of tasks that :func:`_start_batch` reads together, else one each."""
    batch: list[FragmentScanTask] = []
    rows = 0
    simple: dict[tuple, bool] = {}  # (columns, filter) -> no blob or row id columns among them
    for task in tasks:
        key = (task.columns, id(task.filter))
        ok = simple.get(key)
        if ok is None:
            ok = simple[key] = _simple_columns(ds, task)
        frag = task.fragment
        take = task.offsets is not None  # a take: rows picked from each fragment, of any size
        if not (ok and task.ranges is None and len(frag.files) == 1 and _v2_file(frag.files[0])
                and (frag.physical_rows <= _BATCH_FILE_ROWS if not take
                     else task.filter is None and 0 < task.planned_rows <= _BATCH_ROWS
                     and _v21_file(frag.files[0]))):
            if batch:
                yield batch
                batch, rows = [], 0
            yield [task]
            continue
        size = task.planned_rows
        if batch and (rows + size > _BATCH_ROWS or len(batch) >= _BATCH_TASKS
                      or (batch[0].offsets is not None) != take
                      or batch[0].columns != task.columns or batch[0].filter is not task.filter
                      or batch[0].blob_handling != task.blob_handling):
            yield batch
            batch, rows = [], 0
        batch.append(task)
        rows += size
    if batch:
        yield batch


def _v2_file(df: table_pb2.DataFile) -> bool:
    return int(df.file_major_version) >= 2  # 2.0 and later (legacy 0.x files are read one by one)


def _v21_file(df: table_pb2.DataFile) -> bool:
    return (int(df.file_major_version), int(df.file_minor_version)) >= (2, 1)  # takes: ``take_all_of``


def _simple_columns(ds: DatasetSnapshot, task: FragmentScanTask) -> bool:
    """Whether a task reads only plain data columns (no blobs, no row ids or addresses)."""
    if task.with_row_id or task.with_row_address:
        return False
    names = set(task.columns) | (set(task.filter.columns) if task.filter is not None else set())
    if names & {ROW_ID, ROW_ADDR}:
        return False
    ids = ds.top_field_ids
    return not any(blob_v2.has_blobs(ds.storage_schema.field(c)) for c in names if c in ids)


def _start_batch(ds: DatasetSnapshot, tasks: list[FragmentScanTask]) -> list["pa.Table | _Probe"]:
    """:func:`_start` of each of ``tasks`` (a run made by :func:`_batches`), their files read together."""
    if len(tasks) == 1:
        return [_start(ds, tasks[0])]
    first = tasks[0]
    for t in tasks:
        if t.version != ds.version:
            raise InvalidArgumentError(f"{ds.uri}: a scan task of version {t.version} cannot run on version {ds.version}")
    top_ids = ds.top_field_ids
    filt = first.filter
    data_cols = [c for c in first.columns if c in top_ids]
    read_cols = data_cols if filt is None else [c for c in filt.columns if c in top_ids]
    rest = [c for c in data_cols if c not in read_cols]
    eager = filt is not None and bool(rest) and bool(read_cols) and _narrow(ds, rest)
    frags = [LanceFragment(ds, t.fragment) for t in tasks]
    if first.offsets is not None:  # a take (no filter): the picked rows of every file in one decode
        taken = read_together(ds, frags, data_cols, [t.offsets for t in tasks if t.offsets is not None])
        names = output_names(first.columns, False, False)
        return ([_select(t, names) for t in taken[0]] if taken is not None
                else [_start(ds, t) for t in tasks])
    got = read_together(ds, frags, read_cols + rest if eager else read_cols)
    if got is None:
        return [_start(ds, t) for t in tasks]
    tables, masks = got
    names = output_names(first.columns, False, False)
    if filt is None:
        return [t if t.column_names == names else _select(t, names) for t in tables]
    out: list[pa.Table | _Probe] = []
    for task, frag, table, mask in zip(tasks, frags, tables, masks):
        early = table.select(rest) if eager else None
        if eager:
            table = table.select(read_cols)
        probe = table.append_column(_POSITION, pa.array(np.arange(table.num_rows, dtype=np.int64)))
        out.append(_Probe(task, frag, None, names, rest, probe, _LiveOffsets(frag.physical_rows, mask), early))
    return out


#: rest columns of at most this many bytes per row (fixed width) are read with the filter's
#: columns when small fragments are read together ("early materialisation", see :func:`_narrow`)
_EARLY_MAX_WIDTH = 256


def _narrow(ds: DatasetSnapshot, columns: list[str]) -> bool:
    """Whether a filtered batch of small fragments reads ``columns`` (the output columns the
    filter does not name) together with the filter's columns instead of after it: each is
    fixed-width of at most ``_EARLY_MAX_WIDTH`` bytes per row, or a string / binary column. A
    second pass over a small file costs more than decoding a few narrow columns of the
    fragments without matches; wide columns (large vectors, large strings) stay late."""
    for c in columns:
        t = ds.storage_schema.field(c).type
        if pa.types.is_string(t) or pa.types.is_binary(t):
            continue
        width, inner = 1, t
        while pa.types.is_fixed_size_list(inner):
            width *= inner.list_size
            inner = inner.value_type
        if not (pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_boolean(inner)
                or pa.types.is_temporal(inner) or pa.types.is_decimal(inner)):
            return False
        if width * max(1, inner.bit_width // 8) > _EARLY_MAX_WIDTH:
            return False
    return True


def _grouped(ds: DatasetSnapshot, started: Iterable["pa.Table | _Probe"],
             pool: ThreadPoolExecutor | None) -> Iterator[pa.Table]:
    """The tables of the started tasks, in order: probes are filtered in groups, then finished."""
    pending: list[_Probe | pa.Table] = []
    rows = 0
    for item in started:
        if isinstance(item, pa.Table):
            if pending:
                pending.append(item)
            else:
                yield item
            continue
        assert item.task.filter is not None
        if pending and (rows >= _FILTER_GROUP_ROWS or not _same_filter(item.task.filter, _group_filter(pending))):
            yield from _flush(ds, pending, pool)
            pending, rows = [], 0
        pending.append(item)
        rows += item.probe.num_rows
    if pending:
        yield from _flush(ds, pending, pool)


def _group_filter(pending: list["_Probe | pa.Table"]) -> Filter | None:
    for p in pending:
        if isinstance(p, _Probe):
            return p.task.filter
    return None


def _same_filter(a: Filter, b: Filter | None) -> bool:
    return b is not None and (a is b or a.expression.equals(b.expression))


def _flush(ds: DatasetSnapshot, pending: list["_Probe | pa.Table"],
           pool: ThreadPoolExecutor | None = None) -> Iterator[pa.Table]:
    """Evaluate the group's filter once over the probes of ``pending``, then finish each task
    (on ``pool`` when given: late materialisation reads the other columns)."""
    probes = [p for p in pending if isinstance(p, _Probe)]
    filt = _group_filter(pending)
    filtered: list[pa.Table] | None = None
    if len(probes) > 1 and filt is not None:
        filtered = _filter_together([p.probe for p in probes], filt.expression)
    if filtered is None:
        filtered = [filter_table(p.probe, p.task.filter.expression) for p in probes]  # type: ignore[union-attr]
    jobs: list[Any] = []
    for lo in range(0, len(probes), _BATCH_TASKS):
        some, their = probes[lo:lo + _BATCH_TASKS], filtered[lo:lo + _BATCH_TASKS]
        jobs.append(pool.submit(_finish_batch, ds, some, their) if pool is not None and len(probes) > 1
                    else _Done(_finish_batch(ds, some, their)))
    finished = (table for job in jobs for table in job.result())
    for p in pending:
        yield p if isinstance(p, pa.Table) else next(finished)


class _Done:
    """A finished result with a future's ``result()``."""

    __slots__ = ("value",)

    def __init__(self, value: list[pa.Table]) -> None:
        self.value = value

    def result(self) -> list[pa.Table]:
        return self.value


def _filter_together(probes: list[pa.Table], expression: pc.Expression) -> list[pa.Table] | None:
    """``[t.filter(expression) for t in probes]`` computed in one evaluation (None when the
    probes cannot be concatenated: the caller filters them one by one)."""
    try:
        combined = pa.concat_tables(probes)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    lengths = np.array([t.num_rows for t in probes], dtype=np.int64)
    owner = np.repeat(np.arange(len(probes), dtype=np.int32), lengths)
    combined = combined.append_column(_TASK, pa.array(owner))
    out = filter_table(combined, expression)
    which = out.column(_TASK).to_numpy()
    if which.size > 1 and bool((np.diff(which) < 0).any()):  # keep each probe's own order
        order = np.lexsort((out.column(_POSITION).to_numpy(), which))
        out, which = out.take(pa.array(order)), which[order]
    bounds = np.searchsorted(which, np.arange(len(probes) + 1), side="left")
    out = out.drop_columns([_TASK])
    return [out.slice(int(lo), int(hi - lo)) for lo, hi in zip(bounds[:-1], bounds[1:])]


@dataclass(eq=False)
class _Probe:
    """A filtered task half done: its filter columns read (with each row's position)."""

    task: FragmentScanTask
    frag: LanceFragment
    offsets: np.ndarray | None
    names: list[str]
    rest: list[str]
    probe: pa.Table
    phys: "np.ndarray | _LiveOffsets"
    #: the other columns of every probed row, when read with the filter's columns (small fragments)
    early: pa.Table | None = None


def _start(ds: DatasetSnapshot, task: FragmentScanTask) -> "pa.Table | _Probe":
    """The task's result when it needs no filter, else its probe (filter columns read)."""
    if task.version != ds.version:
        raise InvalidArgumentError(f"{ds.uri}: a scan task of version {task.version} cannot run on version {ds.version}")
    frag = LanceFragment(ds, task.fragment)
    blobs = task.blob_handling
    offsets = task.offsets
    if task.ranges is not None:
        offsets = frag.live_offsets_in(task.ranges)
    if offsets is not None and offsets.size == 0:
        return output_schema(ds, task.columns, task.with_row_id, task.with_row_address, blobs).empty_table()
    names = output_names(task.columns, task.with_row_id, task.with_row_address)
    want_id, want_addr = ROW_ID in names, ROW_ADDR in names
    top_ids = ds.top_field_ids
    data_cols = [c for c in task.columns if c in top_ids]
    filt = task.filter
    if filt is None:
        table, _ = _read_rows(ds, frag, data_cols, offsets, want_id, want_addr, blobs)
        return _select(table, names)
    filter_cols = [c for c in filt.columns if c in top_ids]
    rest = [c for c in data_cols if c not in filter_cols]
    probe, phys = _read_rows(ds, frag, filter_cols, offsets, want_id or ROW_ID in filt.columns,
                             want_addr or ROW_ADDR in filt.columns, blobs)
    probe = probe.append_column(_POSITION, pa.array(np.arange(probe.num_rows, dtype=np.int64)))
    return _Probe(task, frag, offsets, names, rest, probe, phys)


def _finish(ds: DatasetSnapshot, p: _Probe, probe: pa.Table) -> pa.Table:
    """The task's result from its filtered probe: the other columns read for the matching rows."""
    blobs = p.task.blob_handling
    top_ids = ds.top_field_ids
    if p.rest and p.early is not None:
        positions = probe.column(_POSITION)
        for c in p.rest:
            probe = probe.append_column(output_field(ds, c, blobs), p.early.column(c).take(positions))
    elif p.rest:
        scanned = p.probe.num_rows
        positions = probe.column(_POSITION).to_numpy()
        if positions.size <= _LATE_MATERIALIZE_FRACTION * scanned:
            extra = p.frag.read([ds.storage_schema.field(c) for c in p.rest], [top_ids[c] for c in p.rest],
                                _take_offsets(p.phys, positions), blob_handling=blobs)
        else:
            full, _ = _read_rows(ds, p.frag, p.rest, p.offsets, False, False, blobs)
            extra = full.take(pa.array(positions))
        for c in p.rest:
            probe = probe.append_column(output_field(ds, c, blobs), extra.column(c))
    return _select(probe, p.names)


def _finish_batch(ds: DatasetSnapshot, probes: list[_Probe], filtered: list[pa.Table]) -> list[pa.Table]:
    """:func:`_finish` of each probe; the other columns of whole small fragments (probes started
    by :func:`_start_batch`) are read together for all of them, then the matching rows taken."""
    rest = probes[0].rest
    if rest and len(probes) > 1 and all(p.early is not None and p.rest == rest for p in probes):
        return _finish_early(ds, probes, filtered)
    if any(p.early is not None for p in probes):
        return [_finish(ds, p, f) for p, f in zip(probes, filtered)]
    if (not rest or len(probes) == 1 or any(blob_v2.has_blobs(ds.storage_schema.field(c)) for c in rest)
            or any(p.offsets is not None or p.rest != rest or not _batch_probe(p) for p in probes)):
        return [_finish(ds, p, f) for p, f in zip(probes, filtered)]
    matched = [i for i, f in enumerate(filtered) if f.num_rows]
    got = read_together(ds, [probes[i].frag for i in matched], rest) if matched else ([], [])
    if got is None:
        return [_finish(ds, p, f) for p, f in zip(probes, filtered)]
    fulls = dict(zip(matched, got[0]))
    blobs = probes[0].task.blob_handling
    fields = [output_field(ds, c, blobs) for c in rest]
    out = []
    for i, (p, probe) in enumerate(zip(probes, filtered)):
        full = fulls.get(i)
        for field in fields:
            col = (full.column(field.name).take(probe.column(_POSITION)) if full is not None
                   else pa.chunked_array([], field.type))
            probe = probe.append_column(field, col)
        out.append(_select(probe, p.names))
    return out


def _finish_early(ds: DatasetSnapshot, probes: list[_Probe], filtered: list[pa.Table]) -> list[pa.Table]:
    """:func:`_finish` of probes whose other columns were read with the filter's (``early``, the
    same ``rest`` columns): the matching rows of all of them taken in one ``take``, then cut."""
    blobs = probes[0].task.blob_handling
    fields = [output_field(ds, c, blobs) for c in probes[0].rest]
    earlies = [p.early for p in probes if p.early is not None]
    early = pa.concat_tables(earlies)  # (slices of one read: no copy)
    starts = np.zeros(len(probes) + 1, dtype=np.int64)
    np.cumsum([t.num_rows for t in earlies], out=starts[1:])
    positions = np.concatenate([f.column(_POSITION).to_numpy().astype(np.int64, copy=False) + int(s)
                                for f, s in zip(filtered, starts[:-1].tolist())])
    taken = early.take(pa.array(positions))
    out, at = [], 0
    for p, probe in zip(probes, filtered):
        n = probe.num_rows
        piece = taken.slice(at, n)
        at += n
        for field in fields:
            probe = probe.append_column(field, piece.column(field.name))
        out.append(_select(probe, p.names))
    return out


def _batch_probe(p: _Probe) -> bool:
    """Whether a probe reads a whole small fragment of one 2.x data file (see :func:`_batches`)."""
    frag = p.task.fragment
    return (p.task.ranges is None and len(frag.files) == 1 and frag.physical_rows <= _BATCH_FILE_ROWS
            and _v2_file(frag.files[0]))


def _select(table: pa.Table, names: list[str]) -> pa.Table:
    if not names:  # Table.select([]) would drop the row count
        return table.drop_columns(table.column_names)
    return table.select(names)


def _read_rows(ds: DatasetSnapshot, frag: LanceFragment, columns: list[str], offsets: np.ndarray | None,
               add_id: bool, add_addr: bool, blobs: str) -> tuple[pa.Table, "np.ndarray | _LiveOffsets"]:
    """Live rows of ``columns`` (all, or the physical ``offsets``), plus their physical offsets.

    ``offsets`` are already free of deleted rows. Reading all rows without row ids or
    addresses, the offsets come as a lazy :class:`_LiveOffsets`.
    """
    ids = ds.top_field_ids
    table = frag.read([ds.storage_schema.field(c) for c in columns], [ids[c] for c in columns], offsets,
                      blob_handling=blobs)
    phys: np.ndarray | _LiveOffsets
    if offsets is None:
        mask = frag.live_mask()
        if mask is not None:
            table = table.filter(pa.array(mask))
        # the offsets are only materialised when asked for (an arange per scan is not free)
        phys = _LiveOffsets(frag.physical_rows, mask)
        if add_id or add_addr:
            phys = phys.array()
    else:
        phys = np.asarray(offsets, dtype=np.uint64)
    if add_id or add_addr:
        arr = phys.array() if isinstance(phys, _LiveOffsets) else phys
        if add_id:
            table = table.append_column(pa.field(ROW_ID, pa.uint64()), pa.array(frag.row_ids(arr), pa.uint64()))
        if add_addr:
            table = table.append_column(pa.field(ROW_ADDR, pa.uint64()),
                                        pa.array(frag.row_addresses(arr), pa.uint64()))
    return table, phys


class _LiveOffsets:
    """The physical offsets of a fragment's live rows, computed only if needed."""

    __slots__ = ("rows", "mask")

    def __init__(self, rows: int, mask: np.ndarray | None):
        self.rows, self.mask = rows, mask

    def array(self) -> np.ndarray:
        if self.mask is None:
            return np.arange(self.rows, dtype=np.uint64)
        return np.flatnonzero(self.mask).astype(np.uint64)

    def take(self, positions: np.ndarray) -> np.ndarray:
        if self.mask is None:
            return positions.astype(np.uint64)
        return np.flatnonzero(self.mask)[positions].astype(np.uint64)


def _take_offsets(phys: "np.ndarray | _LiveOffsets", positions: np.ndarray) -> np.ndarray:
    """``phys[positions]`` for an offsets array or a :class:`_LiveOffsets`."""
    return phys.take(positions) if isinstance(phys, _LiveOffsets) else phys[positions]
