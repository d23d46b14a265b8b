"""Compaction: merge small fragments and drop deleted rows, as pylance's ``compact_files`` does.

plan (:mod:`.plan`, driver) -> execute (:mod:`.execute`, Spark executors or local threads) ->
commit (:mod:`.commit`, driver or Airflow); :mod:`.model` holds what they share (the task shape
and the JSON-serialisable :class:`RewriteResult`), and :mod:`.run` the verbs that chain the three
with conflict retries (see its docstring). Plans, tasks and results travel as JSON between them.
"""
from __future__ import annotations

from lance_ops.maintenance.compaction.commit import commit_compaction
from lance_ops.maintenance.compaction.execute import discard_results, execute_task
from lance_ops.maintenance.compaction.model import RewriteResult
from lance_ops.maintenance.compaction.plan import (
    CompactionOptions,
    CompactionPlan,
    CompactionTask,
    output_sizes,
    plan_compaction,
    plan_materialization,
    plan_summary_metrics,
)
from lance_ops.maintenance.compaction.run import (
    DEFAULT_CONFLICT_RETRIES,
    DatasetOptimizer,
    compact_files,
    materialize_deletions,
)

__all__ = [
    "CompactionOptions", "CompactionPlan", "CompactionTask", "RewriteResult",
    "plan_compaction", "plan_materialization", "plan_summary_metrics", "execute_task",
    "commit_compaction", "compact_files", "materialize_deletions", "discard_results", "output_sizes",
    "DatasetOptimizer", "DEFAULT_CONFLICT_RETRIES",
]
