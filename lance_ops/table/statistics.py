"""Per-page column statistics (null count, min, max) kept beside Lance data files.

Lance 2.x files carry no statistics (upstream-facts 2.7), so lance_ops keeps its own, in files
that upstream readers never open: one small Lance file per data file,

    _stats/<data-file-stem>.stats.lance          (statistics of data/<data-file-stem>.lance)

It lives exactly as long as its data file (``cleanup_old_versions`` deletes it with the data file,
see :mod:`lance_ops.maintenance.cleanup`); pylance ignores the directory.

Values (the statistics section of the Lance format spec)
    * ``null_count``: exact number of nulls of the page (null when unknown);
    * ``min``/``max``: bounds of the non-null values, stored in the column's own Arrow type:
      integers, dates, times, timestamps, durations, decimals and booleans exactly; floats ignore
      NaN (counted separately in ``nan_count``, so ``x > 5`` can still skip pages), a zero min is
      recorded as ``-0.0`` and a zero max as ``+0.0``; strings and binaries are truncated to
      :data:`TRUNCATE_BYTES` bytes (min: the prefix, a lower bound; max: the prefix with its last
      character/byte incremented, an upper bound, or null when no such value exists);
      dictionaries are bounded by their decoded values and half floats are stored as float32.
    * Pages with no non-null value, and types without an order (lists, fixed-size lists, null),
      get null min/max: *unknown*. Readers must treat a null bound as "could be anything".

Layout of a statistics file (a Lance 2.0 file written with :class:`LanceFileWriter`)
    One row per (field, page) of the data file, sorted by field id then page:

    ============== ============ ====================================================
    column         type         meaning
    ============== ============ ====================================================
    field_id       int32        Lance field id (top-level fields and struct children)
    page           int32        page index within the field's column
    row_start      int64        first row of the page (rows of the data file)
    num_rows       int64        rows in the page
    null_count     int64 (null) nulls in the page; null = unknown
    nan_count      int64 (null) NaNs in the page (float fields only)
    min_<k>        <type k>     lower bound, for rows whose field has stats type k
    max_<k>        <type k>     upper bound, for rows whose field has stats type k
    ============== ============ ====================================================

    One ``min_<k>``/``max_<k>`` pair exists per distinct stats type of the file (so a table of
    fifty int64 columns has one pair, not fifty): the bounds stay in their native types, as the
    spec asks, while the file stays narrow. For a row only the pair of its own field's type can
    be non-null, so a reader takes the first non-null ``min_*``/``max_*`` of the row. Schema
    metadata: ``lance_ops.stats.format`` (``1``), ``lance_ops.stats.data_file`` (the data file
    name) and ``lance_ops.stats.num_rows`` (its rows) - a file whose name or row count does not
    match its data file is ignored - and ``lance_ops.stats.truncate_bytes``.

    Why not the spec's layout (one struct column per field, one row per page)? In a Lance 2.0
    file every column has its own page boundaries (they depend on each column's bytes), so the
    fields' page lists have different lengths and cannot share rows; a long table keyed by
    (field, page) can hold them all, and stays a plain Lance file any reader opens.

Fields whose ancestors include a list are not covered (their pages count items, not rows); list
fields themselves get null counts only.

Layering: the table layer reaches this module through two marked hooks, imported lazily (as
``LanceDataset.optimize`` reaches compaction): ``FragmentWriter._open`` wraps its file writer with
:func:`track_statistics`, the scan planner (:mod:`lance_ops.table.scan`) asks :func:`scan_ranges`.

Who writes them
    * ``write_dataset``/``write_fragments`` (and therefore compaction) compute them while writing:
      :func:`track_statistics` wraps each data file's writer; every batch is summarised with
      vectorised ``pyarrow.compute`` kernels as it is written, and when the writer emits a page the
      summaries of the batches it holds are merged (a page cut inside a batch is recomputed from
      that batch, which is then still at hand - see :class:`StatisticsCollector`);
    * :func:`rebuild_statistics` fills in the files of data files that have none (written by
      pylance, or by a writer that crashed after the data file) by reading page by page.

Who reads them
    The scan planner (every filtered scan, the Spark source) calls :func:`scan_ranges` per
    fragment: fragment-level aggregates skip whole fragments, per-page
    bounds leave only the row ranges of pages that may match, which are then read with ranged
    reads. Statistics only ever *skip* work: results are identical with and without them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.errors import LanceOpsError, ObjectNotFoundError
from lance_ops.schema import from_lance_fields
from lance_ops.table import naming
from lance_ops.table import stats_pruning as sp

log = logging.getLogger(__name__)

__all__ = [
    "STATS_DIR", "STATS_SUFFIX", "TRUNCATE_BYTES", "FORMAT_VERSION",
    "FieldPages", "FileStats", "stats_path", "load_file_stats", "track_statistics",
    "scan_offsets", "scan_ranges", "forget_cached_statistics",
    "fragment_statistics", "truncate_min", "truncate_max",
]

#: extension area (must equal ``lance_ops.maintenance.cleanup.STATS_DIR``)
STATS_DIR = "_stats"
STATS_SUFFIX = ".stats.lance"
FORMAT_VERSION = "1"
#: strings and binaries longer than this are truncated in the bounds
TRUNCATE_BYTES = 64

_META_FORMAT = b"lance_ops.stats.format"
_META_DATA_FILE = b"lance_ops.stats.data_file"
_META_ROWS = b"lance_ops.stats.num_rows"
_META_TRUNCATE = b"lance_ops.stats.truncate_bytes"
_CACHE_NAME = "lance_ops.statistics"  # this module's LanceDataset.cache

# =================================================================================================
# bounds of one array
# =================================================================================================
def truncate_min(value: str | bytes, limit: int = TRUNCATE_BYTES) -> str | bytes:
    """A lower bound of ``value`` at most ``limit`` bytes long (a prefix on a character boundary)."""
    if isinstance(value, str):
        raw = value.encode("utf-8")
        if len(raw) <= limit:
            return value
        return raw[:limit].decode("utf-8", errors="ignore")
    return bytes(value[:limit])


def truncate_max(value: str | bytes, limit: int = TRUNCATE_BYTES) -> str | bytes | None:
    """An upper bound of ``value`` at most ``limit`` bytes long, or None when none exists.

    The prefix is "incremented": its last character (byte) grows by one; characters that cannot
    grow (U+10FFFF, 0xFF) are dropped first. UTF-8 byte order equals code point order, so the
    bound holds for byte-wise and for code point comparisons alike.
    """
    if isinstance(value, str):
        raw = value.encode("utf-8")
        if len(raw) <= limit:
            return value
        chars = list(raw[:limit].decode("utf-8", errors="ignore"))
        while chars:
            cp = ord(chars[-1]) + 1
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0xE000
            if cp <= 0x10FFFF:
                chars[-1] = chr(cp)
                out = "".join(chars)
                return out if len(out.encode("utf-8")) <= limit else None
            chars.pop()
        return None
    raw = bytes(value)
    if len(raw) <= limit:
        return raw
    prefix = bytearray(raw[:limit])
    while prefix:
        if prefix[-1] < 0xFF:
            prefix[-1] += 1
            return bytes(prefix)
        prefix.pop()
    return None


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def stats_type(t: pa.DataType) -> pa.DataType | None:
    """The Arrow type the bounds of a field of type ``t`` are stored in (None: no bounds)."""
    if pa.types.is_dictionary(t):
        return stats_type(t.value_type)
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_interval(t):
        return None
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_temporal(t) or pa.types.is_decimal(t)):
        return t
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        return t
    if pa.types.is_fixed_size_binary(t) and t.byte_width <= TRUNCATE_BYTES:
        return t
    return None


@dataclass
class PageStat:
    """Statistics of one page (bounds as Arrow scalars of the stats type, or None)."""

    null_count: int | None
    nan_count: int | None
    min: pa.Scalar | None
    max: pa.Scalar | None


def _minmax_input(values, t: pa.DataType, st: pa.DataType):
    if pa.types.is_dictionary(t) or pa.types.is_float16(t):
        values = values.cast(st)
    if pa.types.is_duration(st):
        values = values.cast(pa.int64())
    return values


def compute_stat(values: pa.Array | pa.ChunkedArray, t: pa.DataType) -> PageStat:
    """Null count and bounds of ``values`` (of field type ``t``) as the spec defines them."""
    nulls = int(values.null_count)
    st = stats_type(t)
    if st is None or nulls >= len(values):
        nan = 0 if st is not None and _is_float(st) else None
        return PageStat(nulls, nan, None, None)
    data = _minmax_input(values, t, st)
    mm = pc.min_max(data)
    lo, hi = mm["min"], mm["max"]
    nan_count = None
    if _is_float(st):
        nan_count = int(pc.sum(pc.is_nan(data)).as_py() or 0)
        lo_py, hi_py = lo.as_py(), hi.as_py()
        if lo_py is None or lo_py != lo_py:  # only NaNs: no bound
            return PageStat(nulls, nan_count, None, None)
        if lo_py == 0:
            lo = pa.scalar(-0.0, st)
        if hi_py == 0:
            hi = pa.scalar(0.0, st)
        return PageStat(nulls, nan_count, lo, hi)
    if pa.types.is_duration(st):
        lo, hi = pa.scalar(lo.as_py(), pa.int64()).cast(st), pa.scalar(hi.as_py(), pa.int64()).cast(st)
    elif pa.types.is_string(st) or pa.types.is_large_string(st) or pa.types.is_binary(st) \
            or pa.types.is_large_binary(st):
        lo_v, hi_v = lo.as_py(), hi.as_py()
        lo = pa.scalar(truncate_min(lo_v), st)
        hi_t = truncate_max(hi_v)
        hi = None if hi_t is None else pa.scalar(hi_t, st)
    if lo is not None and not lo.is_valid:
        lo = None
    if hi is not None and not hi.is_valid:
        hi = None
    return PageStat(nulls, nan_count, lo, hi)


# =================================================================================================
# which fields get statistics
# =================================================================================================
@dataclass(frozen=True)
class StatField:
    """A field that gets statistics: top-level fields and children of (non-list) structs."""

    field_id: int
    path: tuple[str, ...]
    type: pa.DataType
    position: int  # index in the Lance field list (= column index in files lance_ops writes)

    @property
    def name(self) -> str:
        return ".".join(self.path)


def stat_fields(lance_fields: Sequence, schema: pa.Schema | None = None) -> list[StatField]:
    """The fields of a Lance field list that statistics cover, with their paths and types."""
    fields = list(lance_fields)
    if schema is None:
        schema = from_lance_fields(fields, {})
    children: dict[int, list[int]] = {}
    for i, f in enumerate(fields):
        children.setdefault(f.parent_id, []).append(i)
    out: list[StatField] = []

    def walk(i: int, path: tuple[str, ...], arrow: pa.Field) -> None:
        f = fields[i]
        out.append(StatField(f.id, path, arrow.type, i))
        if pa.types.is_struct(arrow.type):
            for c in children.get(f.id, []):
                name = fields[c].name
                idx = arrow.type.get_field_index(name)
                if idx >= 0:
                    walk(c, path + (name,), arrow.type.field(idx))

    for i in children.get(-1, []):
        name = fields[i].name
        idx = schema.get_field_index(name)
        if idx >= 0:
            walk(i, (name,), schema.field(idx))
    return out


def _tracked(sf: StatField) -> bool:
    # struct headers: one page for the whole file and never null in 2.0 - nothing worth keeping
    return not pa.types.is_struct(sf.type)


def _extract(data, path: Sequence[str]):
    """The values of ``path`` from a RecordBatch / Table (struct children via struct_field)."""
    col = data.column(path[0])
    for name in path[1:]:
        col = pc.struct_field(col, [name])
    return col


# =================================================================================================
# the statistics file
# =================================================================================================
def stats_path(store, base: str, data_file: str) -> str:
    """Store path of the statistics file of data file ``data_file`` (a path relative to data/)."""
    stem = data_file.rsplit("/", 1)[-1]
    if stem.endswith(".lance"):
        stem = stem[: -len(".lance")]
    return store.join(base, STATS_DIR, stem + STATS_SUFFIX)


@dataclass
class _Record:
    field_id: int
    page: int
    row_start: int
    num_rows: int
    stat: PageStat
    stype: pa.DataType | None


def _stats_table(records: list[_Record], data_file: str, num_rows: int) -> pa.Table:
    records = sorted(records, key=lambda r: (r.field_id, r.row_start))
    types: list[pa.DataType] = []
    for r in records:
        if r.stype is not None and (r.stat.min is not None or r.stat.max is not None) \
                and not any(r.stype.equals(t) for t in types):
            types.append(r.stype)
    cols: dict[str, pa.Array] = {
        "field_id": pa.array([r.field_id for r in records], pa.int32()),
        "page": pa.array([r.page for r in records], pa.int32()),
        "row_start": pa.array([r.row_start for r in records], pa.int64()),
        "num_rows": pa.array([r.num_rows for r in records], pa.int64()),
        "null_count": pa.array([r.stat.null_count for r in records], pa.int64()),
        "nan_count": pa.array([r.stat.nan_count for r in records], pa.int64()),
    }
    fields = [pa.field("field_id", pa.int32(), nullable=False), pa.field("page", pa.int32(), nullable=False),
              pa.field("row_start", pa.int64(), nullable=False), pa.field("num_rows", pa.int64(), nullable=False),
              pa.field("null_count", pa.int64()), pa.field("nan_count", pa.int64())]
    for k, t in enumerate(types):
        for which in ("min", "max"):
            vals = []
            for r in records:
                s = getattr(r.stat, which)
                vals.append(s if (s is not None and r.stype is not None and r.stype.equals(t)) else None)
            name = f"{which}_{k}"
            cols[name] = _scalars_to_array(vals, t)
            fields.append(pa.field(name, t))
    meta = {_META_FORMAT: FORMAT_VERSION.encode(), _META_DATA_FILE: data_file.encode(),
            _META_ROWS: str(int(num_rows)).encode(), _META_TRUNCATE: str(TRUNCATE_BYTES).encode()}
    schema = pa.schema(fields, metadata=meta)
    return pa.Table.from_arrays([cols[f.name] for f in fields], schema=schema)


def _scalars_to_array(values: list, t: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, t)
    except (pa.ArrowException, TypeError, ValueError):
        chunks = [pa.array([v], t) if v is not None else pa.nulls(1, t) for v in values]
        return pa.concat_arrays(chunks) if chunks else pa.array([], t)


def _write_stats_file(table: pa.Table, store, path: str, storage_options=None) -> None:
    from lance_ops.file.writer import LanceFileWriter

    with LanceFileWriter(store.uri(path), table.schema, storage_options=storage_options) as w:
        if table.num_rows:
            w.write_batch(table)


@dataclass
class FieldPages:
    """Per-page statistics of one field in one data file (Python bounds, None = unknown)."""

    row_start: np.ndarray
    num_rows: np.ndarray
    null_count: list
    nan_count: list
    mins: list
    maxs: list

    def __len__(self) -> int:
        return len(self.row_start)

    def page(self, i: int) -> sp.ColumnStats:
        return sp.ColumnStats(self.mins[i], self.maxs[i], self.null_count[i], int(self.num_rows[i]),
                              self.nan_count[i])

    def _bounds_known(self, i: int) -> bool:
        if self.mins[i] is not None and self.maxs[i] is not None:
            return True
        nulls, nans = self.null_count[i], self.nan_count[i]
        return nulls is not None and nulls + (nans or 0) >= int(self.num_rows[i])

    def aggregate(self) -> sp.ColumnStats:
        """Statistics of the whole data file (all pages together)."""
        cached = self.__dict__.get("_aggregate")
        if cached is None:
            cached = self.__dict__["_aggregate"] = self._aggregate()
        return cached

    def _aggregate(self) -> sp.ColumnStats:
        n = int(self.num_rows.sum())
        nulls = None if any(c is None for c in self.null_count) else int(sum(self.null_count))
        nans = None if any(c is None for c in self.nan_count) else int(sum(self.nan_count))
        lo = hi = None
        if all(self._bounds_known(i) for i in range(len(self))):
            los = [v for v in self.mins if v is not None]
            his = [v for v in self.maxs if v is not None]
            try:
                lo = min(los) if los else None
                hi = max(his) if his else None
            except TypeError:
                lo = hi = None
        return sp.ColumnStats(lo, hi, nulls, n, nans)


@dataclass
class FileStats:
    """Everything a statistics file says about one data file."""

    data_file: str
    num_rows: int
    fields: dict[int, FieldPages]


def _to_py_list(arr: pa.ChunkedArray | pa.Array) -> list:
    try:
        return arr.to_pylist()
    except (pa.ArrowException, ValueError, OverflowError):
        out = []
        for s in arr:
            try:
                out.append(s.as_py())
            except (pa.ArrowException, ValueError, OverflowError):
                out.append(None)  # not representable in Python: unknown bound
        return out


def parse_stats_table(table: pa.Table, data_file: str = "") -> FileStats:
    meta = table.schema.metadata or {}
    if meta.get(_META_FORMAT) != FORMAT_VERSION.encode():
        raise LanceOpsError(f"statistics of {data_file}: unknown format {meta.get(_META_FORMAT)!r}")
    rows = int(meta.get(_META_ROWS, b"-1"))
    n = table.num_rows
    fid = table.column("field_id").to_numpy()
    starts = table.column("row_start").to_numpy().astype(np.int64)
    counts = table.column("num_rows").to_numpy().astype(np.int64)
    nulls = table.column("null_count").to_pylist()
    nans = table.column("nan_count").to_pylist()
    mins: list = [None] * n
    maxs: list = [None] * n
    for name in table.column_names:
        target = mins if name.startswith("min_") else maxs if name.startswith("max_") else None
        if target is None:
            continue
        for i, v in enumerate(_to_py_list(table.column(name))):
            if v is not None and target[i] is None:
                target[i] = v
    fields: dict[int, FieldPages] = {}
    order = np.lexsort((starts, fid))
    for f in np.unique(fid):
        idx = order[fid[order] == f]
        fields[int(f)] = FieldPages(starts[idx], counts[idx], [nulls[i] for i in idx], [nans[i] for i in idx],
                                    [mins[i] for i in idx], [maxs[i] for i in idx])
    return FileStats(meta.get(_META_DATA_FILE, b"").decode() or data_file, rows, fields)


def load_file_stats(store, base: str, data_file: str, expected_rows: int | None = None) -> FileStats | None:
    """The statistics of ``data_file`` (relative to data/), or None when there are none (or bad)."""
    from lance_ops.file.reader import LanceFileReader

    path = stats_path(store, base, data_file)
    try:
        table = LanceFileReader(path, store=store).read_all()
        fs = parse_stats_table(table, data_file)
    except (ObjectNotFoundError, FileNotFoundError):
        return None
    except (LanceOpsError, pa.ArrowException, ValueError, KeyError) as exc:
        log.warning("ignoring unreadable statistics file %s: %s", store.uri(path), exc)
        return None
    if fs.data_file.rsplit("/", 1)[-1] != data_file.rsplit("/", 1)[-1]:
        log.warning("ignoring statistics file %s: it describes data file %s", store.uri(path), fs.data_file)
        return None
    if expected_rows is not None and fs.num_rows != expected_rows:
        log.warning("ignoring statistics file %s: it describes %d rows, the data file has %d",
                    store.uri(path), fs.num_rows, expected_rows)
        return None
    return fs


# =================================================================================================
# computing while writing
# =================================================================================================
def merge_stats(parts: Sequence[tuple[int, PageStat]], t: pa.DataType) -> PageStat:
    """The statistics of consecutive row ranges ``(rows, stat)`` taken together.

    Exact: min/max of the parts' bounds equal the bounds of the whole (truncation and the
    signed-zero rules are monotone), and a part with values but unknown bounds makes the
    whole unknown.
    """
    if len(parts) == 1:
        return parts[0][1]
    stats = [st for _, st in parts]
    nulls = None if any(st.null_count is None for st in stats) else sum(st.null_count for st in stats)
    nans = None if any(st.nan_count is None for st in stats) else sum(st.nan_count for st in stats)
    stype = stats_type(t)
    if stype is None:
        return PageStat(nulls, nans, None, None)

    def has_values(rows: int, st: PageStat) -> bool:
        return st.null_count is None or st.null_count + (st.nan_count or 0) < rows

    def bound(which: str) -> pa.Scalar | None:
        values = []
        for rows, st in parts:
            b = getattr(st, which)
            if b is None:
                if has_values(rows, st):
                    return None  # unknown somewhere: unknown overall
                continue
            values.append(b)
        if not values:
            return None
        arr = pa.array(values, stype)
        if pa.types.is_duration(stype):
            got = pc.min_max(arr.cast(pa.int64()))[which]
            return pa.scalar(got.as_py(), pa.int64()).cast(stype)
        return pc.min_max(arr)[which]

    lo, hi = bound("min"), bound("max")
    if _is_float(stype):
        if lo is not None and lo.as_py() == 0:
            lo = pa.scalar(-0.0, stype)
        if hi is not None and hi.as_py() == 0:
            hi = pa.scalar(0.0, stype)
    return PageStat(nulls, nans, lo, hi)


class _Piece:
    """Rows of one field given to the writer in one batch, not yet covered by emitted pages."""

    __slots__ = ("start", "rows", "stat", "raw")

    def __init__(self, start: int, rows: int, stat: PageStat, raw):
        self.start, self.rows, self.stat, self.raw = start, rows, stat, raw


class _Pending:
    """Per field: the pieces waiting for the writer to emit the pages that cover them."""

    __slots__ = ("sf", "column", "pieces", "next_row", "done", "stype")

    def __init__(self, sf: StatField, column: int):
        self.sf = sf
        self.column = column
        self.pieces: list[_Piece] = []
        self.next_row = 0
        self.done = 0  # pages already handled
        self.stype = stats_type(sf.type)

    def stat_of(self, values) -> PageStat:
        if self.stype is None:
            return PageStat(int(values.null_count), None, None, None)
        return compute_stat(values, self.sf.type)


class StatisticsCollector:
    """Computes page statistics of one data file from the batches given to its writer.

    Each batch's values are summarised at once (one vectorised pass per column) and the batch is
    not kept, except the newest one of each field: the 2.0 writer only ever cuts a page *inside*
    a batch when that batch is alone in the column's queue, i.e. the newest one. Every other page
    is a run of whole batches, whose statistics are merged exactly (:func:`merge_stats`). So memory
    stays at one input batch, and no value is copied.
    """

    def __init__(self, schema: pa.Schema, lance_fields: Sequence):
        self.records: list[_Record] = []
        self._pending = [_Pending(sf, sf.position) for sf in stat_fields(lance_fields, schema) if _tracked(sf)]

    def observe(self, batch: pa.RecordBatch | pa.Table, pages: Sequence[Sequence]) -> None:
        """Summarise ``batch`` (already given to the writer), then handle the pages emitted so far."""
        n = batch.num_rows
        if n:
            for p in self._pending:
                values = _extract(batch, p.sf.path)
                for piece in p.pieces:
                    piece.raw = None  # no longer the newest: never cut (see the class docstring)
                p.pieces.append(_Piece(p.next_row, n, p.stat_of(values), values))
                p.next_row += n
        self.drain(pages)

    def drain(self, pages: Sequence[Sequence]) -> None:
        for p in self._pending:
            col_pages = pages[p.column] if p.column < len(pages) else []
            while p.done < len(col_pages):
                page = col_pages[p.done]
                self._page(p, p.done, page.row_start, page.num_rows)
                p.done += 1

    def _page(self, p: _Pending, index: int, row_start: int, num_rows: int) -> None:
        end = row_start + num_rows
        parts: list[tuple[int, PageStat]] = []
        for piece in p.pieces:
            lo, hi = max(piece.start, row_start), min(piece.start + piece.rows, end)
            if hi <= lo:
                continue
            if lo == piece.start and hi == piece.start + piece.rows:
                parts.append((piece.rows, piece.stat))
            elif piece.raw is not None:
                parts.append((hi - lo, p.stat_of(piece.raw.slice(lo - piece.start, hi - lo))))
            else:
                raise LanceOpsError(f"statistics: page {index} of field {p.sf.name} cuts a batch that "
                                    "is no longer available")
        if sum(rows for rows, _ in parts) != num_rows:
            raise LanceOpsError(f"statistics: page {index} of field {p.sf.name} covers rows not seen")
        stat = merge_stats(parts, p.sf.type) if parts else PageStat(0, None, None, None)
        self.records.append(_Record(p.sf.field_id, index, row_start, num_rows, stat, p.stype))
        while p.pieces and p.pieces[0].start + p.pieces[0].rows <= end:
            p.pieces.pop(0)

    def table(self, data_file: str, num_rows: int) -> pa.Table:
        return _stats_table(self.records, data_file, num_rows)


class _StatsTrackingWriter:
    """A LanceFileWriter that also writes the statistics file of what it wrote (on close)."""

    def __init__(self, writer, store, base: str, data_file: str, storage_options=None):
        self._writer = writer
        self._store, self._base, self._data_file = store, base, data_file
        self._options = storage_options
        self._collector: StatisticsCollector | None = None
        self._failed = False

    def __getattr__(self, name: str):
        return getattr(self._writer, name)

    def _fail(self, exc: BaseException) -> None:
        log.warning("statistics of %s will be missing (rebuild_statistics can add them): %s: %s",
                    self._data_file, type(exc).__name__, exc)
        self._failed, self._collector = True, None

    def write_batch(self, data) -> None:
        self._writer.write_batch(data)
        if self._failed:
            return
        try:
            if not isinstance(data, (pa.RecordBatch, pa.Table)):
                raise LanceOpsError(f"statistics need RecordBatch or Table input, got {type(data).__name__}")
            if self._collector is None:
                self._collector = StatisticsCollector(self._writer.schema, self._writer.lance_fields)
            self._collector.observe(data, self._writer.pages)
        except Exception as exc:  # noqa: BLE001 - statistics are optional, never fail a write
            self._fail(exc)

    def close(self) -> int:
        rows = self._writer.close()
        if self._failed:
            return rows
        try:
            if self._collector is None:
                self._collector = StatisticsCollector(self._writer.schema, self._writer.lance_fields)
            self._collector.drain(self._writer.pages)
            table = self._collector.table(self._data_file, rows)
            _write_stats_file(table, self._store, stats_path(self._store, self._base, self._data_file),
                              self._options)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        return rows


def track_statistics(writer, store, base: str, data_file: str, storage_options=None):
    """Wrap the LanceFileWriter of ``data/<data_file>`` so that closing it also writes its stats.

    Statistics are best effort: if they cannot be computed or written, the data file is still
    written and a warning is logged (``rebuild_statistics`` fills the gap later).
    """
    return _StatsTrackingWriter(writer, store, base, data_file, storage_options)


# =================================================================================================
# computing from an existing file
# =================================================================================================
def _listed_stats(ds) -> set[str]:
    """Names of the files under ``_stats/`` (one listing)."""
    prefix = ds.store.join(ds.base, STATS_DIR)
    return {info.path.rsplit("/", 1)[-1] for info in ds.store.list_dir(prefix)}



def _stats_name(data_file: str) -> str:
    stem = data_file.rsplit("/", 1)[-1]
    return (stem[: -len(".lance")] if stem.endswith(".lance") else stem) + STATS_SUFFIX


def forget_cached_statistics(ds) -> None:
    """Drop what scans of ``ds`` cached about its statistics files (after some were written)."""
    ds.cache(_CACHE_NAME).clear()


def _path_ids(ds) -> dict[str, int]:
    cache = ds.cache(_CACHE_NAME)
    key = ("__paths__", ds.version)
    got = cache.get(key)
    if got is None:
        got = {sf.name: sf.field_id for sf in stat_fields(ds.manifest.fields, ds.schema)}
        cache[key] = got
    return got


#: datasets with more fragments than this list ``_stats/`` once instead of probing each file
LIST_THRESHOLD = 8


def _file_stats(ds, data_file_proto, rows: int) -> FileStats | None:
    cache = ds.cache(_CACHE_NAME)
    key = ("file", data_file_proto.path)
    if key not in cache:
        listed = cache.get("__listing__")
        if listed is None and len(ds.manifest.fragments) > LIST_THRESHOLD:
            try:
                listed = cache["__listing__"] = _listed_stats(ds)
            except Exception as exc:  # noqa: BLE001 - fall back to probing
                log.warning("cannot list %s/: %s", STATS_DIR, exc)
                listed = cache["__listing__"] = False
        if listed and _stats_name(data_file_proto.path) not in listed:
            cache[key] = None  # one listing instead of a failed GET per data file
        else:
            cache[key] = load_file_stats(ds.store, ds.base, data_file_proto.path, rows)
    return cache[key]


def _columns_of(tree) -> set[str]:
    out: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, (sp.Cmp, sp.IsNull)):
            out.add(node.column)
        elif isinstance(node, (sp.And, sp.Or)):
            for c in node.children:
                walk(c)
        elif isinstance(node, (sp.Not, sp.IsBool)):
            walk(node.child)

    walk(tree)
    return out


def fragment_statistics(ds, frag, columns: Iterable[str]) -> dict[str, FieldPages]:
    """Per-page statistics of ``columns`` (dotted paths) in fragment ``frag``, where known."""
    ids = _path_ids(ds)
    out: dict[str, FieldPages] = {}
    for path in columns:
        fid = ids.get(path)
        if fid is None:
            continue
        for df in frag.metadata.files:
            if fid in df.fields:
                fs = _file_stats(ds, df, frag.physical_rows)
                pages = None if fs is None else fs.fields.get(fid)
                if pages is not None and _covers(pages, frag.physical_rows):
                    out[path] = pages
                break
    return out


def _covers(pages: FieldPages, rows: int) -> bool:
    if not len(pages):
        return rows == 0
    ends = pages.row_start + pages.num_rows
    return bool(pages.row_start[0] == 0 and ends[-1] == rows and np.all(pages.row_start[1:] == ends[:-1]))


def scan_offsets(ds, frag, filt) -> np.ndarray | None:
    """Physical rows of ``frag`` a scan with ``filt`` must read, from statistics.

    None: read the whole fragment (no statistics, or they rule nothing out). An empty array:
    skip the fragment. Otherwise the live physical offsets of the pages that may match, sorted.
    """
    ranges = scan_ranges(ds, frag, filt)
    return ranges if ranges is None else frag.live_offsets_in(ranges)


def scan_ranges(ds, frag, filt) -> np.ndarray | None:
    """Physical row ranges of ``frag`` a scan with ``filt`` must read, from statistics.

    None: read the whole fragment (no statistics, or they rule nothing out). An empty array:
    skip the fragment. Otherwise an ``(n, 2)`` int64 array of the sorted, disjoint
    ``[start, end)`` ranges of the pages that may match (deleted rows not removed).
    """
    if filt is None:
        return None
    tree = getattr(filt, "tree", sp.UNKNOWN)
    columns = _columns_of(tree)
    if not columns:
        return None
    n = frag.physical_rows
    try:
        stats = fragment_statistics(ds, frag, columns)
    except Exception as exc:  # noqa: BLE001 - statistics never break a scan
        log.warning("statistics of fragment %d unusable: %s", frag.fragment_id, exc)
        return None
    if not stats:
        return None
    if not sp.may_match(filt, {p: fp.aggregate() for p, fp in stats.items()}):
        return np.empty((0, 2), np.int64)
    bounds = np.unique(np.concatenate([fp.row_start for fp in stats.values()] + [np.array([0, n])]))
    seg_starts, seg_ends = bounds[:-1], bounds[1:]
    if len(seg_starts) <= 1:
        return None
    page_of = {p: np.searchsorted(fp.row_start, seg_starts, side="right") - 1 for p, fp in stats.items()}
    page_stats: dict[str, dict[int, sp.ColumnStats]] = {p: {} for p in stats}
    keep = np.zeros(len(seg_starts), dtype=bool)
    for s in range(len(seg_starts)):
        chunk = {}
        for p, fp in stats.items():
            i = int(page_of[p][s])
            cs = page_stats[p].get(i)
            if cs is None:
                cs = page_stats[p][i] = fp.page(i)
            chunk[p] = cs
        keep[s] = sp.may_match(filt, chunk)
    if keep.all():
        return None
    if not keep.any():
        return np.empty((0, 2), np.int64)
    return np.stack([seg_starts[keep], seg_ends[keep]], axis=1).astype(np.int64)
