"""Helpers for the Spark tests: environment, spark-submit runner, test data, file listings.

``MASTER`` is ``local[2,2]``: two cores and up to 2 attempts per task, so the retry tests can fail
a first attempt (plain ``local[2]`` never retries a task).

Failures are injected from the outside (docs/adr/0007-fault-injection-from-tests.md): the
``executor_hooks/`` directory goes on the Python workers' path, and its ``sitecustomize`` wraps
lance-ops' task functions so that attempt 0 fails when a test switches the fault on.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.spark.executor_hooks.sitecustomize import ENV as FAIL_FIRST_ATTEMPT_ENV
from tests.spark.executor_hooks.sitecustomize import PROPERTY as FAIL_FIRST_ATTEMPT_PROPERTY

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MASTER = "local[2,2]"
#: test-owned directory the Python workers import the fault hook from (``sitecustomize``)
EXECUTOR_HOOKS = Path(__file__).resolve().parent / "executor_hooks"
#: spark-submit settings that make every task's attempt 0 fail right after writing its files
FAIL_FIRST_ATTEMPT_CONF = {
    "spark.executorEnv.PYTHONPATH": str(EXECUTOR_HOOKS),
    f"spark.executorEnv.{FAIL_FIRST_ATTEMPT_ENV}": "1",
}


def have_spark() -> bool:
    if importlib.util.find_spec("pyspark") is None:
        return False
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


requires_spark = pytest.mark.skipif(not have_spark(), reason="pyspark and a JVM are needed")


def spark_env(extra: dict | None = None) -> dict[str, str]:
    """Environment for spark-submit and for the Python workers of the shared session."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env


def spark_submit(script: str, args: list[str], *, master: str = MASTER, env: dict | None = None,
                 conf: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``spark-submit --master <master> [--conf k=v ...] lance_ops/spark/<script> <args>``."""
    submit = BIN / "spark-submit"
    if not submit.exists():
        submit = Path(shutil.which("spark-submit") or "spark-submit")
    confs = [arg for k, v in {"spark.ui.enabled": "false", **(conf or {})}.items() for arg in ("--conf", f"{k}={v}")]
    cmd = [str(submit), "--master", master, *confs, str(REPO / "lance_ops" / "spark" / script), *args]
    return subprocess.run(cmd, env=spark_env(env), capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def summary_of(proc: subprocess.CompletedProcess) -> dict:
    """The job's one-line JSON summary: the last stdout line that is a JSON object."""
    for line in reversed(proc.stdout.splitlines()):
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            return json.loads(text)
    raise AssertionError(f"no JSON summary on stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")


def make_rows(start: int, stop: int) -> pa.Table:
    """Rows with the types Spark round-trips exactly (ints, floats, strings with nulls, bools, dates, UTC timestamps)."""
    ids = np.arange(start, stop, dtype=np.int64)
    # "name-<id % 1000>", null where id % 11 == 0 (vectorised: the 1M-row inputs are made per session)
    names = pa.array([f"name-{k}" for k in range(1000)], pa.string()).take(pa.array(ids % 1000))
    names = pc.if_else(pa.array(ids % 11 == 0), pa.scalar(None, pa.string()), names)
    return pa.table({
        "id": ids,
        "value": pa.array(ids.astype(np.float64) * 0.5),
        "small": pa.array((ids % 30000).astype(np.int32)),
        "name": names,
        "flag": pa.array(ids % 3 == 0),
        "day": pa.array((ids % 20000).astype(np.int32), pa.int32()).cast(pa.date32()),
        "ts": pa.array(ids * 1_000_003, pa.timestamp("us", "UTC")),
    })


def data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def referenced_files(uri: str) -> set[str]:
    import lance_ops

    ds = lance_ops.dataset(uri)
    return {df.path for f in ds.manifest.fragments for df in f.files}


@contextmanager
def fail_first_attempts(spark):
    """Within the block, every task's attempt 0 fails after writing its files.

    Needs the session's workers to load the hook (the ``spark`` fixture sets
    ``spark.executorEnv.PYTHONPATH`` to :data:`EXECUTOR_HOOKS`); the local property switches it on
    for the jobs this thread starts.
    """
    sc = spark.sparkContext
    sc.setLocalProperty(FAIL_FIRST_ATTEMPT_PROPERTY, "1")
    try:
        yield
    finally:
        sc.setLocalProperty(FAIL_FIRST_ATTEMPT_PROPERTY, None)
