"""Compaction verbs: plan, execute and commit with conflict retries, as pylance's ``compact_files``.

Three steps, usable together (:func:`compact_files`) or apart (distributed, e.g. Spark):

    plan = plan_compaction(ds, CompactionOptions(target_rows_per_fragment=...))   # driver
    payloads = [t.to_json() for t in plan.tasks]                                     # ship them
    result = CompactionTask.from_json(p).execute(uri, storage_options)              # executors
    metrics = commit_compaction(uri, [RewriteResult.from_json(r) ...])              # driver / Airflow

* Planning follows upstream exactly (see :mod:`lance_ops.maintenance.compaction.plan`): the same
  fragments are grouped and the new fragments get the same row counts as pylance 14.0.2 produces.
* Execution streams one source fragment at a time and writes new data files only
  (:mod:`lance_ops.maintenance.compaction.execute`). Stable row ids and version sequences are
  carried over; the new fragment ids are assigned when the Rewrite manifest is built, or, when an
  index covers the rewritten fragments, reserved by a ReserveFragments commit first so that the
  commit can remap the index to the new addresses (ADR 0011; :mod:`.remap`).
* Commit publishes one Rewrite transaction (one group per task) against the plan's read version.
  Concurrent appends never conflict. A concurrent delete/update/rewrite of a rewritten fragment
  raises :class:`~lance_ops.errors.RetryableCommitConflictError` and leaves the dataset unchanged.

:func:`compact_files` retries such conflicts ``conflict_retries`` times (default 3): it re-plans
on the newest version, **re-uses the results of tasks whose fragments did not change** (so only
the fragments a concurrent writer touched are rewritten again), deletes the data files of results
it will not commit, and commits again. With ``idempotency_key`` the key is stored in the
transaction properties; calling again with the same key returns the first call's metrics and
version (``already_committed: True``) and writes nothing — safe for Airflow retries.

Metrics (a dict), all measured, none estimated:

* ``fragments_removed`` / ``fragments_added``: fragments the Rewrite drops / adds.
* ``files_removed``: data files plus deletion files of the rewritten fragments; ``files_added``:
  data files written.
* ``rows_read``: live rows actually read from the source fragments (counted on the scanned
  tables); ``rows_written``: rows in the files written (the writer's count).
* ``bytes_read``: size of the source data files the rewrite read (manifest size, else the
  store's); the store's request counters are shared by concurrent tasks, so they are not used.
* ``bytes_written``: size of the new data files, as their writer ended them (equals their size
  on the store).
* ``seconds``: wall time of the whole call (plan + execute + commit, retries included);
  ``rewrite_seconds``: the executed tasks' own rewrite times added up (more than ``seconds``
  with ``num_threads`` > 1; 0 for a dry run or an idempotent replay).
* ``version`` (None when nothing was committed), ``dry_run``, ``tasks``, and with
  ``dry_run=True`` the ``plan`` (one summary per task; the counts are then what a real run would
  do, from the plan, ``bytes_written`` 0).
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from lance_ops.errors import CommitConflictError, RetryableCommitConflictError, UnsupportedError

from lance_ops.maintenance.compaction.commit import (
    commit_compaction,
    find_committed_rewrite,
    replayed_metrics,
)
from lance_ops.maintenance.compaction.execute import discard_results, execute_task
from lance_ops.maintenance.compaction.model import RewriteResult, zero_metrics
from lance_ops.maintenance.compaction.plan import (
    CompactionOptions,
    CompactionPlan,
    CompactionTask,
    fragments_key,
    output_sizes,
    plan_compaction,
    plan_materialization,
    plan_summary_metrics,
)

__all__ = ["compact_files", "materialize_deletions", "DatasetOptimizer", "DEFAULT_CONFLICT_RETRIES"]

log = logging.getLogger(__name__)

DEFAULT_CONFLICT_RETRIES = 3


def _task_key(task: CompactionTask) -> bytes:
    return fragments_key(task.fragments) + repr((task.kind, task.output_rows)).encode()


def _execute_all(tasks: Sequence[CompactionTask], ds: Any, num_threads: int | None,
                 progress: Callable[[int, int], None] | None = None, offset: int = 0,
                 total: int | None = None) -> list[RewriteResult]:
    """Execute ``tasks`` (in threads when asked); on any failure remove what was written.

    ``progress(done, total)`` is called from this (the calling) thread after each task.
    """
    store, base, options = ds.store, ds.base, ds.storage_options or None
    done: list[RewriteResult | None] = [None] * len(tasks)
    total = len(tasks) + offset if total is None else total

    def run(i: int) -> None:
        done[i] = execute_task(tasks[i], store, base, storage_options=options)

    workers = max(1, min(len(tasks), num_threads or 1))
    try:
        if workers == 1:
            for i in range(len(tasks)):
                run(i)
                if progress is not None:
                    progress(offset + i + 1, total)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lance-ops-compact") as pool:
                for n, fut in enumerate([pool.submit(run, i) for i in range(len(tasks))], 1):
                    fut.result()
                    if progress is not None:
                        progress(offset + n, total)
    except BaseException:
        discard_results(store, [r for r in done if r is not None], base=base)
        raise
    return [r for r in done if r is not None]


def _run(ds: Any, planner: Callable[[Any, bool], CompactionPlan], *, dry_run: bool, idempotency_key: str | None,
         conflict_retries: int, num_threads: int | None,
         progress: Callable[[int, int], None] | None = None) -> Any:
    """Plan, execute and commit with conflict retries; returns ``(metrics, manifest_file or None)``.

    ``planner(dataset, explain)``: a dry run plans with ``explain=True`` (a plan refused because of
    indexed fragments is shown, with its ``refusal``), a real run with False (the refusal raises
    UnsupportedError before anything is written).
    """
    t0 = time.perf_counter()
    if idempotency_key and not dry_run:
        found = find_committed_rewrite(ds.store, ds.base, idempotency_key)
        if found is not None:
            rec, earlier = found
            replayed = replayed_metrics(rec)
            replayed.update(dry_run=False, rewrite_seconds=0.0, seconds=time.perf_counter() - t0)
            return replayed, earlier
    cached: dict[bytes, RewriteResult] = {}
    current = ds
    for attempt in range(conflict_retries + 1):
        plan = planner(current, dry_run)
        if dry_run:
            out: dict[str, Any] = plan_summary_metrics(plan)
            out.update(version=None, dry_run=True, tasks=plan.num_tasks, plan=plan.summary(), rewrite_seconds=0.0,
                       read_version=plan.read_version, seconds=time.perf_counter() - t0)
            if plan.held_back:
                out["held_back"] = len(plan.held_back)
            if plan.refusal is not None:
                out["refusal"] = plan.refusal
            return out, None
        results: list[RewriteResult | None] = []
        to_run: list[tuple[int, CompactionTask]] = []
        for i, task in enumerate(plan.tasks):
            reused = cached.pop(_task_key(task), None)
            if reused is not None:
                reused.read_version = plan.read_version  # same fragments, byte for byte
            else:
                to_run.append((i, task))
            results.append(reused)
        if cached:  # results of tasks the new plan no longer has: never to be committed
            discard_results(ds.store, list(cached.values()), base=ds.base)
            cached = {}
        if progress is not None and plan.tasks:
            progress(len(plan.tasks) - len(to_run), len(plan.tasks))  # reused results count as done
        try:
            executed = _execute_all([t for _, t in to_run], current, num_threads, progress,
                                    offset=len(plan.tasks) - len(to_run), total=len(plan.tasks))
        except RetryableCommitConflictError as exc:  # the read version was cleaned up meanwhile
            discard_results(ds.store, [r for r in results if r is not None], base=ds.base)
            if attempt >= conflict_retries:
                raise
            log.info("compaction of %s preempted while rewriting (%s); re-planning", ds.uri, exc)
            current = current.reopen_latest()
            continue
        except BaseException:
            discard_results(ds.store, [r for r in results if r is not None], base=ds.base)
            raise
        for (i, _), r in zip(to_run, executed):
            results[i] = r
        final = [r for r in results if r is not None]
        if not final:
            out = dict(zero_metrics())
            out.update(version=None, dry_run=False, tasks=0, rewrite_seconds=0.0, seconds=time.perf_counter() - t0)
            return out, None
        try:
            metrics, mf = commit_compaction(current, final, idempotency_key=idempotency_key,
                                            _return_manifest=True)
        except RetryableCommitConflictError as exc:
            if attempt >= conflict_retries:
                discard_results(ds.store, final, base=ds.base)
                raise
            log.info("compaction of %s preempted (%s); re-planning (retry %d of %d)",
                     ds.uri, exc, attempt + 1, conflict_retries)
            cached = {_task_key(t): r for t, r in zip(plan.tasks, results) if r is not None}
            current = current.reopen_latest()
            continue
        except CommitConflictError:
            discard_results(ds.store, final, base=ds.base)
            raise
        metrics.update(dry_run=False, tasks=len(final), seconds=time.perf_counter() - t0)
        if metrics.get("already_committed"):
            discard_results(ds.store, final, base=ds.base)
        return metrics, mf
    raise AssertionError("unreachable")


def compact_files(ds: Any, *, target_rows_per_fragment: int | None = 1024 * 1024, max_rows_per_file: int | None = None,
                  materialize_deletions: bool | None = True, materialize_deletions_threshold: float | None = 0.1,
                  max_source_fragments: int | None = None, dry_run: bool = False,
                  idempotency_key: str | None = None, conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
                  num_threads: int | None = None, max_rows_per_group: int | None = None,
                  batch_size: int | None = None, defer_index_remap: bool | None = None,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Compact ``ds`` (plan on its checked-out version, execute, commit); returns the metrics.

    ``num_threads`` executes that many tasks at once (default 1). ``progress(done, total)``
    (optional) is called with the number of executed tasks of the current plan (again from 0
    of a new plan after a conflict retry). Arguments left ``None`` take
    upstream's defaults, as in pylance. pylance's ``max_rows_per_group`` and ``batch_size`` are
    accepted and ignored (our 2.0 writer sizes pages itself; execution streams per fragment);
    ``defer_index_remap=True`` is refused (no fragment-reuse index yet, ADR 0011). Indexed fragments
    are rewritten only when every covering index kind has a remapper (the commit remaps them
    eagerly); see :mod:`lance_ops.maintenance.compaction.plan`. See
    the module docstring for retries, idempotency and the metric names.
    """
    metrics, _ = _compact(ds, target_rows_per_fragment=target_rows_per_fragment,
                          max_rows_per_file=max_rows_per_file, materialize_deletions=materialize_deletions,
                          materialize_deletions_threshold=materialize_deletions_threshold,
                          max_source_fragments=max_source_fragments, dry_run=dry_run,
                          idempotency_key=idempotency_key, conflict_retries=conflict_retries,
                          num_threads=num_threads, max_rows_per_group=max_rows_per_group,
                          batch_size=batch_size, defer_index_remap=defer_index_remap, progress=progress)
    return metrics


_DEFAULTS = {"target_rows_per_fragment": 1024 * 1024, "materialize_deletions": True,
             "materialize_deletions_threshold": 0.1}


def _compact(ds: Any, *, dry_run: Any = False, idempotency_key: Any = None, conflict_retries: Any = DEFAULT_CONFLICT_RETRIES,
             num_threads: Any = None, max_rows_per_group: Any = None, batch_size: Any = None, defer_index_remap: Any = None,
             progress: Any = None, **option_kwargs: Any) -> Any:
    if defer_index_remap:
        raise UnsupportedError("defer_index_remap needs a fragment-reuse index, which lance_ops does not write yet "
                               "(it remaps indices eagerly instead; docs/adr/0011-index-aware-compaction.md)")
    for name, default in _DEFAULTS.items():
        if option_kwargs.get(name) is None:
            option_kwargs[name] = default
    options = CompactionOptions(**option_kwargs)
    return _run(ds, lambda d, explain: plan_compaction(d, options, explain=explain), dry_run=dry_run, idempotency_key=idempotency_key,
                conflict_retries=conflict_retries, num_threads=num_threads, progress=progress)


def materialize_deletions(ds: Any, threshold: float = 0.1, *, dry_run: bool = False, idempotency_key: str | None = None,
                          max_rows_per_file: int | None = None, max_source_fragments: int | None = None,
                          conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
                          num_threads: int | None = None,
                          progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Rewrite every fragment whose deleted ratio exceeds ``threshold``, whatever its size.

    Each such fragment becomes one new fragment without its deleted rows (fragments are not
    merged), and its deletion file is dropped. ``threshold=0`` purges every deletion file.
    ``progress(done, total)`` as in :func:`compact_files`.
    """
    metrics, _ = _materialize(ds, threshold, dry_run=dry_run, idempotency_key=idempotency_key,
                              max_rows_per_file=max_rows_per_file, max_source_fragments=max_source_fragments,
                              conflict_retries=conflict_retries, num_threads=num_threads, progress=progress)
    return metrics


def _materialize(ds: Any, threshold: Any = 0.1, *, dry_run: Any = False, idempotency_key: Any = None, max_rows_per_file: Any = None,
                 max_source_fragments: Any = None, conflict_retries: Any = DEFAULT_CONFLICT_RETRIES, num_threads: Any = None,
                 progress: Any = None) -> Any:
    def planner(d: Any, explain: bool) -> CompactionPlan:
        return plan_materialization(d, threshold, max_rows_per_file=max_rows_per_file,
                                    max_source_fragments=max_source_fragments, explain=explain)

    return _run(ds, planner, dry_run=dry_run, idempotency_key=idempotency_key,
                conflict_retries=conflict_retries, num_threads=num_threads, progress=progress)


class DatasetOptimizer:
    """``ds.optimize``: compaction entry points; the dataset object moves to the new version."""

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset

    def _adopt(self, mf: Any) -> None:
        if mf is not None and mf.version > self._dataset.version:
            self._dataset.move_to(mf)

    def compact_files(self, **kwargs: Any) -> dict[str, Any]:
        """Same arguments as :func:`compact_files`."""
        metrics, mf = _compact(self._dataset, **kwargs)
        self._adopt(mf)
        return metrics

    def materialize_deletions(self, threshold: float = 0.1, **kwargs: Any) -> dict[str, Any]:
        """Same arguments as :func:`materialize_deletions`."""
        metrics, mf = _materialize(self._dataset, threshold, **kwargs)
        self._adopt(mf)
        return metrics

    def plan(self, **kwargs: Any) -> CompactionPlan:
        """Plan a compaction of the dataset (keyword arguments: :class:`CompactionOptions`' fields)."""
        return plan_compaction(self._dataset, CompactionOptions(**kwargs))
