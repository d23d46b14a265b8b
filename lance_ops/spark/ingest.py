"""Spark job: ingest any Spark source into a Lance dataset, committed once by the driver.

    spark-submit lance_ops/spark/ingest.py --format parquet --path s3a://raw/events/ \\
        --uri s3://lake/events.lance --mode append --partitions 16 \\
        --storage-option aws_region=eu-west-1 --idempotency-key "$DAG.$RUN.$TASK.0"
    python -m lance_ops.spark.ingest --help

Each Spark task converts its partition to Arrow (``mapInArrow``) and writes Lance fragments
(data files only) with the field ids the driver chose once, returning the fragments' metadata.
The driver stages them as ONE result under ``_staging/{key}.json`` and commits it (unless
``--stage-only``, which leaves the commit to a separate step, e.g. an Airflow task calling
``lance_ops.maintenance.staged_commit.commit_staged``).

Retry safety: tasks never commit, so a retried or speculative task leaves only orphan files; the
commit records the idempotency key, so re-running the job (or the commit step) with the same key
commits nothing new; a job that fails before its commit leaves the dataset at its previous version.
The last stdout line is a JSON summary: version, rows, fragments, staged key.
"""
from __future__ import annotations

import argparse
import logging
import sys
import uuid
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # PySpark loads only when the job runs (its --help does not need it)
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("lance_ops.spark.ingest")

MODES = ("append", "overwrite", "create")


def build_parser() -> argparse.ArgumentParser:
    """The job's command line (``--help`` lists every option with an example)."""
    from lance_ops.table.versions import DEFAULT as DEFAULT_STORAGE_VERSION

    p = argparse.ArgumentParser(
        prog="spark-submit lance_ops/spark/ingest.py",
        description="Ingest a Spark source (files or a table) into a Lance dataset: executors write "
                    "fragments, the driver stages the result and commits it once.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit lance_ops/spark/ingest.py --format parquet --path /raw/day=1 \\\n"
               "      --uri /lake/events.lance --mode append --idempotency-key run-2024-01-01\n"
               "  spark-submit lance_ops/spark/ingest.py --table db.events --uri s3://b/ev.lance \\\n"
               "      --mode overwrite --storage-option aws_region=us-east-1 --stage-only\n"
               "\nThe last stdout line is a JSON summary (version, rows, fragments, staged_key, ...).",
    )
    src = p.add_argument_group("source (one of --path or --table)")
    src.add_argument("--format", default="parquet", help="Spark source format (default: parquet)")
    src.add_argument("--path", action="append", default=[],
                     help="input path(s) for --format; repeat for several")
    src.add_argument("--table", help="read a catalog table instead of files")
    src.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="Spark reader option (repeatable), e.g. header=true")
    dst = p.add_argument_group("target")
    dst.add_argument("--uri", required=True, help="Lance dataset URI (local path, file://, s3://)")
    dst.add_argument("--mode", choices=MODES, default="append",
                     help="append (creates a missing dataset), overwrite (creates a missing dataset) "
                          "or create (fails if it exists); default: append")
    dst.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                     help="Lance storage option (repeatable), e.g. aws_region=us-east-1, endpoint=http://...")
    dst.add_argument("--max-rows-per-file", type=int, default=1024 * 1024,
                     help="rows per data file / fragment (default: 1048576)")
    dst.add_argument("--data-storage-version", default=None,
                     help=f"file format of a new dataset (default: {DEFAULT_STORAGE_VERSION}; existing datasets "
                          "keep theirs)")
    run = p.add_argument_group("execution")
    run.add_argument("--partitions", type=int, default=None,
                     help="repartition the input into N Spark tasks before writing")
    run.add_argument("--idempotency-key", default=None,
                     help="key recorded with the commit; re-running with the same key is a no-op "
                          "(default: a fresh uuid)")
    run.add_argument("--stage-only", action="store_true",
                     help="write data files and the staged result, but do not commit")
    return p


def load_source(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The source DataFrame of ``--path`` (with ``--format``/``--option``) or ``--table``."""
    from lance_ops.errors import UsageError

    if args.table:
        if args.path:
            raise UsageError("give either --table or --path, not both")
        return spark.table(args.table)
    if not args.path:
        raise UsageError("give --path (with --format) or --table")
    from lance_ops.spark._common import check_input_paths, parse_kv

    check_input_paths(spark, args.path)
    reader = spark.read.format(args.format).options(**parse_kv(args.option, "option"))
    return reader.load(args.path if len(args.path) > 1 else args.path[0])


def run(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    """Run the ingestion with an existing SparkSession; returns the summary dict."""
    from lance_ops.errors import DatasetExistsError, ObjectNotFoundError
    from lance_ops.io import open_store
    from lance_ops.io.options import parse_storage_option_args
    from lance_ops.maintenance.staged_commit import commit_staged, fields_to_b64
    from lance_ops.schema import to_lance_fields
    from lance_ops.spark._common import (
        check_spark_append,
        commit_or_stage,
        latest_manifest,
        spark_to_arrow_schema,
    )
    from lance_ops.spark._tasks import FRAGMENT_ROWS_DDL, WriteFragmentsTask
    from lance_ops.spark.datasource import register
    from lance_ops.table import versions
    from lance_ops.table.commit import idempotency
    from lance_ops.table.commit.staging import StagedResult, read_staged, sanitize_key, write_staged

    register(spark)
    uri = args.uri
    storage_options = parse_storage_option_args(args.storage_option)
    key = sanitize_key(args.idempotency_key or f"ingest-{uuid.uuid4().hex}")
    store, base = open_store(uri, storage_options)
    summary: dict[str, Any] = {"job": "ingest", "uri": uri, "staged_key": key, "mode": args.mode}

    current = latest_manifest(store, base, uri)
    if current is not None and args.idempotency_key:
        earlier = idempotency.lookup(store, base, key, "write")  # the key ledger: survives cleanup
        if earlier is not None:
            log.info("key %s already committed as version %d: nothing to do", key, earlier.version)
            summary.update(version=earlier.version, committed=True, already_committed=True,
                           rows=None, fragments=None)
            return summary
    if args.idempotency_key:
        try:
            staged = read_staged(store, base, key)
        except ObjectNotFoundError:
            staged = None
        if staged is not None:  # an earlier run of this job staged its result but did not commit it
            summary.update(rows=staged.metrics.get("num_rows"), fragments=len(staged.fragments),
                           operation=staged.operation, resumed=True)
            if args.stage_only:
                summary.update(version=current.version if current else None, committed=False,
                               already_committed=False)
                return summary
            res = commit_staged(uri, key, storage_options=storage_options)
            summary.update(version=res["version"], committed=True, already_committed=res["already_committed"])
            return summary
    if current is not None and args.mode == "create":
        raise DatasetExistsError(f"Dataset already exists: {uri} (use --mode append or overwrite)")

    df = load_source(spark, args)
    if args.partitions:
        df = df.repartition(args.partitions)
    data_schema = spark_to_arrow_schema(df.schema)
    appending = current is not None and args.mode == "append"
    if appending and current is not None:
        from lance_ops.schema import from_lance_fields

        manifest = current.manifest
        lance_fields = list(manifest.fields)
        dataset_schema = from_lance_fields(lance_fields, dict(manifest.schema_metadata))
        check_spark_append(dataset_schema, data_schema, uri)
        version = versions.normalize(manifest.data_format.version or None)
        metadata = {k: v.decode("utf-8", "surrogateescape") for k, v in manifest.schema_metadata.items()}
    else:
        lance_fields = to_lance_fields(data_schema)  # ids chosen once, here, for every task
        default = (current.manifest.data_format.version or None) if current is not None else None
        version = versions.normalize(args.data_storage_version or default)
        metadata = {}
    versions.require_writable(version, uri)
    fields_b64 = fields_to_b64(lance_fields)

    task = WriteFragmentsTask(uri, storage_options, fields_b64, metadata, args.max_rows_per_file, version)
    rows = df.mapInArrow(task, FRAGMENT_ROWS_DDL).collect()
    rows.sort(key=lambda r: (r.partition, r.seq))
    from lance_ops.table.commit.staging import fragment_from_b64

    fragments = [fragment_from_b64(r.fragment) for r in rows]
    num_rows = sum(r.num_rows for r in rows)
    staged = StagedResult(
        key=key, operation="append" if appending else "overwrite",
        read_version=current.version if current is not None else 0,
        fragments=fragments, schema_fields=fields_b64, schema_metadata=metadata,
        data_storage_version=version,
        metrics={"num_rows": num_rows, "num_fragments": len(fragments),
                 "num_tasks": len({r.partition for r in rows}),
                 "retried_tasks": len({r.partition for r in rows if r.attempt > 0})},
    )
    write_staged(store, base, staged)
    summary.update(rows=num_rows, fragments=len(fragments), operation=staged.operation,
                   tasks=staged.metrics["num_tasks"], retried_tasks=staged.metrics["retried_tasks"])
    return commit_or_stage(summary, args, uri, key, storage_options, current.version if current else None)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit`` / ``python -m``: parse ``argv``, run the job in a SparkSession,
    print its JSON summary; returns the process exit code."""
    from lance_ops.spark._common import run_job

    return run_job("ingest", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
