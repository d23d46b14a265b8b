"""Statistics maintenance: fill in page statistics for data files that lack them.

The statistics format, the writer hook and scan pruning live in :mod:`lance_ops.table.stats`
(the table layer uses them on every write and filtered scan); this module holds the maintenance
operations built on them: :func:`rebuild_statistics` and :func:`statistics_coverage`.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.errors import LanceOpsError, UnsupportedError, error_line, is_retryable
from lance_ops.table import scan
from lance_ops.table.dataset import LanceDataset
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.stats import (
    PageRecord, PageStat, compute_stat, field_values, forget_cached_statistics, is_tracked,
    listed_stats_files, stat_fields, stats_file_name, stats_path, stats_table, stats_type,
    write_stats_file,
)
from lance_ops.table.stats.ranges import compute_range_statistics

if TYPE_CHECKING:  # pragma: no cover
    from lance_ops.format.v2_0.reader import LanceFileReader

log = logging.getLogger(__name__)

__all__ = ["rebuild_statistics", "statistics_coverage", "compute_file_statistics", "failure_summary"]


def compute_file_statistics(reader: LanceFileReader, data_file_proto: table_pb2.DataFile, dataset_fields: Sequence,
                            schema: pa.Schema | None = None) -> pa.Table:
    """The statistics table of one data file, read page by page with ``reader``."""
    column_of = dict(zip(data_file_proto.fields, data_file_proto.column_indices))
    top_name = {f.id: f.name for f in reader.lance_fields if f.parent_id < 0}
    records: list[PageRecord] = []
    for sf in stat_fields(dataset_fields, schema):
        if not is_tracked(sf) or sf.field_id not in column_of:
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
            values = field_values(table, (name,) + sf.path[1:])
            if values.type != sf.type:
                values = values.cast(sf.type)
            if stype is None:
                stat = PageStat(int(values.null_count), None, None, None)
            else:
                stat = compute_stat(values, sf.type)
            records.append(PageRecord(sf.field_id, page.index, page.row_start, page.length, stat, stype))
    return stats_table(records, data_file_proto.path, reader.num_rows)


def _top_ancestor(fields: Sequence, field_id: int) -> int:
    parent = {f.id: f.parent_id for f in fields}
    fid = field_id
    while parent.get(fid, -1) >= 0:
        fid = parent[fid]
    return fid


def _select_fragments(ds: LanceDataset,
                      fragments: Iterable[int | LanceFragment] | None) -> list[table_pb2.DataFragment]:
    """The manifest records of the fragments to cover, in manifest order (as the scan planner
    picks them: ``fragments`` are ids or fragments, None is all)."""
    return [task.fragment for task in scan.plan(ds, [], fragments=fragments)]


def rebuild_statistics(ds: LanceDataset, fragments: Iterable[int | LanceFragment] | None = None, force: bool = False,
                       *, dry_run: bool = False, progress: Callable[[int, int], object] | None = None) -> dict:
    """Write statistics for the data files of ``ds`` that have none (all of them with ``force``).

    ``fragments``: fragment ids (or fragments) to limit the work to. Data is only read, never
    rewritten, and no new version is committed. Each data file is read with the reader of its file
    version (the format registry's, through the fragment): 2.0 files get per-page statistics,
    2.1/2.2 and legacy 0.1 files per fixed row range (:mod:`lance_ops.table.stats.ranges`).
    ``progress(done, total)`` is called after each data file.

    Returns counts and the statistics files written (or, dry run, to be written). A data file whose
    statistics could not be computed or written is counted in ``failed`` and described in
    ``failures`` (``data_file``, ``fragment_id``, ``file_version``, ``error``, ``retryable``);
    ``unsupported`` counts those of them failing on a file version or encoding this reader does not
    decode; ``status`` is ``"failed"`` when any failed, else ``"ok"``. Callers report a failed
    rebuild as such (the CLI exits 2, the Airflow operator fails its task).
    """
    frags = _select_fragments(ds, fragments)
    existing = set() if force else listed_stats_files(ds)
    todo = []
    for frag in frags:
        for i, df in enumerate(frag.files):
            if stats_file_name(df.path) in existing:
                continue
            todo.append((frag, i, df))
    result: dict[str, Any] = {"data_files": sum(len(f.files) for f in frags), "written": 0,
              "already_present": sum(len(f.files) for f in frags) - len(todo),
              "unsupported": 0, "failed": 0, "dry_run": bool(dry_run), "files": []}
    failures: list[dict[str, Any]] = []
    schema = ds.storage_schema
    for n, (frag, i, df) in enumerate(todo, 1):
        path = stats_path(ds.store, ds.base, df.path)
        if dry_run:
            result["files"].append(ds.store.uri(path))
            result["written"] += 1
        else:
            try:
                table = _file_statistics(ds, frag, i, schema)
                write_stats_file(table, ds.store, path, ds.storage_options)
                result["files"].append(ds.store.uri(path))
                result["written"] += 1
            except (LanceOpsError, pa.ArrowException, NotImplementedError, OSError, ValueError, TypeError) as exc:
                log.warning("cannot compute statistics of %s: %s", df.path, exc)
                result["failed"] += 1
                if isinstance(exc, (UnsupportedError, NotImplementedError)):
                    result["unsupported"] += 1
                failures.append({"data_file": df.path, "fragment_id": int(frag.id),
                                 "file_version": f"{df.file_major_version}.{df.file_minor_version}",
                                 "error": error_line(exc), "retryable": is_retryable(exc)})
        if progress is not None:
            progress(n, len(todo))
    forget_cached_statistics(ds)
    result["status"] = "failed" if result["failed"] else "ok"
    result["failures"] = failures
    return result


def _file_statistics(ds: LanceDataset, frag: table_pb2.DataFragment, file_index: int,
                     schema: pa.Schema) -> pa.Table:
    """The statistics table of data file ``file_index`` of ``frag``, read with the reader of its
    version: per page for 2.0 files, per row range for the others."""
    from lance_ops.format.v2_0.reader import LanceFileReader
    from lance_ops.format.version import FileVersion

    df = frag.files[file_index]
    reader = LanceFragment(ds, frag).data_file_reader(file_index)
    if isinstance(reader, LanceFileReader) and reader.version == FileVersion.V2_0:
        return compute_file_statistics(reader, df, ds.manifest.fields, schema)
    return compute_range_statistics(reader, list(df.fields), df.path, ds.manifest.fields, schema)


def failure_summary(result: dict) -> str:
    """One line naming the data files a :func:`rebuild_statistics` result failed on, and why."""
    failures = result.get("failures") or []
    shown = "; ".join(f"{f['data_file']} (fragment {f['fragment_id']}, file version {f['file_version']}): "
                      f"{f['error']}" for f in failures[:5])
    more = f"; and {len(failures) - 5} more" if len(failures) > 5 else ""
    return (f"statistics of {result.get('failed', len(failures))} of {result.get('data_files', '?')} data files "
            f"could not be written: {shown}{more}")


def statistics_coverage(ds: LanceDataset) -> dict:
    """How many data files of ``ds`` (its version) have a statistics file."""
    names = listed_stats_files(ds)
    files = [df.path for f in ds.manifest.fragments for df in f.files]
    return {"data_files": len(files), "with_stats": sum(1 for p in files if stats_file_name(p) in names)}

