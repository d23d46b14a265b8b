"""Computing page statistics: bounds of one array, which fields get them, and the writer hook.

:func:`track_statistics` wraps the file writer of each data file so that its statistics are
computed from the batches it is given (:class:`StatisticsCollector`) and written beside it on
close; :func:`compute_stat`, :func:`stat_fields` and :func:`field_values` also serve rebuilding
the statistics of existing files (:mod:`lance_ops.maintenance.statistics`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.errors import LanceOpsError
from lance_ops.io import ObjectStore
from lance_ops.schema import from_lance_fields
from lance_ops.table.stats.store import (
    TRUNCATE_BYTES, PageRecord, PageStat, stats_path, stats_table, write_stats_file,
)

log = logging.getLogger(__name__)

__all__ = [
    "truncate_min", "truncate_max", "stats_type", "compute_stat", "StatField", "stat_fields",
    "is_tracked", "field_values", "merge_stats", "StatisticsCollector", "track_statistics", "PagedWriter",
]


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


def _minmax_input(values: pa.Array | pa.ChunkedArray, t: pa.DataType,
                  st: pa.DataType) -> pa.Array | pa.ChunkedArray:
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


@dataclass(frozen=True)
class StatField:
    """A field that gets statistics: top-level fields and children of (non-list) structs."""

    field_id: int
    path: tuple[str, ...]
    type: pa.DataType
    position: int  # index in the Lance field list (= column index in files lance_ops writes)

    @property
    def name(self) -> str:
        """The dotted path (``"st.x"``) filters and pruning use."""
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


def is_tracked(sf: StatField) -> bool:
    """Whether ``sf`` gets statistics (struct headers do not: one page, never null in 2.0)."""
    return not pa.types.is_struct(sf.type)


def field_values(data: pa.RecordBatch | pa.Table, path: Sequence[str]) -> pa.Array | pa.ChunkedArray:
    """The values of ``path`` from a RecordBatch / Table (struct children via struct_field)."""
    col = data.column(path[0])
    for name in path[1:]:
        col = pc.struct_field(col, [name])
    return col


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
    nulls = None if any(st.null_count is None for st in stats) else sum(st.null_count or 0 for st in stats)
    nans = None if any(st.nan_count is None for st in stats) else sum(st.nan_count or 0 for st in stats)
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

    def __init__(self, start: int, rows: int, stat: PageStat, raw: pa.Array | pa.ChunkedArray | None) -> None:
        self.start, self.rows, self.stat, self.raw = start, rows, stat, raw


class _Pending:
    """Per field: the pieces waiting for the writer to emit the pages that cover them."""

    __slots__ = ("sf", "column", "pieces", "next_row", "done", "stype")

    def __init__(self, sf: StatField, column: int) -> None:
        self.sf = sf
        self.column = column
        self.pieces: list[_Piece] = []
        self.next_row = 0
        self.done = 0  # pages already handled
        self.stype = stats_type(sf.type)

    def stat_of(self, values: pa.Array | pa.ChunkedArray) -> PageStat:
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

    def __init__(self, schema: pa.Schema, lance_fields: Sequence) -> None:
        self.records: list[PageRecord] = []
        self._pending = [_Pending(sf, sf.position) for sf in stat_fields(lance_fields, schema) if is_tracked(sf)]

    def observe(self, batch: pa.RecordBatch | pa.Table, pages: Sequence[Sequence]) -> None:
        """Summarise ``batch`` (already given to the writer), then handle the pages emitted so far."""
        n = batch.num_rows
        if n:
            for p in self._pending:
                values = field_values(batch, p.sf.path)
                for piece in p.pieces:
                    piece.raw = None  # no longer the newest: never cut (see the class docstring)
                p.pieces.append(_Piece(p.next_row, n, p.stat_of(values), values))
                p.next_row += n
        self.drain(pages)

    def drain(self, pages: Sequence[Sequence]) -> None:
        """Record the statistics of the pages (per column) the writer emitted since the last call."""
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
        self.records.append(PageRecord(p.sf.field_id, index, row_start, num_rows, stat, p.stype))
        while p.pieces and p.pieces[0].start + p.pieces[0].rows <= end:
            p.pieces.pop(0)

    def table(self, data_file: str, num_rows: int) -> pa.Table:
        """The statistics file contents of what was recorded (see :func:`stats_table`)."""
        return stats_table(self.records, data_file, num_rows)


class PagedWriter(Protocol):
    """What the statistics hook uses of a Lance file writer (``LanceFileWriter`` is one)."""

    @property
    def schema(self) -> pa.Schema | None:
        """The Arrow schema of the file (None until the first batch)."""
        ...

    @property
    def lance_fields(self) -> Sequence[Any]:
        """The file's Lance fields (their order is the column order)."""
        ...

    @property
    def pages(self) -> Sequence[Sequence[Any]]:
        """Per column, the pages emitted so far (each with ``row_start`` and ``num_rows``)."""
        ...

    def write_batch(self, batch: Any) -> None:
        """Append a batch."""
        ...

    def close(self) -> int:
        """Finish the file; returns its rows."""
        ...


W = TypeVar("W", bound=PagedWriter)


class _StatsTrackingWriter:
    """A LanceFileWriter that also writes the statistics file of what it wrote (on close)."""

    def __init__(self, writer: PagedWriter, store: ObjectStore, base: str, data_file: str,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self._writer = writer
        self._store, self._base, self._data_file = store, base, data_file
        self._options = storage_options
        self._collector: StatisticsCollector | None = None
        self._failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    def _fail(self, exc: BaseException) -> None:
        log.warning("statistics of %s will be missing (rebuild_statistics can add them): %s: %s",
                    self._data_file, type(exc).__name__, exc)
        self._failed, self._collector = True, None

    def write_batch(self, data: Any) -> None:
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
            write_stats_file(table, self._store, stats_path(self._store, self._base, self._data_file),
                              self._options)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        return rows


def track_statistics(writer: W, store: ObjectStore, base: str, data_file: str,
                     storage_options: Mapping[str, Any] | None = None) -> W:
    """Wrap the LanceFileWriter of ``data/<data_file>`` so that closing it also writes its stats.

    Statistics are best effort: if they cannot be computed or written, the data file is still
    written and a warning is logged (``rebuild_statistics`` fills the gap later). The wrapper
    passes every other attribute through to ``writer``, so callers keep using it as one.
    """
    return cast(W, _StatsTrackingWriter(writer, store, base, data_file, storage_options))
