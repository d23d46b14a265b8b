"""Upserts from Airflow (issue 23 item 3): the ``lance_ingest`` DAG's ``mode=upsert`` with its
``on`` Param, through the Spark merge job (the default ``upsert_engine``) or
``LanceMergeInsertOperator`` in the task (``upsert_engine=task``), run for real with dag.test()
on datasets pylance made; pylance's own ``merge_insert`` on a copy of the dataset is the oracle of
the exact table.
"""
from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.airflow.test_dag_runs import log_messages


def target(n: int = 100) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "name": [f"n{i}" for i in range(n)],
                     "v": pa.array([float(i) for i in range(n)], pa.float64())})


def source() -> pa.Table:
    """Keys 90..119: 10 match the target (new values), 20 are new; source order is shuffled."""
    ids = [117, 95, 90, 110, 99, 112, 93, 101, 118, 91, 105, 96, 114, 92, 100, 119, 94, 108, 97, 103,
           111, 98, 102, 115, 106, 113, 104, 109, 107, 116]
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"src{i}" for i in ids],
                     "v": pa.array([i * 10.0 for i in ids], pa.float64())})


def pylance_made(path, n: int = 100) -> str:
    import lance

    uri = str(path)
    lance.write_dataset(target(n).slice(0, n // 2), uri, mode="create")
    lance.write_dataset(target(n).slice(n // 2), uri, mode="append")
    return uri


def oracle(uri: str, copy_to, src: pa.Table) -> tuple[pa.Table, dict]:
    """pylance's merge_insert(id) update-all/insert-all on a copy: the exact expected table."""
    import lance

    shutil.copytree(uri, copy_to)
    ds = lance.dataset(str(copy_to))
    stats = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    return lance.dataset(str(copy_to)).to_table().sort_by("id"), stats


def read_sorted(uri: str) -> pa.Table:
    import lance

    return lance.dataset(uri).to_table().sort_by("id")


def test_key_columns_names_the_param(airflow_home):
    from lance_ops_airflow.operators.merge import key_columns

    assert key_columns(["id"]) == ["id"]
    assert key_columns("id, region") == ["id", "region"]
    assert key_columns('["a", "b"]') == ["a", "b"]
    assert key_columns("['a', 'b']") == ["a", "b"]  # a list rendered without native objects
    with pytest.raises(ValueError, match=r"Param 'on': .* is not a list of column names"):
        key_columns("[a, b")
    for empty in (None, [], "", "None"):
        with pytest.raises(ValueError, match=r"Param 'on' is required when mode is 'upsert'"):
            key_columns(empty)
    with pytest.raises(ValueError, match=r"Param 'on': key columns repeat"):
        key_columns(["id", "id"])
    with pytest.raises(ValueError, match=r"Param 'on': key column names must be non-empty strings"):
        key_columns(["id", ""])
    with pytest.raises(ValueError, match=r"Param 'on' must be a list"):
        key_columns(3)


def test_dag_offers_upsert_with_on_param(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    from tests.fixtures.airflow import DAGS

    dag = DagBag(dag_folder=str(DAGS)).get_dag("lance_ingest")
    assert "upsert" in dag.params.get_param("mode").schema["enum"]
    engine = dag.params.get_param("upsert_engine")
    assert engine.value == "spark" and engine.schema["enum"] == ["spark", "task"]
    on = dag.params.get_param("on").schema
    assert on["type"] == ["null", "array"] and on["items"] == {"type": "string", "minLength": 1, "maxLength": 256}
    # the trigger form refuses an empty, repeated or blank key list (a missing one: the task, by name)
    from airflow.sdk.definitions.param import Param
    from airflow.sdk.exceptions import ParamValidationError

    assert Param(["id", "region"], **on).resolve() == ["id", "region"]
    for bad in ([], ["id", "id"], [""], "id"):
        with pytest.raises(ParamValidationError):
            Param(bad, **on).resolve()
    upsert = dag.task_dict["ingest.upsert"]
    assert type(upsert).__name__ == "LanceMergeInsertOperator"
    assert upsert.upstream_task_ids == set() and "lance://ingest" in [getattr(o, "uri", "").rstrip("/") for o in upsert.outlets]


@pytest.mark.slow
def test_ingest_dag_upsert_on_spark_matches_pylance(airflow_runner, tmp_path):
    """The default engine: spark_stage runs the merge job (which commits), commit reports it."""
    import lance

    uri = pylance_made(tmp_path / "t.lance")
    src = source()
    pq.write_table(src, tmp_path / "fix.parquet")
    expected, stats = oracle(uri, tmp_path / "oracle.lance", src)
    conf = {"dataset_uri": uri, "source_path": str(tmp_path / "fix.parquet"), "mode": "upsert", "on": ["id"]}
    res = airflow_runner.run("lance_ingest", conf)
    res.assert_success(skipped=("ingest.upsert",))
    job = res.xcoms["ingest.spark_stage"]
    assert job["job"] == "merge" and job["summary"]["committed"] is True and job["summary"]["version"] == 3
    assert {k: job["summary"][k] for k in stats} == stats
    commit = res.xcoms["ingest.commit"]
    assert commit["operation"] == "update" and commit["version"] == 3 and commit["changed"] is True
    assert commit["committed_by"] == "ingest.spark_stage"
    assert {k: commit["metrics"][k] for k in stats} == stats
    assert read_sorted(uri).equals(expected) and lance.dataset(uri).version == 3


def test_ingest_dag_upsert_matches_pylance_and_rerun_changes_nothing(airflow_runner, tmp_path, capfd):
    import lance

    uri = pylance_made(tmp_path / "t.lance")
    src = source()
    pq.write_table(src, tmp_path / "fix.parquet")
    expected, stats = oracle(uri, tmp_path / "oracle.lance", src)
    assert stats == {"num_inserted_rows": 20, "num_updated_rows": 10, "num_deleted_rows": 0}
    assert expected.num_rows == 120

    conf = {"dataset_uri": uri, "source_path": str(tmp_path / "fix.parquet"), "mode": "upsert", "on": ["id"],
            "upsert_engine": "task"}
    res = airflow_runner.run("lance_ingest", conf)
    res.assert_success(skipped=("ingest.spark_stage", "ingest.commit"))
    out = res.xcoms["ingest.upsert"]
    assert out["operation"] == "merge_insert" and out["version"] == 3 and out["changed"] is True
    assert out["already_committed"] is False and out["idempotency_key"].startswith("airflow_lance_ingest_")
    assert {k: out["metrics"][k] for k in stats} == stats
    assert out["metrics"]["num_source_rows"] == 30 and out["metrics"]["on"] == ["id"]
    assert read_sorted(uri).equals(expected)
    assert lance.dataset(uri).version == 3
    assert any("upsert on id: 10 updated, 20 inserted, 0 deleted" in m for m in log_messages(capfd.readouterr().out))

    # the same source again (a new run, so a new key): the same rows, pylance reads them
    again = airflow_runner.run("lance_ingest", conf)
    again.assert_success(skipped=("ingest.spark_stage", "ingest.commit"))
    metrics = again.xcoms["ingest.upsert"]["metrics"]
    assert (metrics["num_updated_rows"], metrics["num_inserted_rows"], metrics["num_deleted_rows"]) == (30, 0, 0)
    assert read_sorted(uri).equals(expected)
    assert lance.dataset(uri).count_rows() == 120


def test_ingest_dag_upsert_without_on_fails_naming_the_param(airflow_runner, tmp_path, capfd):
    import lance

    uri = pylance_made(tmp_path / "t.lance")
    pq.write_table(source(), tmp_path / "fix.parquet")
    for engine, failing in (("task", "ingest.upsert"), ("spark", "ingest.spark_stage")):
        res = airflow_runner.run("lance_ingest", {"dataset_uri": uri, "source_path": str(tmp_path / "fix.parquet"),
                                                  "mode": "upsert", "upsert_engine": engine})
        assert res.state == "failed"
        states = {"ingest.spark_stage": "skipped", "ingest.commit": "skipped", "ingest.upsert": "skipped"}
        states[failing] = "failed"
        if engine == "spark":
            states["ingest.commit"] = "upstream_failed"
        assert res.task_states == states
        assert res.tries[failing] == 1  # not retryable: fails at once, before any spark-submit
        out = capfd.readouterr().out
        errors = [m for m in log_messages(out) if "Param 'on'" in m]
        assert errors and "Param 'on' is required when mode is 'upsert'" in errors[0]
        assert lance.dataset(uri).version == 2 and read_sorted(uri).equals(target())


def test_upsert_retry_after_landed_commit_commits_once(airflow_runner, tmp_path, monkeypatch):
    import lance

    from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY

    uri = pylance_made(tmp_path / "t.lance")
    src = source()
    expected, _ = oracle(uri, tmp_path / "oracle.lance", src)
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "upsert.fail").touch()
    monkeypatch.setenv("LANCE_OPS_TEST_FLAG_DIR", str(flags))

    res = airflow_runner.run("lance_test_upsert_retry", {"dataset_uri": uri, "rows": src.to_pylist()})
    res.assert_success()
    assert not list(flags.iterdir()), "the injected failure fired"
    assert res.tries == {"upsert": 2}
    out = res.xcoms["upsert"]
    assert out["already_committed"] is True and out["version"] == 3 and out["changed"] is False
    assert out["metrics"] == {"committed_operation": "update", "num_inserted_rows": 20, "num_updated_rows": 10,
                              "num_deleted_rows": 0, "num_source_rows": 30, "on": ["id"]}
    ds = lance.dataset(uri)
    assert ds.version == 3, "exactly one new version"
    assert read_sorted(uri).equals(expected)
    import lance_ops

    txn = lance_ops.dataset(uri, version=3).transaction
    assert txn.WhichOneof("operation") == "update"
    assert txn.transaction_properties[IDEMPOTENCY_KEY] == out["idempotency_key"]


def test_ingest_arguments_become_merge_arguments(airflow_home):
    from lance_ops_airflow.operators.spark import _clean_args, merge_job_args

    rendered = _clean_args(["--format", "parquet", "--path", "/raw/x", "--mode", "upsert", "--partitions", None,
                            "--on", ["id", "day"]])
    assert merge_job_args(rendered) == ["--format", "parquet", "--path", "/raw/x", "--on", "id,day"]
    # a merge target exists and keeps its format: the create-time format flag is not the merge job's
    with_version = _clean_args(["--path", "/p", "--mode", "upsert", "--data-storage-version", "2.2", "--on", "k"])
    assert merge_job_args(with_version) == ["--path", "/p", "--on", "k"]
    assert _clean_args(["--path", "/p", "--data-storage-version", None]) == ["--path", "/p"]
    assert merge_job_args(["--path", "/p", "--mode", "upsert", "--on", '["k"]'])[-2:] == ["--on", "k"]
    with pytest.raises(ValueError, match=r"Param 'on' is required when mode is 'upsert'"):
        merge_job_args(_clean_args(["--path", "/p", "--mode", "upsert", "--on", None]))
