"""The statistics file of one data file: its layout, writing, reading and naming.

``_stats/<data-file-stem>.stats.lance`` holds one row per (field, page) of the data file; see the
package docstring (:mod:`lance_ops.table.stats`) for the values and the layout.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.errors import LanceOpsError, ObjectNotFoundError
from lance_ops.io import ObjectStore
from lance_ops.table.filters import pruning as sp

log = logging.getLogger(__name__)

__all__ = [
    "STATS_DIR", "STATS_SUFFIX", "TRUNCATE_BYTES", "FORMAT_VERSION", "PageStat", "PageRecord",
    "FieldPages", "FileStats", "stats_path", "stats_file_name", "stats_table", "write_stats_file",
    "parse_stats_table", "load_file_stats", "listed_stats_files", "StatsDataset",
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
_META_RANGES = b"lance_ops.stats.ranges"


@dataclass
class PageStat:
    """Statistics of one page (bounds as Arrow scalars of the stats type, or None)."""

    null_count: int | None
    nan_count: int | None
    min: pa.Scalar | None
    max: pa.Scalar | None


class StatsDataset(Protocol):
    """What statistics read of a dataset version (:class:`~lance_ops.table.dataset.LanceDataset` is one).

    A protocol, so that this package never imports the dataset module (which imports it).
    """

    @property
    def store(self) -> ObjectStore:
        """The object store holding the dataset."""
        ...

    @property
    def base(self) -> str:
        """The dataset root inside :attr:`store`."""
        ...

    @property
    def version(self) -> int:
        """The version number."""
        ...

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The manifest of the version."""
        ...

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the version (as pylance shows it)."""
        ...

    @property
    def storage_schema(self) -> pa.Schema:
        """The Arrow schema of the version as stored."""
        ...

    def cache(self, name: str) -> dict:
        """The dataset object's cache called ``name``."""
        ...


def stats_path(store: ObjectStore, base: str, data_file: str) -> str:
    """Store path of the statistics file of data file ``data_file`` (a path relative to data/)."""
    stem = data_file.rsplit("/", 1)[-1]
    if stem.endswith(".lance"):
        stem = stem[: -len(".lance")]
    return store.join(base, STATS_DIR, stem + STATS_SUFFIX)


@dataclass
class PageRecord:
    """One row of a statistics file: the statistics of one page of one field."""

    field_id: int
    page: int
    row_start: int
    num_rows: int
    stat: PageStat
    stype: pa.DataType | None


def stats_table(records: list[PageRecord], data_file: str, num_rows: int, *,
                range_rows: int | None = None) -> pa.Table:
    """The statistics file contents (one row per field and page, sorted) of data file ``data_file``.

    ``range_rows``: the records are fixed row ranges of that many rows, not pages (2.1+ files, see
    :mod:`lance_ops.table.stats.ranges`); recorded as schema metadata ``lance_ops.stats.ranges``.
    """
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
    if range_rows is not None:
        meta[_META_RANGES] = str(int(range_rows)).encode()
    schema = pa.schema(fields, metadata=meta)
    return pa.Table.from_arrays([cols[f.name] for f in fields], schema=schema)


def _scalars_to_array(values: list, t: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, t)
    except (pa.ArrowException, TypeError, ValueError):
        chunks = [pa.array([v], t) if v is not None else pa.nulls(1, t) for v in values]
        return pa.concat_arrays(chunks) if chunks else pa.array([], t)


def write_stats_file(table: pa.Table, store: ObjectStore, path: str,
                     storage_options: Mapping[str, Any] | None = None) -> None:
    """Write ``table`` (from :func:`stats_table`) as the Lance (2.0) file ``path`` of ``store``.

    A statistics table is a few rows of flat columns: its bytes are made in memory and stored with
    one put (the same bytes the file writer makes, ADR 0053); other tables go through the writer."""
    from lance_ops.format.registry import LanceFileWriter
    from lance_ops.format.writer import small_file_bytes

    data = small_file_bytes(table)
    if data is not None:
        store.put(path, data)
        return
    with LanceFileWriter(store.uri(path), table.schema, storage_options=storage_options) as w:
        if table.num_rows:
            w.write_batch(table)


@dataclass
class FieldPages:
    """Per-page statistics of one field in one data file (Python bounds, None = unknown)."""

    row_start: np.ndarray
    num_rows: np.ndarray
    null_count: list[int | None]
    nan_count: list[int | None]
    mins: list[Any]
    maxs: list[Any]

    def __len__(self) -> int:
        return len(self.row_start)

    def page(self, i: int) -> sp.ColumnStats:
        """Statistics of page ``i``, in the form pruning reads."""
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
        nulls = None if any(c is None for c in self.null_count) else int(sum(c or 0 for c in self.null_count))
        nans = None if any(c is None for c in self.nan_count) else int(sum(c or 0 for c in self.nan_count))
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
    """What a statistics file (read as a table) says; LanceOpsError for an unknown format."""
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


def load_file_stats(store: ObjectStore, base: str, data_file: str, expected_rows: int | None = None) -> FileStats | None:
    """The statistics of ``data_file`` (relative to data/), or None when there are none (or bad)."""
    from lance_ops.format.v2_0.reader import LanceFileReader

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


def listed_stats_files(ds: StatsDataset) -> set[str]:
    """Names of the files under ``_stats/`` of dataset ``ds`` (one listing)."""
    prefix = ds.store.join(ds.base, STATS_DIR)
    return {info.path.rsplit("/", 1)[-1] for info in ds.store.list_dir(prefix)}


def stats_file_name(data_file: str) -> str:
    """File name (under ``_stats/``) of the statistics of data file ``data_file``."""
    stem = data_file.rsplit("/", 1)[-1]
    return (stem[: -len(".lance")] if stem.endswith(".lance") else stem) + STATS_SUFFIX
