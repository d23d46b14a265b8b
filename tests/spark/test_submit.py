"""Real ``spark-submit --master local[2,2]`` runs of the jobs (each costs one JVM start, ~10 s).

Three job runs: ingest 1M rows into a new dataset (the one large case: the job at scale, with
Spark's own file splits); append 100k rows in two Parquet files (two tasks) to a pylance-made
dataset while every first task attempt fails; and compaction from a plan file. The job that fails
and must leave the dataset untouched (an overwrite whose input is missing) is checked with the one
spark-submit run of ``tests/spark/test_error_lines.py::test_missing_input_path_is_one_line_and_not_retryable``.
``--help`` of the job file, which exits before any SparkContext exists, runs without a JVM
(tests/spark/test_staged_commit.py::test_job_file_help_as_spark_submit_runs_it).
"""
from __future__ import annotations

import os
import shutil

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lance_ops
from lance_ops.maintenance.compaction import CompactionOptions, compact_files, plan_compaction
from tests.spark._support import (
    FAIL_FIRST_ATTEMPT_CONF, data_files, have_spark, make_rows, referenced_files, spark_submit, summary_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not have_spark(), reason="pyspark and a JVM are needed")]


def check(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    return summary_of(proc)


def test_ingest_1m_rows_into_a_new_dataset(tmp_path, parquet_inputs):
    path, table = parquet_inputs["a"]
    uri = str(tmp_path / "new.lance")
    summary = check(spark_submit("ingest.py", ["--format", "parquet", "--path", path, "--uri", uri,
                                               "--mode", "create", "--idempotency-key", "ingest-new-1"]))
    assert summary["version"] == 1 and summary["rows"] == 1_000_000 and summary["committed"]
    assert summary["staged_key"] == "ingest-new-1" and summary["already_committed"] is False
    ds = lance.dataset(uri)  # pylance reads it exactly as the source
    assert ds.count_rows() == 1_000_000
    assert ds.to_table().sort_by("id").equals(table)
    assert lance_ops.dataset(uri).to_table().sort_by("id").equals(table)
    assert len(ds.get_fragments()) == summary["fragments"]


def test_ingest_into_an_existing_dataset_with_failed_first_attempts(tmp_path):
    table_a, table_b = make_rows(0, 100_000), make_rows(100_000, 200_000)
    source = tmp_path / "raw"  # two files: Spark gives each its own task
    source.mkdir()
    for i in range(2):
        pq.write_table(table_b.slice(i * 50_000, 50_000), source / f"part-{i}.parquet", row_group_size=25_000)
    uri = str(tmp_path / "existing.lance")
    lance.write_dataset(table_a, uri, data_storage_version="2.0")  # made by pylance
    summary = check(spark_submit(
        "ingest.py", ["--path", str(source), "--uri", uri, "--mode", "append", "--max-rows-per-file", "20000"],
        conf=FAIL_FIRST_ATTEMPT_CONF,  # every task's first attempt fails after writing its files
    ))
    assert summary["version"] == 2 and summary["rows"] == 100_000
    assert summary["retried_tasks"] == summary["tasks"] >= 2
    ds = lance.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 200_000
    assert ds.to_table().sort_by("id").equals(pa.concat_tables([table_a, table_b]))
    assert [f.count_rows() for f in ds.get_fragments()][0] == 100_000  # pylance's fragment, untouched
    assert all(f.count_rows() <= 20_000 for f in ds.get_fragments()[1:])
    assert len(data_files(uri) - referenced_files(uri)) >= summary["tasks"]  # failed attempts: orphans only


def test_compact_from_a_plan_file_matches_compact_files(tmp_path):
    local, distributed = str(tmp_path / "local.lance"), str(tmp_path / "spark.lance")
    lance_ops.write_dataset(make_rows(0, 40 * 5_000), local, max_rows_per_file=5_000)
    lance_ops.dataset(local).delete("id % 13 = 0 OR (id >= 50000 AND id < 51000)")
    shutil.copytree(local, distributed)
    plan = plan_compaction(lance_ops.dataset(distributed), CompactionOptions(target_rows_per_fragment=30_000))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    compact_files(lance_ops.dataset(local), target_rows_per_fragment=30_000)

    summary = check(spark_submit("compact.py", ["--uri", distributed, "--plan-file", str(plan_file),
                                                "--idempotency-key", "compact-plan-1"]))
    assert summary["committed"] and summary["tasks"] == plan.num_tasks and summary["version"] == 3
    a, b = lance_ops.dataset(local), lance_ops.dataset(distributed)
    assert len(a.get_fragments()) < 40
    assert [f.count_rows() for f in b.get_fragments()] == [f.count_rows() for f in a.get_fragments()]
    assert lance.dataset(distributed).to_table().equals(lance.dataset(local).to_table())
    assert os.path.exists(os.path.join(distributed, "_staging", "compact-plan-1.json"))
