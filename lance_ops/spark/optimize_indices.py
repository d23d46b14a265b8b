"""Spark job: bring a Lance dataset's indices up to date (``optimize_indices``), committed once.

    spark-submit lance_ops/spark/optimize_indices.py --uri s3://lake/events.lance \\
        --idempotency-key "$DAG.$RUN.optimize_indices" --storage-option aws_region=eu-west-1
    python -m lance_ops.spark.optimize_indices --help

The driver plans exactly as :func:`lance_ops.maintenance.optimize_indices` does (pylance's
``optimize_indices`` semantics: unindexed fragments per index, ``--num-indices-to-merge``,
refusals before anything is written). The new rows of every index are cut into slices of about
``--rows-per-task`` rows (whole fragments), ONE Spark task each: executors read their slice and
encode it (scalar: indexed values and row ids; vector: nearest existing centroid and code from the
existing quantizer) and return the encoding. The driver joins the slices in fragment order, writes
one segment per index with the local updaters (so the files equal the local ``optimize_indices``'
and pylance's), stages the result (operation ``create_index``) under ``_staging/{key}.json`` and
commits ONE CreateIndex carrying the key (unless ``--stage-only``).

Retry safety: executors write nothing, so retried or speculative tasks leave nothing behind.
Re-running with the same ``--idempotency-key`` after the commit landed writes nothing (the key
ledger answers); a staged but uncommitted result is committed without redoing the work. Without a
key, a re-run finds every index covering every fragment and writes nothing either. A failure before
the commit leaves the dataset at its previous version; a definite commit conflict (a concurrent
compaction) discards the stage, and a re-run plans again. The last stdout line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # PySpark loads only when the job runs (its --help does not need it)
    from pyspark.sql import SparkSession

log = logging.getLogger("lance_ops.spark.optimize_indices")


def build_parser() -> argparse.ArgumentParser:
    """The job's command line (``--help`` lists every option with an example)."""
    from lance_ops.maintenance.index_upkeep.distributed import DEFAULT_ROWS_PER_TASK

    p = argparse.ArgumentParser(
        prog="spark-submit lance_ops/spark/optimize_indices.py",
        description="Extend a Lance dataset's indices to the fragments they do not cover: executors encode "
                    "slices of the new rows, the driver writes the segments and commits once.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit lance_ops/spark/optimize_indices.py --uri /lake/ev.lance --idempotency-key run-1\n"
               "  spark-submit lance_ops/spark/optimize_indices.py --uri s3://b/ev.lance --index vec_idx \\\n"
               "      --num-indices-to-merge 0 --storage-option aws_region=us-east-1\n"
               "\nThe last stdout line is a JSON summary (version, committed, indices, tasks, staged_key).",
    )
    p.add_argument("--uri", required=True, help="Lance dataset URI (local path, file://, s3://)")
    p.add_argument("--index", action="append", default=[], metavar="NAME",
                   help="only this index (repeatable; default: every index)")
    p.add_argument("--num-indices-to-merge", type=int, default=None,
                   help="segments folded into the new one (default: pylance's, 1 for scalar indices, a delta "
                        "segment for vector indices)")
    p.add_argument("--rows-per-task", type=int, default=DEFAULT_ROWS_PER_TASK,
                   help=f"new rows encoded per Spark task, whole fragments (default: {DEFAULT_ROWS_PER_TASK})")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="Lance storage option (repeatable)")
    p.add_argument("--idempotency-key", default=None,
                   help="key recorded with the commit; re-running with the same key writes nothing new "
                        "(default: a fresh uuid)")
    p.add_argument("--stage-only", action="store_true",
                   help="write the segments and stage the result, but do not commit")
    return p


def _resume(summary: dict[str, Any], args: argparse.Namespace, ds: Any, key: str,
            storage_options: dict[str, str]) -> dict[str, Any] | None:
    """With a key: the summary of an earlier run's commit or stage (None: nothing earlier)."""
    from lance_ops.errors import ObjectNotFoundError
    from lance_ops.maintenance.index_upkeep.staged import OPERATION
    from lance_ops.maintenance.staged_commit import commit_staged
    from lance_ops.table.commit import idempotency
    from lance_ops.table.commit.staging import read_staged

    earlier = idempotency.lookup(ds.store, ds.base, key, OPERATION)  # the key ledger: survives cleanup
    if earlier is not None:
        summary.update(version=earlier.version, committed=True, already_committed=True, tasks=None)
        return summary
    try:
        staged = read_staged(ds.store, ds.base, key)
    except ObjectNotFoundError:
        return None
    summary.update(tasks=staged.metrics.get("num_tasks"), rows=staged.metrics.get("num_rows"),
                   indices=staged.indices.get("upkeep"), resumed=True)
    if args.stage_only:
        summary.update(version=ds.version, committed=False, already_committed=False)
        return summary
    res = commit_staged(args.uri, key, storage_options=storage_options)
    summary.update(version=res["version"], committed=True, already_committed=res["already_committed"])
    return summary


def run(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    """Run the index upkeep with an existing SparkSession; returns the summary dict."""
    from lance_ops.io.options import parse_storage_option_args
    from lance_ops.maintenance.compaction.remap import discard_index_dirs
    from lance_ops.maintenance.index_upkeep.distributed import plan_slices, with_encoded
    from lance_ops.maintenance.index_upkeep.optimize import prepare_upkeep, write_segments
    from lance_ops.maintenance.index_upkeep.staged import OPERATION, staged_indices
    from lance_ops.spark._common import commit_or_stage
    from lance_ops.spark._upkeep_tasks import EncodeSliceTask
    from lance_ops.table.commit.staging import StagedResult, sanitize_key, write_staged
    from lance_ops.table.dataset import LanceDataset

    t0 = time.perf_counter()
    uri = args.uri
    storage_options = parse_storage_option_args(args.storage_option)
    key = sanitize_key(args.idempotency_key or f"optimize-indices-{uuid.uuid4().hex}")
    ds = LanceDataset(uri, None, storage_options)
    summary: dict[str, Any] = {"job": "optimize_indices", "uri": uri, "staged_key": key, "operation": OPERATION}
    if args.idempotency_key:
        earlier = _resume(summary, args, ds, key, storage_options)
        if earlier is not None:
            return earlier

    result, work = prepare_upkeep(ds, index_names=args.index or None, num_indices_to_merge=args.num_indices_to_merge)
    summary["indices"] = [vars(i).copy() for i in result.indices]
    if not work:
        summary.update(version=ds.version, committed=False, already_committed=False, tasks=0, rows=0,
                       note="every index covers every live fragment: nothing to do")
        return summary
    tasks = plan_slices(work, args.rows_per_task)
    payload = [json.dumps(t) for t in tasks]
    encode = EncodeSliceTask(uri, int(ds.version), storage_options)
    t1 = time.perf_counter()
    results = spark.sparkContext.parallelize(payload, len(payload)).map(encode).collect()
    encode_seconds = time.perf_counter() - t1
    work = with_encoded(work, tasks, [data for _, data in results])
    rows = sum(t.num_rows for w in work for t in (w.request.encoded or []))
    written: list[str] = []
    try:
        new_indices = write_segments(ds, work, written)
        staged = StagedResult(
            key=key, operation=OPERATION, read_version=int(ds.version),
            data_storage_version=ds.data_storage_version,
            metrics={"num_rows": rows, "num_tasks": len(tasks), "num_indices": len(work)},
            indices=staged_indices(new_indices, [m for w in work for m in w.plan.merged], result.indices),
        )
        write_staged(ds.store, ds.base, staged)
    except BaseException:
        discard_index_dirs(ds.store, written)
        raise
    summary.update(indices=[vars(i).copy() for i in result.indices], tasks=len(tasks), rows=rows,
                   retried_tasks=sum(1 for attempt, _ in results if attempt > 0), encode_seconds=encode_seconds)
    out = commit_or_stage(summary, args, uri, key, storage_options, ds.version)
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit`` / ``python -m``: parse ``argv``, run the job in a SparkSession,
    print its JSON summary; returns the process exit code."""
    from lance_ops.spark._common import run_job

    return run_job("optimize_indices", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
