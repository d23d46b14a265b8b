"""Test-only DAG (bundle ``lance-ops-tests``) whose OpenLineage events the lineage test captures.

``lance_test_lineage``: ``append`` (a Parquet file -> the dataset, mode create) -> ``compact`` (the
dataset -> itself, in-process) -> ``delete`` (a predicate; rows deleted, none written).
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from lance_ops_airflow.operators import LanceAppendOperator, LanceCompactionOperator, LanceDeleteOperator

with DAG(
    dag_id="lance_test_lineage",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    params={"dataset_uri": Param(type="string", minLength=1), "source_path": Param(type="string", minLength=1)},
) as dag:
    append = LanceAppendOperator(task_id="append", dataset_uri="{{ params.dataset_uri }}",
                                 source_path="{{ params.source_path }}", mode="create", max_rows_per_file=100)
    compact = LanceCompactionOperator(task_id="compact", dataset_uri="{{ params.dataset_uri }}",
                                      target_rows_per_fragment=1000)
    delete = LanceDeleteOperator(task_id="delete", dataset_uri="{{ params.dataset_uri }}", predicate="id < 10")
    append >> compact >> delete
