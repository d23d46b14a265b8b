"""The Spark merge job (``lance_ops.spark.merge``) with pylance's own merge_insert as the oracle.

In-process runs share the session's SparkSession; one test runs real ``spark-submit`` (a merge;
its re-run under the same key runs in-process). Each case compares the exact table (and, with stable row ids,
the ids updated rows keep) with pylance's merge_insert of the same source into a copy.
"""
from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lance_ops
from lance_ops.errors import AmbiguousMergeError, MergeMatchError
from lance_ops.spark import merge
from lance_ops.table.commit.staging import read_staged
from tests.spark._support import data_files, spark_submit, summary_of

pytestmark = pytest.mark.slow


def target(n: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(n), pa.int64()), "v": pa.array(np.arange(n) * 1.5),
                     "s": pa.array([f"r{i}" for i in range(n)])})


def source(lo: int, hi: int, tag: str = "n") -> pa.Table:
    ids = np.arange(lo, hi)
    return pa.table({"s": pa.array([f"{tag}{i}" for i in ids]), "id": pa.array(ids, pa.int64()),
                     "v": pa.array(ids * -1.0)})


def pair(tmp_path, table: pa.Table, *, stable: bool = False, version: str = "2.0", rows: int = 300):
    """The same pylance-written dataset twice: ours (merged by the job) and the oracle's."""
    ours, oracle = str(tmp_path / "ours.lance"), str(tmp_path / "oracle.lance")
    lance.write_dataset(table, ours, max_rows_per_file=rows, enable_stable_row_ids=stable,
                        data_storage_version=version)
    shutil.copytree(ours, oracle)
    return ours, oracle


def pylance_upsert(uri: str, src: pa.Table) -> dict:
    return lance.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)


def same_table(ours: str, oracle: str, *, stable: bool = False, updated: pa.Array | None = None) -> None:
    a = lance.dataset(ours).to_table(with_row_id=stable).sort_by("id")
    b = lance.dataset(oracle).to_table(with_row_id=stable).sort_by("id")
    if not stable:
        assert a.equals(b)
        return
    assert a.drop(["_rowid"]).equals(b.drop(["_rowid"]))
    # updated rows keep their ids as pylance keeps them; inserted rows get fresh ids from the same range
    mask = pc.is_in(a["id"], updated)
    assert a.filter(mask)["_rowid"].equals(b.filter(mask)["_rowid"])
    assert sorted(a["_rowid"].to_pylist()) == sorted(b["_rowid"].to_pylist())


@pytest.mark.parametrize("version,stable", [("2.0", False), ("2.2", True)])
def test_merge_equals_pylance_and_reruns_are_noops(spark, tmp_path, version, stable):
    ours, oracle = pair(tmp_path, target(2000), stable=stable, version=version)
    lance.dataset(ours).delete("id % 97 = 0")  # existing deletion vectors are merged into the new ones
    lance.dataset(oracle).delete("id % 97 = 0")
    src = source(1500, 2600)
    expected = pylance_upsert(oracle, src)
    df = spark.createDataFrame(src.to_pandas()).repartition(3)
    out = merge.merge_dataframe(df, ours, ["id"], idempotency_key="run-1")
    counts = {k: out[k] for k in expected}
    assert counts == expected == {"num_inserted_rows": 605, "num_updated_rows": 495, "num_deleted_rows": 0}
    assert out["version"] == 3 and out["committed"] and not out["already_committed"]
    same_table(ours, oracle, stable=stable, updated=pa.array([i for i in range(1500, 2000) if i % 97], pa.int64()))
    txn, theirs = lance.dataset(ours).read_transaction(3).operation, lance.dataset(oracle).read_transaction(3).operation
    assert type(txn).__name__ == type(theirs).__name__ == "Update" and txn.update_mode == theirs.update_mode
    assert sorted(txn.removed_fragment_ids) == sorted(theirs.removed_fragment_ids) == [5, 6]
    assert sorted(f.id for f in txn.updated_fragments) == sorted(f.id for f in theirs.updated_fragments)
    assert lance_ops.dataset(ours).to_table().sort_by("id").equals(lance.dataset(ours).to_table().sort_by("id"))
    # a re-run under the key commits nothing and reports what the first run did
    files = data_files(ours)
    again = merge.merge_dataframe(df, ours, ["id"], idempotency_key="run-1")
    assert again["already_committed"] and again["version"] == 3
    assert {k: again[k] for k in expected} == expected
    assert lance.dataset(ours).version == 3 and data_files(ours) == files


def test_failed_runs_before_commit_leave_no_duplicate(spark, tmp_path):
    ours, oracle = pair(tmp_path, target(1000))
    src = source(800, 1200)
    df = spark.createDataFrame(src.to_pandas()).repartition(2)
    expected = pylance_upsert(oracle, src)
    # a run that died after writing its files but before staging: orphans only
    merge.stage_merge(df, lance_ops.dataset(ours), ["id"], "lost")
    assert lance.dataset(ours).version == 1
    # a run that staged and died before its commit: the re-run commits that stage once
    staged = merge.merge_dataframe(df, ours, ["id"], idempotency_key="k", stage_only=True)
    assert not staged["committed"] and lance.dataset(ours).version == 1
    out = merge.merge_dataframe(df, ours, ["id"], idempotency_key="k")
    assert out["resumed"] and out["version"] == 2 and {k: out[k] for k in expected} == expected
    same_table(ours, oracle)
    assert read_staged(lance_ops.dataset(ours).store, lance_ops.dataset(ours).base, "k").committed_version == 2


def test_stage_preempted_by_a_delete_is_planned_again(spark, tmp_path):
    """A stage whose fragments a concurrent delete changed cannot be committed as staged: the
    re-run drops it and plans again on the newest version (the deleted row is then inserted)."""
    ours, oracle = pair(tmp_path, target(1000))
    src = source(900, 1100)
    df = spark.createDataFrame(src.to_pandas())
    merge.merge_dataframe(df, ours, ["id"], idempotency_key="k", stage_only=True)
    for uri in (ours, oracle):
        lance.dataset(uri).delete("id = 950")
    expected = pylance_upsert(oracle, src)
    out = merge.merge_dataframe(df, ours, ["id"], idempotency_key="k")
    assert out["replanned"] == 1 and {k: out[k] for k in expected} == expected
    assert expected["num_inserted_rows"] == 101
    same_table(ours, oracle)


def test_duplicate_keys_fail_before_anything_is_written(spark, tmp_path):
    ours, oracle = pair(tmp_path, target(100))
    src = pa.concat_tables([source(10, 20), source(15, 16, tag="dup"), source(200, 210)])
    df = spark.createDataFrame(src.to_pandas())
    files = data_files(ours)
    with pytest.raises(AmbiguousMergeError, match=r"^Ambiguous merge inserts are prohibited: multiple source rows "
                                                  r"match the same target row on \(id = 15\)"):
        merge.merge_dataframe(df, ours, ["id"], idempotency_key="dup")
    assert lance.dataset(ours).version == 1 and data_files(ours) == files
    with pytest.raises(OSError, match="Ambiguous merge inserts are prohibited"):  # pylance's own rule
        pylance_upsert(ours, src)
    # unmatched duplicates are all inserted, as pylance inserts them; matched rows may be kept
    twice = spark.createDataFrame(pa.concat_tables([source(300, 302), source(300, 302), source(5, 6)]).to_pandas())
    out = merge.merge_dataframe(twice, ours, ["id"], when_matched="keep")
    assert (out["num_inserted_rows"], out["num_updated_rows"]) == (4, 0)
    assert lance.dataset(ours).count_rows("id >= 300") == 4
    with pytest.raises(MergeMatchError, match=r"^Merge insert failed: found matching row with key values: id = (5|300|301)$"):
        merge.merge_dataframe(twice, ours, ["id"], when_matched="fail")
    # matched rows deleted, as pylance's when_matched_delete() deletes them
    src_twice = pa.concat_tables([source(300, 302), source(300, 302), source(5, 6)])
    lance.dataset(oracle).merge_insert("id").when_not_matched_insert_all().execute(src_twice)
    gone = source(40, 60)
    expected = lance.dataset(oracle).merge_insert("id").when_matched_delete().execute(gone)
    out = merge.merge_dataframe(spark.createDataFrame(gone.to_pandas()), ours, ["id"], when_matched="delete",
                                insert=False)
    assert {k: out[k] for k in expected} == expected == {"num_inserted_rows": 0, "num_updated_rows": 0,
                                                         "num_deleted_rows": 20}
    same_table(ours, oracle)


def test_spark_submit_merge_then_rerun(spark, tmp_path):
    ours, oracle = pair(tmp_path, target(3000), rows=1000)
    src = source(2500, 4000)
    path = str(tmp_path / "src.parquet")
    pq.write_table(src, path)
    expected = pylance_upsert(oracle, src)
    argv = ["--path", path, "--uri", ours, "--on", "id", "--idempotency-key", "dag.run.merge.0"]
    first = spark_submit("merge.py", argv)
    assert first.returncode == 0, first.stderr[-3000:]
    out = summary_of(first)
    assert {k: out[k] for k in expected} == expected and out["version"] == 2 and not out["already_committed"]
    same_table(ours, oracle)
    # the re-run under the same key (in-process: a second JVM start would add little but time)
    again = merge.run(spark, merge.build_parser().parse_args(argv))
    assert again["already_committed"] and again["version"] == 2 and {k: again[k] for k in expected} == expected
    assert lance.dataset(ours).version == 2


def test_lance_format_upsert_option_names_the_merge_job(spark, tmp_path):
    ours, _ = pair(tmp_path, target(10))
    df = spark.createDataFrame(source(5, 15).to_pandas())
    with pytest.raises(Exception, match=r"lance_ops\.spark\.merge\.merge_dataframe\(df, uri, on=\[\.\.\.\]\)"):
        df.write.format("lance").option("mode", "upsert").option("on", "id").mode("append").save(ours)
    assert lance.dataset(ours).version == 1
