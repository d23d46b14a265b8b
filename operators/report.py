"""The last task of a maintenance run: say which steps failed, and fail the run if any did.

Maintenance steps run on even when an earlier one failed (their trigger rules let them), so the
run's state cannot come from the first failure any more. :class:`LanceRunReportOperator` runs
last (``all_done``), reads the states of every other task of its run and

* skips when nothing ran (the maintenance sensor found nothing to do and skipped the run);
* succeeds with ``{"failed": [], "not_run": [], "states": {...}}`` when no step failed;
* otherwise pushes that report as XCom ``run_report``, logs one error line per failed step and
  fails (``AirflowFailException``, no retry), naming the failed steps: the run ends failed.

``failed`` lists tasks in state ``failed``; ``not_run`` the tasks that did not run because an
upstream step failed (``upstream_failed``: e.g. ``cleanup`` after a failed ``verify``).
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from lance_ops_airflow.operators.base import skip

#: the trigger rule of the report task: it runs whatever happened before it
ALL_DONE = "all_done"


class LanceRunReportOperator(BaseOperator):
    """Fail the run, naming the failed steps, when any step of the run failed (see module docs)."""

    ui_color = "#f4cccc"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", ALL_DONE)
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)

    def execute(self, context: Any) -> dict[str, Any]:
        """Read the run's task states; skip, succeed or fail as the module docs say."""
        from airflow.sdk.exceptions import AirflowFailException

        ti = context["ti"]
        by_run = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
        states = {task_id: str(state) for task_id, state in (by_run.get(ti.run_id) or {}).items()
                  if task_id != ti.task_id}
        report = report_from_states(states)
        if not report["ran"]:
            skip(self.log, "no maintenance step ran (the sensor found nothing to do and skipped the run)")
        if report["failed"] or report["not_run"]:
            ti.xcom_push(key="run_report", value=report)
            for task_id in report["failed"]:
                self.log.error("step failed: %s", task_id)
            for task_id in report["not_run"]:
                self.log.error("step not run (an upstream step failed): %s", task_id)
            raise AirflowFailException(
                f"failed steps: {', '.join(report['failed']) or '-'}; not run because of them: "
                f"{', '.join(report['not_run']) or '-'}")
        self.log.info("every step succeeded or was skipped: %s", states)
        return report


def report_from_states(states: dict[str, str]) -> dict[str, Any]:
    """``{"failed", "not_run", "ran", "states"}`` from the task states of a run (task id -> state)."""
    failed = sorted(t for t, s in states.items() if s == "failed")
    not_run = sorted(t for t, s in states.items() if s == "upstream_failed")
    ran = any(s not in ("skipped", "None", "none", "") for s in states.values())
    return {"failed": failed, "not_run": not_run, "ran": ran, "states": dict(sorted(states.items()))}
