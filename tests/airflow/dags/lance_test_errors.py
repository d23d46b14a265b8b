"""Test-only DAGs (bundle ``lance-ops-tests``) for error classification; every task may retry once.

``lance_test_errors``: independent tasks that each fail in one way: a missing dataset, a schema
mismatch, a bad argument (not retryable: failed after one try), an injected StorageError and an
injected unknown commit outcome of a keyed commit (retryable: a second try runs).

``lance_test_spark_errors``: the Spark stage of an ingestion group reading a missing input path
(not retryable: the job exits 2, the task fails after one try).
"""
from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from lance_ops_airflow.operators import LanceAppendOperator, LanceDeleteOperator, lance_ingest_group
from lance_ops_airflow.operators.base import LanceBaseOperator

URI = "{{ params.dataset_uri }}"
RETRY_ONCE = {"retries": 1, "retry_delay": timedelta(seconds=0)}


class StorageDownOperator(LanceDeleteOperator):
    """A delete whose object store fails like an unreachable S3 endpoint."""

    def run(self, context, uri, storage_options, key):
        from lance_ops.errors import StorageError

        raise StorageError(f"S3 get_object {uri}/_versions failed: Could not connect to the endpoint URL")


class UnknownOutcomeOperator(LanceDeleteOperator):
    """A keyed delete whose commit outcome is unknown (a retry finds it by its key)."""

    def run(self, context, uri, storage_options, key):
        from lance_ops.errors import CommitOutcomeUnknownError

        raise CommitOutcomeUnknownError(f"{uri}: version 7: the store failed after the put")


class UnkeyedUnknownOutcomeOperator(LanceBaseOperator):
    """An unknown commit outcome of a step without an idempotency lookup: a retry could commit twice."""

    def run(self, context, uri, storage_options, key):
        from lance_ops.errors import CommitOutcomeUnknownError

        raise CommitOutcomeUnknownError(f"{uri}: version 7: the store failed after the put")


def retrying_dag(dag_id: str, *param_names: str) -> DAG:
    """A manually triggered DAG whose tasks may retry once at once; the params are required strings."""
    return DAG(dag_id=dag_id, schedule=None, render_template_as_native_obj=True, default_args=RETRY_ONCE,
               params={name: Param(type="string", minLength=1) for name in param_names})


with retrying_dag("lance_test_errors", "dataset_uri", "missing_uri") as errors_dag:
    LanceDeleteOperator(task_id="missing_dataset", dataset_uri="{{ params.missing_uri }}", predicate="id < 5")
    LanceAppendOperator(task_id="schema_mismatch", dataset_uri=URI, data=[{"id": 1, "unexpected": "x"}])
    LanceDeleteOperator(task_id="bad_argument", dataset_uri=URI, predicate="   ")
    StorageDownOperator(task_id="storage_down", dataset_uri=URI, predicate="id < 5")
    UnknownOutcomeOperator(task_id="unknown_outcome_keyed", dataset_uri=URI, predicate="id < 5")
    UnkeyedUnknownOutcomeOperator(task_id="unknown_outcome_unkeyed", dataset_uri=URI)


with retrying_dag("lance_test_spark_errors", "dataset_uri", "source_path") as spark_errors_dag:
    lance_ingest_group("ingest", dataset_uri=URI, source_path="{{ params.source_path }}")
