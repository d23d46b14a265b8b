"""
### lance_maintenance: keep a Lance dataset healthy (daily)

`maintenance_needed` (deferrable sensor, soft_fail) -> `compaction` (bin-packs small fragments;
plan in-process, small plans compact right there, big ones go to Spark and a commit task) ->
`materialize_deletions` (rewrites fragments whose deleted-row ratio exceeds the threshold, whatever
their size) -> `optimize_indices` (extends every index to the fragments it does not cover, as
pylance's `optimize_indices`) -> `rebuild_statistics` -> `refresh_row_id_index` -> `verify` -> `cleanup` -> `health`
(the report: fragments, rows, deletions, versions, and every index with its kind, columns, uuids,
coverage and index version) -> `run_report`.

**The run never stalls.** A failed or refused step (compaction refusing a dataset, a statistics
failure) does not stop the steps after it: `materialize_deletions`, `optimize_indices`, `rebuild_statistics`,
`refresh_row_id_index`, `verify` and `health` use the trigger rule `none_skipped` (run when the
step before them succeeded, failed or did not run because of a failure; skip only when it was
skipped, i.e. when the sensor skipped the run). Each step reads the dataset's latest committed
version, so a failed step leaves nothing half-done for the next one (commits are atomic).

**Index upkeep.** `optimize_indices` runs after compaction and materialization, so it indexes the
fragments they wrote too. It writes nothing and logs `skipped: <reason>` when the Param
`optimize_indices` is off, the dataset has no index, coverage is already complete (every index
covers every live fragment), or no index leaves more than `unindexed_rows_threshold_pct` percent
of the rows unindexed; the task then succeeds with that reason (a `skipped` state would skip the
steps after it). Index kinds lance_ops cannot update (INVERTED, IVF_HNSW_*, ...) are reported with
their reason and skipped while the others are updated, unless they are named in `index_names`
(then the task fails). The sensor also counts unindexed rows above the threshold as a reason
to run. Upkeeps indexing more than `index_spark_threshold_rows` unindexed rows run as the Spark job
`lance_ops/spark/optimize_indices.py` (submitted from the task; executors encode the new rows, one
commit), smaller ones in the task.

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
within `sensor_timeout` (default `0s`: check once), skips, and everything after it is
skipped too. Every step is idempotent per run (commits carry the run's idempotency key), so
retries and re-runs never commit twice.

Run it on any dataset:

    airflow dags test lance_maintenance -c '{"dataset_uri": "/data/events.lance"}'
    airflow dags test lance_maintenance -c '{"dataset_uri": "s3://lake/events.lance", "lance_conn_id": "lance_s3"}'

**Scheduling.** The daily run maintains `$LANCE_OPS_DATASET_URI` (with `$LANCE_OPS_CONN_ID`),
read when the file is parsed. Without it the DAG has no schedule at all (unpausing it creates no
runs, so no failed ones) and `dataset_uri` is a required field of the trigger form.

Durations (`cleanup_older_than`, `sensor_timeout`) are entered as `14d`, `12h`, `30m`, `45s`,
`1d12h`.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from lance_ops_airflow.params import conn_id_param, dataset_uri_param, duration_param

from lance_ops_airflow.operators import (
    LanceCleanupOperator,
    LanceHealthOperator,
    LanceMaterializeDeletionsOperator,
    LanceOptimizeIndicesOperator,
    LanceRebuildStatisticsOperator,
    LanceRefreshRowIdIndexOperator,
    LanceRunReportOperator,
    LanceVerifyOperator,
    lance_compaction_group,
)
from lance_ops_airflow.sensors import LanceMaintenanceNeededSensor

URI = "{{ params.dataset_uri }}"
CONN = "{{ params.lance_conn_id }}"
#: run after the previous step succeeded, failed or was not run because of a failure; skip only
#: when it was skipped (the sensor skipped the run)
AFTER_ANY_OUTCOME = "none_skipped"

#: the dataset the scheduled run maintains, fixed when the file is parsed (empty: manual runs only)
SCHEDULED_URI = os.environ.get("LANCE_OPS_DATASET_URI", "").strip()

with DAG(
    dag_id="lance_maintenance",
    description="Compaction, deletion materialization, index upkeep, statistics, row-id index and cleanup of a Lance dataset",
    # no dataset configured: not scheduled at all (a daily run could only fail); trigger it by hand
    schedule="@daily" if SCHEDULED_URI else None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=1)},
    tags=["lance", "maintenance"],
    doc_md=__doc__,
    params={
        "dataset_uri": dataset_uri_param(SCHEDULED_URI),
        "lance_conn_id": conn_id_param(os.environ.get("LANCE_OPS_CONN_ID") or None),
        "target_rows_per_fragment": Param(
            1024 * 1024, type="integer", minimum=1, maximum=1 << 31, title="Target rows per fragment",
            description="fragments with fewer rows count as small; compaction writes fragments of about this size"),
        "small_fragments_threshold": Param(
            10, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Small fragments threshold",
            description="this many small fragments make maintenance needed (empty: never for this reason)"),
        "deleted_ratio_threshold": Param(
            0.1, type=["null", "number"], minimum=0, maximum=1, title="Deleted-row ratio threshold",
            description="this share of deleted rows in the dataset makes maintenance needed (0-1; empty: never)"),
        "versions_to_clean_threshold": Param(
            20, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Old versions threshold",
            description="this many versions older than the cleanup age make maintenance needed (empty: never)"),
        "materialize_deletions_threshold": Param(
            0.1, type="number", minimum=0, maximum=1, title="Materialize deletions threshold",
            description="fragments with a larger share of deleted rows are rewritten without them (0-1)"),
        "spark_threshold_rows": Param(
            5_000_000, type=["null", "integer"], minimum=0, maximum=1 << 40, title="Spark threshold (rows)",
            description="compactions rewriting more rows run on Spark; smaller ones in the task (empty: never Spark)"),
        "optimize_indices": Param(
            True, type="boolean", title="Optimize indices",
            description="bring every index up to date with the fragments it does not cover (pylance's optimize_indices)"),
        "unindexed_rows_threshold_pct": Param(
            0, type="number", minimum=0, maximum=100, title="Unindexed rows threshold (%)",
            description="optimize indices only when some index leaves more than this percent of the rows "
                        "unindexed (0-100; 0: whenever anything is unindexed); also makes maintenance needed"),
        "num_indices_to_merge": Param(
            None, type=["null", "integer"], minimum=0, maximum=1000, title="Index segments to merge",
            description="segments folded into the new one (empty: pylance's default, 1 for scalar "
                        "indices, a delta segment for vector indices; 0: always a delta segment)"),
        "index_names": Param(
            None, type=["null", "array"], items={"type": "string", "minLength": 1, "maxLength": 256}, minItems=1, maxItems=100,
            title="Indices to optimize",
            description="only these indices, e.g. [\"id_idx\"] (empty: every index; kinds lance_ops cannot "
                        "update are then skipped with their reason; named ones fail the task instead)"),
        "index_spark_threshold_rows": Param(
            5_000_000, type=["null", "integer"], minimum=0, maximum=1 << 40, title="Index upkeep Spark threshold (rows)",
            description="index upkeeps indexing more unindexed rows run as a Spark job; smaller ones in the task "
                        "(empty: never Spark)"),
        "verify_deep": Param(
            False, type="boolean", title="Deep verify",
            description="verify: also decode every page of every data file (reads all data)"),
        "cleanup_older_than": duration_param(
            "14d", title="Cleanup age",
            description="versions older than this are removed by cleanup, e.g. 14d, 12h, 1d12h (0s: all but the latest)"),
        "retain_versions": Param(
            None, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Versions to keep",
            description="always keep this many newest versions, whatever their age (empty: age only)"),
        "delete_unverified": Param(
            False, type="boolean", title="Delete unverified files",
            description="also delete young unreferenced files (only safe with no concurrent writers)"),
        "dry_run": Param(
            False, type="boolean", title="Dry run",
            description="report what would be rewritten or deleted; change nothing"),
        "sensor_timeout": duration_param(
            "0s", title="Wait for maintenance",
            description="how long the sensor waits (deferred) for maintenance to be needed, e.g. 0s (check once), 2h"),
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
        cleanup_older_than="{{ params.cleanup_older_than }}",
        unindexed_rows_threshold_pct="{{ params.unindexed_rows_threshold_pct if params.optimize_indices else None }}",
        wait_timeout="{{ params.sensor_timeout }}",
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
    indices = LanceOptimizeIndicesOperator(
        task_id="optimize_indices",
        dataset_uri=URI,
        lance_conn_id=CONN,
        enabled="{{ params.optimize_indices and not params.dry_run }}",
        index_names="{{ params.index_names }}",
        num_indices_to_merge="{{ params.num_indices_to_merge }}",
        unindexed_rows_threshold_pct="{{ params.unindexed_rows_threshold_pct }}",
        spark_threshold_rows="{{ params.index_spark_threshold_rows }}",
        skip_when_nothing_to_do=False,  # a skipped state would skip the none_skipped steps after it
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
        older_than="{{ params.cleanup_older_than }}",
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
    needed >> compaction >> materialize >> indices >> statistics >> rowid_index >> verify >> cleanup >> health >> report
