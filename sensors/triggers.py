"""Async triggers behind the deferrable Lance sensors.

The triggerer runs ``run()``; the blocking lance_ops reads happen in a worker thread
(``asyncio.to_thread``), so one triggerer can watch many datasets. Trigger kwargs hold only the
dataset URI, the connection id and thresholds (no credentials: the connection is resolved inside
the check). The timeout is an absolute ``deadline`` (epoch seconds) fixed when the sensor
deferred, so a triggerer restart does not extend it.

Events: ``{"status": "success", "result": {...}}``, ``{"status": "timeout", "message", "last"}``
or ``{"status": "error", "message", "retryable"}`` (after ``max_errors`` consecutive failed
checks, or at once when the error is not retryable, e.g. a corrupt manifest or a bad URI; the
message is the one-line ``"<ErrorClass>: <message>"``).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from lance_ops_airflow.sensors.checks import check_maintenance, check_new_version, check_unindexed_rows


class _PollingTrigger(BaseTrigger):
    """Call a check in a thread every ``poll_interval`` seconds until it holds or ``deadline``."""

    def __init__(self, *, dataset_uri: str, lance_conn_id: str | None = None, poll_interval: float = 60.0,
                 deadline: float | None = None, max_errors: int = 3) -> None:
        super().__init__()
        self.dataset_uri = dataset_uri
        self.lance_conn_id = lance_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        self.max_errors = int(max_errors)

    def _base_kwargs(self) -> dict[str, Any]:
        return {"dataset_uri": self.dataset_uri, "lance_conn_id": self.lance_conn_id,
                "poll_interval": self.poll_interval, "deadline": self.deadline, "max_errors": self.max_errors}

    def _check(self) -> tuple[bool, Any]:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        errors = 0
        last: Any = None
        while True:
            try:
                done, last = await asyncio.to_thread(self._check)
                errors = 0
            except Exception as exc:  # noqa: BLE001 - reported in the event after max_errors tries
                from lance_ops.errors import error_line, is_retryable

                errors += 1
                retryable = is_retryable(exc)
                self.log.warning("check of %s failed (%d/%d): %s", self.dataset_uri, errors, self.max_errors,
                                 error_line(exc))
                if errors >= self.max_errors or not retryable:
                    yield TriggerEvent({"status": "error", "message": error_line(exc), "retryable": retryable})
                    return
                done = False
            if done:
                yield TriggerEvent({"status": "success", "result": last})
                return
            now = time.time()
            if self.deadline is not None and now >= self.deadline:
                yield TriggerEvent({"status": "timeout", "last": last,
                                    "message": f"{self.dataset_uri}: condition not met before the deadline"})
                return
            wait = self.poll_interval if self.deadline is None else max(0.0, min(self.poll_interval, self.deadline - now))
            await asyncio.sleep(wait)


class LanceNewVersionTrigger(_PollingTrigger):
    """Fires when the dataset's latest version is beyond ``baseline_version`` / ``tag`` exists."""

    def __init__(self, *, baseline_version: int | None = None, tag: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.baseline_version = None if baseline_version is None else int(baseline_version)
        self.tag = tag

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("lance_ops_airflow.sensors.triggers.LanceNewVersionTrigger",
                {**self._base_kwargs(), "baseline_version": self.baseline_version, "tag": self.tag})

    def _check(self) -> tuple[bool, Any]:
        result = check_new_version(self.dataset_uri, self.lance_conn_id, self.baseline_version, self.tag)
        return result is not None, result


class LanceMaintenanceNeededTrigger(_PollingTrigger):
    """Fires when ``dataset_health`` crosses one of the thresholds (see sensors.checks)."""

    def __init__(self, *, thresholds: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thresholds = dict(thresholds or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("lance_ops_airflow.sensors.triggers.LanceMaintenanceNeededTrigger",
                {**self._base_kwargs(), "thresholds": self.thresholds})

    def _check(self) -> tuple[bool, Any]:
        return check_maintenance(self.dataset_uri, self.lance_conn_id, **self.thresholds)


class LanceUnindexedRowsTrigger(_PollingTrigger):
    """Fires when some index leaves more than ``threshold_pct`` percent of the rows unindexed."""

    def __init__(self, *, threshold_pct: float = 0.0, index_names: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold_pct = float(threshold_pct)
        self.index_names = list(index_names) if index_names else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("lance_ops_airflow.sensors.triggers.LanceUnindexedRowsTrigger",
                {**self._base_kwargs(), "threshold_pct": self.threshold_pct, "index_names": self.index_names})

    def _check(self) -> tuple[bool, Any]:
        return check_unindexed_rows(self.dataset_uri, self.lance_conn_id, threshold_pct=self.threshold_pct,
                                    index_names=self.index_names)
