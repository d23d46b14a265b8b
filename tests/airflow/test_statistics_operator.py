"""LanceRebuildStatisticsOperator: statistics of 2.2 files, and a failed rebuild fails the task."""
from __future__ import annotations

import os

import lance
import pyarrow as pa
import pytest

from tests.airflow.test_components import context


@pytest.fixture(autouse=True)
def _airflow(airflow_home):
    yield


def _dataset(uri: str) -> None:
    lance.write_dataset(pa.table({"id": pa.array(range(300), pa.int64())}), uri, max_rows_per_file=100)


def test_operator_writes_statistics_of_default_version_files(tmp_path):
    from lance_ops_airflow.operators import LanceRebuildStatisticsOperator

    uri = str(tmp_path / "ok.lance")
    _dataset(uri)  # pylance's default storage version (2.2)
    res = LanceRebuildStatisticsOperator(task_id="s", dataset_uri=uri).execute(context(task_id="s"))
    m = res["metrics"]
    assert (m["written"], m["failed"], m["status"]) == (3, 0, "ok") and res["changed"]


def test_operator_fails_the_task_naming_the_file(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from lance_ops_airflow.operators import LanceRebuildStatisticsOperator

    uri = str(tmp_path / "bad.lance")
    _dataset(uri)
    bad = lance.dataset(uri).get_fragments()[2].data_files()[0].path
    with open(os.path.join(uri, "data", bad), "r+b") as f:  # no longer a Lance file
        f.seek(-8, os.SEEK_END)
        f.write(b"\0" * 8)
    op = LanceRebuildStatisticsOperator(task_id="s", dataset_uri=uri)
    with pytest.raises(AirflowFailException) as err:
        op.execute(context(task_id="s"))
    text = str(err.value)
    assert bad in text and "fragment 2" in text and "CorruptFileError" in text and "1 of 3" in text
    assert len(os.listdir(os.path.join(uri, "_stats"))) == 2  # the other files keep theirs


def test_a_retryable_failure_keeps_the_retries(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from lance_ops.errors import StorageError
    from lance_ops.maintenance import statistics
    from lance_ops_airflow.operators import LanceRebuildStatisticsOperator

    uri = str(tmp_path / "flaky.lance")
    _dataset(uri)

    def flaky(*args, **kwargs):
        raise StorageError("connection reset while reading")

    monkeypatch.setattr(statistics, "compute_range_statistics", flaky)  # fault injected from the test
    with pytest.raises(AirflowException) as err:
        LanceRebuildStatisticsOperator(task_id="s", dataset_uri=uri).execute(context(task_id="s"))
    assert not isinstance(err.value, AirflowFailException) and "connection reset" in str(err.value)
