"""Spark jobs and the Spark data source for Lance datasets (PySpark 4.x).

Jobs, runnable with ``spark-submit lance_ops/spark/<job>.py --help`` or
``python -m lance_ops.spark.<job> --help``:

* :mod:`lance_ops.spark.ingest`  - any Spark source -> Lance fragments, staged and committed once;
* :mod:`lance_ops.spark.compact` - a compaction plan executed one Spark task per compaction task;
* :mod:`lance_ops.spark.optimize_indices` - index upkeep: executors encode slices of the new rows,
  the driver writes the segments and commits one CreateIndex;
* :mod:`lance_ops.spark.merge`   - merge-insert (upsert) on key columns: executors join and write,
  the driver commits one Update (``merge_dataframe(df, uri, on=...)`` from a DataFrame).

Data source: ``LanceDataSource`` (format ``"lance"``), registered with :func:`register`.

Every job prints a one-line JSON summary as its last stdout line (version, rows, fragments,
staged_key, ...). Executors import ``lance_ops``: on a cluster install ``lance-ops`` in the
executor image (or ship it with ``--py-files``); in local mode ``PYTHONPATH`` is inherited.

Retry safety: tasks only write new files and return metadata; the driver commits once, recording
the idempotency key. Failed, retried or speculative attempts leave orphan files that
``cleanup_old_versions(delete_unverified=True)`` removes after its safety age.

``import lance_ops`` never imports PySpark; this package imports it only when the data source is
first used (``lance_ops.spark.LanceDataSource`` / ``register`` load it lazily).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ below hands out, for type checkers
    from lance_ops.spark.datasource import LanceDataSource, register

__all__ = ["LanceDataSource", "register"]


def __getattr__(name: str) -> object:
    """Load ``LanceDataSource`` and ``register`` from the data source module on first use.

    PEP 562 hook: importing ``lance_ops.spark`` (e.g. for a job's ``--help``) never loads PySpark.
    """
    if name in ("LanceDataSource", "register"):
        from lance_ops.spark import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module 'lance_ops.spark' has no attribute {name!r}")
