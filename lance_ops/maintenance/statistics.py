"""Statistics maintenance: fill in page statistics for data files that lack them.

The statistics format, the writer hook and scan pruning live in :mod:`lance_ops.table.statistics`
(the table layer uses them on every write and filtered scan); this module holds the maintenance
operations built on them: :func:`rebuild_statistics` and :func:`statistics_coverage`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from lance_ops.errors import LanceOpsError, ObjectNotFoundError  # noqa: F401
from lance_ops.schema import from_lance_fields  # noqa: F401
from lance_ops.table import naming, scan
from lance_ops.table.paths import dataset_where, resolve_inside
from lance_ops.table.statistics import *  # noqa: F401,F403 - re-exported for callers of this module
from lance_ops.table.statistics import (  # noqa: F401
    LIST_THRESHOLD, STATS_DIR, STATS_SUFFIX, TRUNCATE_BYTES, FileStats, PageStat, _Record,
    _extract, _stats_table, _tracked, _write_stats_file, compute_stat, load_file_stats, log,
    parse_stats_table, scan_offsets, stat_fields, stats_path, stats_type,
    track_statistics, truncate_max, truncate_min, _listed_stats, _stats_name, forget_cached_statistics,
)

__all__ = ["rebuild_statistics", "statistics_coverage", "compute_file_statistics"]

def compute_file_statistics(reader, data_file_proto, dataset_fields: Sequence,
                            schema: pa.Schema | None = None) -> pa.Table:
    """The statistics table of one data file, read page by page with ``reader``."""
    column_of = dict(zip(data_file_proto.fields, data_file_proto.column_indices))
    top_name = {f.id: f.name for f in reader.lance_fields if f.parent_id < 0}
    records: list[_Record] = []
    for sf in stat_fields(dataset_fields, schema):
        if not _tracked(sf) or sf.field_id not in column_of:
            continue
        column = column_of[sf.field_id]
        if column < 0 or column >= reader.num_columns:
            continue
        top_id = _top_ancestor(dataset_fields, sf.field_id)
        name = top_name.get(top_id)
        if name is None:
            continue
        stype = stats_type(sf.type)
        for page in reader.column_pages(column):
            if page.length == 0:
                continue
            table = reader.read_range(page.row_start, page.length, columns=[name])
            values = _extract(table, (name,) + sf.path[1:])
            if values.type != sf.type:
                values = values.cast(sf.type)
            if stype is None:
                stat = PageStat(int(values.null_count), None, None, None)
            else:
                stat = compute_stat(values, sf.type)
            records.append(_Record(sf.field_id, page.index, page.row_start, page.length, stat, stype))
    return _stats_table(records, data_file_proto.path, reader.num_rows)


def _top_ancestor(fields: Sequence, field_id: int) -> int:
    parent = {f.id: f.parent_id for f in fields}
    fid = field_id
    while parent.get(fid, -1) >= 0:
        fid = parent[fid]
    return fid


def _select_fragments(ds, fragments) -> list:
    """The manifest records of the fragments to cover, in manifest order (as the scan planner
    picks them: ``fragments`` are ids or fragments, None is all)."""
    return [task.fragment for task in scan.plan(ds, [], fragments=fragments)]


def rebuild_statistics(ds, fragments=None, force: bool = False, *, dry_run: bool = False,
                       progress=None) -> dict:
    """Write statistics for the data files of ``ds`` that have none (all of them with ``force``).

    ``fragments``: fragment ids (or fragments) to limit the work to. Data is only read, never
    rewritten, and no new version is committed. Files this reader cannot read (Lance 2.1+ files
    written by pylance) are counted as ``unsupported``. ``progress(done, total)`` is called after
    each data file. Returns counts and the statistics files written (or, dry run, to be written).
    """
    from lance_ops.file.reader import LanceFileReader

    frags = _select_fragments(ds, fragments)
    existing = set() if force else _listed_stats(ds)
    todo = []
    for frag in frags:
        for i, df in enumerate(frag.files):
            if _stats_name(df.path) in existing:
                continue
            todo.append((frag, i, df))
    result = {"data_files": sum(len(f.files) for f in frags), "written": 0,
              "already_present": sum(len(f.files) for f in frags) - len(todo),
              "unsupported": 0, "failed": 0, "dry_run": bool(dry_run), "files": []}
    schema = ds.schema
    for n, (frag, i, df) in enumerate(todo, 1):
        path = stats_path(ds.store, ds.base, df.path)
        if dry_run:
            result["files"].append(ds.store.uri(path))
            result["written"] += 1
        else:
            try:
                reader = None
                if df.file_major_version >= 2 or (df.file_major_version, df.file_minor_version) == (0, 3):
                    reader = LanceFileReader(resolve_inside(ds.store, ds.base, df.path, under=(naming.DATA_DIR,),
                                                            what=f"data file path of fragment {frag.id}",
                                                            where=dataset_where(ds)), store=ds.store)
                if reader is None or reader.version != "2.0":  # legacy (0.1) and 2.1+ files
                    result["unsupported"] += 1
                else:
                    table = compute_file_statistics(reader, df, ds.manifest.fields, schema)
                    _write_stats_file(table, ds.store, path, ds.storage_options)
                    result["files"].append(ds.store.uri(path))
                    result["written"] += 1
            except (LanceOpsError, pa.ArrowException, NotImplementedError) as exc:
                log.warning("cannot compute statistics of %s: %s", df.path, exc)
                result["failed"] += 1
        if progress is not None:
            progress(n, len(todo))
    forget_cached_statistics(ds)
    return result


def statistics_coverage(ds) -> dict:
    """How many data files of ``ds`` (its version) have a statistics file."""
    names = _listed_stats(ds)
    files = [df.path for f in ds.manifest.fragments for df in f.files]
    return {"data_files": len(files), "with_stats": sum(1 for p in files if _stats_name(p) in names)}


# =================================================================================================
# pruning scans
# =================================================================================================
