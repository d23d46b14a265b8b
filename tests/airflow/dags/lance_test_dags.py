"""Test-only DAGs (bundle ``lance-ops-tests``): failure injection after a commit, a waiting sensor.

``lance_test_retry``: append -> stage -> commit_staged -> delete. Each committing task is a
subclass that, when ``$LANCE_OPS_TEST_FLAG_DIR/<task_id>.fail`` exists, deletes the flag and
raises *after* its commit landed. With ``retries=1, retry_delay=0`` Airflow runs the task again,
which must find its earlier commit by idempotency key and commit nothing new.

``lance_test_sensors``: a deferrable LanceNewVersionSensor waiting for a tag (created by the test
from another thread while the trigger polls: the sensor touches ``$LANCE_OPS_TEST_FLAG_DIR/<task_id>.deferred``
when it defers, so the test creates the tag only once the sensor is waiting) and a deferrable LanceMaintenanceNeededSensor with a
short timeout on a healthy dataset (soft_fail: skipped).
"""
from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param
from airflow.sdk.exceptions import AirflowException

from lance_ops_airflow.operators import LanceAppendOperator, LanceCommitStagedOperator, LanceDeleteOperator
from lance_ops_airflow.sensors import LanceMaintenanceNeededSensor, LanceNewVersionSensor

URI = "{{ params.dataset_uri }}"


class FailOnceAfterCommit:
    """Mixin: fail the first try after ``execute`` returned (i.e. after the commit landed)."""

    def execute(self, context):
        result = super().execute(context)
        flag = Path(os.environ.get("LANCE_OPS_TEST_FLAG_DIR", "/nonexistent")) / f"{self.task_id}.fail"
        if flag.exists():
            flag.unlink()
            raise AirflowException(f"injected failure after the commit of version {result.get('version')}")
        return result


class FailingAppend(FailOnceAfterCommit, LanceAppendOperator):
    pass


class FailingCommitStaged(FailOnceAfterCommit, LanceCommitStagedOperator):
    pass


class FailingDelete(FailOnceAfterCommit, LanceDeleteOperator):
    pass


class MarksDeferral(LanceNewVersionSensor):
    """The real sensor; when it defers (its first check missed) it first touches a flag file."""

    def defer(self, **kwargs):
        flags = os.environ.get("LANCE_OPS_TEST_FLAG_DIR")
        if flags:
            Path(flags, f"{self.task_id}.deferred").touch()
        super().defer(**kwargs)


def stage_rows(uri: str, start: int, count: int, **context) -> dict:
    """Stage ``count`` rows under the run's key of scope ``staged`` (what the Spark job does)."""
    import pyarrow as pa

    import lance_ops
    from lance_ops.errors import AlreadyExistsError
    from lance_ops.table.commit.staging import StagedResult, write_staged
    from lance_ops.table.write import write_fragments
    from lance_ops_airflow.operators.base import find_committed, idempotency_key

    key = idempotency_key(context, "staged")
    ds = lance_ops.dataset(uri)
    if find_committed(ds, key) is not None:
        return {"key": key, "already_committed": True}
    table = pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                      "name": pa.array(["staged"] * count, pa.string())})
    frags = write_fragments(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()),
                            ds._store, ds._base, list(ds.manifest.fields), version=ds.data_storage_version)
    staged = StagedResult(key=key, operation="append", read_version=ds.version, fragments=frags,
                          metrics={"num_rows": count, "num_fragments": len(frags)})
    try:
        write_staged(ds._store, ds._base, staged)
    except AlreadyExistsError:
        pass
    return {"key": key, "rows": count}


with DAG(
    dag_id="lance_test_retry",
    schedule=None,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    params={"dataset_uri": Param(type="string", minLength=1)},
) as retry_dag:
    append = FailingAppend(task_id="append", dataset_uri=URI,
                           data=[{"id": 1000 + i, "name": "appended"} for i in range(10)])
    stage = PythonOperator(task_id="stage", python_callable=stage_rows,
                           op_kwargs={"uri": URI, "start": 2000, "count": 7})
    commit = FailingCommitStaged(task_id="commit", dataset_uri=URI, idempotency_scope="staged")
    delete = FailingDelete(task_id="delete", dataset_uri=URI, predicate="id < 5")
    append >> stage >> commit >> delete


with DAG(
    dag_id="lance_test_sensors",
    schedule=None,
    render_template_as_native_obj=True,
    params={"dataset_uri": Param(type="string", minLength=1), "healthy_uri": Param(type="string", minLength=1)},
) as sensors_dag:
    MarksDeferral(task_id="wait_for_tag", dataset_uri=URI, tag="ready", deferrable=True,
                  poke_interval=0.5, timeout=60)
    LanceMaintenanceNeededSensor(task_id="healthy_skips", dataset_uri="{{ params.healthy_uri }}",
                                 small_fragments_threshold=5, deferrable=True, soft_fail=True,
                                 poke_interval=0.5, timeout=1.5)
