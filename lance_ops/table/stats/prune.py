"""Statistics-based scan pruning: which rows of a fragment a filtered scan must read.

:func:`scan_ranges` (for the scan planner) evaluates a compiled filter's pruning tree (:mod:`lance_ops.table.filters.pruning`)
over fragment-level aggregates, then per page (2.0 files) or per 8192-row range (2.1/2.2 files, see
:mod:`lance_ops.table.stats.ranges`), using the statistics files of the fragment's data files
(cached per dataset in ``LanceDataset.cache``). A field's statistics are those of the data file
holding it, or, in 2.1+ files that list only leaf fields, holding one of its leaves.
"""
from __future__ import annotations

import logging
from typing import Iterable, Protocol

import numpy as np

from lance_ops._proto import table_pb2
from lance_ops.table.filters import pruning as sp
from lance_ops.table.stats.collect import stat_fields
from lance_ops.table.stats.ranges import file_fields
from lance_ops.table.stats.store import (
    STATS_DIR, FieldPages, FileStats, StatsDataset, listed_stats_files, load_file_stats, stats_file_name,
)

log = logging.getLogger(__name__)

__all__ = ["LIST_THRESHOLD", "scan_offsets", "scan_ranges", "fragment_statistics", "forget_cached_statistics",
           "StatsFragment"]

_CACHE_NAME = "lance_ops.statistics"  # this module's LanceDataset.cache


class StatsFragment(Protocol):
    """What pruning reads of a fragment (:class:`~lance_ops.table.fragment.LanceFragment` is one)."""

    proto: table_pb2.DataFragment

    @property
    def fragment_id(self) -> int:
        """The fragment's id."""
        ...

    @property
    def physical_rows(self) -> int:
        """Rows stored in its data files, deleted ones included."""
        ...

    def live_mask(self) -> np.ndarray | None:
        """Boolean mask over physical rows (None when nothing is deleted)."""
        ...

    def live_offsets_in(self, ranges: np.ndarray) -> np.ndarray:
        """Physical offsets of the live rows within ``ranges`` (``(n, 2)`` ``[start, end)``)."""
        ...


def forget_cached_statistics(ds: StatsDataset) -> None:
    """Drop what scans of ``ds`` cached about its statistics files (after some were written)."""
    ds.cache(_CACHE_NAME).clear()


def _path_ids(ds: StatsDataset) -> dict[str, int]:
    cache = ds.cache(_CACHE_NAME)
    key = ("__paths__", ds.version)
    got = cache.get(key)
    if got is None:
        got = {sf.name: sf.field_id for sf in stat_fields(ds.manifest.fields, ds.storage_schema)}
        cache[key] = got
    return got


def _held_fields(ds: StatsDataset, data_file_proto: table_pb2.DataFile) -> set[int]:
    """Fields data file ``data_file_proto`` holds, its listed leaves' ancestors included (2.1+ files
    list only leaves: a list or struct field is held through them)."""
    cache = ds.cache(_CACHE_NAME)
    key = ("__held__", ds.version, data_file_proto.path)
    got = cache.get(key)
    if got is None:
        got = cache[key] = file_fields(data_file_proto.fields, ds.manifest.fields)
    return got


#: datasets with more fragments than this list ``_stats/`` once instead of probing each file
LIST_THRESHOLD = 8


def _file_stats(ds: StatsDataset, data_file_proto: table_pb2.DataFile, rows: int) -> FileStats | None:
    cache = ds.cache(_CACHE_NAME)
    key = ("file", data_file_proto.path)
    if key not in cache:
        listed = cache.get("__listing__")
        if listed is None and len(ds.manifest.fragments) > LIST_THRESHOLD:
            try:
                listed = cache["__listing__"] = listed_stats_files(ds)
            except Exception as exc:  # noqa: BLE001 - fall back to probing
                log.warning("cannot list %s/: %s", STATS_DIR, exc)
                listed = cache["__listing__"] = False
        # an empty listing is an answer too (no statistics at all): no GET per data file then
        if listed is not None and listed is not False and stats_file_name(data_file_proto.path) not in listed:
            cache[key] = None  # one listing instead of a failed GET per data file
        else:
            cache[key] = load_file_stats(ds.store, ds.base, data_file_proto.path, rows)
    return cache[key]


def fragment_statistics(ds: StatsDataset, frag: StatsFragment, columns: Iterable[str]) -> dict[str, FieldPages]:
    """Per-page statistics of ``columns`` (dotted paths) in fragment ``frag``, where known."""
    ids = _path_ids(ds)
    out: dict[str, FieldPages] = {}
    for path in columns:
        fid = ids.get(path)
        if fid is None:
            continue
        for df in frag.proto.files:
            if fid in df.fields or fid in _held_fields(ds, df):
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


def scan_offsets(ds: StatsDataset, frag: StatsFragment, filt: sp.Prunable | None) -> np.ndarray | None:
    """Physical rows of ``frag`` a scan with ``filt`` must read, from statistics.

    None: read the whole fragment (no statistics, or they rule nothing out). An empty array:
    skip the fragment. Otherwise the live physical offsets of the pages that may match, sorted.
    """
    ranges = scan_ranges(ds, frag, filt)
    return ranges if ranges is None else frag.live_offsets_in(ranges)


def scan_ranges(ds: StatsDataset, frag: StatsFragment, filt: sp.Prunable | None) -> np.ndarray | None:
    """Physical row ranges of ``frag`` a scan with ``filt`` must read, from statistics (what the
    scan planner, :mod:`lance_ops.table.scan`, asks).

    None: read the whole fragment (no statistics, or they rule nothing out). An empty array:
    skip the fragment. Otherwise an ``(n, 2)`` int64 array of the sorted, disjoint
    ``[start, end)`` ranges of the pages that may match (deleted rows not removed).
    """
    if filt is None:
        return None
    tree = getattr(filt, "tree", sp.UNKNOWN)
    columns = sp.columns_of(tree)
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
