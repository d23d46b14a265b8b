"""Interop: lance_ops compacts datasets pylance wrote; pylance keeps reading, writing and maintaining them."""
from __future__ import annotations

import shutil
from datetime import timedelta

import lance
import numpy as np
import pytest

import lance_ops
from lance_ops.maintenance.compaction import compact_files, materialize_deletions, plan_compaction
from tests.maintenance.test_compaction import build, data_files, referenced_data_files, rows, sorted_table


def _ids(t) -> list[int]:
    return sorted(t["id"].to_pylist())


@pytest.mark.parametrize("stable", [False, True])
def test_pylance_dataset_compacted_by_us_stays_pylance_usable(tmp_path, stable):
    uri = str(tmp_path / "t.lance")
    # 6000 deletions in the big fragment -> a bitmap (.bin) deletion file; small ones -> .arrow
    build(uri, [50] * 8 + [8000] + [30] * 4, stable=stable,
          deletes=["id % 3 = 0 AND id < 400", "id >= 400 AND id < 6400", "id >= 8400 AND id < 8410"])
    kinds = {f.deletion_file.file_type for f in lance_ops.dataset(uri).manifest.fragments
             if f.HasField("deletion_file")}
    assert kinds == {0, 1}  # arrow and bitmap deletion files
    theirs_before = lance.dataset(uri)
    expected = sorted_table(theirs_before.to_table(with_row_id=stable))
    stale = lance.dataset(uri)  # a pylance handle that will not see our compaction

    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=150)
    assert m["fragments_removed"] == 13 and m["version"] == theirs_before.version + 1

    theirs = lance.dataset(uri)
    assert theirs.version == m["version"]
    assert sorted_table(theirs.to_table(with_row_id=stable)).equals(expected)
    assert sorted_table(lance_ops.dataset(uri).to_table(with_row_id=stable)).equals(expected)
    assert theirs.count_rows() == expected.num_rows == 8520 - 134 - 6000 - 10
    assert all(not f.metadata.deletion_file for f in theirs.get_fragments())
    if stable:
        probe = expected["_rowid"].to_numpy()[::11].tolist()
        got = theirs._take_rows(probe)
        want = expected.filter(np.isin(expected["_rowid"].to_numpy(), probe))
        assert sorted(got["id"].to_pylist()) == _ids(want)
        assert lance_ops.dataset(uri).take_by_row_id(probe)["id"].to_pylist() == got["id"].to_pylist()

    # pylance keeps writing: a stale handle deletes (it must understand our Rewrite transaction)
    stale.delete("id = 8401 OR id = 7")
    lance.write_dataset(rows(20000, 20100), uri, mode="append")
    lance.dataset(uri).delete("id >= 20050")
    want_ids = sorted(set(_ids(expected)) - {8401, 7} | set(range(20000, 20050)))
    assert _ids(lance.dataset(uri).to_table()) == want_ids
    assert _ids(lance_ops.dataset(uri).to_table()) == want_ids

    # ... and its own maintenance still works on top of ours
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=10_000)
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    final = lance.dataset(uri)
    assert _ids(final.to_table()) == want_ids
    assert _ids(lance_ops.dataset(uri).to_table()) == want_ids
    assert data_files(uri) == referenced_data_files(uri)
    if stable:
        assert sorted_table(final.to_table(with_row_id=True).filter(
            np.isin(final.to_table()["id"].to_numpy(), expected["id"].to_numpy()))).equals(
            sorted_table(expected.filter(np.isin(expected["id"].to_numpy(), want_ids))))


def test_pylance_compacted_then_we_compact_then_pylance_again(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [40] * 10)
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100)  # reserve + rewrite
    lance.write_dataset(rows(400, 430), uri, mode="append")
    lance.write_dataset(rows(430, 460), uri, mode="append")
    lance.dataset(uri).delete("id < 150")
    expected = sorted_table(lance.dataset(uri).to_table())
    ours = lance_ops.dataset(uri)
    plan = plan_compaction(ours, target_rows_per_fragment=100)
    their_plan = lance.optimize.Compaction.plan(lance.dataset(uri), dict(target_rows_per_fragment=100))
    assert [t.fragment_ids for t in plan.tasks] == [[f.id for f in t.fragments] for t in their_plan.tasks]
    compact_files(ours, target_rows_per_fragment=100)
    assert sorted_table(lance.dataset(uri).to_table()).equals(expected)
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    assert sorted_table(lance.dataset(uri).to_table()).equals(expected)
    assert len(lance.dataset(uri).get_fragments()) == 1
    ids = [f.id for f in lance_ops.dataset(uri).manifest.fragments]
    assert len(set(ids)) == len(ids)


def test_materialize_pylance_deletions_then_pylance_and_our_cleanup(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [300, 300, 300], stable=True, deletes=["id % 2 = 0 AND id < 300", "id >= 300 AND id < 310"])
    expected = sorted_table(lance.dataset(uri).to_table(with_row_id=True))
    m = materialize_deletions(lance_ops.dataset(uri), threshold=0.2)
    assert m["fragments_removed"] == 1 and m["fragments_added"] == 1 and m["files_removed"] == 2
    frags = lance.dataset(uri).get_fragments()
    assert sorted(f.count_rows() for f in frags) == [150, 290, 300]
    assert sorted_table(lance.dataset(uri).to_table(with_row_id=True)).equals(expected)
    try:
        from lance_ops.maintenance.cleanup import cleanup_old_versions
    except ImportError:  # pragma: no cover - written by another engineer
        pytest.skip("lance_ops.maintenance.cleanup not available")
    cleanup_old_versions(lance_ops.dataset(uri), timedelta(0), None, delete_unverified=True)
    assert sorted_table(lance.dataset(uri).to_table(with_row_id=True)).equals(expected)
    lance.dataset(uri).delete("id = 601")
    assert lance.dataset(uri).count_rows() == expected.num_rows - 1


def test_lance_ops_dataset_compacted_by_pylance_and_us_alternately(tmp_path):
    a = str(tmp_path / "a.lance")
    build(a, [25] * 12, library="lance_ops", stable=True, deletes=["id % 4 = 0"])
    b = str(tmp_path / "b.lance")
    shutil.copytree(a, b)
    expected = sorted_table(lance_ops.dataset(a).to_table(with_row_id=True))
    compact_files(lance_ops.dataset(a), target_rows_per_fragment=60)
    lance.dataset(b).optimize.compact_files(target_rows_per_fragment=60)
    got_a = [f.physical_rows for f in sorted(lance_ops.dataset(a).manifest.fragments, key=lambda f: f.id)]
    got_b = [f.physical_rows for f in sorted(lance_ops.dataset(b).manifest.fragments, key=lambda f: f.id)]
    assert got_a == got_b
    for uri in (a, b):
        assert sorted_table(lance.dataset(uri).to_table(with_row_id=True)).equals(expected)
        assert sorted_table(lance_ops.dataset(uri).to_table(with_row_id=True)).equals(expected)


def test_fragments_with_several_data_files_and_dropped_columns(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [30] * 5, deletes=["id % 4 = 0"])
    lance.dataset(uri).add_columns({"double_id": "id * 2"})   # a second data file per fragment
    lance.dataset(uri).drop_columns(["v"])                     # field ids are no longer dense
    expected = sorted_table(lance.dataset(uri).to_table())
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000)
    assert m["fragments_removed"] == 5 and m["files_removed"] == 5 * 3 and m["files_added"] == 1
    (frag,) = lance.dataset(uri).get_fragments()
    assert len(frag.metadata.files) == 1
    assert sorted_table(lance.dataset(uri).to_table()).equals(expected)
    assert sorted_table(lance_ops.dataset(uri).to_table()).equals(expected)
    assert lance.dataset(uri).to_table().column_names == ["id", "s", "tags", "double_id"]


def test_rewrites_keep_fragments_ordered_by_id_so_pylance_row_id_takes_are_exact(tmp_path):
    """pylance orders fragments by id after every commit, and its take by stable row id misses rows
    of fragments listed out of order; our rewrite must leave the same order (it used to put the
    new fragments where the old ones stood: [4, 5, 6, 3])."""
    import pyarrow as pa

    uri = str(tmp_path / "ds")
    rows = lambda start, n: pa.table({"a": np.arange(start, start + n, dtype=np.int64)})  # noqa: E731
    lance_ops.write_dataset(rows(0, 20), uri, max_rows_per_file=15, enable_stable_row_ids=True)
    lance_ops.write_dataset(rows(20, 5), uri, mode="append")
    lance_ops.dataset(uri).delete("a % 2 = 0")
    lance_ops.write_dataset(rows(25, 5), uri, mode="append")
    materialize_deletions(lance_ops.dataset(uri), 0.0)
    ids = [f.id for f in lance_ops.dataset(uri).manifest.fragments]
    assert ids == sorted(ids) == [3, 4, 5, 6]
    theirs = lance.dataset(uri)
    row_ids = theirs.to_table(with_row_id=True)["_rowid"].to_pylist()
    assert theirs._take_rows(row_ids)["a"].to_pylist() == lance_ops.dataset(uri).take_by_row_id(row_ids)["a"].to_pylist()
    some = row_ids[::3]
    assert theirs._take_rows(some)["a"].to_pylist() == lance_ops.dataset(uri).take_by_row_id(some)["a"].to_pylist()
    assert len(some) == 6 and sorted(theirs._take_rows(some)["a"].to_pylist()) == [3, 9, 15, 21, 25, 28]
