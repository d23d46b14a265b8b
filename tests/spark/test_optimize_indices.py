"""The Spark ``optimize_indices`` job (issue 22 item 2), pylance 14.0.2 and the local
``optimize_indices`` as oracles.

One pylance-made dataset carries BTREE, BITMAP, LABEL_LIST and IVF_PQ indices, then appended
fragments and deletions. pylance's ``optimize_indices`` runs on copy A, lance_ops' local one on
copy B, the Spark job on copy C (several slices per index, so executors' encodings are joined):
C's segments equal B's file by file (decoded) and A's (metadata, BTREE pages, bitmaps, IVF
partitions and codes), pylance reports 0 unindexed rows on C and answers queries as on A. Re-runs
with the same key write nothing; a stage-only run is committed by a later run. The job as a real
spark-submit runs in ``tests/airflow/test_index_upkeep.py`` (the ``lance_maintenance`` step
submits it), so CI starts one more JVM for it, not two.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.table.dataset import LanceDataset
from tests.maintenance.test_index_upkeep_scalar import _decoded, _meta, _segments
from tests.maintenance.test_index_upkeep_vector import ivf_loss, partition_contents, recall
from tests.spark._support import have_spark

lance = pytest.importorskip("lance")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not have_spark(), reason="pyspark and a JVM are needed")]

SCALAR = ("cat_idx", "id_idx", "labels_idx")
DIM = 16


def _rows(lo: int, hi: int) -> pa.Table:
    i = np.arange(lo, hi)
    vec = np.random.default_rng(lo).standard_normal((hi - lo, DIM)).astype(np.float32)
    return pa.table({
        "id": pa.array(i, pa.int64()),
        "cat": pa.array([f"c{k % 7}" if k % 13 else None for k in i]),
        "labels": pa.array([[f"l{k % 5}", f"l{k % 3}"] if k % 11 else None for k in i]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM),
    })


def _build(path: Path) -> Path:
    ds = lance.write_dataset(_rows(0, 6000), str(path), max_rows_per_file=2000)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=4)
    lance.write_dataset(_rows(6000, 6500), str(path), mode="append", max_rows_per_file=200)
    lance.dataset(str(path)).delete("id % 10 = 3 or id = 6005")
    lance.write_dataset(_rows(6500, 6900), str(path), mode="append", max_rows_per_file=200)
    return path


def _copy(src: Path, name: str) -> Path:
    dst = src.parent / name
    shutil.copytree(src, dst)
    return dst


def _index_dirs(path: Path) -> set[str]:
    return {d for d in os.listdir(path / "_indices") if os.listdir(path / "_indices" / d)}


def _job_args(path: Path, *extra: str):
    from lance_ops.spark.optimize_indices import build_parser

    return build_parser().parse_args(["--uri", str(path), *extra])


def _assert_equal_segments(ours: Path, theirs: Path, *, vector_equal: bool) -> None:
    a, b = _segments(str(ours)), _segments(str(theirs))
    assert sorted(a) == sorted(b)
    for name in SCALAR:
        assert [_meta(i) for i in a[name]] == [_meta(i) for i in b[name]], name
        for x, y in zip(a[name], b[name]):
            assert _decoded(str(ours), x) == _decoded(str(theirs), y), name
    seg_a, index_a, aux_a = newest_segment_of(ours)
    seg_b, index_b, aux_b = newest_segment_of(theirs)
    assert _meta(seg_a)[:5] == _meta(seg_b)[:5]
    assert partition_contents(aux_a) == partition_contents(aux_b)
    assert aux_a.metadata == aux_b.metadata and index_a.metadata == index_b.metadata
    if vector_equal:  # lance_ops against lance_ops: the same float64 sum, split per slice
        assert ivf_loss(index_a) == pytest.approx(ivf_loss(index_b), rel=1e-9)
    else:
        assert ivf_loss(index_a) == pytest.approx(ivf_loss(index_b), rel=1e-4)


def newest_segment_of(path: Path):
    """(metadata, index.idx, auxiliary.idx) of the vector index's segment covering the newest fragment."""
    from lance_ops.maintenance.index_remap.ivf_files import read_index_file
    from lance_ops.table.indices import fragment_ids, segment_uuid

    ds = LanceDataset(str(path))
    seg = max((s for s in ds.manifest_file.index_section.indices if s.name == "vec_idx"),
              key=lambda s: max(fragment_ids(s)))
    folder = f"{ds.base}/_indices/{segment_uuid(seg)}"
    return seg, read_index_file(ds.store, f"{folder}/index.idx"), read_index_file(ds.store, f"{folder}/auxiliary.idx")


def test_spark_job_equals_local_and_pylance_and_reruns_write_nothing(spark, tmp_path: Path) -> None:
    import lance_ops
    from lance_ops.spark.optimize_indices import run

    src = _build(tmp_path / "src")
    a, b, c = _copy(src, "a"), _copy(src, "b"), _copy(src, "c")
    lance.dataset(str(a)).optimize.optimize_indices()
    lance_ops.dataset(str(b)).optimize.optimize_indices()
    before = LanceDataset(str(c)).version

    summary = run(spark, _job_args(c, "--rows-per-task", "250", "--idempotency-key", "upkeep-1"))
    assert summary["committed"] and not summary["already_committed"] and summary["version"] == before + 1
    assert summary["tasks"] == 4 * 5  # 4 indices x 5 slices of the 900 new rows (5 fragments of 100-200 rows)
    assert sorted(i["name"] for i in summary["indices"]) == ["cat_idx", "id_idx", "labels_idx", "vec_idx"]
    _assert_equal_segments(c, b, vector_equal=True)
    _assert_equal_segments(c, a, vector_equal=False)
    pc = lance.dataset(str(c))
    assert {i["name"]: pc.stats.index_stats(i["name"])["num_unindexed_rows"] for i in pc.list_indices()} == \
        {"cat_idx": 0, "id_idx": 0, "labels_idx": 0, "vec_idx": 0}
    pa_ = lance.dataset(str(a))
    for f in ("id >= 5990 and id < 6100", "cat = 'c3'", "array_has_any(labels, ['l1'])"):
        assert sorted(pc.to_table(filter=f, columns=["id"])["id"].to_pylist()) == \
            sorted(pa_.to_table(filter=f, columns=["id"])["id"].to_pylist())
    assert recall(pc, DIM) >= recall(pa_, DIM) - 0.05
    assert LanceDataset(str(c)).transaction.WhichOneof("operation") == "create_index"

    # retry after the commit landed: the same key writes nothing new (no version, no index directory)
    dirs = _index_dirs(c)
    again = run(spark, _job_args(c, "--idempotency-key", "upkeep-1"))
    assert again["already_committed"] and again["version"] == before + 1
    assert LanceDataset(str(c)).version == before + 1 and _index_dirs(c) == dirs
    # without a key: coverage is complete, nothing to do
    fresh = run(spark, _job_args(c))
    assert not fresh["committed"] and fresh["tasks"] == 0 and LanceDataset(str(c)).version == before + 1
    assert _index_dirs(c) == dirs


def test_stage_only_then_a_rerun_commits_the_stage(spark, tmp_path: Path) -> None:
    """Every task's first attempt fails (retried by Spark); the stage-only run writes nothing to the
    version; the re-run with the key commits the stage; the segments equal the local call's."""
    import lance_ops
    from lance_ops.spark.optimize_indices import run
    from tests.spark._support import fail_first_attempts

    src = _build(tmp_path / "src")
    local = _copy(src, "local")
    lance_ops.dataset(str(local)).optimize.optimize_indices(index_names=["id_idx", "vec_idx"])
    before = LanceDataset(str(src)).version
    with fail_first_attempts(spark):
        staged = run(spark, _job_args(src, "--index", "id_idx", "--index", "vec_idx", "--idempotency-key", "k2",
                                      "--stage-only", "--rows-per-task", "300"))
    assert not staged["committed"] and staged["tasks"] == 2 * 4 and LanceDataset(str(src)).version == before
    assert staged["retried_tasks"] == 8  # every task's attempt 0 failed and was retried
    assert (src / "_staging" / "k2.json").exists()
    done = run(spark, _job_args(src, "--index", "id_idx", "--index", "vec_idx", "--idempotency-key", "k2"))
    assert done["resumed"] and done["committed"] and done["version"] == before + 1
    ours, theirs = _segments(str(src)), _segments(str(local))
    assert [_meta(i) for i in ours["id_idx"]] == [_meta(i) for i in theirs["id_idx"]]
    assert _decoded(str(src), ours["id_idx"][-1]) == _decoded(str(local), theirs["id_idx"][-1])
    assert partition_contents(newest_segment_of(src)[2]) == partition_contents(newest_segment_of(local)[2])
    stats = lance.dataset(str(src)).stats
    assert stats.index_stats("id_idx")["num_unindexed_rows"] == 0
    assert stats.index_stats("vec_idx")["num_unindexed_rows"] == 0
    assert stats.index_stats("cat_idx")["num_unindexed_rows"] > 0  # not asked for


def test_stage_overtaken_by_a_compaction_is_discarded_and_a_rerun_plans_again(spark, tmp_path: Path) -> None:
    """A staged upkeep whose commit meets a concurrent compaction fails cleanly: nothing is
    committed, the stage and its index directories are removed, and the same key then re-plans
    from the latest version."""
    import lance_ops
    from lance_ops.errors import RetryableCommitConflictError
    from lance_ops.maintenance.staged_commit import commit_staged
    from lance_ops.spark.optimize_indices import run

    from lance_ops.table.commit.staging import read_staged

    src = _build(tmp_path / "src")
    dirs = _index_dirs(src)
    run(spark, _job_args(src, "--index", "id_idx", "--idempotency-key", "k3", "--stage-only"))
    (staged_dir,) = _index_dirs(src) - dirs
    stage = read_staged(LanceDataset(str(src)).store, LanceDataset(str(src)).base, "k3")
    assert [i["new_segment"] for i in stage.indices["upkeep"]] == [staged_dir]
    lance_ops.dataset(str(src)).optimize.compact_files(target_rows_per_fragment=10_000)
    compacted = LanceDataset(str(src)).version
    with pytest.raises(RetryableCommitConflictError):
        commit_staged(str(src), "k3")
    assert LanceDataset(str(src)).version == compacted
    assert not (src / "_staging" / "k3.json").exists()
    assert staged_dir not in _index_dirs(src)  # the staged segment is gone with its stage
    again = run(spark, _job_args(src, "--index", "id_idx", "--idempotency-key", "k3"))
    assert again["committed"] and not again.get("resumed")
    ds = lance.dataset(str(src))
    assert ds.stats.index_stats("id_idx")["num_unindexed_rows"] == 0
    assert sorted(ds.to_table(filter="id >= 5990 and id < 6010", columns=["id"])["id"].to_pylist()) == \
        [i for i in range(5990, 6010) if i % 10 != 3 and i != 6005]

