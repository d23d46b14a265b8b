"""commit_staged: a staged result is committed once; no JVM needed (fragments written in-process)."""
from __future__ import annotations

import subprocess
import sys

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import DatasetNotFoundError, ObjectNotFoundError
from lance_ops.io import open_store
from lance_ops.maintenance.staged_commit import commit_staged, fields_to_b64
from lance_ops.schema import to_lance_fields
from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY
from lance_ops.table.commit.staging import StagedResult, sanitize_key, write_staged
from lance_ops.table.versions import DEFAULT
from lance_ops.table.write import write_fragments
from tests.spark._support import REPO, make_rows, spark_env


def stage(uri: str, key: str, table: pa.Table, operation: str, *, fields=None, read_version: int = 0,
          max_rows_per_file: int = 1000, version: str = DEFAULT) -> StagedResult:
    """What a Spark ingest does: write fragments (no commit) in ``version`` (an append: the
    dataset's), then stage them under ``key``."""
    store, base = open_store(uri)
    fields = fields if fields is not None else to_lance_fields(table.schema)
    frags = write_fragments(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()), store, base,
                            fields, max_rows_per_file=max_rows_per_file, version=version)
    result = StagedResult(key=key, operation=operation, read_version=read_version, fragments=frags,
                          schema_fields=fields_to_b64(fields), metrics={"num_rows": table.num_rows},
                          data_storage_version=version)
    write_staged(store, base, result)
    return result


def test_overwrite_creates_dataset_then_second_commit_is_noop(tmp_path):
    uri = str(tmp_path / "ds")
    table = make_rows(0, 2500)
    stage(uri, "k-create", table, "overwrite")
    first = commit_staged(uri, "k-create")
    assert first["version"] == 1 and first["operation"] == "overwrite" and not first["already_committed"]
    assert first["metrics"]["num_rows"] == 2500 and first["metrics"]["num_fragments"] == 3
    assert first["metrics"]["created"] is True
    again = commit_staged(uri, "k-create")
    assert (again["version"], again["operation"], again["already_committed"]) == (1, "overwrite", True)
    assert again["metrics"]["num_rows"] == 2500
    ds = lance.dataset(uri)
    assert ds.version == 1
    assert ds.to_table().equals(table)
    assert lance_ops.dataset(uri).transaction.transaction_properties[IDEMPOTENCY_KEY] == "k-create"


def test_append_once_to_a_pylance_dataset(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(make_rows(0, 100), uri, data_storage_version="2.0")
    ds = lance_ops.dataset(uri)
    stage(uri, "k-append", make_rows(100, 300), "append", fields=list(ds.manifest.fields), read_version=1,
          version="2.0")
    res = commit_staged(uri, "k-append")
    assert (res["version"], res["already_committed"]) == (2, False)
    assert commit_staged(uri, "k-append")["already_committed"] is True
    got = lance.dataset(uri)
    assert got.version == 2 and got.count_rows() == 300
    assert got.to_table().equals(make_rows(0, 300))


def test_append_commits_on_top_of_concurrent_versions(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(make_rows(0, 100), uri)
    fields = list(lance_ops.dataset(uri).manifest.fields)
    stage(uri, "k-late", make_rows(100, 200), "append", fields=fields, read_version=1)
    lance.write_dataset(make_rows(200, 250), uri, mode="append")  # someone else commits meanwhile
    res = commit_staged(uri, "k-late")
    assert res["version"] == 3
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == list(range(250))


def test_missing_key_and_missing_dataset(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(make_rows(0, 10), uri)
    with pytest.raises(ObjectNotFoundError, match="nothing is staged"):
        commit_staged(uri, "never-staged")
    other = str(tmp_path / "other")
    store, base = open_store(other)
    write_staged(store, base, StagedResult(key="k", operation="append", read_version=0))
    with pytest.raises(DatasetNotFoundError, match="carries no schema"):
        commit_staged(other, "k")


def test_keys_are_sanitized_like_the_jobs_do(tmp_path):
    uri = str(tmp_path / "ds")
    raw = "dag/run:2024-01-01T00:00:00+00:00/task.0"
    stage(uri, sanitize_key(raw), make_rows(0, 10), "overwrite")
    assert commit_staged(uri, raw)["version"] == 1
    assert commit_staged(uri, raw)["already_committed"] is True


def test_import_lance_ops_does_not_import_pyspark():
    code = ("import sys, lance_ops, lance_ops.spark, lance_ops.maintenance.staged_commit, lance_ops.spark.ingest, "
            "lance_ops.spark.compact; lance_ops.dataset; assert 'pyspark' not in sys.modules, 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(REPO))


@pytest.mark.parametrize("job", ["ingest", "compact"])
def test_help_without_spark(job):
    out = subprocess.run([sys.executable, "-m", f"lance_ops.spark.{job}", "--help"], capture_output=True,
                         text=True, check=True, cwd=str(REPO)).stdout
    assert "--uri" in out and "--idempotency-key" in out and "--stage-only" in out


def test_job_file_help_as_spark_submit_runs_it():
    """spark-submit's Python runner executes the job file by path (``python <file> args``) with the
    repository on PYTHONPATH; ``--help`` exits before any SparkContext, so no JVM is needed to check it."""
    proc = subprocess.run([sys.executable, str(REPO / "lance_ops" / "spark" / "ingest.py"), "--help"],
                          env=spark_env(), capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--stage-only" in proc.stdout and "--idempotency-key" in proc.stdout and "--partitions" in proc.stdout


def test_staged_rewrite_commits_once(tmp_path):
    from lance_ops.maintenance.compaction import CompactionOptions, plan_compaction

    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(make_rows(0, 6_000), uri, max_rows_per_file=1_000)
    before = lance_ops.dataset(uri).to_table()
    plan = plan_compaction(lance_ops.dataset(uri), CompactionOptions(target_rows_per_fragment=3_000))
    results = [task.execute(uri) for task in plan.tasks]  # what the Spark executors do
    store, base = open_store(uri)
    write_staged(store, base, StagedResult(key="k-rw", operation="rewrite", read_version=plan.read_version,
                                           rewrite_groups=[{"result": r.to_json()} for r in results]))
    res = commit_staged(uri, "k-rw")
    assert (res["version"], res["operation"], res["already_committed"]) == (2, "rewrite", False)
    assert res["metrics"]["fragments_removed"] == 6 and res["metrics"]["fragments_added"] == 2
    again = commit_staged(uri, "k-rw")
    assert (again["version"], again["already_committed"]) == (2, True)
    ds = lance.dataset(uri)
    assert ds.version == 2 and [f.count_rows() for f in ds.get_fragments()] == [3_000, 3_000]
    assert ds.to_table().equals(before)
