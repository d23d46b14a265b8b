"""Spark test fixtures: ONE shared local SparkSession and the 1M-row Parquet input.

JVM starts are expensive (~10 s each), so every in-process test shares the session-scoped
``spark`` fixture (``local[2,2]``: two cores, and up to 2 attempts per task so the retry tests
can fail a first attempt; the workers load the test-owned fault hook in ``executor_hooks/``, see
``_support.fail_first_attempts``), and only a handful of tests run real ``spark-submit`` processes.
"""
from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from tests.spark._support import EXECUTOR_HOOKS, MASTER, have_spark, make_rows, spark_env


@pytest.fixture(scope="session")
def spark():
    if not have_spark():
        pytest.skip("pyspark and a JVM are needed")
    os.environ.update({k: v for k, v in spark_env().items()
                       if k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "PATH")})
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(MASTER)
        .appName("lance-ops-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.executorEnv.PYTHONPATH", str(EXECUTOR_HOOKS))  # the fault hook, inert until switched on
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from lance_ops.spark import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def parquet_inputs(tmp_path_factory):
    """A 1M-row Parquet file ``a`` (ids 0..1M) and its table (tests/spark/test_submit.py's large case)."""
    root = tmp_path_factory.mktemp("parquet")
    out = {}
    for name, (lo, hi) in {"a": (0, 1_000_000)}.items():
        table = make_rows(lo, hi)
        path = root / f"{name}.parquet"
        pq.write_table(table, path, row_group_size=125_000)
        out[name] = (str(path), table)
    return out


