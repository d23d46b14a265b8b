"""Index upkeep in Airflow (issue 22 items 2-3): LanceOptimizeIndicesOperator, its step in
lance_maintenance, LanceUnindexedRowsSensor and the unindexed rows of the health step.

Datasets and indices are made by pylance; pylance's ``index_stats`` is the oracle for coverage.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tests.airflow.test_components import _first_event, context


@pytest.fixture(autouse=True)
def _airflow(airflow_home):
    yield


def rows(lo: int, hi: int) -> pa.Table:
    rng = np.random.default_rng(lo)
    vec = rng.standard_normal((hi - lo, 8)).astype(np.float32)
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "text": [f"word{i % 7} other{i % 3}" for i in range(lo, hi)],
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 8)})


def indexed_dataset(uri: str, *, vector: bool = True, inverted: bool = False, appended: tuple[int, ...] = (100, 50)):
    """pylance: 600 rows, a BTREE on id (+ IVF_PQ on vec, + INVERTED on text), then appended fragments."""
    import lance

    ds = lance.write_dataset(rows(0, 600), uri, max_rows_per_file=300)
    ds.create_scalar_index("id", "BTREE")
    if vector:
        ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    if inverted:
        ds.create_scalar_index("text", "INVERTED")
    lo = 600
    for n in appended:
        ds = lance.write_dataset(rows(lo, lo + n), uri, mode="append")
        lo += n
    return lance.dataset(uri)


def unindexed(uri: str) -> dict[str, int]:
    import lance

    ds = lance.dataset(uri)
    return {i["name"]: ds.stats.index_stats(i["name"])["num_unindexed_rows"] for i in ds.list_indices()}


# -- health (item 3) -------------------------------------------------------------------------------
def test_health_reports_unindexed_rows_and_percent(tmp_path):
    import lance_ops
    from lance_ops.maintenance.health import dataset_health
    from lance_ops_airflow.operators import LanceHealthOperator

    uri = str(tmp_path / "h.lance")
    indexed_dataset(uri)
    assert unindexed(uri) == {"id_idx": 150, "vec_idx": 150}
    report = dataset_health(lance_ops.dataset(uri)).to_dict()
    cov = {c["name"]: c for c in report["index_coverage"]}
    assert set(cov) == {"id_idx", "vec_idx"}
    for name, kind in (("id_idx", "BTREE"), ("vec_idx", "IVF_PQ")):
        assert cov[name]["kind"] == kind
        assert (cov[name]["indexed_rows"], cov[name]["unindexed_rows"], cov[name]["unindexed_fragments"]) == (600, 150, 2)
        assert cov[name]["unindexed_pct"] == pytest.approx(20.0)
    op = LanceHealthOperator(task_id="health", dataset_uri=uri)
    out = op.execute(context())
    assert out["metrics"]["max_unindexed_pct"] == pytest.approx(20.0)
    assert sorted(out["metrics"]["indices_with_unindexed_rows"]) == ["id_idx", "vec_idx"]
    assert [c["unindexed_rows"] for c in out["metrics"]["index_coverage"]] == [150, 150]


# -- the operator ----------------------------------------------------------------------------------
def test_operator_updates_reports_unsupported_kinds_and_skips_with_reasons(tmp_path, capfd):
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from lance_ops_airflow.operators import LanceOptimizeIndicesOperator

    plain = str(tmp_path / "plain.lance")
    import lance

    lance.write_dataset(rows(0, 10), plain)
    with pytest.raises(AirflowSkipException, match="the dataset has no index"):
        LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=plain).execute(context())

    uri = str(tmp_path / "inv.lance")
    indexed_dataset(uri, vector=False, inverted=True)
    assert unindexed(uri) == {"id_idx": 150, "text_idx": 150}
    # below the threshold: 20 % unindexed is not more than 25 %
    with pytest.raises(AirflowSkipException, match=r"at most 20.0% \(index id_idx\) <= 25%"):
        LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri, unindexed_rows_threshold_pct=25).execute(context())
    # named explicitly: the INVERTED index is refused and the task fails, nothing written
    with pytest.raises(AirflowFailException, match="text_idx"):
        LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri, index_names=["text_idx"]).execute(context())
    assert lance.dataset(uri).version == 5  # write, 2 indices, 2 appends
    # not named: INVERTED is reported and skipped, the BTREE is brought up to date
    out = LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri, unindexed_rows_threshold_pct=10).execute(context())
    assert out["changed"] and out["version"] == 6 and out["metrics"]["updated"] == ["id_idx"]
    assert list(out["metrics"]["skipped_indices"]) == ["text_idx"]
    assert "INVERTED" in out["metrics"]["skipped_indices"]["text_idx"]
    logged = capfd.readouterr()
    assert "index text_idx (INVERTED) skipped: kind INVERTED cannot be brought up to date" in logged.out + logged.err
    assert unindexed(uri) == {"id_idx": 0, "text_idx": 150}
    assert lance.dataset(uri).to_table(filter="id >= 590 AND id < 610")["id"].to_pylist() == list(range(590, 610))
    # only the INVERTED index has work left: skipped with its reason; with it excluded, coverage is complete
    with pytest.raises(AirflowSkipException, match=r"no index lance_ops can update has unindexed rows \(skipped: "
                                                   r"text_idx \(INVERTED\)\)"):
        LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri).execute(context())
    with pytest.raises(AirflowSkipException, match="coverage is already complete: every index covers every live "
                                                   r"fragment \(id_idx\)"):
        LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri, index_names="id_idx").execute(context())
    # in a DAG: the reason is the XCom's, the task succeeds
    op = LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri, index_names=["id_idx"],
                                      skip_when_nothing_to_do=False)
    out = op.execute(context())
    assert not out["changed"] and out["reason"].startswith("coverage is already complete")
    with pytest.raises(AirflowSkipException, match="turned off"):
        LanceOptimizeIndicesOperator(task_id="oi", dataset_uri=uri, enabled=False).execute(context())


# -- the sensor ------------------------------------------------------------------------------------
def test_unindexed_rows_sensor_fires_above_threshold(tmp_path):
    import time

    import lance

    from lance_ops_airflow.sensors import LanceUnindexedRowsSensor, LanceUnindexedRowsTrigger

    uri = str(tmp_path / "s.lance")
    ds = lance.write_dataset(rows(0, 600), uri)
    s = LanceUnindexedRowsSensor(task_id="u", dataset_uri=uri, threshold_pct=10)
    assert s.poke(context()) is False  # no index: never fires
    ds.create_scalar_index("id", "BTREE")
    assert s.poke(context()) is False  # complete coverage
    lance.write_dataset(rows(600, 650), uri, mode="append")  # 50 / 650 = 7.7 %
    assert s.poke(context()) is False
    lance.write_dataset(rows(650, 750), uri, mode="append")  # 150 / 750 = 20 %
    got = s.poke(context())
    assert got.is_done and got.xcom_value["over"] == ["id_idx"]
    assert got.xcom_value["indices"][0]["unindexed_rows"] == 150 and got.xcom_value["indices"][0]["unindexed_pct"] == 20.0
    assert got.xcom_value["reasons"] == ["unindexed rows above 10%: id_idx (BTREE) 150 rows, 20.0%"]
    high = LanceUnindexedRowsSensor(task_id="u", dataset_uri=uri, threshold_pct="25")
    assert high.poke(context()) is False
    assert LanceUnindexedRowsSensor(task_id="u", dataset_uri=uri, index_names=["nope"]).poke(context()) is False
    with pytest.raises(ValueError, match="between 0 and 100"):
        LanceUnindexedRowsSensor(task_id="u", dataset_uri=uri, threshold_pct=120).poke(context())

    # deferrable: fires on the first check, else a trigger that times out / fires; serializable
    d = LanceUnindexedRowsSensor(task_id="u", dataset_uri=uri, threshold_pct=10, deferrable=True, timeout=0)
    assert d.execute(context())["over"] == ["id_idx"]
    trig = LanceUnindexedRowsTrigger(dataset_uri=uri, threshold_pct=25, index_names=["id_idx"], poll_interval=0.1,
                                     deadline=time.time() + 0.4)
    classpath, kwargs = trig.serialize()
    json.dumps(kwargs)
    assert classpath == "lance_ops_airflow.sensors.triggers.LanceUnindexedRowsTrigger"
    event = _first_event(LanceUnindexedRowsTrigger(**kwargs))
    assert event["status"] == "timeout" and event["last"]["indices"][0]["unindexed_pct"] == 20.0
    event = _first_event(LanceUnindexedRowsTrigger(**{**kwargs, "threshold_pct": 15.0}))
    assert event["status"] == "success" and event["result"]["over"] == ["id_idx"]


def test_maintenance_sensor_counts_unindexed_rows(tmp_path):
    from lance_ops_airflow.sensors import LanceMaintenanceNeededSensor

    uri = str(tmp_path / "m.lance")
    indexed_dataset(uri, vector=False)
    kw = dict(task_id="mn", dataset_uri=uri, small_fragments_threshold=None, deleted_ratio_threshold=None,
              versions_to_clean_threshold=None)
    assert LanceMaintenanceNeededSensor(**kw).poke(context()) is False  # not asked: no reason
    assert LanceMaintenanceNeededSensor(**kw, unindexed_rows_threshold_pct=30).poke(context()) is False
    got = LanceMaintenanceNeededSensor(**kw, unindexed_rows_threshold_pct="0").poke(context())
    assert got.is_done and got.xcom_value["reasons"] == ["unindexed rows above 0%: id_idx (BTREE) 150 rows, 20.0%"]


# -- a real lance_maintenance run ------------------------------------------------------------------
@pytest.mark.slow
def test_maintenance_dag_brings_btree_and_ivf_pq_up_to_date(airflow_runner, tmp_path, capfd):
    import lance

    from tests.airflow.test_dag_runs import log_messages

    uri = str(tmp_path / "idx.lance")
    indexed_dataset(uri)
    assert unindexed(uri) == {"id_idx": 150, "vec_idx": 150}
    query = rows(0, 1)["vec"][0].values.to_numpy()
    conf = {"dataset_uri": uri, "target_rows_per_fragment": 10, "small_fragments_threshold": None,
            "deleted_ratio_threshold": None, "versions_to_clean_threshold": None, "unindexed_rows_threshold_pct": 5,
            "index_spark_threshold_rows": 0}  # the first run's upkeep goes through the Spark job (spark-submit)
    res = airflow_runner.run("lance_maintenance", conf)
    out = capfd.readouterr()
    logs = log_messages(out.out + out.err)
    res.assert_success(skipped=("compaction.spark_rewrite",))
    assert unindexed(uri) == {"id_idx": 0, "vec_idx": 0}
    x = res.xcoms["optimize_indices"]
    assert x["changed"] and sorted(x["metrics"]["updated"]) == ["id_idx", "vec_idx"]
    assert x["metrics"]["engine"] == "spark" and x["metrics"]["upkeep"]["committed"]
    assert x["metrics"]["upkeep"]["staged_key"] == x["idempotency_key"]
    assert x["metrics"]["unindexed_rows_before"] == 300 and x["metrics"]["unindexed_rows_after"] == 0
    assert "Lance optimize_indices: changed the dataset, now at version 6" in logs
    # the health step after it sees complete coverage
    assert res.xcoms["health"]["metrics"]["indices_with_unindexed_rows"] == []
    assert res.xcoms["health"]["metrics"]["max_unindexed_pct"] == 0
    ds = lance.dataset(uri)
    assert ds.to_table(filter="id >= 640 AND id < 660")["id"].to_pylist() == list(range(640, 660))
    near = ds.to_table(nearest={"column": "vec", "q": query, "k": 5, "nprobes": 2})
    assert len(near) == 5 and 0 in near["id"].to_pylist()

    # second run (made needed by deletions): coverage is complete, the step says so and succeeds
    ds.delete("id % 10 = 0")
    res = airflow_runner.run("lance_maintenance", {**conf, "deleted_ratio_threshold": 0.05,
                                                   "materialize_deletions_threshold": 1})
    out = capfd.readouterr()
    logs = log_messages(out.out + out.err)
    res.assert_success(skipped=("compaction.spark_rewrite",))
    reason = "coverage is already complete: every index covers every live fragment (id_idx, vec_idx)"
    assert f"skipped: {reason}" in logs
    assert res.xcoms["optimize_indices"]["reason"] == reason and not res.xcoms["optimize_indices"]["changed"]
    assert unindexed(uri) == {"id_idx": 0, "vec_idx": 0}
