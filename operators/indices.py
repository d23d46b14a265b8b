"""The index upkeep operator: bring pylance indices up to date with appended fragments (issue 22).

:class:`LanceOptimizeIndicesOperator` calls :func:`lance_ops.maintenance.optimize_indices` (one
CreateIndex version, pylance's ``optimize_indices`` semantics; ADR 0026 / 0020) when some index
leaves more than ``unindexed_rows_threshold_pct`` percent of the live rows unindexed. Every case in
which it writes nothing logs ``skipped: <reason>``: the step is off, the dataset has no index,
coverage is already complete, the unindexed share is below the threshold, or every index with work
is of a kind lance_ops cannot update. Without ``index_names`` such kinds (INVERTED, IVF_HNSW_*, ...)
are reported (one warning line each, ``metrics["skipped_indices"]``) and the others are updated;
naming them in ``index_names`` makes the refusal fail the task instead (UnsupportedError).

With ``spark_threshold_rows`` set, an upkeep indexing more unindexed rows than that runs as the
Spark job ``lance_ops/spark/optimize_indices.py`` (executors encode the new rows, its driver
writes the segments and commits ONE CreateIndex with this task's idempotency key), submitted from
this task through the Spark connection; smaller ones run in the task (the same threshold rule as
the compaction step; ADR 0031).
"""
from __future__ import annotations

import json
from typing import Any

from lance_ops_airflow.operators.base import LanceBaseOperator, as_bool, as_optional_float, as_optional_int, skip


def parse_index_names(value: Any) -> list[str] | None:
    """``None`` / ``""`` -> None (every index); a list, a JSON list or ``"a, b"`` -> the names."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text in ("", "None", "null", "[]"):
            return None
        if text.startswith("["):
            value = json.loads(text)
        else:
            return [part.strip() for part in text.split(",") if part.strip()]
    names = [str(v) for v in value]
    return names or None


class LanceOptimizeIndicesOperator(LanceBaseOperator):
    """Extend the dataset's indices to the fragments they do not cover (``optimize_indices``).

    XCom: the usual result dict; ``metrics`` holds ``indices`` (coverage before: name, kind,
    indexed / unindexed rows, unindexed %), ``updated`` (index names), ``skipped_indices`` (name ->
    reason), ``unindexed_rows_before`` / ``unindexed_rows_after`` and the ``optimize_indices``
    result (``upkeep``). When nothing is written, ``reason`` says why.

    :param index_names: only these indices (default: every index; named kinds lance_ops cannot
        update then fail the task). (templated)
    :param num_indices_to_merge: segments folded into the new one (default: pylance's, 1 for
        scalar kinds, a delta segment for vector kinds). (templated)
    :param retrain: pylance's ``retrain`` (lance_ops never retrains; kept for the same call). (templated)
    :param unindexed_rows_threshold_pct: run only when some index leaves more than this percent
        (0-100) of the rows unindexed; 0: whenever anything is unindexed. (templated)
    :param enabled: False skips the step (a DAG Param turns it off). (templated)
    :param skip_when_nothing_to_do: True: nothing to do puts the task in the ``skipped`` state; False:
        it succeeds with the reason (for DAGs whose later steps use ``none_skipped``).
    :param spark_threshold_rows: unindexed rows (summed over the indices to update) above which the
        upkeep runs as a Spark job; None (default): always in the task; 0: always on Spark. (templated)
    :param spark_conn_id: the Spark connection spark-submit uses.
    :param spark_conf: extra ``--conf`` settings of the Spark job.
    """

    template_fields = LanceBaseOperator.template_fields + (
        "index_names", "num_indices_to_merge", "retrain", "unindexed_rows_threshold_pct", "enabled",
        "spark_threshold_rows",
    )
    operation = "optimize_indices"
    ui_color = "#d9e8fb"
    # a retry re-plans from the latest version: a landed first try leaves nothing to do
    idempotent_retries = True

    def __init__(self, *, index_names: list[str] | str | None = None, num_indices_to_merge: int | str | None = None,
                 retrain: bool | str = False, unindexed_rows_threshold_pct: float | str | None = 0,
                 enabled: bool | str = True, skip_when_nothing_to_do: bool = True,
                 spark_threshold_rows: int | str | None = None, spark_conn_id: str = "spark_default",
                 spark_conf: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spark_threshold_rows = spark_threshold_rows
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.index_names = index_names
        self.num_indices_to_merge = num_indices_to_merge
        self.retrain = retrain
        self.unindexed_rows_threshold_pct = unindexed_rows_threshold_pct
        self.enabled = enabled
        self.skip_when_nothing_to_do = skip_when_nothing_to_do

    def _nothing(self, version: int | None, reason: str, metrics: dict[str, Any]) -> dict[str, Any]:
        if self.skip_when_nothing_to_do:
            skip(self.log, reason)
        self.log.info("skipped: %s", reason)
        return {"version": version, "changed": False, "reason": reason, "metrics": {**metrics, "skipped": reason}}

    def run(self, context: Any, uri: str, storage_options: dict[str, str], key: str) -> dict[str, Any]:
        """Decide whether the indices need upkeep (logging why not) and run ``optimize_indices``."""
        from lance_ops.errors import InvalidArgumentError
        from lance_ops.maintenance.health import index_coverage
        from lance_ops.maintenance.index_upkeep import optimize_indices, upkeep_refusals
        from lance_ops.table.indices import list_indices

        if not as_bool(self.enabled):
            return self._nothing(None, "index upkeep is turned off (enabled is false: the optimize_indices Param is off or this is a dry run)", {})
        ds = self.open_dataset(uri, storage_options)
        coverage = {i.name: index_coverage(i) for i in list_indices(ds) if not i.system}
        metrics: dict[str, Any] = {"indices": list(coverage.values())}
        if not coverage:
            return self._nothing(ds.version, "the dataset has no index", metrics)
        names = parse_index_names(self.index_names)
        unknown = [n for n in names or [] if n not in coverage]
        if unknown:
            raise InvalidArgumentError(f"{uri}: no index named {unknown[0]!r} (indices: {sorted(coverage)})")
        selected = names if names is not None else list(coverage)
        for name in selected:
            c = coverage[name]
            self.log.info("index %-20s %-10s unindexed %d rows (%.1f%%) in %d fragments", name, c["kind"],
                          c["unindexed_rows"], c["unindexed_pct"], c["unindexed_fragments"])
        work = [n for n in selected if coverage[n]["unindexed_rows"] > 0]
        if not work:
            return self._nothing(ds.version, "coverage is already complete: every index covers every live "
                                 f"fragment ({', '.join(sorted(selected))})", metrics)
        threshold = as_optional_float(self.unindexed_rows_threshold_pct) or 0.0
        worst = max(work, key=lambda n: coverage[n]["unindexed_pct"])
        if coverage[worst]["unindexed_pct"] <= threshold:
            return self._nothing(ds.version, f"unindexed rows at or below the threshold: at most "
                                 f"{coverage[worst]['unindexed_pct']:.1f}% (index {worst}) <= {threshold:g}%",
                                 metrics)
        skipped: dict[str, str] = {}
        if names is None:  # not asked for explicitly: report kinds lance_ops cannot update, update the rest
            skipped = upkeep_refusals(ds, work)
            for name, why in skipped.items():
                self.log.warning("index %s (%s) skipped: %s", name, coverage[name]["kind"], why)
            work = [n for n in work if n not in skipped]
        metrics["skipped_indices"] = skipped
        if not work:
            listed = ", ".join(f"{n} ({coverage[n]['kind']})" for n in skipped)
            return self._nothing(ds.version, f"no index lance_ops can update has unindexed rows (skipped: {listed})",
                                 metrics)
        self.check_cancelled()
        before = ds.version
        rows = sum(coverage[n]["unindexed_rows"] for n in work)
        threshold = as_optional_int(self.spark_threshold_rows)
        merge = as_optional_int(self.num_indices_to_merge)
        if threshold is not None and rows > threshold:
            self.log.info("%d unindexed rows (> %d): running the Spark optimize_indices job", rows, threshold)
            upkeep = self._spark(uri, key, work, merge)
            ds = self.open_dataset(uri, storage_options)
            committed = bool(upkeep.get("committed"))
            infos = upkeep.get("indices") or []
            metrics["engine"] = "spark"
        else:
            result = optimize_indices(ds, index_names=work, num_indices_to_merge=merge, retrain=as_bool(self.retrain))
            upkeep, committed = result.to_dict(), result.committed
            infos = upkeep["indices"]
            metrics["engine"] = "local"
        after = {i.name: i.unindexed_rows for i in list_indices(ds) if not i.system}
        metrics.update(updated=work, upkeep=upkeep,
                       unindexed_rows_before=sum(coverage[n]["unindexed_rows"] for n in selected),
                       unindexed_rows_after=sum(after.get(n, 0) for n in selected),
                       fragments_indexed=sum(len(i["unindexed_fragments"]) for i in infos if not i.get("skipped")))
        for info in infos:
            self.log.info("index %-20s %-10s %s", info["name"], info["kind"],
                          f"skipped: {info['skipped']}" if info.get("skipped") else
                          f"new segment {info.get('new_segment')} over fragments {info['unindexed_fragments']}")
        return {"version": ds.version, "changed": committed and ds.version != before,
                "already_committed": bool(upkeep.get("already_committed")), "metrics": metrics}

    def _spark(self, uri: str, key: str, names: list[str], merge: int | None) -> dict[str, Any]:
        """spark-submit ``lance_ops/spark/optimize_indices.py`` for ``names`` with this task's key;
        its JSON summary. Its one-line cause is logged first on failure; exit code 2 (a retry
        cannot help) fails the task at once."""
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from lance_ops_airflow.operators.hooks import LanceHook, normalize_conn_id
        from lance_ops_airflow.operators.spark import JOB_EXIT_NOT_RETRYABLE, LanceSparkSubmitHook, job_path

        storage_args, secret_env = LanceHook(normalize_conn_id(self.lance_conn_id)).spark_arguments()
        args = ["--uri", uri, "--idempotency-key", key, *storage_args]
        for name in names:
            args += ["--index", name]
        if merge is not None:
            args += ["--num-indices-to-merge", str(merge)]
        hook = LanceSparkSubmitHook(conf=self.spark_conf, conn_id=self.spark_conn_id, name="lance-ops-optimize-indices",
                                    application_args=args, env_vars=secret_env)
        try:
            hook.submit(job_path("optimize_indices"))
        except AirflowException as exc:
            lines = list(getattr(hook, "job_error_lines", None) or [])
            if lines:
                self.log.error("%s", lines[0])
                if hook.submit_returncode == JOB_EXIT_NOT_RETRYABLE:
                    raise AirflowFailException(f"{lines[0]} (spark optimize_indices job exit code "
                                               f"{hook.submit_returncode}: not retryable)") from exc
            raise
        for line in reversed(hook.last_log_lines):
            text = line.strip()
            if text.startswith("{") and text.endswith("}"):
                try:
                    summary: dict[str, Any] = json.loads(text)
                    return summary
                except ValueError:
                    continue
        raise AirflowException("the Spark optimize_indices job printed no JSON summary")
