"""The DAGs run for real: dag.test() on local datasets, one DAG on S3 (moto_server), a commit that
lands before its task fails, and deferrable sensors whose triggers run inline. Results are read
back with lance_ops and pylance. ``lance_ingest`` (Spark stage, commit, asset events, the
downstream DAG) and ``lance_compaction`` (dry run, then the Spark route) run in
tests/spark/test_standalone_cluster.py, on a standalone cluster: the same DAG runs, once.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

pytestmark = pytest.mark.slow


def table(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "name": [f"n{i}" for i in range(lo, hi)]})


def write_fragments(uri: str, sizes: list[int], storage_options=None):
    import lance_ops

    lo = 0
    for i, n in enumerate(sizes):
        lance_ops.write_dataset(table(lo, lo + n), uri, mode="append" if i else "create",
                                storage_options=storage_options)
        lo += n
    return lance_ops.dataset(uri, storage_options=storage_options)


def log_messages(output: str) -> list[str]:
    """The messages of the task log lines in dag.test()'s output (structlog console format),
    leading spaces kept (the summary's alignment)."""
    out = []
    for line in output.splitlines():
        m = re.search(r"\[(?:info|warning|error)\s*\] (.*?)\s+\[[\w.]+\]\s+loc=\S+$", line)
        if m:
            out.append(m.group(1))
    return out


def pylance_ids(uri: str, storage_options=None) -> list[int]:
    import lance

    return sorted(lance.dataset(uri, storage_options=storage_options).to_table(columns=["id"])["id"].to_pylist())


def ops_ids(uri: str, storage_options=None) -> list[int]:
    import lance_ops

    return sorted(lance_ops.dataset(uri, storage_options=storage_options).to_table(columns=["id"])["id"].to_pylist())


# -- lance_maintenance ------------------------------------------------------------------------------
def test_maintenance_dag_compacts_materializes_and_cleans(airflow_runner, tmp_path, capfd):
    import lance_ops

    uri = str(tmp_path / "events.lance")
    ds = write_fragments(uri, [600] + [50] * 10)  # one big fragment, ten small ones
    ds.delete("id < 600 AND id % 4 = 0")  # 25 % of the big fragment
    expected = [i for i in range(1100) if not (i < 600 and i % 4 == 0)]
    before = lance_ops.dataset(uri)
    assert len(before.get_fragments()) == 11 and before.version == 12

    res = airflow_runner.run("lance_maintenance", {
        "dataset_uri": uri, "target_rows_per_fragment": 500, "small_fragments_threshold": 5,
        "materialize_deletions_threshold": 0.2, "cleanup_older_than": "0s",
    })
    out = capfd.readouterr()
    logs = log_messages(out.out + out.err)
    res.assert_success(skipped=("compaction.spark_rewrite",))
    # task logs (issue 21, item 4): a short aligned summary per task, the JSON only in XCom; skips say why
    assert "skipped: compaction plan route is 'in_process': no Spark rewrite needed (the plan task compacted " \
           "in-process or found nothing to compact)" in logs
    at = logs.index("Lance compaction: changed the dataset, now at version 13")
    summary = logs[at:at + 7]
    assert summary[1] == f"  dataset  {uri}"
    labels = [line[2:11] for line in summary[1:]]
    assert labels == ["dataset  ", "rows     ", "files    ", "bytes    ", "seconds  ", "XCom     "], summary
    assert "rows_written=500" in summary[2] and "fragments_removed=10" in summary[3]
    assert re.fullmatch(r"  seconds  task=\d+\.\d\d .*", summary[5])
    assert "Lance cleanup: changed the dataset, now at version 14" in logs
    assert not any(line.startswith("result: {") for line in logs)  # no long JSON line (it is the XCom)
    x = res.xcoms
    assert x["maintenance_needed"]["reasons"] and x["maintenance_needed"]["health"]["small_fragments"] == 10
    assert x["compaction.plan"]["route"] == "in_process"
    assert x["compaction.commit"]["metrics"]["fragments_removed"] == 10
    assert x["materialize_deletions"]["changed"] and x["materialize_deletions"]["metrics"]["fragments_removed"] == 1
    assert x["cleanup"]["metrics"]["old_versions"] == 13

    after = lance_ops.dataset(uri)
    assert after.version == 14
    assert [v["version"] for v in after.versions()] == [14]
    frags = after.get_fragments()
    assert len(frags) == 2 and not any(f.metadata.HasField("deletion_file") for f in frags)
    assert ops_ids(uri) == expected
    assert pylance_ids(uri) == expected  # the oracle reads what the DAG left


def test_maintenance_dag_without_a_dataset_creates_no_run(airflow_runner):
    """No LANCE_OPS_DATASET_URI (the tests' environment): the DAG has no schedule, so unpausing it
    creates no runs, and a run without dataset_uri is refused before it exists (issue 21, item 3)."""
    from airflow.models.dagrun import DagRun
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.utils.session import create_session

    def runs() -> int:
        with create_session() as session:
            return session.query(DagRun).filter(DagRun.dag_id == "lance_maintenance").count()

    dag = airflow_runner.dag("lance_maintenance")
    assert dag.schedule is None and not dag.timetable.can_be_scheduled
    before = runs()
    with pytest.raises(ParamValidationError, match="Invalid input for param dataset_uri: No value passed"):
        dag.test(run_conf={})
    assert runs() == before


def test_maintenance_dag_healthy_dataset_skips(airflow_runner, tmp_path, capfd):
    """The sensor defers, its trigger (run inline by dag.test) times out, soft_fail skips the run."""
    import lance_ops

    uri = str(tmp_path / "healthy.lance")
    write_fragments(uri, [100])
    t0 = time.monotonic()
    res = airflow_runner.run("lance_maintenance", {"dataset_uri": uri, "sensor_timeout": "1s"})
    out = capfd.readouterr()
    logs = log_messages(out.out + out.err)
    assert res.state == "success"
    assert set(res.task_states.values()) == {"skipped"}, res.task_states
    # every skip logs its reason: the sensor's (nothing reached a threshold) and the report's
    assert any(line.startswith("skipped: ") and "(soft_fail: the run's later steps are skipped too)" in line
               for line in logs), logs[-30:]
    assert "skipped: no maintenance step ran (the sensor found nothing to do and skipped the run)" in logs
    assert time.monotonic() - t0 < 60
    assert lance_ops.dataset(uri).version == 1


def test_maintenance_dag_on_s3(airflow_runner, moto_server, s3_bucket, monkeypatch):
    """Credentials and endpoint come from the connection; the DAG names the dataset relatively."""
    import lance_ops

    monkeypatch.setenv("AIRFLOW_CONN_LANCE_S3", json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"endpoint_url": moto_server.endpoint, "region_name": "us-east-1", "allow_http": True,
                  "base_uri": s3_bucket},
    }))
    opts = moto_server.storage_options
    uri = f"{s3_bucket}/events.lance"
    ds = write_fragments(uri, [40] * 6, storage_options=opts)
    ds.delete("id >= 200")
    res = airflow_runner.run("lance_maintenance", {
        "dataset_uri": "events.lance", "lance_conn_id": "lance_s3", "target_rows_per_fragment": 1000,
        "small_fragments_threshold": 3, "cleanup_older_than": "0s",
    })
    res.assert_success(skipped=("compaction.spark_rewrite",))
    assert res.xcoms["compaction.commit"]["uri"] == uri
    after = lance_ops.dataset(uri, storage_options=opts)
    assert len(after.get_fragments()) == 1 and len(after.versions()) == 1
    assert ops_ids(uri, opts) == list(range(200))
    assert pylance_ids(uri, opts) == list(range(200))
    # no secret leaked into XComs
    assert "testing" not in json.dumps(res.xcoms).replace("test-", "")


# -- a commit that lands, then its task fails: the retry must not commit again --------------------
def test_retry_after_landed_commit_commits_once(airflow_runner, tmp_path, monkeypatch):
    import lance_ops
    from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY

    uri = str(tmp_path / "retry.lance")
    write_fragments(uri, [100])
    flags = tmp_path / "flags"
    flags.mkdir()
    for task_id in ("append", "commit", "delete"):
        (flags / f"{task_id}.fail").touch()
    monkeypatch.setenv("LANCE_OPS_TEST_FLAG_DIR", str(flags))

    res = airflow_runner.run("lance_test_retry", {"dataset_uri": uri})
    res.assert_success()
    assert not list(flags.iterdir()), "every injected failure fired"
    assert res.tries == {"append": 2, "stage": 1, "commit": 2, "delete": 2}
    for task_id in ("append", "commit", "delete"):
        assert res.xcoms[task_id]["already_committed"] is True, res.xcoms[task_id]

    ds = lance_ops.dataset(uri)
    assert ds.version == 4, "exactly one new version per committing task"
    ids = ops_ids(uri)
    assert ids == list(range(5, 100)) + list(range(1000, 1010)) + list(range(2000, 2007))
    assert pylance_ids(uri) == ids
    keys = [lance_ops.dataset(uri, version=v).transaction.transaction_properties.get(IDEMPOTENCY_KEY)
            for v in (2, 3, 4)]
    assert all(k and k.startswith("airflow_lance_test_retry_") for k in keys) and len(set(keys)) == 3


# -- deferrable sensors ------------------------------------------------------------------------------
def test_deferrable_sensors_wait_and_skip(airflow_runner, tmp_path, capfd, monkeypatch):
    """The tag sensor finds no tag on its first check and defers (the test DAG's sensor touches a flag
    file as it defers); only then does another thread create the tag, so the success comes from the
    trigger polling inline in dag.test, after waiting."""
    import lance_ops

    uri = str(tmp_path / "tagged.lance")
    healthy = str(tmp_path / "healthy.lance")
    write_fragments(uri, [10, 10])
    write_fragments(healthy, [10])
    flags = tmp_path / "flags"
    flags.mkdir()
    monkeypatch.setenv("LANCE_OPS_TEST_FLAG_DIR", str(flags))
    seen: dict[str, float] = {}
    run_over = threading.Event()

    def tag_once_deferred():
        while not run_over.is_set():
            if (flags / "wait_for_tag.deferred").exists():
                seen["deferred"] = time.monotonic()
                time.sleep(1.0)  # two poke intervals: the trigger checks (and misses) at least once more
                lance_ops.dataset(uri).tags.create("ready", 1)
                seen["tagged"] = time.monotonic()
                return
            time.sleep(0.1)

    thread = threading.Thread(target=tag_once_deferred)
    thread.start()
    try:
        res = airflow_runner.run("lance_test_sensors", {"dataset_uri": uri, "healthy_uri": healthy})
    finally:
        run_over.set()
        thread.join()
    out = capfd.readouterr()
    logs = log_messages(out.out + out.err)
    assert "tagged" in seen, "the tag sensor never deferred"
    assert res.state == "success"
    assert res.task_states == {"wait_for_tag": "success", "healthy_skips": "skipped"}
    assert res.xcoms["wait_for_tag"]["tag"] == "ready" and res.xcoms["wait_for_tag"]["version"] == 1
    # it waited: the first check found no tag, and it never succeeded on a first check
    assert any(line.startswith("condition not met ({'baseline_version': None, 'tag': 'ready'})") for line in logs), \
        logs[-30:]
    assert not any(line.startswith("condition met on the first check") for line in logs), logs[-30:]
