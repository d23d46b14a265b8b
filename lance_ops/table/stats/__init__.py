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

Lance 2.1/2.2 (and legacy 0.1) data files get the same file, cut into fixed row ranges of
:data:`RANGE_ROWS` (8192) rows instead of pages (their pages are large, and what a ranged read
fetches inside one is a mini-block chunk; see :mod:`~lance_ops.table.stats.ranges`): ``page`` is then
the range's index, every field has the same ranges, and schema metadata ``lance_ops.stats.ranges``
says ``8192``. Readers need not tell the two apart: ``row_start``/``num_rows`` say which rows a
record covers.

Fields whose ancestors include a list are not covered (their pages count items, not rows); list
fields themselves get null counts only.

Modules: :mod:`~lance_ops.table.stats.store` (the statistics file: layout, naming, reading,
writing), :mod:`~lance_ops.table.stats.collect` (computing bounds, the writer hook),
:mod:`~lance_ops.table.stats.ranges` (statistics per row range of 2.1/2.2 files),
:mod:`~lance_ops.table.stats.prune` (scan pruning); :mod:`~lance_ops.table.stats.fragments` fills
in the fragment-level statistics of the manifest that older Lance versions did not record.
The table layer reaches them through two hooks, imported lazily: ``FragmentWriter._open`` wraps
its file writer with :func:`track_statistics`, the scan planner (:mod:`lance_ops.table.scan`)
asks :func:`scan_ranges`.

Who writes them
    * ``write_dataset``/``write_fragments`` (and therefore compaction) compute them while writing:
      :func:`track_statistics` wraps each data file's writer; every batch is summarised with
      vectorised ``pyarrow.compute`` kernels as it is written, and when the writer emits a page the
      summaries of the batches it holds are merged (a page cut inside a batch is recomputed from
      that batch, which is then still at hand - see :class:`StatisticsCollector`);
    * :func:`~lance_ops.maintenance.statistics.rebuild_statistics` fills in the files of data files that have none (written by
      pylance, or by a writer that crashed after the data file): 2.0 files page by page, 2.1/2.2
      and 0.1 files range by range (:func:`compute_range_statistics`), each read with the reader
      the format registry picks for its version; a file it cannot read is reported as failed.

Who reads them
    The scan planner (:mod:`lance_ops.table.scan`: every filtered scan, the Spark source) calls
    :func:`scan_ranges` per fragment: fragment-level aggregates skip whole fragments, per-page
    bounds leave only the row ranges of pages that may match, which are then read with ranged
    reads. Statistics only ever *skip* work: results are identical with and without them.
"""
from lance_ops.table.stats.collect import (
    StatField, StatisticsCollector, compute_stat, field_values, is_tracked, merge_stats, stat_fields,
    stats_type, track_statistics, truncate_max, truncate_min,
)
from lance_ops.table.stats.prune import (
    LIST_THRESHOLD, forget_cached_statistics, fragment_statistics, scan_offsets, scan_ranges,
)
from lance_ops.table.stats.ranges import RANGE_ROWS, compute_range_statistics, file_fields, row_ranges
from lance_ops.table.stats.store import (
    FORMAT_VERSION, STATS_DIR, STATS_SUFFIX, TRUNCATE_BYTES, FieldPages, FileStats, PageRecord, PageStat,
    listed_stats_files, load_file_stats, parse_stats_table, stats_file_name, stats_path, stats_table,
    write_stats_file,
)

__all__ = [
    "STATS_DIR", "STATS_SUFFIX", "TRUNCATE_BYTES", "FORMAT_VERSION", "LIST_THRESHOLD",
    "PageStat", "PageRecord", "FieldPages", "FileStats", "StatField", "StatisticsCollector",
    "stats_path", "stats_file_name", "stats_table", "write_stats_file", "parse_stats_table",
    "load_file_stats", "listed_stats_files", "truncate_min", "truncate_max", "stats_type",
    "compute_stat", "stat_fields", "is_tracked", "field_values", "merge_stats", "track_statistics",
    "scan_offsets", "scan_ranges", "fragment_statistics", "forget_cached_statistics",
    "RANGE_ROWS", "row_ranges", "file_fields", "compute_range_statistics",
]
