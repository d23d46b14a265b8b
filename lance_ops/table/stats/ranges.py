"""Statistics per fixed row range, for data files whose pages do not suit pruning (Lance 2.1/2.2, 0.1).

A Lance 2.0 file cuts each column into pages of a few MiB, and the statistics file of a 2.0 data file
keeps one row per page (:mod:`lance_ops.maintenance.statistics`, :class:`StatisticsCollector`).
Lance 2.1 and 2.2 files (pylance's default since 2.1 became stable; 14.0.2 writes 2.2) are shaped
differently: a column's page is large (pylance 14.0.2 writes one page per column for 100 000
int64 rows), and what a ranged read actually fetches inside a page is a *mini-block chunk*
(a power of two of values, 512 to 4096 in pylance's files) or, in full-zip pages, single rows.
Per-page statistics of such a file would let pruning skip whole files, never a part of one.

So statistics of 2.1/2.2 files (and of legacy 0.1 files) are kept per **row range** instead:
rows ``[k * RANGE_ROWS, (k + 1) * RANGE_ROWS)`` of the data file, the last range shorter, the same
ranges for every field. :data:`RANGE_ROWS` is 8192, a multiple of every mini-block chunk size, so a
range that pruning keeps starts and ends on chunk boundaries of every fixed-width column and the
reader (:class:`~lance_ops.format.v2_1.reader.LanceFileReaderV21`: ``take_rows`` reads only the
chunks holding the rows asked for) fetches exactly the chunks of the kept ranges. The scan planner
needs nothing new: the statistics file has the same layout (one row per field and range; ``page``
is the range's index, ``row_start``/``num_rows`` its rows), and schema metadata
``lance_ops.stats.ranges`` = ``"8192"`` records how it was cut.

What is covered is the same as for 2.0 files (top-level fields and struct children; list fields get
null counts only; nothing below a list), with one addition and one exception: in 2.1+ files a list
or struct field has no column of its own (only its leaves are listed in the data file's ``fields``),
so a field belongs to the data file holding any of its leaves; blob fields get no statistics (their
bounds are never useful, and computing them would read every blob).

Values are read through the reader the format registry picks for the file's version
(:meth:`~lance_ops.table.fragment.LanceFragment.data_file_reader`), so every encoding that reader
decodes gets statistics; a file it cannot decode raises, and the rebuild reports it as failed.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import pyarrow as pa

from lance_ops.format import blob_v2
from lance_ops.table.stats.collect import StatField, compute_stat, field_values, is_tracked, stat_fields, stats_type
from lance_ops.table.stats.store import PageRecord, PageStat, stats_table

__all__ = ["RANGE_ROWS", "BLOCK_RANGES", "RangeReader", "row_ranges", "file_fields", "compute_range_statistics"]

#: rows of one statistics range of a 2.1/2.2 (or 0.1) data file
RANGE_ROWS = 8192
#: ranges read per ``read_range`` call while computing (one column at a time)
BLOCK_RANGES = 8


class RangeReader(Protocol):
    """What computing range statistics reads of a data file (every registry reader is one)."""

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        ...

    @property
    def lance_fields(self) -> Sequence[Any]:
        """The file's Lance fields (``id``, ``parent_id``, ``name``)."""
        ...

    def read_range(self, start: int, num_rows: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows ``start .. start + num_rows`` of the named top-level columns."""
        ...


def row_ranges(num_rows: int, range_rows: int = RANGE_ROWS) -> list[tuple[int, int]]:
    """The ``(row_start, num_rows)`` statistics ranges of a data file of ``num_rows`` rows."""
    if range_rows <= 0:
        raise ValueError(f"range_rows must be positive, got {range_rows}")
    return [(start, min(range_rows, num_rows - start)) for start in range(0, num_rows, range_rows)]


def _parents(dataset_fields: Sequence[Any]) -> dict[int, int]:
    return {int(f.id): int(f.parent_id) for f in dataset_fields}


def _top_ancestor(parent: dict[int, int], field_id: int) -> int:
    fid = field_id
    while parent.get(fid, -1) >= 0:
        fid = parent[fid]
    return fid


def file_fields(stored: Sequence[int], dataset_fields: Sequence[Any]) -> set[int]:
    """Ids of the fields a data file holds: those it lists (``DataFile.fields``) and their
    ancestors (2.1+ files list only leaves, so their structs and lists are held through them)."""
    parent = _parents(dataset_fields)
    out: set[int] = set()
    for fid in stored:
        f = int(fid)
        while f >= 0 and f not in out:
            out.add(f)
            f = parent.get(f, -1)
    return out


def _wanted(reader: RangeReader, stored: Sequence[int], dataset_fields: Sequence[Any],
            schema: pa.Schema | None) -> dict[str, list[StatField]]:
    """Per top-level column name of the file, the tracked statistics fields it holds."""
    held = file_fields(stored, dataset_fields)
    parent = _parents(dataset_fields)
    top_name = {int(f.id): f.name for f in reader.lance_fields if f.parent_id < 0}
    out: dict[str, list[StatField]] = {}
    fields = stat_fields(dataset_fields, schema)
    tops = {sf.field_id: sf for sf in fields if len(sf.path) == 1}
    for sf in fields:
        if not is_tracked(sf) or sf.field_id not in held:
            continue
        top_id = _top_ancestor(parent, sf.field_id)
        name = top_name.get(top_id)
        top = tops.get(top_id)
        if name is None or top is None or _is_blob(top, schema):
            continue
        out.setdefault(name, []).append(sf)
    return out


def _is_blob(top: StatField, schema: pa.Schema | None) -> bool:
    if schema is None:
        return False
    idx = schema.get_field_index(top.path[0])
    return idx >= 0 and blob_v2.has_blobs(schema.field(idx))


def compute_range_statistics(reader: RangeReader, stored: Sequence[int], data_file: str,
                             dataset_fields: Sequence[Any], schema: pa.Schema | None = None, *,
                             range_rows: int = RANGE_ROWS) -> pa.Table:
    """The statistics table (see :func:`~lance_ops.table.stats.store.stats_table`) of one data file,
    one row per field and :func:`row_ranges` range.

    ``stored`` is the data file's ``DataFile.fields``; ``dataset_fields``/``schema`` those of the
    dataset version. Each top-level column is read :data:`BLOCK_RANGES` ranges at a time.
    Reader errors (an encoding it cannot decode, a damaged file) propagate.
    """
    num_rows = int(reader.num_rows)
    ranges = row_ranges(num_rows, range_rows)
    records: list[PageRecord] = []
    for name, sfs in _wanted(reader, stored, dataset_fields, schema).items():
        for b in range(0, len(ranges), BLOCK_RANGES):
            block = ranges[b:b + BLOCK_RANGES]
            start = block[0][0]
            rows = block[-1][0] + block[-1][1] - start
            table = reader.read_range(start, rows, columns=[name])
            for sf in sfs:
                values = field_values(table, (name,) + sf.path[1:])
                if values.type != sf.type:
                    values = values.cast(sf.type)
                stype = stats_type(sf.type)
                for k, (row_start, n) in enumerate(block, b):
                    part = values.slice(row_start - start, n)
                    stat = compute_stat(part, sf.type) if stype is not None else \
                        PageStat(int(part.null_count), None, None, None)
                    records.append(PageRecord(sf.field_id, k, row_start, n, stat, stype))
    return stats_table(records, data_file, num_rows, range_rows=range_rows)
