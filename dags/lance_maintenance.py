"""
### lance_maintenance: keep a Lance dataset healthy (daily)

`maintenance_needed` (deferrable sensor, soft_fail) -> `compaction` (bin-packs small fragments;
plan in-process, small plans compact right there, big ones go to Spark and a commit task) ->
`materialize_deletions` (rewrites fragments whose deleted-row ratio exceeds the threshold, whatever
their size) -> `rebuild_statistics` -> `refresh_row_id_index` -> `verify` -> `cleanup` -> `health`
(the report: fragments, rows, deletions, versions, and every index with its kind, columns, uuids,
coverage and index version) -> `run_report`.

**The run never stalls.** A failed or refused step (compaction refusing a dataset, a statistics
failure) does not stop the steps after it: `materialize_deletions`, `rebuild_statistics`,
`refresh_row_id_index`, `verify` and `health` use the trigger rule `none_skipped` (run when the
step before them succeeded, failed or did not run because of a failure; skip only when it was
skipped, i.e. when the sensor skipped the run). Each step reads the dataset's latest committed
version, so a failed step leaves nothing half-done for the next one (commits are atomic).

**verify gates cleanup.** `verify` checks that every file the latest manifest references exists
with its recorded size and decodes (`verify_deep` also decodes every page). If anything is wrong the
task fails at once, naming each problem, and `cleanup` (trigger rule `all_success`, its only
upstream is `verify`) does not run: the old versions and their files stay for recovery. `health`
still runs.

**The final state says what failed.** `run_report` (trigger rule `all_done`) reads the states of
every task of the run: when a step failed (or did not run because of one) it logs one line per
step, pushes `{"failed": [...], "not_run": [...], "states": {...}}` as XCom `run_report` and fails,
so the run ends failed and names the failed steps; otherwise it succeeds (XCom `return_value`, the
same report). Failed steps keep their own error line and `retries`.

A healthy dataset skips the whole run: the sensor checks once and, if no threshold is reached
within `sensor_timeout_seconds` (default 0: check once), skips, and everything after it is
skipped too. Every step is idempotent per run (commits carry the run's idempotency key), so
retries and re-runs never commit twice.

Run it on any dataset:

    airflow dags test lance_maintenance -c '{"dataset_uri": "/data/events.lance"}'
    airflow dags test lance_maintenance -c '{"dataset_uri": "s3://lake/events.lance", "lance_conn_id": "lance_s3"}'

The scheduled run uses the `dataset_uri` default, taken from `$LANCE_OPS_DATASET_URI` (and
`$LANCE_OPS_CONN_ID`) when the DAG file is parsed.
"""
from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

try:  # the deployment tree (operators/, sensors/) lives next to dags/
    import operators  # noqa: F401
except ImportError:  # pragma: no cover - when only dags/ is on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow.sdk import DAG, Param

from operators import (
    LanceCleanupOperator,
    LanceHealthOperator,
    LanceMaterializeDeletionsOperator,
    LanceRebuildStatisticsOperator,
    LanceRefreshRowIdIndexOperator,
    LanceRunReportOperator,
    LanceVerifyOperator,
    lance_compaction_group,
)
from sensors import LanceMaintenanceNeededSensor

URI = "{{ params.dataset_uri }}"
CONN = "{{ params.lance_conn_id }}"
#: run after the previous step succeeded, failed or was not run because of a failure; skip only
#: when it was skipped (the sensor skipped the run)
AFTER_ANY_OUTCOME = "none_skipped"

with DAG(
    dag_id="lance_maintenance",
    description="Compaction, deletion materialization, statistics, row-id index and cleanup of a Lance dataset",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=1)},
    tags=["lance", "maintenance"],
    doc_md=__doc__,
    params={
        "dataset_uri": Param(os.environ.get("LANCE_OPS_DATASET_URI", ""), type="string",
                             description="dataset path or URI (relative: under the connection's base_uri)"),
        "lance_conn_id": Param(os.environ.get("LANCE_OPS_CONN_ID") or None, type=["null", "string"],
                               description="Airflow connection with S3 credentials; empty for local paths"),
        "target_rows_per_fragment": Param(1024 * 1024, type="integer", minimum=1),
        "small_fragments_threshold": Param(10, type=["null", "integer"], minimum=1,
                                           description="this many small fragments need compaction"),
        "deleted_ratio_threshold": Param(0.1, type=["null", "number"], minimum=0, maximum=1,
                                         description="this deleted-row ratio needs maintenance"),
        "versions_to_clean_threshold": Param(20, type=["null", "integer"], minimum=1,
                                             description="this many old versions need cleanup"),
        "materialize_deletions_threshold": Param(0.1, type="number", minimum=0, maximum=1),
        "spark_threshold_rows": Param(5_000_000, type=["null", "integer"], minimum=0,
                                      description="compactions rewriting more rows run on Spark"),
        "verify_deep": Param(False, type="boolean",
                             description="verify: also decode every page of every data file (reads all data)"),
        "cleanup_older_than_seconds": Param(14 * 24 * 3600, type="number", minimum=0),
        "retain_versions": Param(None, type=["null", "integer"], minimum=1),
        "delete_unverified": Param(False, type="boolean",
                                   description="also delete young unreferenced files (no concurrent writers!)"),
        "dry_run": Param(False, type="boolean", description="report what would be rewritten/deleted only"),
        "sensor_timeout_seconds": Param(0, type="number", minimum=0,
                                        description="how long to wait (deferred) for maintenance to be needed"),
    },
) as dag:
    needed = LanceMaintenanceNeededSensor(
        task_id="maintenance_needed",
        dataset_uri=URI,
        lance_conn_id=CONN,
        target_rows_per_fragment="{{ params.target_rows_per_fragment }}",
        small_fragments_threshold="{{ params.small_fragments_threshold }}",
        deleted_ratio_threshold="{{ params.deleted_ratio_threshold }}",
        versions_to_clean_threshold="{{ params.versions_to_clean_threshold }}",
        materialize_deletions_threshold="{{ params.materialize_deletions_threshold }}",
        cleanup_older_than_seconds="{{ params.cleanup_older_than_seconds }}",
        wait_timeout="{{ params.sensor_timeout_seconds }}",
        deferrable=True,
        soft_fail=True,
        poke_interval=60,
        timeout=0,
        retries=0,
    )
    compaction = lance_compaction_group(
        "compaction",
        dataset_uri=URI,
        lance_conn_id=CONN,
        target_rows_per_fragment="{{ params.target_rows_per_fragment }}",
        materialize_deletions=False,  # the next step purges deletions of fragments compaction leaves alone
        dry_run="{{ params.dry_run }}",
        spark_threshold_rows="{{ params.spark_threshold_rows }}",
    )
    materialize = LanceMaterializeDeletionsOperator(
        task_id="materialize_deletions",
        dataset_uri=URI,
        lance_conn_id=CONN,
        threshold="{{ params.materialize_deletions_threshold }}",
        dry_run="{{ params.dry_run }}",
        trigger_rule=AFTER_ANY_OUTCOME,
    )
    statistics = LanceRebuildStatisticsOperator(task_id="rebuild_statistics", dataset_uri=URI, lance_conn_id=CONN,
                                                trigger_rule=AFTER_ANY_OUTCOME)
    rowid_index = LanceRefreshRowIdIndexOperator(task_id="refresh_row_id_index", dataset_uri=URI, lance_conn_id=CONN,
                                                 trigger_rule=AFTER_ANY_OUTCOME)
    verify = LanceVerifyOperator(
        task_id="verify", dataset_uri=URI, lance_conn_id=CONN, deep="{{ params.verify_deep }}",
        trigger_rule=AFTER_ANY_OUTCOME,
    )
    cleanup = LanceCleanupOperator(  # all_success (the default): only after verify passed
        task_id="cleanup",
        dataset_uri=URI,
        lance_conn_id=CONN,
        older_than_seconds="{{ params.cleanup_older_than_seconds }}",
        retain_versions="{{ params.retain_versions }}",
        delete_unverified="{{ params.delete_unverified }}",
        dry_run="{{ params.dry_run }}",
    )
    health = LanceHealthOperator(
        task_id="health", dataset_uri=URI, lance_conn_id=CONN,
        target_rows_per_fragment="{{ params.target_rows_per_fragment }}",
        materialize_deletions_threshold="{{ params.materialize_deletions_threshold }}",
        trigger_rule=AFTER_ANY_OUTCOME,
    )
    report = LanceRunReportOperator(task_id="run_report")
    needed >> compaction >> materialize >> statistics >> rowid_index >> verify >> cleanup >> health >> report
