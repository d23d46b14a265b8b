"""Spark beyond local mode (issue 21, item 7): a standalone cluster on 127.0.0.1 runs the DAGs.

One master and two workers (``spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``,
one core and 1 GB each) start in their own process groups; once both workers are registered
(the master's ``/json``), ``lance_ingest`` and ``lance_compaction`` run for real (``dag.test()``)
with ``spark_default`` pointing at ``spark://127.0.0.1:<port>``, so SparkSubmitOperator submits
to the cluster in client mode and the executors run in the workers' JVMs. The rows are read back
with pylance, and each worker's work directory must show an executor of both applications.
These are also the suite's runs of both DAGs' Spark paths (tests/airflow/test_dag_runs.py has
none): the ingest is staged, then committed by its own task, emits its asset events and triggers
``lance_ingest_downstream``; the compaction runs a dry run first, then the Spark route, and leaves
no hand-off file. (``local[2]`` submits still run in tests/airflow/test_upsert.py and
test_error_classification.py.) The cluster is torn down whatever happens: every process group is
killed, so no JVM outlives the test.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.spark._support import BIN, have_spark, spark_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not have_spark(), reason="pyspark and a JVM are needed")]

#: how long the cluster may take to come up (JVM starts on a loaded machine)
START_TIMEOUT = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _master_state(webui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as resp:
        return json.loads(resp.read())


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of group ``pgid`` is left (from /proc where there is one)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # (state, ppid, pgrp, ...)
            return True
    return False


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group (the daemon JVM, its executors and their Python workers), then
    SIGKILL whatever is left after a few seconds; the daemon itself is reaped."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _group_alive(proc.pid):
            proc.poll()
            time.sleep(0.1)
        if not _group_alive(proc.pid):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - reported by the test's leak check
        pass


@contextmanager
def standalone_cluster(root: Path, groups: list[int], workers: int = 2) -> Iterator[tuple[str, int, list[Path]]]:
    """A master and ``workers`` workers on 127.0.0.1; yields (master URL, web UI port, work dirs).
    The process group of each daemon is appended to ``groups`` (all are gone after the block)."""
    env = spark_env({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
                     "SPARK_DAEMON_MEMORY": "256m", "SPARK_NO_DAEMONIZE": "1"})
    spark_class = str(BIN / "spark-class")
    port, webui = _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> None:
        log = open(root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([spark_class, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(root)))
        groups.append(procs[-1].pid)  # start_new_session: the pid is the group id
        log.close()  # the child holds its own descriptor

    work_dirs = [root / f"worker{i}" for i in range(workers)]
    try:
        start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(webui)])
        for i, work in enumerate(work_dirs):
            work.mkdir()
            start(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                                 "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                                 "--webui-port", str(_free_port())])
        deadline = time.monotonic() + START_TIMEOUT
        alive = 0
        while time.monotonic() < deadline:
            dead = [p.args[1] for p in procs if p.poll() is not None]
            if dead:
                break
            try:
                alive = sum(1 for w in _master_state(webui).get("workers", []) if w.get("state") == "ALIVE")
            except OSError:
                alive = 0
            if alive == workers:
                break
            time.sleep(0.5)
        if alive != workers:
            logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(root.glob("*.log")))
            pytest.fail(f"the standalone cluster did not come up: {alive}/{workers} workers alive\n{logs}")
        yield master_url, webui, work_dirs
    finally:
        for proc in reversed(procs):  # workers (and their executors) first, then the master
            _kill_group(proc)


def _table(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "name": [f"n{i}" for i in range(lo, hi)]})


def _asset_events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.uri.in_([uri, uri + "/"])).order_by(AssetEvent.id).all())
        return [dict(r.extra or {}) for r in rows]


def test_dags_run_on_a_standalone_cluster(airflow_runner, tmp_path, monkeypatch):
    import lance

    import lance_ops

    conf_dir = tmp_path / "spark-conf"  # small executors: two of them fit next to everything else
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\nspark.driver.memory 512m\nspark.ui.enabled false\n")
    src = tmp_path / "raw"
    src.mkdir()
    for i in range(2):
        pq.write_table(_table(i * 1000, i * 1000 + 1000), src / f"part-{i}.parquet")
    uri = str(tmp_path / "cluster.lance")

    groups: list[int] = []
    with standalone_cluster(tmp_path, groups) as (master_url, webui, work_dirs):
        host, port = master_url.rsplit(":", 1)
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": host,
                                                                     "port": int(port)}))
        monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))

        ingest = airflow_runner.run("lance_ingest", {"dataset_uri": uri, "source_path": str(src), "partitions": 2,
                                                     "data_storage_version": "2.1"})
        ingest.assert_success(skipped=("ingest.upsert",))
        summary = ingest.xcoms["ingest.spark_stage"]["summary"]
        assert summary["rows"] == 2000 and summary["committed"] is False  # stage only: the commit is its own task
        commit = ingest.xcoms["ingest.commit"]
        assert commit["version"] == 1 and commit["metrics"]["num_rows"] == 2000
        assert sorted(lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist()) == list(range(2000))
        ds = lance_ops.dataset(uri)
        assert ds.count_rows() == 2000 and len(ds.get_fragments()) == 2
        assert len(lance.dataset(uri).get_fragments()) == 2
        assert lance.dataset(uri).data_storage_version == "2.1"  # the DAG's Param reached the Spark job

        ingest_events = _asset_events("lance://ingest")
        assert ingest_events and ingest_events[-1]["uri"] == uri and ingest_events[-1]["version"] == 1
        assert ingest_events[-1]["operation"] in ("overwrite", "create", "append")
        dataset_events = _asset_events("file://" + uri)
        assert dataset_events and dataset_events[-1]["version"] == 1

        down = airflow_runner.run("lance_ingest_downstream", {})
        down.assert_success()
        assert down.xcoms["check_version"] == {"uri": uri, "version": 1, "latest_version": 1, "rows": 2000,
                                               "fragments": 2, "ingested_rows": 2000}

        dry = airflow_runner.run("lance_compaction", {"dataset_uri": uri, "target_rows": 2000, "dry_run": True})
        dry.assert_success(skipped=("compaction.spark_rewrite",))
        assert dry.xcoms["compaction.commit"]["route"] == "dry_run"
        assert dry.xcoms["compaction.commit"]["metrics"]["fragments_removed"] == 2
        assert lance_ops.dataset(uri).version == 1

        compact = airflow_runner.run("lance_compaction", {"dataset_uri": uri, "target_rows": 2000,
                                                          "spark_threshold_rows": 0})
        compact.assert_success()
        assert compact.xcoms["compaction.plan"]["route"] == "spark"
        commit = compact.xcoms["compaction.commit"]
        assert commit["route"] == "spark" and commit["version"] == 2 and commit["changed"]
        assert not list(Path(uri, "_staging").glob("*.plan.json"))  # the hand-off file is gone

        # both applications ran on the cluster, with an executor on each worker
        apps = _master_state(webui)["completedapps"]
        assert sorted(a["name"] for a in apps) == [f"lance-ops compact {uri}", f"lance-ops ingest {uri}"]
        app_ids = {a["id"] for a in apps}
        for work in work_dirs:
            assert {p.name for p in work.iterdir() if p.name.startswith("app-")} == app_ids, work

    # torn down: no daemon, executor or Python worker of the cluster is left
    assert len(groups) == 3 and not [g for g in groups if _group_alive(g)]

    pl = lance.dataset(uri)
    assert pl.version == 2 and len(pl.get_fragments()) == 1
    assert pl.to_table().sort_by("id") == _table(0, 2000)
    assert lance_ops.dataset(uri).to_table().sort_by("id") == _table(0, 2000)
    assert lance_ops.dataset(uri).transaction.WhichOneof("operation") == "rewrite"
