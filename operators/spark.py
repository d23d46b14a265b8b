"""Spark steps chained to small commit steps: ``lance_ingest_group`` and ``lance_compaction_group``.

::

    ingest/spark_stage  (SparkSubmitOperator: executors write .lance files, the driver stages
                         the fragments under _staging/<key>.json; --stage-only, no commit)
      -> ingest/commit  (LanceCommitStagedOperator: one small commit of that staged result)

Both tasks derive the same idempotency key from the run (dag_id, run_id, the group id,
map_index), so a retried Spark task finds its own staged result (or the commit) and a retried
commit finds its own version: one run appends once. A re-run Spark task at worst leaves orphan
data files, which cleanup removes after its safety age.

Secrets: storage credentials from the Lance connection reach spark-submit as environment
variables (``AWS_ACCESS_KEY_ID`` ...), set at execute time, never as arguments or rendered
template fields; endpoint/region/allow_http are passed as ``--storage-option`` arguments.

Errors: a failed job prints its cause first as ``lance-ops: error: <ErrorClass>: <message>`` and
exits 2 when a retry cannot help (missing input path or dataset, schema mismatch, bad arguments)
or 75 when it may (storage/network errors, lost commit races). The Spark task logs that line as
its first error line and fails at once (``AirflowFailException``) on exit 2; other failures keep
the task's retries. This needs the driver's output in spark-submit's output (client mode, local
or standalone); in cluster modes every failure is retried as before.
"""
from __future__ import annotations

import importlib.util
import json
import os
from typing import Any, Sequence

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import TaskGroup

from lance_ops_airflow.operators.base import idempotency_key, skip
from lance_ops_airflow.operators.hooks import LanceHook, normalize_conn_id
from lance_ops_airflow.operators.lance import LanceCommitStagedOperator, LanceCompactionOperator
from lance_ops_airflow.operators.merge import LanceMergeInsertOperator, key_columns

NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"


def _job_path(name: str) -> str:
    """Path of a Spark job script shipped in ``lance_ops/spark/`` (found without importing it)."""
    spec = importlib.util.find_spec("lance_ops")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("lance_ops is not importable: install lance-ops on the Airflow workers")
    return os.path.join(list(spec.submodule_search_locations)[0], "spark", f"{name}.py")


def _clean_args(args: Sequence[Any]) -> list[str]:
    """Rendered job arguments as strings; ``--flag <None/empty>`` pairs (unset Params) are dropped."""
    out: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        item = items[i]
        nxt = items[i + 1] if i + 1 < len(items) else "--"
        if isinstance(item, str) and item.startswith("--") and (nxt is None or str(nxt).strip() in ("", "None")):
            i += 2
            continue
        out.append(str(item))
        i += 1
    return out


def _arg_value(args: Sequence[str], flag: str) -> str | None:
    """The value following ``flag`` in rendered job arguments (None if absent)."""
    for i, item in enumerate(args[:-1]):
        if item == flag:
            return str(args[i + 1]).strip()
    return None


#: the write mode that merges on key columns instead of appending/overwriting
UPSERT = "upsert"


def _without(args: Sequence[str], flag: str) -> list[str]:
    """``args`` without every ``flag <value>`` pair."""
    out: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        if items[i] == flag:
            i += 2
            continue
        out.append(items[i])
        i += 1
    return out


def merge_job_args(args: Sequence[str]) -> list[str]:
    """The ingest job's rendered arguments as the merge job's: ``--mode`` and
    ``--data-storage-version`` dropped (a merge target exists and keeps its format), the ``--on``
    value (a list, JSON text or comma-separated names) checked as :func:`key_columns` does."""
    on = key_columns(_arg_value(args, "--on"))
    kept = _without(_without(_without(args, "--mode"), "--on"), "--data-storage-version")
    return [*kept, "--on", ",".join(on)]
#: what a failed lance_ops job prints first, and its exit code when a retry cannot help
#: (lance_ops.spark._common.ERROR_PREFIX / EXIT_NOT_RETRYABLE, repeated here so that parsing a DAG
#: does not import lance_ops)
JOB_ERROR_PREFIX = "lance-ops: error: "
JOB_EXIT_NOT_RETRYABLE = 2


class _LanceSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that also keeps the job's ``lance-ops: error:`` lines (the whole output
    streams through it; the provider only keeps a short tail)."""

    job_error_lines: list[str]

    def _process_spark_submit_log(self, itr):
        self.job_error_lines = []

        def watch():
            for raw in itr:
                text = str(raw).strip()
                if text.startswith(JOB_ERROR_PREFIX):
                    self.job_error_lines.append(text[len(JOB_ERROR_PREFIX):])
                yield raw

        return super()._process_spark_submit_log(watch())

    @property
    def submit_returncode(self) -> int | None:
        """Exit code of the last spark-submit process (None before it ended or if none ran)."""
        return getattr(getattr(self, "_submit_sp", None), "returncode", None)

    @property
    def last_log_lines(self) -> list[str]:
        """The tail of the last spark-submit's output that the provider keeps."""
        return [str(line) for line in getattr(self, "_last_submit_log_lines", None) or []]


#: public names for other operators that submit a lance_ops job from inside their own task
#: (``LanceOptimizeIndicesOperator`` with ``spark_threshold_rows``)
LanceSparkSubmitHook = _LanceSparkSubmitHook
job_path = _job_path


class LanceSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit one of lance_ops' Spark jobs in ``--stage-only`` mode for a Lance dataset.

    The dataset URI, storage options and idempotency key are added to the job's arguments at
    execute time. Returns the job's one-line JSON summary (the last JSON line it printed).
    ``on_kill`` is SparkSubmitOperator's: it kills the spark-submit process (and the driver on a
    cluster).

    :param job: ``ingest`` or ``compact``. An ``ingest`` whose rendered ``--mode`` is ``upsert`` runs
        the merge job instead (``lance_ops/spark/merge.py`` on the ``--on`` key columns), which
        commits itself (re-planning when preempted); ``upsert_engine`` other than ``spark`` skips it.
    :param dataset_uri: dataset path or URI. (templated)
    :param lance_conn_id: connection with the storage credentials. (templated)
    :param job_args: job arguments before the ones added here. (templated)
    :param idempotency_scope: shared with the commit task (the group id).
    :param plan_task_id: for ``compact``: the planning task; skipped unless it routed to Spark.
    :param upsert_engine: ``spark`` (default) or ``task``: who merges a ``mode=upsert`` run. (templated)
    """

    template_fields: Sequence[str] = tuple(SparkSubmitOperator.template_fields) + (
        "dataset_uri", "lance_conn_id", "job_args", "upsert_engine",
    )
    ui_color = "#ffe5b4"

    def __init__(self, *, job: str, dataset_uri: str, lance_conn_id: str | None = None,
                 job_args: list[str] | None = None, idempotency_scope: str | None = None,
                 plan_task_id: str | None = None, upsert_engine: str = "spark", **kwargs: Any) -> None:
        if job not in ("ingest", "compact"):
            raise ValueError(f"job must be 'ingest' or 'compact', not {job!r}")
        kwargs.setdefault("name", f"lance-ops-{job}")
        super().__init__(**kwargs)
        self.job = job
        self.dataset_uri = dataset_uri
        self.lance_conn_id = lance_conn_id
        self.job_args = list(job_args or [])
        self.idempotency_scope = idempotency_scope
        self.plan_task_id = plan_task_id
        self.upsert_engine = upsert_engine
        self._application = self.application

    def execute(self, context: Any) -> dict[str, Any]:
        hook = LanceHook(normalize_conn_id(self.lance_conn_id))
        uri = hook.resolve_uri(self.dataset_uri)
        storage_args, secret_env = hook.spark_arguments()
        key = idempotency_key(context, self.idempotency_scope)
        args = _clean_args(self.job_args)
        job, stage_only = self.job, ["--stage-only"]
        if self.job == "ingest" and _arg_value(args, "--mode") == UPSERT:
            engine = str(self.upsert_engine or "spark").strip().lower()
            if engine != "spark":
                skip(self.log, f"mode is 'upsert' and upsert_engine is {engine!r}: the group's upsert task merges "
                               "the source (no Spark job)")
            try:
                merge_args = merge_job_args(args)
            except ValueError as exc:  # a bad or missing `on` Param: retrying cannot help
                from airflow.sdk.exceptions import AirflowFailException

                self.log.error("%s", exc)
                raise AirflowFailException(str(exc)) from exc
            job, stage_only, args = "merge", [], merge_args
        else:
            args = _without(args, "--on")
        if self.job == "compact":
            plan = context["ti"].xcom_pull(task_ids=self.plan_task_id) if self.plan_task_id else None
            if self.plan_task_id:
                if not plan or plan.get("route") != "spark":
                    route = plan.get("route") if plan else None
                    skip(self.log, f"compaction plan route is {route!r}: no Spark rewrite needed "
                                   "(the plan task compacted in-process or found nothing to compact)")
                args += ["--plan-file", plan["plan_file"]]
        self.application = self._application or _job_path(job)
        self.application_args = [*args, "--uri", uri, "--idempotency-key", key, *stage_only, *storage_args]
        self.env_vars = {**(self.env_vars or {}), **secret_env}
        self._hook = None  # built in super().execute() from the arguments above
        self.log.info("spark %s job for %s, key %s", job, uri, key)
        try:
            super().execute(context)
        except Exception as exc:  # noqa: BLE001 - classified from the job's exit code and error line
            self._classify_failure(exc)
            raise
        summary = self._summary()
        return {"uri": uri, "idempotency_key": key, "job": job, "summary": summary}

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        if type(hook) is SparkSubmitHook:
            hook.__class__ = _LanceSparkSubmitHook
        return hook

    def _classify_failure(self, exc: BaseException) -> None:
        """Log the job's one-line cause first; fail at once (no retry) when it exited 2."""
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        if not isinstance(exc, AirflowException) or type(exc) is not AirflowException:
            return  # skips, or our own errors before the submit: handled by Airflow as they are
        hook = self._hook if isinstance(self._hook, _LanceSparkSubmitHook) else None
        lines = list(getattr(hook, "job_error_lines", None) or [])  # set once the job's output streamed
        returncode = hook.submit_returncode if hook is not None else None
        if not lines:
            return
        self.log.error("%s", lines[0])
        if returncode == JOB_EXIT_NOT_RETRYABLE:
            raise AirflowFailException(f"{lines[0]} (spark {self.job} job exit code {returncode}: "
                                       f"not retryable)") from exc

    def _summary(self) -> dict[str, Any] | None:
        hook = self._hook
        lines = hook.last_log_lines if isinstance(hook, _LanceSparkSubmitHook) else []
        for line in reversed(lines):
            text = str(line).strip()
            if text.startswith("{") and text.endswith("}"):
                try:
                    return json.loads(text)
                except ValueError:
                    continue
        return None


class LanceIngestCommitOperator(LanceCommitStagedOperator):
    """The ingest group's commit step: commits what ``spark_stage`` staged; after a Spark merge
    (``mode=upsert``), which commits itself, it finds that version by the run's key and reports
    it as this run's change (so the asset events fire as for an ingest)."""

    def __init__(self, *, spark_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spark_task_id = spark_task_id

    def run(self, context, uri, storage_options, key):
        out = super().run(context, uri, storage_options, key)
        if out["operation"] == "update" and out["already_committed"]:
            pushed = context["ti"].xcom_pull(task_ids=self.spark_task_id) or {}
            summary = pushed.get("summary") or {}
            if summary.get("committed") and not summary.get("already_committed") and \
                    summary.get("version") == out["version"]:
                out.update(changed=True, committed_by=self.spark_task_id)
        return out


class LanceCompactionCommitOperator(LanceCommitStagedOperator):
    """Commit a Spark compaction's staged rewrite; pass the plan task's result through otherwise.

    Runs when the plan succeeded and the Spark task succeeded or was skipped (its trigger rule is
    ``none_failed_min_one_success``), so it is the one place a compaction group's result is read.
    """

    operation = "compaction"

    def __init__(self, *, plan_task_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", NONE_FAILED_MIN_ONE_SUCCESS)
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id

    def run(self, context, uri, storage_options, key):
        plan = context["ti"].xcom_pull(task_ids=self.plan_task_id) or {}
        route = plan.get("route")
        if route != "spark":
            # done (or nothing to do) in the plan task, which also emitted any asset event
            return {"version": plan.get("version"), "route": route, "changed": False,
                    "dry_run": bool(plan.get("dry_run")), "already_committed": bool(plan.get("already_committed")),
                    "metrics": plan.get("metrics", {}), "committed_by": self.plan_task_id}
        out = super().run(context, uri, storage_options, key)
        out["route"] = "spark"
        out["operation"] = "compaction"
        self._discard_plan(plan.get("plan_file"), storage_options)
        return out

    def _discard_plan(self, plan_file: str | None, storage_options: dict[str, str]) -> None:
        """The plan file is only the hand-off to the Spark task: remove it once committed."""
        if not plan_file:
            return
        from lance_ops.io import open_store

        try:
            store, path = open_store(plan_file, storage_options)
            store.delete(path)
        except Exception as exc:  # noqa: BLE001 - best effort; a leftover plan is harmless
            self.log.warning("could not remove the plan file %s: %s", plan_file, exc)


def _prefixed(group: TaskGroup, task_id: str) -> str:
    return group.child_id(task_id)


def lance_ingest_group(
    group_id: str = "ingest",
    *,
    dataset_uri: str,
    source_path: str,
    source_format: str = "parquet",
    mode: str = "append",
    lance_conn_id: str | None = None,
    spark_conn_id: str = "spark_default",
    spark_conf: dict[str, str] | None = None,
    partitions: int | str | None = None,
    max_rows_per_file: int | str | None = None,
    reader_options: dict[str, str] | None = None,
    outlets: list[Any] | None = None,
    spark_kwargs: dict[str, Any] | None = None,
    commit_kwargs: dict[str, Any] | None = None,
    on: Any = None,
    upsert_engine: str = "spark",
    data_storage_version: str | None = None,
) -> TaskGroup:
    """A TaskGroup ``<group_id>.spark_stage >> <group_id>.commit`` ingesting files into a dataset,
    and, when ``on`` is given, ``<group_id>.upsert`` beside them (a :class:`LanceMergeInsertOperator`
    on the key columns ``on``).

    ``mode`` ``append``/``overwrite``/``create`` runs the Spark pair and skips ``upsert``;
    ``mode`` ``upsert`` with ``upsert_engine`` ``spark`` (default) runs the Spark merge job in
    ``spark_stage`` (it commits, re-planning when preempted) and ``commit`` reports that version
    (and emits the asset events); with ``upsert_engine`` ``task`` both skip and the ``upsert``
    task merges the source in its own process. ``dataset_uri``, ``source_path``, ``mode``, ``on``,
    ``partitions``, ``max_rows_per_file``, ``upsert_engine`` and ``data_storage_version`` may be templates.
    ``data_storage_version`` (e.g. ``"2.2"``; empty: lance-ops' default) is the file format of a
    dataset the run creates; an existing dataset keeps its own. ``outlets`` (e.g. a fixed ``Asset``) go on
    the commit and upsert tasks, which also emit the dataset's own asset event.
    """
    job_args = ["--format", source_format, "--path", source_path, "--mode", mode]
    if partitions is not None:
        job_args += ["--partitions", str(partitions)]
    if max_rows_per_file is not None:
        job_args += ["--max-rows-per-file", str(max_rows_per_file)]
    if data_storage_version is not None:
        job_args += ["--data-storage-version", str(data_storage_version)]
    for k, v in (reader_options or {}).items():
        job_args += ["--option", f"{k}={v}"]
    if on is not None:
        job_args += ["--on", on]
    with TaskGroup(group_id, tooltip="Spark stages the new fragments; one small task commits them") as group:
        scope = group.group_id
        stage = LanceSparkSubmitOperator(
            task_id="spark_stage", job="ingest", dataset_uri=dataset_uri, lance_conn_id=lance_conn_id,
            job_args=job_args, idempotency_scope=scope, conn_id=spark_conn_id, conf=spark_conf,
            upsert_engine=upsert_engine, **(spark_kwargs or {}),
        )
        commit = LanceIngestCommitOperator(
            task_id="commit", dataset_uri=dataset_uri, lance_conn_id=lance_conn_id, spark_task_id=stage.task_id,
            idempotency_scope=scope, outlets=list(outlets or []), **(commit_kwargs or {}),
        )
        stage >> commit
        if on is not None:  # a DAG offering mode=upsert (on: a template of its key-columns Param)
            LanceMergeInsertOperator(
                task_id="upsert", dataset_uri=dataset_uri, lance_conn_id=lance_conn_id, on=on,
                source_path=source_path, source_format=source_format, mode=mode, engine=upsert_engine,
                idempotency_scope=scope, outlets=list(outlets or []), **(commit_kwargs or {}),
            )
    return group


def lance_compaction_group(
    group_id: str = "compaction",
    *,
    dataset_uri: str,
    lance_conn_id: str | None = None,
    target_rows_per_fragment: int | str = 1024 * 1024,
    max_rows_per_file: int | str | None = None,
    materialize_deletions: bool | str = True,
    materialize_deletions_threshold: float | str = 0.1,
    max_source_fragments: int | str | None = None,
    dry_run: bool | str = False,
    spark_threshold_rows: int | str | None = 5_000_000,
    spark_conn_id: str = "spark_default",
    spark_conf: dict[str, str] | None = None,
    outlets: list[Any] | None = None,
    task_kwargs: dict[str, Any] | None = None,
) -> TaskGroup:
    """A TaskGroup ``plan >> spark_rewrite >> commit`` (and ``plan >> commit``).

    ``plan`` plans in-process and compacts right there when the plan rewrites at most
    ``spark_threshold_rows`` rows; bigger plans are stored under the dataset and executed by
    ``spark_rewrite`` (skipped otherwise), then committed by ``commit``, whose XCom is the
    group's compaction result in every case.
    """
    kw = dict(task_kwargs or {})
    with TaskGroup(group_id, tooltip="plan in-process; small: compact here; big: Spark rewrite -> commit") as group:
        scope = group.group_id
        plan = LanceCompactionOperator(
            task_id="plan", dataset_uri=dataset_uri, lance_conn_id=lance_conn_id,
            target_rows_per_fragment=target_rows_per_fragment, max_rows_per_file=max_rows_per_file,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            max_source_fragments=max_source_fragments, dry_run=dry_run,
            spark_threshold_rows=spark_threshold_rows, spark_task_id=_prefixed(group, "spark_rewrite"),
            idempotency_scope=scope, outlets=list(outlets or []), **kw,
        )
        rewrite = LanceSparkSubmitOperator(
            task_id="spark_rewrite", job="compact", dataset_uri=dataset_uri, lance_conn_id=lance_conn_id,
            idempotency_scope=scope, plan_task_id=plan.task_id, conn_id=spark_conn_id, conf=spark_conf,
        )
        commit = LanceCompactionCommitOperator(
            task_id="commit", dataset_uri=dataset_uri, lance_conn_id=lance_conn_id, plan_task_id=plan.task_id,
            idempotency_scope=scope, outlets=list(outlets or []), **kw,
        )
        plan >> rewrite >> commit
        plan >> commit
    return group
