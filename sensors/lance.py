"""Sensors: a new dataset version (or tag) and "maintenance needed", in poke or deferrable mode.

``deferrable=True``: the sensor checks once in the worker; if the condition does not hold yet it
defers to a trigger (:mod:`lance_ops_airflow.sensors.triggers`) that polls from the triggerer until the condition
holds or the timeout passes, then resumes in ``execute_complete``. Otherwise the usual
BaseSensorOperator poke / reschedule loop runs. Either way the XCom is the check's result dict,
and a timeout with ``soft_fail=True`` skips the task (and, through trigger rules, what follows).

Errors are classified like the operators' (:func:`lance_ops_airflow.operators.base.classify_failure`): a check that
cannot succeed on a retry (corrupt manifest, bad argument) fails the task at once with its cause
as the first error line; retryable ones keep the task's retries.

``wait_timeout`` (templated; a duration such as ``"10m"`` or seconds) overrides ``timeout`` at run time, so a DAG can take it
from a Param.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseSensorOperator, PokeReturnValue

from lance_ops_airflow.operators.base import as_optional_float, as_optional_int, classify_failure, parse_duration, skip
from lance_ops_airflow.sensors.checks import check_maintenance, check_new_version, check_unindexed_rows
from lance_ops_airflow.sensors.triggers import (
    LanceMaintenanceNeededTrigger,
    LanceNewVersionTrigger,
    LanceUnindexedRowsTrigger,
)


class _LanceSensor(BaseSensorOperator):
    template_fields: tuple[str, ...] = ("dataset_uri", "lance_conn_id", "wait_timeout")
    ui_color = "#e8f4d9"

    def __init__(self, *, dataset_uri: str, lance_conn_id: str | None = None, deferrable: bool = False,
                 wait_timeout: float | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dataset_uri = dataset_uri
        self.lance_conn_id = lance_conn_id
        self.deferrable = deferrable
        self.wait_timeout = wait_timeout

    # subclasses: the check (-> (done, payload)) and the trigger for the remaining wait
    def check(self) -> tuple[bool, Any]:
        raise NotImplementedError

    def make_trigger(self, deadline: float):
        raise NotImplementedError

    def finish(self, context: Any, payload: Any) -> Any:
        return payload

    def _apply_wait_timeout(self) -> None:
        override = parse_duration(self.wait_timeout, "wait_timeout")
        if override is not None:
            self.timeout = override

    def poke(self, context: Any) -> bool | PokeReturnValue:
        done, payload = self.check()
        self.log.info("%s: %s", "condition met" if done else "not yet", payload)
        if not done:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.finish(context, payload))

    def execute(self, context: Any) -> Any:
        try:
            return self._execute(context)
        except Exception as exc:  # noqa: BLE001 - classified: fail at once or keep the retries
            classify_failure(self.log, exc)

    def _execute(self, context: Any) -> Any:
        self._apply_wait_timeout()
        if not self.deferrable:
            return super().execute(context)
        done, payload = self.check()
        if done:
            self.log.info("condition met on the first check: %s", payload)
            return self.finish(context, payload)
        if self.timeout <= 0:
            self._timed_out(f"condition not met and no wait allowed (timeout 0): {payload}")
        deadline = time.time() + float(self.timeout)
        self.log.info("condition not met (%s); deferring for up to %.0f s", payload, self.timeout)
        self.defer(trigger=self.make_trigger(deadline), method_name="execute_complete",
                   timeout=timedelta(seconds=float(self.timeout) + 2 * float(self.poke_interval) + 60))

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        event = event or {}
        status = event.get("status")
        if status == "success":
            return self.finish(context, event.get("result"))
        if status == "timeout":
            self._timed_out(event.get("message", "timed out"))
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        message = str(event.get("message", event))
        self.log.error("%s", message)
        if event.get("retryable") is False:
            raise AirflowFailException(f"{self.task_id}: {message} (not retryable)")
        raise AirflowException(f"{self.task_id}: trigger failed: {message}")

    def _timed_out(self, message: str) -> None:
        from airflow.sdk.exceptions import AirflowSensorTimeout

        if self.soft_fail:
            skip(self.log, f"{message} (soft_fail: the run's later steps are skipped too)")
        raise AirflowSensorTimeout(f"{self.task_id}: {message}")


class LanceNewVersionSensor(_LanceSensor):
    """Wait for a dataset version beyond ``baseline_version``, or for ``tag`` to exist.

    With neither, waits for the dataset to exist. XCom: ``{"uri", "version", "observed_version",
    "baseline_version", "tag", "tag_version"?}``. If the sensor has ``Asset`` outlets, their
    event extra is that dict: "a newer version was observed; read the dataset AS OF ``version``".

    :param baseline_version: the version already seen. (templated)
    :param tag: a tag name to wait for. (templated)
    """

    template_fields = _LanceSensor.template_fields + ("baseline_version", "tag")

    def __init__(self, *, baseline_version: int | str | None = None, tag: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.baseline_version = baseline_version
        self.tag = tag

    def _args(self) -> tuple[int | None, str | None]:
        tag = self.tag if self.tag not in (None, "", "None") else None
        return as_optional_int(self.baseline_version), tag

    def check(self) -> tuple[bool, Any]:
        baseline, tag = self._args()
        result = check_new_version(self.dataset_uri, self.lance_conn_id, baseline, tag)
        return result is not None, result or {"baseline_version": baseline, "tag": tag}

    def make_trigger(self, deadline: float):
        baseline, tag = self._args()
        return LanceNewVersionTrigger(dataset_uri=self.dataset_uri, lance_conn_id=self.lance_conn_id,
                                      baseline_version=baseline, tag=tag, poll_interval=self.poke_interval,
                                      deadline=deadline)

    def finish(self, context: Any, payload: Any) -> Any:
        if payload and self.outlets:
            events = context["outlet_events"]
            for outlet in self.outlets:
                if isinstance(outlet, Asset):
                    events[outlet].extra = {**payload, "operation": "observed"}
        return payload


class LanceMaintenanceNeededSensor(_LanceSensor):
    """Wait until the dataset needs maintenance (from ``lance_ops.maintenance.health``).

    Use ``soft_fail=True`` with a short ``timeout`` in a scheduled maintenance DAG: a healthy
    dataset then skips the run instead of failing it. XCom: ``{"uri", "health", "reasons"}``.

    :param target_rows_per_fragment: fragments below this count as small. (templated)
    :param small_fragments_threshold: this many small fragments need compaction. (templated)
    :param deleted_ratio_threshold: this deleted-row ratio needs materialization. (templated)
    :param versions_to_clean_threshold: this many versions awaiting cleanup. (templated)
    :param materialize_deletions_threshold: per-fragment ratio reported in the health. (templated)
    :param cleanup_older_than: versions older than this await cleanup: a duration (``"14d"``) or
        seconds. (templated) ``cleanup_older_than_seconds`` is the earlier name, in seconds.
    :param unindexed_rows_threshold_pct: some index leaving more than this percent (0-100) of the
        rows unindexed needs index upkeep (default None: never for this reason). (templated)
    """

    template_fields = _LanceSensor.template_fields + (
        "target_rows_per_fragment", "small_fragments_threshold", "deleted_ratio_threshold",
        "versions_to_clean_threshold", "materialize_deletions_threshold", "cleanup_older_than",
        "unindexed_rows_threshold_pct",
    )

    def __init__(self, *, target_rows_per_fragment: int | str = 1024 * 1024,
                 small_fragments_threshold: int | str | None = 10,
                 deleted_ratio_threshold: float | str | None = 0.1,
                 versions_to_clean_threshold: int | str | None = 20,
                 materialize_deletions_threshold: float | str = 0.1,
                 cleanup_older_than: str | float = "14d", cleanup_older_than_seconds: float | str | None = None,
                 unindexed_rows_threshold_pct: float | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.unindexed_rows_threshold_pct = unindexed_rows_threshold_pct
        self.target_rows_per_fragment = target_rows_per_fragment
        self.small_fragments_threshold = small_fragments_threshold
        self.deleted_ratio_threshold = deleted_ratio_threshold
        self.versions_to_clean_threshold = versions_to_clean_threshold
        self.materialize_deletions_threshold = materialize_deletions_threshold
        self.cleanup_older_than = cleanup_older_than if cleanup_older_than_seconds is None else cleanup_older_than_seconds

    def thresholds(self) -> dict[str, Any]:
        def default(value, fallback):
            return fallback if value is None else value

        return {
            "target_rows_per_fragment": as_optional_int(self.target_rows_per_fragment) or 1024 * 1024,
            "small_fragments_threshold": as_optional_int(self.small_fragments_threshold),
            "deleted_ratio_threshold": as_optional_float(self.deleted_ratio_threshold),
            "versions_to_clean_threshold": as_optional_int(self.versions_to_clean_threshold),
            "materialize_deletions_threshold": default(as_optional_float(self.materialize_deletions_threshold), 0.1),
            "cleanup_older_than_seconds": default(parse_duration(self.cleanup_older_than, "cleanup_older_than"),
                                                  14 * 24 * 3600.0),
            "unindexed_rows_threshold_pct": as_optional_float(self.unindexed_rows_threshold_pct),
        }

    def check(self) -> tuple[bool, Any]:
        return check_maintenance(self.dataset_uri, self.lance_conn_id, **self.thresholds())

    def make_trigger(self, deadline: float):
        return LanceMaintenanceNeededTrigger(dataset_uri=self.dataset_uri, lance_conn_id=self.lance_conn_id,
                                             thresholds=self.thresholds(), poll_interval=self.poke_interval,
                                             deadline=deadline)


class LanceUnindexedRowsSensor(_LanceSensor):
    """Wait until some index leaves more than ``threshold_pct`` percent of the live rows unindexed
    (fragments appended since the index was built; :class:`LanceOptimizeIndicesOperator
    <lance_ops_airflow.operators.indices.LanceOptimizeIndicesOperator>` brings it up to date).

    Reads manifests only (cheap to poll); deferrable like the other Lance sensors. XCom: ``{"uri",
    "version", "indices": [{"name", "kind", "indexed_rows", "unindexed_rows", "unindexed_pct",
    ...}], "over": [names], "reasons", "threshold_pct"}``. A dataset without an index never fires.

    :param threshold_pct: percent (0-100) of unindexed rows above which the sensor fires; 0: any
        unindexed row. (templated)
    :param index_names: watch only these indices (default: every user index). (templated)
    """

    template_fields = _LanceSensor.template_fields + ("threshold_pct", "index_names")

    def __init__(self, *, threshold_pct: float | str = 0.0, index_names: list[str] | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold_pct = threshold_pct
        self.index_names = index_names

    def _args(self) -> tuple[float, list[str] | None]:
        from lance_ops_airflow.operators.indices import parse_index_names

        pct = as_optional_float(self.threshold_pct) or 0.0
        if not 0.0 <= pct <= 100.0:
            raise ValueError(f"threshold_pct must be between 0 and 100, got {pct:g}")
        return pct, parse_index_names(self.index_names)

    def check(self) -> tuple[bool, Any]:
        pct, names = self._args()
        return check_unindexed_rows(self.dataset_uri, self.lance_conn_id, threshold_pct=pct, index_names=names)

    def make_trigger(self, deadline: float):
        pct, names = self._args()
        return LanceUnindexedRowsTrigger(dataset_uri=self.dataset_uri, lance_conn_id=self.lance_conn_id,
                                         threshold_pct=pct, index_names=names, poll_interval=self.poke_interval,
                                         deadline=deadline)
