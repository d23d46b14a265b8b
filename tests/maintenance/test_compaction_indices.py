"""Index-aware compaction (issue 19 item 4, ADR 0011), with pylance 14.0.2 as the oracle.

Datasets carry BTREE, BITMAP, LABEL_LIST, INVERTED and IVF_PQ indices built by pylance over the
first fragments, then small appends (unindexed) and deletes. lance_ops compacts the unindexed tail
and leaves every indexed fragment alone; pylance must then open and validate the dataset, list
every index with the same coverage, answer index queries exactly as a brute-force scan, never
return a deleted row, and keep its own maintenance working. A rewrite of an indexed fragment is
refused before anything is written; so is an index kind lance_ops does not know.
"""
from __future__ import annotations

import os
import shutil
from datetime import timedelta
from typing import Any

import lance
from lance.optimize import Compaction
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from lance_ops import cli
from lance_ops.errors import UnsupportedError
from lance_ops.maintenance.compaction import (
    CompactionPlan,
    CompactionTask,
    compact_files,
    materialize_deletions,
    plan_compaction,
)
from lance_ops.table.manifest.codec import read_manifest, write_manifest

INDEXED_ROWS = 1000  # per indexed fragment (two of them)
DIM = 8


def rows(lo: int, hi: int) -> pa.Table:
    """Rows ``lo..hi`` with a column for each index kind."""
    ids = np.arange(lo, hi)
    rng = np.random.default_rng(lo)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "cat": pa.array([f"c{i % 7}" for i in ids]),
        "tags": pa.array([[f"t{i % 3}", f"u{i % 5}"] for i in ids], pa.list_(pa.string())),
        "text": pa.array([f"hello world number {i} fox{i % 11}" for i in ids]),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal((hi - lo) * DIM).astype(np.float32)), DIM),
    })


def build(uri: str, version: str, stable: bool, appends: int = 4) -> None:
    """Two indexed fragments, ``appends`` small unindexed ones, deletes in both kinds."""
    lance.write_dataset(rows(0, 2 * INDEXED_ROWS), uri, data_storage_version=version,
                        enable_stable_row_ids=stable, max_rows_per_file=INDEXED_ROWS)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    ds.create_scalar_index("text", "INVERTED")
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    start = 2 * INDEXED_ROWS
    for _ in range(appends):
        lance.write_dataset(rows(start, start + 60), uri, mode="append")
        start += 60
    # a few deletes in the indexed fragments (below the 10% threshold) and many in the tail
    lance.dataset(uri).delete("id = 7 OR id = 1500 OR (id >= 2000 AND id % 4 = 0)")


def coverage(ds: Any) -> dict[str, tuple[str, list[int]]]:
    """index name -> (uuid, covered fragment ids), as pylance lists them."""
    return {i["name"]: (i["uuid"], sorted(i["fragment_ids"])) for i in ds.list_indices()}


def check_queries(ds: Any) -> None:
    """Index answers equal brute-force answers; no deleted row comes back from the vector index."""
    full = ds.to_table(columns=["id", "cat", "tags", "text"])
    ids = full["id"].to_numpy()

    def same(filter_: str, mask: np.ndarray) -> None:
        got = sorted(ds.to_table(columns=["id"], filter=filter_)["id"].to_pylist())
        assert got == sorted(ids[mask].tolist()), filter_

    same("id = 17", ids == 17)
    same("id >= 1990 AND id < 2030", (ids >= 1990) & (ids < 2030))
    same("id = 7", ids == 7)  # deleted: nothing
    same("cat = 'c3'", np.array([c == "c3" for c in full["cat"].to_pylist()]))
    same("array_has_any(tags, ['u4'])", np.array(["u4" in t for t in full["tags"].to_pylist()]))
    fts = sorted(ds.to_table(columns=["id"], full_text_query="fox3")["id"].to_pylist())
    assert fts == sorted(ids[np.array([t.endswith(" fox3") for t in full["text"].to_pylist()])].tolist())
    live = set(ids.tolist())
    q = np.ones(DIM, np.float32)
    hits = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 10})["id"].to_pylist()
    assert len(hits) == 10 and set(hits) <= live
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 17").explain_plan() or \
        "ScalarIndex" in ds.scanner(filter="id = 17").explain_plan()


def all_files(uri: str) -> set[str]:
    out = set()
    for root, _, files in os.walk(uri):
        for f in files:
            out.add(os.path.relpath(os.path.join(root, f), uri))
    return out


@pytest.mark.parametrize("version,stable", [("2.0", False), ("2.2", True), ("2.2", False), ("2.0", True)])
def test_unindexed_tail_compacted_indices_kept(tmp_path, version, stable):
    uri = str(tmp_path / "t.lance")
    build(uri, version, stable)
    before = lance.dataset(uri)
    cov = coverage(before)
    assert set(cov) == {"id_idx", "cat_idx", "tags_idx", "text_idx", "vec_idx"}
    assert all(frags == [0, 1] for _, frags in cov.values())
    expected = sorted(before.to_table()["id"].to_pylist())
    section_before = lance_ops.dataset(uri).manifest_file.index_section.SerializeToString()

    # pylance's planner bins the same fragments (the indexed ones are not candidates here)
    theirs = Compaction.plan(before, dict(target_rows_per_fragment=INDEXED_ROWS))
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=INDEXED_ROWS)
    assert [t.fragment_ids for t in plan.tasks] == [[f.id for f in t.fragments] for t in theirs.tasks]
    assert [t.fragment_ids for t in plan.tasks] == [[2, 3, 4, 5]] and plan.held_back == []
    assert [s["index_action"] for s in plan.summary()] == ["none"]

    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=INDEXED_ROWS)
    assert m["fragments_removed"] == 4 and m["fragments_added"] == 1

    # the commit is what pylance writes for this case: a Rewrite without rewritten_indices, the
    # index section untouched (same uuids, bitmaps, files)
    ours = lance_ops.dataset(uri)
    txn = ours.transaction
    assert txn.WhichOneof("operation") == "rewrite" and len(txn.rewrite.rewritten_indices) == 0
    assert [[f.id for f in g.old_fragments] for g in txn.rewrite.groups] == [[2, 3, 4, 5]]
    assert ours.manifest_file.index_section.SerializeToString() == section_before

    after = lance.dataset(uri)
    after.validate()
    assert coverage(after) == cov
    assert sorted(after.to_table()["id"].to_pylist()) == expected
    tail = [f for f in after.get_fragments() if f.fragment_id not in (0, 1)]
    assert len(tail) == 1
    for name in cov:
        stats = after.stats.index_stats(name)
        assert stats["num_indexed_fragments"] == 2 and stats["num_unindexed_fragments"] == 1, name
        assert stats["num_indexed_rows"] + stats["num_unindexed_rows"] == after.count_rows(), name
        assert stats["num_unindexed_rows"] == tail[0].count_rows(), name
    check_queries(after)

    # pylance's own maintenance keeps working on top
    after.optimize.optimize_indices()
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=10_000)
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    final = lance.dataset(uri)
    final.validate()
    assert set(coverage(final)) == set(cov)
    assert sorted(final.to_table()["id"].to_pylist()) == expected
    check_queries(final)


def test_indexed_candidates_held_back(tmp_path, monkeypatch):
    """Indexed fragments whose index kinds have no remapper are left alone; dry run shows it."""
    from lance_ops.maintenance.index_remap import registry

    uri = str(tmp_path / "t.lance")
    build(uri, "2.2", False)
    cov = coverage(lance.dataset(uri))
    # with every kind remappable the same plan remaps the indexed run instead of holding it back
    full = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=5000, dry_run=True)
    assert [(s["fragment_ids"], s["index_action"]) for s in full["plan"]] == [
        ([0, 1], "remap"), ([2, 3, 4, 5], "none")]
    assert full.get("held_back", 0) == 0 and full["tasks"] == 2
    monkeypatch.setattr(registry, "REMAPPERS", {})  # no kind remappable: the indexed run is held back
    dry = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=5000, dry_run=True)
    assert [(s["fragment_ids"], s["index_action"]) for s in dry["plan"]] == [
        ([0, 1], "remap (not supported yet)"), ([2, 3, 4, 5], "none")]
    assert {i["name"] for i in dry["plan"][0]["indices"]} == set(cov)
    assert {i["kind"] for i in dry["plan"][0]["indices"]} == {"BTREE", "BITMAP", "LABEL_LIST", "INVERTED", "IVF_PQ"}
    assert dry["plan"][1]["indices"] == [] and dry["tasks"] == 1 and dry["held_back"] == 1
    assert "refusal" not in dry and dry["fragments_removed"] == 4

    # the plan's JSON round-trips; held-back tasks stay out of the tasks and cannot be executed
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=5000)
    again = CompactionPlan.from_json(plan.to_json())
    assert [t.fragment_ids for t in again.held_back] == [[0, 1]] and len(again.tasks) == 1
    held = CompactionTask.from_json(again.held_back[0].to_json())
    with pytest.raises(UnsupportedError, match="id_idx"):
        held.execute(uri)
    # a task JSON of an older lance_ops (no index fields) is checked at execution too
    raw = held.to_dict()
    del raw["indices"], raw["index_action"]
    files = all_files(uri)
    with pytest.raises(UnsupportedError, match="indices"):
        CompactionTask.from_dict(raw).execute(uri)
    assert all_files(uri) == files

    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=5000)
    assert m["fragments_removed"] == 4
    ds = lance.dataset(uri)
    ds.validate()
    assert coverage(ds) == cov
    assert [f.fragment_id for f in ds.get_fragments()][:2] == [0, 1]
    check_queries(ds)


def test_rewrite_of_indexed_fragment_refused_writes_nothing(tmp_path, capsys, monkeypatch):
    from lance_ops.maintenance.index_remap import registry

    monkeypatch.setattr(registry, "REMAPPERS", {})  # kinds without a remapper are refused
    uri = str(tmp_path / "t.lance")
    build(uri, "2.0", False, appends=2)
    lance.dataset(uri).delete("id >= 100 AND id < 250")  # 15% of indexed fragment 0
    files, version = all_files(uri), lance.dataset(uri).version
    with pytest.raises(UnsupportedError, match=r"id_idx \(BTREE\).*remap"):
        compact_files(lance_ops.dataset(uri), target_rows_per_fragment=INDEXED_ROWS)
    with pytest.raises(UnsupportedError, match="vec_idx"):
        materialize_deletions(lance_ops.dataset(uri), 0.1)
    dry = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=INDEXED_ROWS, dry_run=True)
    assert [(s["fragment_ids"], s["index_action"]) for s in dry["plan"]] == [
        ([0], "remap (not supported yet)"), ([2, 3], "none")]
    assert "fragment(s) [0]" in dry["refusal"]
    assert cli.main(["compact", uri, "--target-rows-per-fragment", str(INDEXED_ROWS)]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "id_idx (BTREE)" in err and "remap" in err and err.count("\n") == 1
    assert all_files(uri) == files and lance.dataset(uri).version == version
    # without materialisation the unindexed tail is still compacted
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=INDEXED_ROWS, materialize_deletions=False)
    assert m["fragments_removed"] == 2
    lance.dataset(uri).validate()
    check_queries(lance.dataset(uri))


def _retype_index(uri: str, name: str, type_url: str) -> None:
    """Rewrite the latest manifest in place with ``name``'s details type URL replaced."""
    ds = lance_ops.dataset(uri)
    mf = ds.manifest_file
    section = mf.index_section
    for index in section.indices:
        if index.name == name:
            index.index_details.type_url = type_url
    write_manifest(ds.store, mf.path, mf.manifest, mf.transaction, section, if_absent=False)
    assert read_manifest(ds.store, mf.path).index_section.indices[0].index_details.type_url == type_url


def test_unknown_index_kind_refused(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(rows(0, 400), uri, max_rows_per_file=200)
    lance.write_dataset(rows(400, 420), uri, mode="append")
    lance.write_dataset(rows(420, 440), uri, mode="append")
    lance.dataset(uri).create_scalar_index("id", "BTREE", name="future")
    _retype_index(uri, "future", "/lance.table.HologramIndexDetails")
    files = all_files(uri)
    for call in (lambda: compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100),
                 lambda: compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100, dry_run=True),
                 lambda: materialize_deletions(lance_ops.dataset(uri), 0.0)):
        with pytest.raises(UnsupportedError, match=r"'future'.*HologramIndexDetails"):
            call()
    assert all_files(uri) == files


def test_fragment_reuse_index_refused(tmp_path):
    """pylance's deferred remap leaves a __lance_frag_reuse index: not applied by lance_ops yet."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(rows(0, 200), uri, max_rows_per_file=50)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    lance.write_dataset(rows(200, 220), uri, mode="append")
    lance.write_dataset(rows(220, 240), uri, mode="append")
    with pytest.raises(UnsupportedError, match="__lance_frag_reuse.*FRAG_REUSE"):
        compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000)


def test_delta_segments_never_binned_together(tmp_path):
    """Fragments covered by different segments of one index (a delta) go into separate bins."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(rows(0, 100), uri, max_rows_per_file=50)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.write_dataset(rows(100, 200), uri, mode="append", max_rows_per_file=50)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a delta segment over 2, 3
    lance.write_dataset(rows(200, 250), uri, mode="append")
    lance.write_dataset(rows(250, 300), uri, mode="append")
    ds = lance.dataset(uri)
    assert len(ds.describe_indices()[0].segments if hasattr(ds, "describe_indices") else
               [i for i in lance_ops.dataset(uri).manifest_file.index_section.indices]) == 2
    theirs = Compaction.plan(ds, dict(target_rows_per_fragment=1000))
    dry = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000, dry_run=True)
    assert [s["fragment_ids"] for s in dry["plan"]] == [[f.id for f in t.fragments] for t in theirs.tasks]
    assert [(s["fragment_ids"], s["index_action"]) for s in dry["plan"]] == [
        ([0, 1], "remap"), ([2, 3], "remap"), ([4, 5], "none")]
    assert dry["plan"][0]["indices"][0]["uuid"] != dry["plan"][1]["indices"][0]["uuid"]
    compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000)
    after = lance.dataset(uri)
    after.validate()
    # each delta segment follows its own fragments (BTREE is remapped)
    assert sorted(sorted(i["fragment_ids"]) for i in after.list_indices()) == [[6], [7]]
    assert sorted(after.to_table(filter="id >= 40 AND id < 160", use_scalar_index=True)["id"].to_pylist()) == \
        list(range(40, 160))
    assert sorted(after.to_table(filter="id >= 90 AND id < 260")["id"].to_pylist()) == list(range(90, 260))
    shutil.rmtree(uri)
