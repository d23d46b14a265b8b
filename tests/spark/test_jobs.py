"""The ingest and compaction jobs run in-process on the shared SparkSession (``run(spark, args)``).

Retry safety, idempotent re-runs, stage-only + separate commit, schema errors and distributed
compaction vs single-process ``compact_files``. The real ``spark-submit`` runs are in
test_submit.py.
"""
from __future__ import annotations

import os
import shutil

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lance_ops
from lance_ops.errors import SchemaMismatchError
from lance_ops.maintenance.compaction import compact_files
from lance_ops.maintenance.staged_commit import commit_staged
from lance_ops.spark import compact, ingest
from tests.spark._support import data_files, fail_first_attempts, make_rows, referenced_files

pytestmark = pytest.mark.slow


def ingest_args(*argv: str):
    return ingest.build_parser().parse_args(list(argv))


@pytest.fixture
def small_parquet(tmp_path):
    path = tmp_path / "src.parquet"
    table = make_rows(0, 120_000)
    pq.write_table(table, path, row_group_size=30_000)
    return str(path), table


def test_ingest_retried_tasks_leave_orphans_not_duplicates(spark, tmp_path, small_parquet):
    path, table = small_parquet
    uri = str(tmp_path / "ds.lance")
    with fail_first_attempts(spark):
        summary = ingest.run(spark, ingest_args("--path", path, "--uri", uri, "--mode", "create",
                                                "--partitions", "4", "--max-rows-per-file", "20000"))
    assert summary["retried_tasks"] == 4 and summary["tasks"] == 4
    assert summary["rows"] == 120_000 and summary["version"] == 1 and summary["committed"]
    ds = lance.dataset(uri)
    assert ds.count_rows() == 120_000
    assert ds.to_table().sort_by("id").equals(table)  # no row twice, none missing
    orphans = data_files(uri) - referenced_files(uri)
    assert len(orphans) >= 4  # what the failed first attempts wrote: never referenced


@pytest.mark.parametrize("version", [None, "2.0", "2.1", "2.2", "legacy"])
def test_ingest_creates_in_the_storage_version_asked(spark, tmp_path, version):
    """``--data-storage-version`` picks the format of a dataset the job creates (none: the library's
    default); a later ingest keeps the dataset's own, whatever it asks."""
    from lance_ops.table.versions import DEFAULT

    path, uri = str(tmp_path / "src.parquet"), str(tmp_path / "ds.lance")
    pq.write_table(make_rows(0, 1_000), path)
    want = {None: str(DEFAULT), "legacy": "0.1"}.get(version, version)
    opt = ["--data-storage-version", version] if version else []
    ingest.run(spark, ingest_args("--path", path, "--uri", uri, "--mode", "create", *opt))
    assert lance.dataset(uri).data_storage_version == want
    other = "2.1" if want == "2.0" else "2.0"  # asked for, and ignored: the dataset exists
    ingest.run(spark, ingest_args("--path", path, "--uri", uri, "--data-storage-version", other))
    ds = lance.dataset(uri)
    assert (ds.version, ds.data_storage_version) == (2, want)
    assert ds.to_table().sort_by("id").equals(pa.concat_tables([make_rows(0, 1_000)] * 2).sort_by("id"))


def test_ingest_stage_only_then_commit_and_reruns_are_noops(spark, tmp_path, small_parquet):
    path, table = small_parquet
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(make_rows(-1000, 0), uri, data_storage_version="2.0")
    argv = ["--path", path, "--uri", uri, "--mode", "append", "--idempotency-key", "dag.run1.ingest.0"]

    staged = ingest.run(spark, ingest_args(*argv, "--stage-only"))
    assert staged["committed"] is False and staged["version"] == 1 and staged["rows"] == 120_000
    assert lance.dataset(uri).version == 1  # nothing visible yet
    assert os.path.exists(os.path.join(uri, "_staging", "dag.run1.ingest.0.json"))

    # an Airflow retry of the Spark step finds its own staged result: no Spark work, no new files
    files = data_files(uri)
    again = ingest.run(spark, ingest_args(*argv, "--stage-only"))
    assert again["resumed"] is True and again["committed"] is False and data_files(uri) == files

    first = commit_staged(uri, "dag.run1.ingest.0")
    assert (first["version"], first["operation"], first["already_committed"]) == (2, "append", False)
    second = commit_staged(uri, "dag.run1.ingest.0")
    assert (second["version"], second["already_committed"]) == (2, True)

    rerun = ingest.run(spark, ingest_args(*argv))  # the whole job again, same key
    assert rerun["already_committed"] is True and rerun["version"] == 2
    ds = lance.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 121_000
    assert ds.to_table().sort_by("id").equals(pa.concat_tables([make_rows(-1000, 0), table]))

    # issue 16: after compaction and cleanup removed version 2 and the staged files, the old run's
    # job and commit step again: the key ledger answers, nothing is appended, pylance still opens it
    from datetime import timedelta

    from lance_ops.maintenance.cleanup import cleanup_old_versions

    compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1_000_000)
    cleanup_old_versions(lance_ops.dataset(uri), timedelta(0))
    assert not os.path.exists(os.path.join(uri, "_staging", "dag.run1.ingest.0.json"))  # committed: removed
    assert commit_staged(uri, "dag.run1.ingest.0")["version"] == 2
    rerun = ingest.run(spark, ingest_args(*argv))
    assert rerun["already_committed"] is True and rerun["version"] == 2
    ds = lance.dataset(uri)
    assert ds.version == 3 and ds.count_rows() == 121_000
    assert ds.to_table().sort_by("id").equals(pa.concat_tables([make_rows(-1000, 0), table]))


def test_ingest_schema_mismatch_names_fields_and_changes_nothing(spark, tmp_path):
    uri = str(tmp_path / "ds.lance")
    lance_ops.write_dataset(make_rows(0, 100), uri)
    bad = make_rows(0, 100).drop(["name"]).set_column(1, "value", pa.array(["x"] * 100))
    path = str(tmp_path / "bad.parquet")
    pq.write_table(bad, path)
    with pytest.raises(SchemaMismatchError, match=r"missing fields \['name'\].*field 'value' has type string"):
        ingest.run(spark, ingest_args("--path", path, "--uri", uri))
    assert lance_ops.dataset(uri).version == 1
    assert not os.path.exists(os.path.join(uri, "_staging"))


def _forty_fragments(uri: str) -> None:
    lance_ops.write_dataset(make_rows(0, 40 * 2_500), uri, max_rows_per_file=2_500)
    ds = lance_ops.dataset(uri)
    ds.delete("id >= 5000 AND id < 5400")  # fragment 2 loses 16%: materialised alone
    ds.delete("id % 97 = 0")


def test_distributed_compaction_equals_compact_files(spark, tmp_path):
    local, distributed = str(tmp_path / "local.lance"), str(tmp_path / "spark.lance")
    _forty_fragments(local)
    shutil.copytree(local, distributed)
    assert len(lance_ops.dataset(local).get_fragments()) == 40

    expected = compact_files(lance_ops.dataset(local), target_rows_per_fragment=12_000)
    summary = compact.run(spark, compact.build_parser().parse_args(
        ["--uri", distributed, "--target-rows-per-fragment", "12000", "--idempotency-key", "compact-1"]))
    assert summary["committed"] and summary["tasks"] >= 2
    assert summary["metrics"]["fragments_removed"] == expected["fragments_removed"]
    assert summary["metrics"]["fragments_added"] == expected["fragments_added"]
    for k in ("rows_read", "rows_written", "bytes_read", "files_added", "files_removed"):  # measured on executors
        assert summary["metrics"][k] == expected[k], k
    # issue 20: the executors' task times travel in their results; the driver reports its wall time
    assert summary["rewrite_seconds"] > 0 and summary["seconds"] > 0

    a, b = lance_ops.dataset(local), lance_ops.dataset(distributed)
    assert [f.count_rows() for f in b.get_fragments()] == [f.count_rows() for f in a.get_fragments()]
    assert b.to_table().equals(a.to_table())
    assert lance.dataset(distributed).to_table().equals(lance.dataset(local).to_table())

    again = compact.run(spark, compact.build_parser().parse_args(
        ["--uri", distributed, "--target-rows-per-fragment", "12000", "--idempotency-key", "compact-1"]))
    assert again["already_committed"] is True and lance_ops.dataset(distributed).version == b.version


def test_compaction_retried_tasks_leave_orphans_not_duplicates(spark, tmp_path):
    local, distributed = str(tmp_path / "local.lance"), str(tmp_path / "spark.lance")
    _forty_fragments(local)
    shutil.copytree(local, distributed)
    compact_files(lance_ops.dataset(local), target_rows_per_fragment=12_000)
    before = data_files(distributed)

    with fail_first_attempts(spark):  # every compaction task's attempt 0 fails after writing its files
        summary = compact.run(spark, compact.build_parser().parse_args(
            ["--uri", distributed, "--target-rows-per-fragment", "12000", "--idempotency-key", "compact-retry"]))
    assert summary["committed"] and summary["tasks"] >= 2

    a, b = lance_ops.dataset(local), lance_ops.dataset(distributed)
    assert [f.count_rows() for f in b.get_fragments()] == [f.count_rows() for f in a.get_fragments()]
    assert lance.dataset(distributed).to_table().equals(lance.dataset(local).to_table())  # no row twice
    failed_attempt_files = data_files(distributed) - before - referenced_files(distributed)
    assert len(failed_attempt_files) >= summary["tasks"]  # written by attempt 0, never referenced
