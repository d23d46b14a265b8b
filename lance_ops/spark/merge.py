"""Spark job: merge-insert (upsert) a Spark source into a Lance dataset, committed once.

    spark-submit lance_ops/spark/merge.py --format parquet --path s3a://raw/changes/ \\
        --uri s3://lake/events.lance --on id --idempotency-key "$DAG.$RUN.$TASK.0"
    python -m lance_ops.spark.merge --help

From a DataFrame (the equivalent of a ``format("lance")`` upsert option, which Spark's Python
data sources cannot offer: a writer sees only its own partition, never the target's keys)::

    from lance_ops.spark.merge import merge_dataframe
    merge_dataframe(df, "s3://lake/events.lance", on=["id"], storage_options={...})

What runs where (ADR 0035): executors read the target's key columns fragment by fragment (with
each row's fragment and offset, and its stable row id), Spark joins them with the source on the
key columns, then executors write the deletion files of matched rows (one task per group of
fragments) and the new fragments (updated rows first, then inserted rows). The driver stages one
``Update`` under ``_staging/{key}.json`` and commits it once, as ``ds.merge_insert(on)
.when_matched_update_all().when_not_matched_insert_all().execute(source)`` commits.

Rules (pylance's): several source rows matching one target row fail the job with
``AmbiguousMergeError`` before any file is written; unmatched source rows are all inserted,
duplicates included; null keys match nothing. Re-runs: a key already committed writes nothing
and returns the recorded counts; a stage left by a failed run is committed (or, when a concurrent
commit changed its fragments, dropped and planned again); a run that failed before its commit
left only unreferenced files. A commit preempted by a concurrent delete, update or compaction of
the same fragments is planned again on the newest version (``--conflict-retries``), then fails
retryably (exit 75). The last stdout line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # PySpark loads only when the job runs (its --help does not need it)
    from pyspark.sql import DataFrame, SparkSession

    from lance_ops.table.commit.staging import StagedResult
    from lance_ops.table.dataset import LanceDataset

log = logging.getLogger("lance_ops.spark.merge")

#: what matched target rows become: updated, kept as they are, deleted, or the merge fails
WHEN_MATCHED = ("update", "keep", "delete", "fail")


def build_parser() -> argparse.ArgumentParser:
    """The job's command line (``--help`` lists every option with an example)."""
    p = argparse.ArgumentParser(
        prog="spark-submit lance_ops/spark/merge.py",
        description="Merge-insert (upsert) a Spark source into a Lance dataset on key columns: executors "
                    "join and write, the driver stages one Update and commits it once.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit lance_ops/spark/merge.py --path /raw/changes --uri /lake/ev.lance --on id \\\n"
               "      --idempotency-key run-2024-01-01\n"
               "  spark-submit lance_ops/spark/merge.py --table db.changes --uri s3://b/ev.lance --on id --on day \\\n"
               "      --when-matched keep --storage-option aws_region=us-east-1\n"
               "\nThe last stdout line is a JSON summary (version, num_updated_rows, num_inserted_rows, ...).",
    )
    src = p.add_argument_group("source (one of --path or --table)")
    src.add_argument("--format", default="parquet", help="Spark source format (default: parquet)")
    src.add_argument("--path", action="append", default=[], help="input path(s); repeat for several")
    src.add_argument("--table", help="read a catalog table instead of files")
    src.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="Spark reader option (repeatable), e.g. header=true")
    dst = p.add_argument_group("target")
    dst.add_argument("--uri", required=True, help="Lance dataset URI (local path, file://, s3://); must exist")
    dst.add_argument("--on", action="append", required=True, metavar="COLUMN",
                     help="key column (repeat, or comma-separated, for several)")
    dst.add_argument("--when-matched", choices=WHEN_MATCHED, default="update",
                     help="matched target rows are updated (default), kept, deleted, or fail the merge")
    dst.add_argument("--no-insert", dest="insert", action="store_false",
                     help="do not insert source rows that match no target row")
    dst.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                     help="Lance storage option (repeatable), e.g. aws_region=us-east-1")
    dst.add_argument("--max-rows-per-file", type=int, default=1024 * 1024,
                     help="rows per new data file / fragment (default: 1048576)")
    run = p.add_argument_group("execution")
    run.add_argument("--partitions", type=int, default=None,
                     help="Spark partitions of the join, and so tasks writing new rows and deletion files "
                          "(default: 2 x the default parallelism)")
    run.add_argument("--idempotency-key", default=None,
                     help="key recorded with the commit; re-running with the same key is a no-op "
                          "(default: a fresh uuid)")
    run.add_argument("--conflict-retries", type=int, default=3,
                     help="times the merge is planned again when a concurrent commit preempts it (default: 3)")
    run.add_argument("--stage-only", action="store_true",
                     help="write the files and the staged Update, but do not commit")
    return p


def key_columns(values: Sequence[str]) -> list[str]:
    """``--on`` values (repeated and/or comma-separated) as a list of unique column names."""
    from lance_ops.errors import UsageError

    cols = [c.strip() for v in values for c in str(v).split(",") if c.strip()]
    if not cols:
        raise UsageError("give the key columns with --on")
    if len(set(cols)) != len(cols):
        raise UsageError(f"--on: key columns repeat: {cols}")
    return cols


def merge_dataframe(source: DataFrame, uri: str, on: str | Sequence[str], *,
                    storage_options: Mapping[str, str] | None = None, when_matched: str = "update",
                    insert: bool = True, idempotency_key: str | None = None, conflict_retries: int = 3,
                    stage_only: bool = False, partitions: int | None = None,
                    max_rows_per_file: int = 1024 * 1024) -> dict[str, Any]:
    """Merge ``source`` into the dataset at ``uri`` on the key columns ``on`` with Spark and
    commit one ``Update`` (see the module doc); returns the summary (``version``, pylance's
    ``num_inserted_rows``/``num_updated_rows``/``num_deleted_rows``, ``already_committed``...)."""
    from lance_ops.errors import RetryableCommitConflictError, UsageError
    from lance_ops.table.commit import idempotency
    from lance_ops.table.commit.staging import sanitize_key
    from lance_ops.table.dataset import LanceDataset
    from lance_ops.table.rewrite_rows import RESULT_PROPERTY

    keys = key_columns([on] if isinstance(on, str) else list(on))
    if when_matched not in WHEN_MATCHED:
        raise UsageError(f"when_matched must be one of {WHEN_MATCHED}, not {when_matched!r}")
    if when_matched in ("keep", "fail") and not insert:
        raise UsageError("The merge insert job is not configured to change the data in any way")
    so = dict(storage_options or {})
    key = sanitize_key(idempotency_key or f"merge-{uuid.uuid4().hex}")
    ds = LanceDataset(uri, None, so or None)
    summary: dict[str, Any] = {"job": "merge", "uri": uri, "staged_key": key, "operation": "update", "on": keys}
    if idempotency_key:
        earlier = idempotency.lookup(ds.store, ds.base, key, "update")  # the key ledger: survives cleanup
        if earlier is not None:
            log.info("key %s already committed as version %d: nothing to do", key, earlier.version)
            summary.update(json.loads(earlier.properties.get(RESULT_PROPERTY) or "{}"))
            summary.update(version=earlier.version, committed=True, already_committed=True)
            return summary
    for attempt in range(conflict_retries + 1):
        try:
            return _merge_once(source, ds, keys, summary, when_matched=when_matched, insert=insert, key=key,
                               resume=bool(idempotency_key), stage_only=stage_only, partitions=partitions,
                               max_rows_per_file=max_rows_per_file)
        except RetryableCommitConflictError as exc:
            _drop_stage(ds, key)
            if attempt == conflict_retries:
                raise
            log.warning("merge preempted by a concurrent commit (%s): planning again on the newest version", exc)
            ds = LanceDataset(uri, None, so or None)
            summary["replanned"] = attempt + 1
    raise AssertionError("unreachable")


def _drop_stage(ds: LanceDataset, key: str) -> None:
    """Remove a stage whose commit was preempted (nothing committed: its files become orphans)."""
    from lance_ops.table.commit.staging import staged_path

    try:
        ds.store.delete(staged_path(ds.store, ds.base, key))
    except Exception as exc:  # noqa: BLE001 - a leftover stage is re-checked against the ledger
        log.warning("could not remove the preempted stage %s: %s", key, exc)


def _merge_once(source: DataFrame, ds: LanceDataset, on: list[str], summary: dict[str, Any], *,
                when_matched: str, insert: bool, key: str, resume: bool, stage_only: bool,
                partitions: int | None, max_rows_per_file: int) -> dict[str, Any]:
    from lance_ops.errors import ObjectNotFoundError
    from lance_ops.maintenance.staged_commit import commit_result
    from lance_ops.table.commit.staging import read_staged, write_staged

    staged = None
    if resume:
        try:
            staged = read_staged(ds.store, ds.base, key)
        except ObjectNotFoundError:
            staged = None
        if staged is not None:
            summary["resumed"] = True
    if staged is None:
        staged = stage_merge(source, ds, on, key, when_matched=when_matched, insert=insert,
                             partitions=partitions, max_rows_per_file=max_rows_per_file)
        write_staged(ds.store, ds.base, staged)
    summary.update({k: staged.metrics.get(k) for k in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")},
                   fragments=len(staged.fragments), read_version=staged.read_version)
    if stage_only:
        summary.update(version=ds.version, committed=False, already_committed=False)
        return summary
    res = commit_result(ds.uri, staged, storage_options=ds.storage_options or None)
    summary.update(version=res["version"], committed=True, already_committed=res["already_committed"])
    return summary


def stage_merge(source: DataFrame, ds: LanceDataset, on: list[str], key: str, *, when_matched: str = "update",
                insert: bool = True, partitions: int | None = None,
                max_rows_per_file: int = 1024 * 1024) -> StagedResult:
    """Plan the merge of ``source`` into ``ds`` (its version) on Spark and write its files; the
    staged ``Update`` (not yet stored). Raises AmbiguousMergeError / MergeMatchError before any
    file is written."""
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    from lance_ops.errors import InvalidArgumentError
    from lance_ops.maintenance.staged_commit import fields_to_b64
    from lance_ops.spark._common import check_spark_append, spark_to_arrow_schema
    from lance_ops.spark._merge_tasks import (
        DELETIONS_DDL,
        FRAGMENT_COL,
        OFFSET_COL,
        ROW_ID_COL,
        WriteDeletionsTask,
        WriteMergedRowsTask,
    )
    from lance_ops.spark._tasks import FRAGMENT_ROWS_DDL
    from lance_ops.table.commit.staging import StagedResult, fragment_from_b64
    from lance_ops.table.rewrite_rows import refuse_unwritable

    refuse_unwritable(ds, "merge_insert")
    names = ds.storage_schema.names
    for k in on:
        if k not in names:
            raise InvalidArgumentError(f"Merge insert key column '{k}' does not exist in schema")
    check_spark_append(ds.storage_schema, spark_to_arrow_schema(source.schema), ds.uri)
    spark = source.sparkSession
    stable = bool(ds.has_stable_row_ids)
    # both sides hash-partitioned alike on the keys: the join adds no exchange, and the joined
    # rows (persisted, then written) come in `parts` partitions, not spark.sql.shuffle.partitions
    parts = int(partitions or max(1, spark.sparkContext.defaultParallelism * 2))
    target = _target_keys(spark, ds, on, stable).repartition(parts, *on)
    src = source.select(*names).repartition(parts, *on)
    how = "left_anti" if when_matched == "keep" else ("left" if insert else "inner")
    joined = src.join(target, on=on, how=how)
    if how == "left_anti":
        joined = joined.withColumn(FRAGMENT_COL, F.lit(None).cast("long")).withColumn(OFFSET_COL, F.lit(None).cast("long"))
    joined = joined.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        matches = joined.where(F.col(FRAGMENT_COL).isNotNull()).select(*on, FRAGMENT_COL, OFFSET_COL)
        if when_matched == "fail":
            _refuse_matches(matches, on)
        if when_matched in ("update", "delete"):
            _refuse_ambiguous(matches, on)
        deletions = (matches.select(FRAGMENT_COL, OFFSET_COL).repartition(parts, FRAGMENT_COL).sortWithinPartitions(FRAGMENT_COL, OFFSET_COL)
                     .mapInArrow(WriteDeletionsTask(ds.uri, dict(ds.storage_options), ds.version), DELETIONS_DDL)
                     .collect()) if when_matched in ("update", "delete") else []
        rows_df = joined if when_matched == "update" else joined.where(F.col(FRAGMENT_COL).isNull())
        if not insert:
            rows_df = rows_df.where(F.col(FRAGMENT_COL).isNotNull())
        if ROW_ID_COL not in rows_df.columns:
            rows_df = rows_df.withColumn(ROW_ID_COL, F.lit(None).cast("long"))
        rows_df = rows_df.select(*names, FRAGMENT_COL, ROW_ID_COL)
        if when_matched == "update":
            rows_df = rows_df.sortWithinPartitions(F.col(FRAGMENT_COL).isNull())
        written: list[Any] = []
        if insert or when_matched == "update":
            manifest = ds.manifest
            metadata = {k: v.decode("utf-8", "surrogateescape") for k, v in manifest.schema_metadata.items()}
            task = WriteMergedRowsTask(ds.uri, dict(ds.storage_options), fields_to_b64(manifest.fields), metadata,
                                       max_rows_per_file, ds.data_storage_version, names, stable)
            written = rows_df.mapInArrow(task, FRAGMENT_ROWS_DDL).collect()
    finally:
        joined.unpersist()
    written.sort(key=lambda r: (r.partition, r.seq))
    matched = sum(int(r.matched) for r in deletions)
    new_rows = sum(int(r.num_rows) for r in written)
    updated = matched if when_matched == "update" else 0
    counts = {"num_inserted_rows": new_rows - updated, "num_updated_rows": updated,
              "num_deleted_rows": matched if when_matched == "delete" else 0}
    return StagedResult(
        key=key, operation="update", read_version=ds.version,
        fragments=[fragment_from_b64(r.fragment) for r in written],
        updated_fragments=[fragment_from_b64(r.fragment) for r in deletions if not r.removed],
        removed_fragment_ids=[int(r.fragment_id) for r in deletions if r.removed],
        data_storage_version=ds.data_storage_version,
        metrics={**counts, "num_rows": new_rows, "num_fragments": len(written),
                 "num_tasks": len({r.partition for r in written}),
                 "retried_tasks": len({r.partition for r in written if r.attempt > 0}),
                 "fragments_with_deletions": len(deletions)},
    )


def _target_keys(spark: SparkSession, ds: LanceDataset, on: list[str], stable: bool) -> DataFrame:
    """The target's key columns with each row's fragment and offset (and row id), read on the
    executors one fragment per task."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from lance_ops.spark._common import arrow_to_spark_type
    from lance_ops.spark._merge_tasks import FRAGMENT_COL, OFFSET_COL, ROW_ID_COL, TargetKeysTask

    fields = [T.StructField(k, arrow_to_spark_type(ds.storage_schema.field(k).type), True) for k in on]
    fields += [T.StructField(FRAGMENT_COL, T.LongType(), False), T.StructField(OFFSET_COL, T.LongType(), False)]
    if stable:
        fields.append(T.StructField(ROW_ID_COL, T.LongType(), False))
    struct = T.StructType(fields)
    ids = [f.fragment_id for f in ds.get_fragments()]
    slices = max(1, min(len(ids), spark.sparkContext.defaultParallelism * 4))
    frag_df = spark.createDataFrame([(int(i),) for i in ids], "fragment_id long").repartition(slices) if ids else \
        spark.createDataFrame([], "fragment_id long")
    task = TargetKeysTask(ds.uri, dict(ds.storage_options), ds.version, on, to_arrow_schema(struct, timezone="UTC"), stable)
    return frag_df.mapInArrow(task, struct)


def _keys_of(row: Any, on: list[str]) -> Any:
    """The key columns of a Spark row as a one-row Arrow table (what the error messages name)."""
    import pyarrow as pa

    return pa.Table.from_pylist([{k: row[k] for k in on}])


def _refuse_ambiguous(matches: DataFrame, on: list[str]) -> None:
    """AmbiguousMergeError (pylance's message) when a target row has several source matches.
    Such matches share their key, so grouping by key + (fragment, offset) needs no new exchange:
    the joined rows are already hash-partitioned on the key."""
    from pyspark.sql import functions as F

    from lance_ops.spark._merge_tasks import FRAGMENT_COL, OFFSET_COL
    from lance_ops.table.merge_insert import ambiguous_error

    dup = matches.groupBy(*on, FRAGMENT_COL, OFFSET_COL).count().where(F.col("count") > 1).limit(1).collect()
    if dup:
        raise ambiguous_error(_keys_of(dup[0], on), 0)


def _refuse_matches(matches: DataFrame, on: list[str]) -> None:
    """MergeMatchError (pylance's message) on the first matched target row (``when_matched=fail``)."""
    from lance_ops.errors import MergeMatchError
    from lance_ops.table.merge_insert import key_values

    hit = matches.limit(1).collect()
    if hit:
        raise MergeMatchError("Merge insert failed: found matching row with key values: "
                              + key_values(_keys_of(hit[0], on), 0))


def run(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    """Run the merge with an existing SparkSession; returns the summary dict."""
    from lance_ops.io.options import parse_storage_option_args
    from lance_ops.spark.datasource import register
    from lance_ops.spark.ingest import load_source

    t0 = time.perf_counter()
    register(spark)
    on = key_columns(args.on)
    df = load_source(spark, args)
    out = merge_dataframe(df, args.uri, on, storage_options=parse_storage_option_args(args.storage_option),
                          when_matched=args.when_matched, insert=args.insert,
                          idempotency_key=args.idempotency_key, conflict_retries=args.conflict_retries,
                          stage_only=args.stage_only, partitions=args.partitions,
                          max_rows_per_file=args.max_rows_per_file)
    out["seconds"] = time.perf_counter() - t0  # the driver's wall time of the job (Spark already started)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit`` / ``python -m``: parse ``argv``, run the job in a SparkSession,
    print its JSON summary; returns the process exit code."""
    from lance_ops.spark._common import run_job

    return run_job("merge", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
