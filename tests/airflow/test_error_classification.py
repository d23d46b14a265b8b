"""Operators, sensors and the Spark stage classify errors (issue 16, acceptance item 9).

Real dag.test() runs of ``tests/airflow/dags/lance_test_errors.py`` (every task has one retry):
non-retryable errors fail the task after ONE try with the cause as the first error line of its
log; retryable ones run a second try. dag.test() never raises: the tests read task states, try
numbers and the task log lines dag.test() prints.
"""
from __future__ import annotations

import re

import pyarrow as pa
import pytest


@pytest.fixture(autouse=True)
def _airflow(airflow_home):
    yield


def task_logs(output: str, task_ids: list[str]) -> dict[str, list[list[str]]]:
    """The log lines of each try of each task in dag.test()'s output (one list per try).

    A try starts at the operator's ``... (idempotency key <key>)`` line (the key ends with
    ``_<task_id>_<map_index>``) and ends where the next try starts. (dag.test()'s own "[DAG
    TEST]" lines are unreliable here: after one run in a process they may go to a closed stream.)
    """
    tries: dict[str, list[list[str]]] = {t: [] for t in task_ids}
    current: list[str] | None = None
    for line in output.splitlines():
        started = next((t for t in task_ids if "(idempotency key airflow_" in line and f"_{t}_-1)" in line), None)
        if started is not None:
            current = []
            tries[started].append(current)
        elif current is not None:
            current.append(line)
    return tries


def first_error(lines: list[str]) -> str:
    """The message of the first ERROR-level log line (structlog console format)."""
    for line in lines:
        m = re.search(r"\[error\s*\]\s(.*)$", line)
        if m:
            return re.sub(r"\s+\[[\w.]+\]\s+loc=\S+$", "", m.group(1)).strip()
    raise AssertionError("no error line in:\n" + "\n".join(lines[-40:]))


def test_classification_table():
    from lance_ops.errors import (
        AlreadyExistsError,
        CommitConflictError,
        CommitOutcomeUnknownError,
        CommitRetriesExhaustedError,
        CorruptFileError,
        DatasetNotFoundError,
        InputNotFoundError,
        ObjectNotFoundError,
        RetryableCommitConflictError,
        SchemaMismatchError,
        StorageError,
        UnsupportedError,
        UsageError,
        error_line,
        is_retryable,
    )

    never = [DatasetNotFoundError("no ds"), SchemaMismatchError("x"), UsageError("bad"), InputNotFoundError("p"),
             CorruptFileError("/d/x.lance", "bad magic"), UnsupportedError("v9"), CommitConflictError("c"),
             ObjectNotFoundError("gone"), ValueError("v"), KeyError("k"), TypeError("t"),
             OverflowError("date value out of range")]
    for exc in never:
        assert not is_retryable(exc), exc
        assert not is_retryable(exc, idempotent=True), exc
    for exc in [StorageError("net"), AlreadyExistsError("raced"), RetryableCommitConflictError("r"),
                CommitRetriesExhaustedError("x"), ConnectionResetError("reset"), TimeoutError("slow"),
                RuntimeError("unknown")]:
        assert is_retryable(exc), exc
    # an unknown commit outcome may only be retried by a step that looks up its key first
    assert not is_retryable(CommitOutcomeUnknownError("?"))
    assert is_retryable(CommitOutcomeUnknownError("?"), idempotent=True)
    # a wrapper is judged by its lance_ops cause
    try:
        try:
            raise DatasetNotFoundError("Dataset at path /x was not found")
        except DatasetNotFoundError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert not is_retryable(outer)
        assert error_line(outer) == "DatasetNotFoundError: Dataset at path /x was not found"
    assert error_line(CorruptFileError("/d/x.lance", "bad\nmagic")) == "CorruptFileError: /d/x.lance: bad magic"


def test_operators_fail_at_once_on_non_retryable_errors(airflow_runner, tmp_path, capfd):
    import lance_ops

    uri = str(tmp_path / "ds.lance")
    missing = str(tmp_path / "missing.lance")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    capfd.readouterr()
    res = airflow_runner.run("lance_test_errors", {"dataset_uri": uri, "missing_uri": missing})
    out = capfd.readouterr()
    output = out.out + "\n" + out.err

    assert res.task_states == {t: "failed" for t in res.task_states}, res.task_states
    expected_tries = {"missing_dataset": 1, "schema_mismatch": 1, "bad_argument": 1, "unknown_outcome_unkeyed": 1,
                      "storage_down": 2, "unknown_outcome_keyed": 2}
    assert res.tries == expected_tries

    logs = task_logs(output, list(expected_tries))

    def first(task_id: str, n_tries: int) -> str:
        assert len(logs[task_id]) == n_tries, (task_id, len(logs[task_id]))
        return first_error(logs[task_id][0])

    line = first("missing_dataset", 1)
    assert line.startswith("DatasetNotFoundError: ") and missing in line
    line = first("schema_mismatch", 1)
    assert line.startswith("SchemaMismatchError: ") and "unexpected" in line
    assert first("bad_argument", 1) == "ValueError: predicate is empty; refusing to guess what to delete"
    assert first("unknown_outcome_unkeyed", 1) == (
        f"CommitOutcomeUnknownError: {uri}: version 7: the store failed after the put")
    # retryable: the cause is still the first error line, and Airflow ran the second try
    assert first("storage_down", 2).startswith("StorageError: S3 get_object ")
    assert first("unknown_outcome_keyed", 2).startswith("CommitOutcomeUnknownError: ")
    # the failing tries say "not retryable" in the exception Airflow records
    assert "AirflowFailException: DatasetNotFoundError: " in output
    # nothing was changed
    assert lance_ops.dataset(uri).version == 1


def test_sensor_corrupt_manifest_fails_at_once(tmp_path):
    """A sensor whose check cannot succeed (corrupt manifest) fails, not retried; the trigger too."""
    import asyncio
    import os

    import lance_ops
    from airflow.sdk.exceptions import AirflowFailException

    from lance_ops_airflow.sensors import LanceNewVersionSensor
    from lance_ops_airflow.sensors.triggers import LanceNewVersionTrigger

    uri = str(tmp_path / "ds.lance")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    versions = os.path.join(uri, "_versions")
    for name in os.listdir(versions):
        with open(os.path.join(versions, name), "wb") as f:
            f.write(b"not a manifest at all, just some bytes")
    sensor = LanceNewVersionSensor(task_id="s", dataset_uri=uri, baseline_version=5, poke_interval=0.1, timeout=5)
    with pytest.raises(AirflowFailException, match=r"^CorruptFileError: .*_versions"):
        sensor.execute({"ti": None})

    async def first_event():
        async for event in LanceNewVersionTrigger(dataset_uri=uri, baseline_version=5, poll_interval=0.05,
                                                  max_errors=50).run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(first_event(), 30))
    assert event["status"] == "error" and event["retryable"] is False  # at once, not after 50 tries
    assert event["message"].startswith("CorruptFileError: ")
    with pytest.raises(AirflowFailException, match="CorruptFileError"):
        sensor.execute_complete({}, event)


@pytest.mark.slow
def test_spark_stage_missing_input_fails_without_retry(airflow_runner, tmp_path, capfd):
    """The spark-submit job exits 2 with the cause first; the Spark task fails after one try and
    its first error line names the missing path (not a Java stack)."""
    import lance_ops

    uri = str(tmp_path / "ds.lance")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    source = str(tmp_path / "no-such-input")
    capfd.readouterr()
    res = airflow_runner.run("lance_test_spark_errors", {"dataset_uri": uri, "source_path": source})
    out = capfd.readouterr()
    output = out.out + "\n" + out.err
    assert res.task_states["ingest.spark_stage"] == "failed"
    assert res.tries["ingest.spark_stage"] == 1
    assert res.task_states["ingest.commit"] == "upstream_failed"
    assert output.count("spark ingest job for ") == 1  # one try
    # the first error line of the log is the cause, not a Java stack
    assert first_error(output.splitlines()) == f"InputNotFoundError: input path does not exist: {source}"
    assert "spark ingest job exit code 2: not retryable" in output
    assert lance_ops.dataset(uri).version == 1
