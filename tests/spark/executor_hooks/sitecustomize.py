"""Executor-side fault injection for the Spark tests (docs/adr/0007-fault-injection-from-tests.md).

The Spark tests put this directory on the Python workers' path (``spark.executorEnv.PYTHONPATH``);
Python imports ``sitecustomize`` when a worker starts, and this one wraps lance-ops' task functions
from the outside: when switched on, attempt 0 of every task fails right after it wrote its files
(so the tests can prove that a retried task adds no row twice and leaves only orphan files).

Switched on per job by the Spark local property :data:`PROPERTY` = "1" (the shared in-process
session), or for every task by the worker environment variable :data:`ENV` = "1" (set with
``--conf spark.executorEnv.<ENV>=1`` on a spark-submit command line). Inert otherwise.
"""
from __future__ import annotations

import functools
import os

PROPERTY = "lance_ops.tests.fail_first_attempt"
ENV = "LANCE_OPS_TESTS_FAIL_FIRST_ATTEMPT"


def fail_if_first_attempt() -> None:
    """Raise in attempt 0 of a task when the fault is switched on."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None or ctx.attemptNumber() != 0:
        return
    if os.environ.get(ENV) == "1" or ctx.getLocalProperty(PROPERTY) == "1":
        raise RuntimeError(f"injected fault: attempt 0 of partition {ctx.partitionId()} fails after writing its files")


def _then_fail(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        fail_if_first_attempt()
        return out
    wrapper.__lance_ops_fault_hook__ = True
    return wrapper


def install() -> None:
    """Wrap the functions every Spark write and compaction task runs (idempotent)."""
    try:
        from lance_ops.spark import _tasks
    except ImportError:  # a worker of some other job: nothing to patch
        return
    if getattr(_tasks.write_partition, "__lance_ops_fault_hook__", False):
        return
    # ingest's mapInArrow task and the data source's DataWriter both call write_partition
    _tasks.write_partition = _then_fail(_tasks.write_partition)
    _tasks.CompactionTaskRunner.__call__ = _then_fail(_tasks.CompactionTaskRunner.__call__)
    # the optimize_indices job's tasks (they write nothing: a failed attempt leaves nothing behind)
    from lance_ops.maintenance.index_upkeep import distributed

    distributed.encode_slice = _then_fail(distributed.encode_slice)


if __name__ == "sitecustomize":  # a worker's start-up; the test driver imports the names only
    install()
