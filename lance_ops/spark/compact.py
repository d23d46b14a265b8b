"""Spark job: distributed compaction of a Lance dataset, committed once by the driver.

    spark-submit lance_ops/spark/compact.py --uri s3://lake/events.lance --plan-file s3://lake/plans/p1.json
    spark-submit lance_ops/spark/compact.py --uri /lake/events.lance --target-rows-per-fragment 1000000
    python -m lance_ops.spark.compact --help

The plan (a ``CompactionPlan`` JSON made by ``lance_ops.maintenance.compaction.plan_compaction``,
given as a file on local disk / S3 or inline) - or, without one, a plan the driver makes itself
from the ``--target-rows-per-fragment`` ... options - is executed with ONE Spark task per
compaction task (lance-spark's distributed compaction design). Executors run
``CompactionTask.execute`` and return ``RewriteResult`` JSON; the driver stages the results
(operation ``rewrite``) under ``_staging/{key}.json`` and commits them once with
``commit_compaction`` (unless ``--stage-only``).

Retried or speculative tasks only leave orphan files; re-running with the same
``--idempotency-key`` commits nothing new; a failure before the commit leaves the dataset at its
previous version. The last stdout line is a JSON summary (version, rows, fragments, staged key).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # PySpark loads only when the job runs (its --help does not need it)
    from pyspark.sql import SparkSession

    from lance_ops.maintenance.compaction import RewriteResult

log = logging.getLogger("lance_ops.spark.compact")


def build_parser() -> argparse.ArgumentParser:
    """The job's command line (``--help`` lists every option with an example)."""
    p = argparse.ArgumentParser(
        prog="spark-submit lance_ops/spark/compact.py",
        description="Compact a Lance dataset with Spark: one Spark task per compaction task, "
                    "one commit by the driver.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit lance_ops/spark/compact.py --uri /lake/ev.lance --plan-file /tmp/plan.json\n"
               "  spark-submit lance_ops/spark/compact.py --uri s3://b/ev.lance \\\n"
               "      --target-rows-per-fragment 1000000 --storage-option aws_region=us-east-1\n"
               "\nThe last stdout line is a JSON summary (version, rows, fragments, staged_key, metrics).",
    )
    p.add_argument("--uri", required=True, help="Lance dataset URI (local path, file://, s3://)")
    plan = p.add_mutually_exclusive_group()
    plan.add_argument("--plan-file", help="CompactionPlan JSON file (local path or s3:// URI)")
    plan.add_argument("--plan-inline", help="CompactionPlan JSON text")
    opts = p.add_argument_group("planning (when no plan is given)")
    opts.add_argument("--target-rows-per-fragment", type=int, default=1024 * 1024,
                      help="rows per compacted fragment (default: 1048576)")
    opts.add_argument("--max-rows-per-file", type=int, default=None,
                      help="no new fragment gets more rows than this")
    opts.add_argument("--no-materialize-deletions", dest="materialize_deletions", action="store_false",
                      help="do not rewrite fragments just to drop deleted rows")
    opts.add_argument("--materialize-deletions-threshold", type=float, default=0.1,
                      help="deleted-row ratio above which a fragment is rewritten (default: 0.1)")
    opts.add_argument("--max-source-fragments", type=int, default=None,
                      help="bound the fragments one run may rewrite")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="Lance storage option (repeatable; also used to read --plan-file from S3)")
    p.add_argument("--idempotency-key", default=None,
                   help="key recorded with the commit; re-running with the same key is a no-op "
                        "(default: a fresh uuid)")
    p.add_argument("--stage-only", action="store_true",
                   help="rewrite the data and stage the results, but do not commit")
    return p


def _read_plan_file(path: str, storage_options: Mapping[str, str] | None) -> bytes:
    from lance_ops.io import open_store

    store, key = open_store(path, storage_options)
    return store.read(key)


def _group(result: RewriteResult) -> dict[str, Any]:
    """A staged rewrite group: the ids and new fragments (as staging documents them) + the result."""
    from lance_ops.table.commit.staging import fragment_to_b64

    return {"old_fragment_ids": result.original_fragment_ids,
            "new_fragments": [fragment_to_b64(f) for f in result.new_fragments],
            "result": result.to_json()}


def run(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    """Run the compaction with an existing SparkSession; returns the summary dict."""
    from lance_ops.errors import ObjectNotFoundError
    from lance_ops.io.options import parse_storage_option_args
    from lance_ops.maintenance.compaction import CompactionOptions, CompactionPlan, plan_compaction
    from lance_ops.maintenance.staged_commit import commit_staged
    from lance_ops.spark._common import commit_or_stage
    from lance_ops.spark._tasks import CompactionTaskRunner
    from lance_ops.spark.datasource import register
    from lance_ops.table.commit import idempotency
    from lance_ops.table.dataset import LanceDataset
    from lance_ops.table.commit.staging import StagedResult, read_staged, sanitize_key, write_staged

    t0 = time.perf_counter()
    register(spark)
    uri = args.uri
    storage_options = parse_storage_option_args(args.storage_option)
    key = sanitize_key(args.idempotency_key or f"compact-{uuid.uuid4().hex}")
    ds = LanceDataset(uri, None, storage_options)
    store, base = ds.store, ds.base
    summary: dict[str, Any] = {"job": "compact", "uri": uri, "staged_key": key, "operation": "rewrite"}

    if args.idempotency_key:
        earlier = idempotency.lookup(store, base, key, "rewrite")  # the key ledger: survives cleanup
        if earlier is not None:
            summary.update(version=earlier.version, committed=True, already_committed=True,
                           rows=None, fragments=None, tasks=None)
            return summary
        try:
            staged = read_staged(store, base, key)
        except ObjectNotFoundError:
            staged = None
        if staged is not None:  # staged by an earlier run, never committed
            summary.update(rows=staged.metrics.get("num_rows"), fragments=staged.metrics.get("num_fragments"),
                           tasks=len(staged.rewrite_groups), resumed=True)
            if args.stage_only:
                summary.update(version=ds.version, committed=False, already_committed=False)
                return summary
            res = commit_staged(uri, key, storage_options=storage_options)
            summary.update(version=res["version"], committed=True, already_committed=res["already_committed"],
                           metrics=res["metrics"])
            return summary

    if args.plan_file:
        plan = CompactionPlan.from_json(_read_plan_file(args.plan_file, storage_options), args.plan_file)
    elif args.plan_inline:
        plan = CompactionPlan.from_json(args.plan_inline, "--plan-inline")
    else:
        plan = plan_compaction(ds, CompactionOptions(
            target_rows_per_fragment=args.target_rows_per_fragment,
            max_rows_per_file=args.max_rows_per_file,
            materialize_deletions=args.materialize_deletions,
            materialize_deletions_threshold=args.materialize_deletions_threshold,
            max_source_fragments=args.max_source_fragments,
        ))
    tasks = list(plan.tasks)
    summary["tasks"] = len(tasks)
    if not tasks:
        summary.update(version=ds.version, committed=False, already_committed=False, rows=0, fragments=0,
                       metrics={}, note="nothing to compact")
        return summary

    payload = [t.to_json() for t in tasks]
    runner = CompactionTaskRunner(uri, storage_options)
    results = spark.sparkContext.parallelize(payload, len(payload)).map(runner).collect()

    from lance_ops.maintenance.compaction import RewriteResult

    parsed = [RewriteResult.from_json(r) for r in results]
    rows = sum(f.physical_rows for r in parsed for f in r.new_fragments)
    fragments = sum(len(r.new_fragments) for r in parsed)
    staged = StagedResult(
        key=key, operation="rewrite", read_version=plan.read_version,
        rewrite_groups=[_group(r) for r in parsed],
        data_storage_version=ds.data_storage_version,
        metrics={"num_rows": rows, "num_fragments": fragments, "num_tasks": len(parsed),
                 "fragments_removed": sum(len(r.original_fragments) for r in parsed)},
    )
    write_staged(store, base, staged)
    # measured: the executors' task times (sum) and this driver's wall time of the whole job
    summary.update(rows=rows, fragments=fragments,
                   rewrite_seconds=sum(float(r.metrics.get("rewrite_seconds", 0.0)) for r in parsed))
    out = commit_or_stage(summary, args, uri, key, storage_options, ds.version)
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit`` / ``python -m``: parse ``argv``, run the job in a SparkSession,
    print its JSON summary; returns the process exit code."""
    from lance_ops.spark._common import run_job

    return run_job("compact", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
