"""pylance's ``lance.optimize``: ``Compaction.plan / execute / commit``, tasks, results and metrics.

A face module (floor 9, ADR 0015) over :mod:`lance_ops.maintenance.compaction`, which keeps its
own JSON plan/task/result shapes for Spark and Airflow. These classes give them pylance's names:
``CompactionPlan.tasks`` / ``num_tasks()`` / ``read_version``, ``CompactionTask.fragments`` (pylance's
``FragmentMetadata``) / ``execute(dataset)``, ``RewriteResult`` and ``CompactionMetrics`` (the
four counters as attributes; still a dict for lance_ops' callers). ``json()`` / ``from_json()``
round-trip lance_ops' JSON, not pylance's.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, TypedDict

from lance_ops.errors import UnsupportedError
from lance_ops.maintenance import compaction as core
from lance_ops.table.fragment_meta import FragmentMetadata


class CompactionOptions(TypedDict, total=False):
    """pylance's compaction options (the keys ``Compaction.plan`` and ``compact_files`` take)."""

    target_rows_per_fragment: Optional[int]
    max_rows_per_group: Optional[int]
    max_bytes_per_file: Optional[int]
    materialize_deletions: Optional[bool]
    materialize_deletions_threshold: Optional[float]
    num_threads: Optional[int]
    batch_size: Optional[int]
    defer_index_remap: Optional[bool]
    max_source_fragments: Optional[int]


class CompactionMetrics(dict):
    """Compaction counters: pylance's attributes (``fragments_removed``, ``fragments_added``,
    ``files_removed``, ``files_added``) on lance_ops' metrics dict (bytes, rows, timings)."""

    @property
    def fragments_removed(self) -> int:
        """Fragments the compaction replaced."""
        return int(self.get("fragments_removed", 0))

    @property
    def fragments_added(self) -> int:
        """Fragments it wrote."""
        return int(self.get("fragments_added", 0))

    @property
    def files_removed(self) -> int:
        """Data files no longer referenced."""
        return int(self.get("files_removed", 0))

    @property
    def files_added(self) -> int:
        """Data files written."""
        return int(self.get("files_added", 0))


def compaction_arguments(ds: Any, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """pylance's options as lance_ops' ``compact_files`` arguments."""
    args = {k: v for k, v in dict(options or {}).items() if v is not None}
    for name in ("compaction_mode", "binary_copy_read_batch_bytes", "max_source_rows", "max_source_bytes",
                 "excluded_fragment_ids", "data_storage_version"):
        if args.pop(name, None) is not None:
            raise UnsupportedError(f"compaction option {name!r} is not supported by lance_ops")
    return args


def plan_options(args: Mapping[str, Any]) -> core.CompactionOptions:
    """The planner's options from ``compact_files`` arguments (tuning-only ones dropped)."""
    keep = {"target_rows_per_fragment", "max_rows_per_file", "materialize_deletions",
            "materialize_deletions_threshold", "max_source_fragments", "max_bytes_per_file"}
    return core.CompactionOptions(**{k: v for k, v in args.items() if k in keep})


class RewriteResult:
    """One executed task's outcome, to commit (pylance's ``RewriteResult``)."""

    def __init__(self, inner: core.RewriteResult) -> None:
        self.inner = inner

    @property
    def read_version(self) -> int:
        """The version the task read."""
        return self.inner.read_version

    @property
    def original_fragments(self) -> list[FragmentMetadata]:
        """The fragments it replaces."""
        return [FragmentMetadata.from_proto(f) for f in self.inner.original_fragments]

    @property
    def new_fragments(self) -> list[FragmentMetadata]:
        """The fragments it wrote (not yet committed)."""
        return [FragmentMetadata.from_proto(f) for f in self.inner.new_fragments]

    @property
    def metrics(self) -> CompactionMetrics:
        """The task's counters."""
        return CompactionMetrics(self.inner.metrics)

    def json(self) -> str:
        """lance_ops' JSON of the result."""
        return self.inner.to_json()

    @staticmethod
    def from_json(json: str) -> "RewriteResult":
        """A result from :meth:`json`'s text."""
        return RewriteResult(core.RewriteResult.from_json(json))


class CompactionTask:
    """One unit of rewrite work (pylance's ``CompactionTask``); ``execute`` runs it anywhere."""

    def __init__(self, inner: core.CompactionTask) -> None:
        self.inner = inner

    @property
    def read_version(self) -> int:
        """The version the plan read."""
        return self.inner.read_version

    @property
    def fragments(self) -> list[FragmentMetadata]:
        """The fragments the task rewrites."""
        return [FragmentMetadata.from_proto(f) for f in self.inner.fragments]

    def execute(self, dataset: Any) -> RewriteResult:
        """Rewrite the fragments into new files of ``dataset`` (nothing is committed)."""
        return RewriteResult(core.execute_task(self.inner, dataset.store, dataset.base,
                                               storage_options=dataset.storage_options))

    def json(self) -> str:
        """lance_ops' JSON of the task."""
        return self.inner.to_json()

    @staticmethod
    def from_json(json: str) -> "CompactionTask":
        """A task from :meth:`json`'s text."""
        return CompactionTask(core.CompactionTask.from_json(json))


class CompactionPlan:
    """The tasks of one compaction (pylance's ``CompactionPlan``)."""

    def __init__(self, inner: core.CompactionPlan) -> None:
        self.inner = inner

    @property
    def read_version(self) -> int:
        """The version planned on."""
        return self.inner.read_version

    @property
    def tasks(self) -> list[CompactionTask]:
        """The tasks to execute (held-back indexed runs are not among them)."""
        return [CompactionTask(t) for t in self.inner.compaction_tasks()]

    def num_tasks(self) -> int:
        """How many tasks there are."""
        return len(self.inner.compaction_tasks())

    def json(self) -> str:
        """lance_ops' JSON of the plan."""
        return self.inner.to_json()

    @staticmethod
    def from_json(json: str) -> "CompactionPlan":
        """A plan from :meth:`json`'s text."""
        return CompactionPlan(core.CompactionPlan.from_json(json))


class Compaction:
    """pylance's distributed compaction: ``plan`` on the driver, ``CompactionTask.execute`` on
    workers, ``commit`` of the results on the driver."""

    @staticmethod
    def plan(dataset: Any, options: Mapping[str, Any] | None = None) -> CompactionPlan:
        """Plan a compaction of ``dataset`` with pylance's options."""
        args = compaction_arguments(dataset, options)
        return CompactionPlan(core.plan_compaction(dataset, plan_options(args)))

    @staticmethod
    def execute(dataset: Any, options: Mapping[str, Any] | None = None) -> CompactionMetrics:
        """Plan, execute and commit in one go (as ``dataset.optimize.compact_files(**options)``)."""
        return dataset.optimize.compact_files(**dict(options or {}))

    @staticmethod
    def commit(dataset: Any, rewrites: Sequence[RewriteResult],
               options: Mapping[str, Any] | None = None) -> CompactionMetrics:
        """Commit executed results as one version; the dataset object moves to it (as pylance's)."""
        metrics = core.commit_compaction(dataset, [r.inner for r in rewrites],
                                         storage_options=dict(dataset.storage_options))
        version = metrics.get("version")
        if version is not None and version > dataset.version:
            dataset.move_to(dataset.checkout_version(version).manifest_file)
        return CompactionMetrics(metrics)


__all__ = ["Compaction", "CompactionMetrics", "CompactionOptions", "CompactionPlan", "CompactionTask",
           "RewriteResult"]
