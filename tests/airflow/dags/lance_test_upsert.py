"""Test-only DAG (bundle ``lance-ops-tests``): an upsert whose first try fails after its commit.

``lance_test_upsert_retry``: one ``LanceMergeInsertOperator`` (keys ``id``, the rows of the
``rows`` Param) that, when ``$LANCE_OPS_TEST_FLAG_DIR/upsert.fail`` exists, deletes the flag and
raises *after* its commit landed. With ``retries=1, retry_delay=0`` Airflow runs it again, which
must find its earlier commit by idempotency key and commit nothing new.
"""
from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param
from airflow.sdk.exceptions import AirflowException

from lance_ops_airflow.operators import LanceMergeInsertOperator


class FailingMergeInsert(LanceMergeInsertOperator):
    """Fails its first try after ``execute`` returned (i.e. after the commit landed)."""

    def execute(self, context):
        result = super().execute(context)
        flag = Path(os.environ.get("LANCE_OPS_TEST_FLAG_DIR", "/nonexistent")) / f"{self.task_id}.fail"
        if flag.exists():
            flag.unlink()
            raise AirflowException(f"injected failure after the commit of version {result.get('version')}")
        return result


with DAG(
    dag_id="lance_test_upsert_retry",
    schedule=None,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    params={"dataset_uri": Param(type="string", minLength=1), "rows": Param(type="array")},
) as upsert_retry_dag:
    FailingMergeInsert(task_id="upsert", dataset_uri="{{ params.dataset_uri }}", on=["id"],
                       data="{{ params.rows }}")
