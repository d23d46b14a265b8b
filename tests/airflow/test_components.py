"""Hook, keys, lineage, operators (executed with a minimal context), sensors and triggers.

These run the operator/sensor code directly (no scheduler); the DAG-level behaviour is in
test_dag_runs.py.
"""
from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest


@pytest.fixture(autouse=True)
def _airflow(airflow_home):
    yield


# -- a minimal task context -----------------------------------------------------------------------
@dataclass
class FakeTI:
    dag_id: str = "dag"
    run_id: str = "manual__2024-01-01T00:00:00+00:00"
    task_id: str = "task"
    map_index: int = -1
    try_number: int = 1
    xcoms: dict = field(default_factory=dict)

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.xcoms.get(task_ids)


class _Event:
    def __init__(self):
        self.extra = {}
        self.added = []

    def add(self, asset, extra=None):
        self.added.append((asset, dict(extra or {})))


class FakeOutletEvents(dict):
    def __getitem__(self, key):
        name = key if isinstance(key, str) else (getattr(key, "uri", None) or getattr(key, "name"))
        if name not in self:
            super().__setitem__(name, _Event())
        return super().__getitem__(name)


def context(**ti_kwargs):
    return {"ti": FakeTI(**ti_kwargs), "outlet_events": FakeOutletEvents(), "params": {}}


def make_dataset(uri, n_frags=3, rows=10, start=0):
    import lance_ops

    for i in range(n_frags):
        lo = start + i * rows
        lance_ops.write_dataset(pa.table({"id": pa.array(range(lo, lo + rows), pa.int64()),
                                          "v": [f"r{j}" for j in range(lo, lo + rows)]}),
                                uri, mode="append" if i else "create")
    return lance_ops.dataset(uri)


# -- hook -------------------------------------------------------------------------------------------
def test_hook_local_and_connection(monkeypatch, tmp_path):
    from lance_ops_airflow.operators.hooks import LanceHook

    uri, opts = LanceHook(None).resolve(str(tmp_path / "a.lance"))
    assert uri == str(tmp_path / "a.lance") and opts == {}
    assert LanceHook("None").lance_conn_id is None  # a rendered empty template
    monkeypatch.chdir(tmp_path)
    assert LanceHook(None).resolve_uri("rel.lance") == str(tmp_path / "rel.lance")
    with pytest.raises(ValueError):
        LanceHook(None).resolve_uri("")

    monkeypatch.setenv("AIRFLOW_CONN_LANCE_UNIT", json.dumps({
        "conn_type": "aws", "login": "AKIDTEST", "password": "s3cr3t",
        "extra": {"endpoint_url": "http://127.0.0.1:9999", "region_name": "eu-west-1",
                  "base_uri": "s3://bucket/lake", "storage_options": {"aws_virtual_hosted_style_request": "false"}},
    }))
    hook = LanceHook("lance_unit")
    uri, opts = hook.resolve("events.lance")
    assert uri == "s3://bucket/lake/events.lance"
    assert hook.resolve_uri("s3://other/x.lance") == "s3://other/x.lance"
    assert opts == {"aws_access_key_id": "AKIDTEST", "aws_secret_access_key": "s3cr3t",
                    "endpoint": "http://127.0.0.1:9999", "region": "eu-west-1", "allow_http": "true",
                    "aws_virtual_hosted_style_request": "false"}
    args, env = hook.spark_arguments()
    assert env == {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    assert "s3cr3t" not in " ".join(args) and "AKIDTEST" not in " ".join(args)
    assert "endpoint=http://127.0.0.1:9999" in args and "region=eu-west-1" in args


def test_idempotency_key_ignores_try_number():
    from lance_ops_airflow.operators.base import idempotency_key

    first = idempotency_key(context(try_number=1))
    assert first == idempotency_key(context(try_number=2))
    assert first != idempotency_key(context(map_index=3))
    assert first != idempotency_key(context(run_id="manual__other"))
    assert first != idempotency_key(context(task_id="other"))
    assert idempotency_key(context(task_id="g.a"), "g") == idempotency_key(context(task_id="g.b"), "g")
    import re

    assert re.fullmatch(r"[A-Za-z0-9._=+-]+", first)


def test_asset_uri_and_openlineage_names(tmp_path):
    from lance_ops_airflow.operators.base import dataset_asset_uri, openlineage_names

    assert dataset_asset_uri("/data/x.lance") == "file:///data/x.lance"
    assert dataset_asset_uri("s3://b/k/x.lance/") == "s3://b/k/x.lance"
    assert openlineage_names("/data/x.lance") == ("file", "/data/x.lance")
    assert openlineage_names("file:///data/x.lance") == ("file", "/data/x.lance")
    assert openlineage_names("s3://bkt/a/b.lance") == ("s3://bkt", "a/b.lance")
    assert openlineage_names("s3+ddb://bkt/a.lance?ddbTableName=t") == ("s3://bkt", "a.lance")


def test_openlineage_facets(tmp_path):
    """With the OpenLineage provider (the test extra): the dataset is input and output, named per
    the OL spec; a dataset that cannot be opened leaves the schema facet out, never failing."""
    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset

    from lance_ops_airflow.operators import LanceDeleteOperator

    op = LanceDeleteOperator(task_id="d", dataset_uri=str(tmp_path / "x.lance"), predicate="id > 1")
    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage.outputs == [OutputDataset("file", str(tmp_path / "x.lance"), facets={}, outputFacets={})]
    assert lineage.inputs == [InputDataset("file", str(tmp_path / "x.lance"), facets={}, inputFacets={})]


def test_spark_arg_cleaning():
    from lance_ops_airflow.operators.spark import _clean_args

    assert _clean_args(["--format", "parquet", "--partitions", None, "--max-rows-per-file", "None",
                        "--path", "/x", "--mode", 3]) == ["--format", "parquet", "--path", "/x", "--mode", "3"]


# -- operators --------------------------------------------------------------------------------------
def test_append_operator_creates_in_the_version_asked(tmp_path):
    """``data_storage_version`` picks the format of a dataset the task creates; appends keep the
    dataset's own (pylance reads both)."""
    import lance

    from lance_ops.table.versions import DEFAULT
    from lance_ops_airflow.operators import LanceAppendOperator

    rows = [{"id": 1, "v": "a"}]
    for version, want in [("2.0", "2.0"), ("2.1", "2.1"), ("2.2", "2.2"), ("legacy", "0.1"), ("None", str(DEFAULT))]:
        uri = str(tmp_path / f"{version}.lance")
        op = LanceAppendOperator(task_id="create", dataset_uri=uri, data=rows, data_storage_version=version)
        assert op.execute(context(task_id="create"))["operation"] == "create"
        other = "2.1" if want == "2.0" else "2.0"  # asked for, and ignored: the dataset exists
        LanceAppendOperator(task_id="more", dataset_uri=uri, data=rows, data_storage_version=other).execute(
            context(task_id="more"))
        assert lance.dataset(uri).data_storage_version == want
        assert lance.dataset(uri).to_table().to_pylist() == rows * 2


def test_append_delete_retry_and_asset_events(tmp_path):
    import pyarrow.parquet as pq

    import lance_ops
    from airflow.sdk import Asset
    from lance_ops_airflow.operators import LanceAppendOperator, LanceDeleteOperator

    uri = str(tmp_path / "ds.lance")
    make_dataset(uri)
    # rows, a Parquet file and an Arrow IPC file
    op = LanceAppendOperator(task_id="append", dataset_uri=uri, data=[{"id": 100, "v": "a"}, {"id": 101, "v": "b"}])
    assert [o.uri for o in op.outlets if isinstance(o, Asset)] == ["file://" + uri]
    ctx = context(task_id="append")
    out = op.execute(ctx)
    assert out["version"] == 4 and out["changed"] and out["metrics"]["num_rows"] == 2
    assert ctx["outlet_events"]["file://" + uri].extra["version"] == 4
    again = op.execute(context(task_id="append", try_number=2))  # a retry: nothing new
    assert again["already_committed"] and again["version"] == 4
    assert lance_ops.dataset(uri).version == 4

    pq.write_table(pa.table({"id": pa.array([200, 201, 202], pa.int64()), "v": ["x", "y", "z"]}), tmp_path / "s.parquet")
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as sink:
        t = pa.table({"id": pa.array([300], pa.int64()), "v": ["w"]})
        with pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t)
    for i, name in enumerate(["s.parquet", "s.arrow"]):
        LanceAppendOperator(task_id=f"file{i}", dataset_uri=uri, source_path=str(tmp_path / name)).execute(
            context(task_id=f"file{i}"))
    assert lance_ops.dataset(uri).count_rows() == 30 + 2 + 3 + 1

    dry = LanceDeleteOperator(task_id="del", dataset_uri=uri, predicate="id >= 200", dry_run=True)
    res = dry.execute(context(task_id="del"))
    assert res["dry_run"] and res["metrics"]["num_rows_to_delete"] == 4 and not res["changed"]
    assert lance_ops.dataset(uri).count_rows() == 36

    templated = LanceDeleteOperator(task_id="del", dataset_uri="{{ params.dataset_uri }}", predicate="id >= 200")
    assert [o.name for o in templated.outlets] == ["lance_ops_datasets"]  # an AssetAlias
    templated.dataset_uri = uri  # what rendering does
    ctx = context(task_id="del")
    res = templated.execute(ctx)
    assert res["metrics"]["num_deleted_rows"] == 4 and res["changed"]
    (asset, extra), = ctx["outlet_events"]["lance_ops_datasets"].added
    assert asset.uri.rstrip("/") == "file://" + uri and extra["version"] == res["version"]
    assert extra["operation"] == "delete" and extra["metrics"]["num_deleted_rows"] == 4
    retry = templated.execute(context(task_id="del", try_number=2))
    assert retry["already_committed"] and retry["version"] == res["version"]
    assert lance_ops.dataset(uri).version == res["version"] and lance_ops.dataset(uri).count_rows() == 32


def test_maintenance_operators_in_process(tmp_path):
    import lance_ops
    from lance_ops_airflow.operators import (
        LanceCleanupOperator,
        LanceCompactionOperator,
        LanceMaterializeDeletionsOperator,
        LanceRebuildStatisticsOperator,
        LanceRefreshRowIdIndexOperator,
    )

    uri = str(tmp_path / "m.lance")
    ds = make_dataset(uri, n_frags=6, rows=20)
    ds.delete("id % 2 = 0 AND id < 20")  # half of fragment 0
    v0 = lance_ops.dataset(uri).version

    dry = LanceCompactionOperator(task_id="c", dataset_uri=uri, target_rows_per_fragment=100, dry_run=True)
    res = dry.execute(context(task_id="c"))
    assert res["route"] == "dry_run" and res["metrics"]["fragments_removed"] == 6
    assert lance_ops.dataset(uri).version == v0

    comp = LanceCompactionOperator(task_id="c", dataset_uri=uri, target_rows_per_fragment=100,
                                   spark_threshold_rows=10_000)
    res = comp.execute(context(task_id="c"))
    assert res["route"] == "in_process" and res["changed"] and res["version"] == v0 + 1
    assert len(lance_ops.dataset(uri).get_fragments()) == 1
    again = comp.execute(context(task_id="c", try_number=2))
    assert again["already_committed"] and again["version"] == v0 + 1
    noop = comp.execute(context(task_id="c2"))
    assert noop["route"] == "noop" and not noop["changed"]

    mat = LanceMaterializeDeletionsOperator(task_id="m", dataset_uri=uri, threshold=0.0, dry_run=True)
    assert not mat.execute(context(task_id="m"))["changed"]
    stats = LanceRebuildStatisticsOperator(task_id="s", dataset_uri=uri, force=True).execute(context(task_id="s"))
    assert stats["metrics"]["data_files"] == 1
    rowid = LanceRefreshRowIdIndexOperator(task_id="r", dataset_uri=uri).execute(context(task_id="r"))
    assert rowid["metrics"].get("skipped")  # no stable row ids on this dataset

    dry = LanceCleanupOperator(task_id="k", dataset_uri=uri, older_than_seconds=0, dry_run=True).execute(context())
    assert dry["dry_run"] and dry["metrics"]["old_versions"] == v0 and not dry["changed"]
    assert len(lance_ops.dataset(uri).versions()) == v0 + 1
    done = LanceCleanupOperator(task_id="k", dataset_uri=uri, older_than_seconds=0).execute(context())
    assert done["changed"] and len(lance_ops.dataset(uri).versions()) == 1
    assert lance_ops.dataset(uri).count_rows() == 110


def test_compaction_routes_big_plans_to_spark_task(tmp_path):
    import lance_ops
    from lance_ops_airflow.operators import LanceCompactionOperator

    uri = str(tmp_path / "b.lance")
    make_dataset(uri, n_frags=4, rows=10)
    op = LanceCompactionOperator(task_id="g.plan", dataset_uri=uri, target_rows_per_fragment=100,
                                 spark_threshold_rows=5, spark_task_id="g.spark_rewrite", idempotency_scope="g")
    res = op.execute(context(task_id="g.plan"))
    assert res["route"] == "spark" and not res["changed"]
    plan_file = res["plan_file"]
    assert plan_file.endswith(".plan.json") and "/_staging/" in plan_file
    from lance_ops.maintenance.compaction import CompactionPlan

    plan = CompactionPlan.from_json(Path(plan_file.replace("file://", "")).read_bytes())
    assert plan.read_version == 4 and len(plan.tasks) == 1
    assert lance_ops.dataset(uri).version == 4
    # standalone (no Spark task after it) the operator compacts in-process whatever the size
    alone = LanceCompactionOperator(task_id="alone", dataset_uri=uri, target_rows_per_fragment=100,
                                    spark_threshold_rows=5)
    res = alone.execute(context(task_id="alone"))
    assert res["route"] == "in_process" and res["version"] == 5 and len(lance_ops.dataset(uri).get_fragments()) == 1


# -- sensors and triggers ---------------------------------------------------------------------------
def test_sensor_pokes(tmp_path):
    from lance_ops_airflow.sensors import LanceMaintenanceNeededSensor, LanceNewVersionSensor

    uri = str(tmp_path / "s.lance")
    s = LanceNewVersionSensor(task_id="nv", dataset_uri=uri, baseline_version=2)
    assert s.poke(context()) is False  # no dataset yet
    make_dataset(uri, n_frags=2)
    assert s.poke(context()) is False
    make_dataset(str(tmp_path / "other.lance"))
    import lance_ops

    lance_ops.write_dataset(pa.table({"id": pa.array([99], pa.int64()), "v": ["x"]}), uri, mode="append")
    got = s.poke(context())
    assert got.is_done and got.xcom_value["version"] == 3

    m = LanceMaintenanceNeededSensor(task_id="mn", dataset_uri=uri, small_fragments_threshold=5,
                                     deleted_ratio_threshold=None, versions_to_clean_threshold=None)
    assert m.poke(context()) is False
    m.small_fragments_threshold = 3
    got = m.poke(context())
    assert got.is_done and got.xcom_value["health"]["small_fragments"] == 3 and got.xcom_value["reasons"]


def test_trigger_serialization_round_trip():
    from airflow.sdk._shared.module_loading import import_string

    from lance_ops_airflow.sensors.triggers import LanceMaintenanceNeededTrigger, LanceNewVersionTrigger

    for trig in (LanceNewVersionTrigger(dataset_uri="/x", lance_conn_id="c", baseline_version=3, tag="t",
                                        poll_interval=5, deadline=123.0),
                 LanceMaintenanceNeededTrigger(dataset_uri="/x", thresholds={"small_fragments_threshold": 4},
                                               poll_interval=5, deadline=None)):
        classpath, kwargs = trig.serialize()
        json.dumps(kwargs)
        again = import_string(classpath)(**kwargs)
        assert again.serialize() == (classpath, kwargs)


def _first_event(trigger, timeout=30):
    async def go():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(go(), timeout))


def test_triggers_fire_time_out_and_report_errors(tmp_path):
    import lance_ops
    from lance_ops_airflow.sensors.triggers import LanceMaintenanceNeededTrigger, LanceNewVersionTrigger

    uri = str(tmp_path / "t.lance")
    make_dataset(uri, n_frags=1)

    def append_later():
        time.sleep(1.0)
        lance_ops.write_dataset(pa.table({"id": pa.array([5], pa.int64()), "v": ["x"]}), uri, mode="append")

    thread = threading.Thread(target=append_later)
    thread.start()
    t0 = time.monotonic()
    event = _first_event(LanceNewVersionTrigger(dataset_uri=uri, baseline_version=1, poll_interval=0.2,
                                                deadline=time.time() + 30))
    thread.join()
    assert event["status"] == "success" and event["result"]["version"] == 2
    assert time.monotonic() - t0 >= 0.9

    event = _first_event(LanceMaintenanceNeededTrigger(dataset_uri=uri, thresholds={"small_fragments_threshold": 50},
                                                       poll_interval=0.2, deadline=time.time() + 0.6))
    assert event["status"] == "timeout" and event["last"]["health"]["fragments"] == 2

    event = _first_event(LanceNewVersionTrigger(dataset_uri="gs://nope/x.lance", poll_interval=0.05, max_errors=2))
    assert event["status"] == "error" and "gs://" in event["message"]


def test_on_kill_and_result_trimming(tmp_path):
    from airflow.sdk.exceptions import AirflowException

    from lance_ops_airflow.operators import LanceCompactionOperator, LanceDeleteOperator
    from lance_ops_airflow.operators.base import trim_lists

    op = LanceCompactionOperator(task_id="c", dataset_uri=str(tmp_path / "x.lance"))
    op.on_kill()
    with pytest.raises(AirflowException):
        op.check_cancelled()  # nothing is committed after a kill

    uri = str(tmp_path / "k.lance")
    make_dataset(uri, n_frags=1)
    killed = LanceDeleteOperator(task_id="d", dataset_uri=uri, predicate="id > 3")
    killed.on_kill()
    with pytest.raises(AirflowException):
        killed.execute(context(task_id="d"))
    import lance_ops

    assert lance_ops.dataset(uri).version == 1

    assert trim_lists({"a": list(range(60)), "b": [{"c": list(range(3))}]}, 50) == {
        "a": list(range(50)) + ["... 10 more"], "b": [{"c": [0, 1, 2]}]}


def test_append_operator_on_s3(moto_server, s3_bucket, monkeypatch):
    """Connection-resolved S3 dataset, Parquet source on S3 read with the same credentials."""
    import io

    import pyarrow.parquet as pq

    import lance_ops
    from lance_ops_airflow.operators import LanceAppendOperator

    monkeypatch.setenv("AIRFLOW_CONN_LANCE_S3_UNIT", json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"endpoint_url": moto_server.endpoint, "region_name": "us-east-1", "base_uri": s3_bucket},
    }))
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(5), pa.int64()), "v": list("abcde")}), buf)
    bucket = s3_bucket[len("s3://"):]
    moto_server.client().put_object(Bucket=bucket, Key="raw/x.parquet", Body=buf.getvalue())

    op = LanceAppendOperator(task_id="a", dataset_uri="ds.lance", lance_conn_id="lance_s3_unit",
                             source_path=f"{s3_bucket}/raw/x.parquet")
    out = op.execute(context(task_id="a"))
    assert out["uri"] == f"{s3_bucket}/ds.lance" and out["version"] == 1 and out["operation"] == "create"
    assert "testing" not in json.dumps(out)
    ds = lance_ops.dataset(f"{s3_bucket}/ds.lance", storage_options=moto_server.storage_options)
    assert ds.to_table()["v"].to_pylist() == list("abcde")

