"""BTREE indices carried through lance_ops compaction by eager remap (issue 19, ADR 0011 step 2).

pylance 14.0.2 is the oracle: the same dataset compacted by pylance gives the expected index files
(decoded content), coverage and commit shape; queries through the index equal brute force.
"""
from __future__ import annotations

import shutil
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_ops
from lance_ops.errors import CommitError
from lance_ops.maintenance.compaction import commit as commit_mod
from lance_ops.maintenance.compaction.run import compact_files, materialize_deletions
from lance_ops.table.index_files import listed_files

FILTERS = ["id < 300", "id >= 1500 and id < 1600", "id = 777", "id in (5, 10, 1999, 2100)", "cat = 'c3'",
           "cat is null", "id > 2050"]


def build(uri: str, version: str, stable: bool) -> list[int]:
    """4 indexed fragments of 500 rows (BTREE on id and cat), deletions, 2 unindexed appends."""
    n = 2000
    cats = pa.array([None if i % 11 == 0 else f"c{i % 7}" for i in range(n)])
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "cat": cats,
                      "x": pa.array(np.arange(n, dtype=np.float64) * 0.5)})
    ds = lance.write_dataset(table, uri, max_rows_per_file=500, data_storage_version=version,
                             enable_stable_row_ids=stable)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BTREE")
    ds.delete("id % 7 = 3 or (id >= 600 and id < 700)")
    extra = pa.table({"id": pa.array(np.arange(n, n + 200, dtype=np.int64)),
                      "cat": pa.array([f"c{i % 7}" for i in range(200)]),
                      "x": pa.array(np.zeros(200))})
    lance.write_dataset(extra.slice(0, 100), uri, mode="append")
    lance.write_dataset(extra.slice(100), uri, mode="append")
    return sorted(lance.dataset(uri).to_table()["id"].to_pylist())


def coverage(ds) -> dict[str, list[int]]:
    return {i["name"]: sorted(i["fragment_ids"]) for i in ds.list_indices()}


def index_tables(uri: str, name: str) -> dict[str, pa.Table]:
    ds = lance.dataset(uri)
    (idx,) = [i for i in ds.list_indices() if i["name"] == name]
    return {f: LanceFileReader(f"{uri}/_indices/{idx['uuid']}/{f}").read_all().to_table()
            for f in ("page_data.lance", "page_lookup.lance")}


def check_queries(ds, expected_ids: list[int]) -> None:
    assert sorted(ds.to_table()["id"].to_pylist()) == expected_ids
    for f in FILTERS:
        via_index = ds.to_table(filter=f, use_scalar_index=True)
        brute = ds.to_table(filter=f, use_scalar_index=False)
        assert sorted(via_index["id"].to_pylist()) == sorted(brute["id"].to_pylist()), f
        assert set(via_index["id"].to_pylist()) <= set(expected_ids), f
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 5").explain_plan()


@pytest.mark.parametrize("stable", [False, True], ids=["addr", "stable"])
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_btree_remap_matches_pylance(tmp_path, version, stable):
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    expected = build(ours, version, stable)
    shutil.copytree(ours, theirs)
    before = lance.dataset(ours)
    old_uuids = {i["uuid"] for i in before.list_indices()}

    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=10_000)
    dry = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=10_000, dry_run=True)
    assert [(s["fragment_ids"], s["index_action"]) for s in dry["plan"]] == [([0, 1, 2, 3], "remap"), ([4, 5], "none")]
    assert {(i["name"], i["kind"], i["action"]) for i in dry["plan"][0]["indices"]} == {
        ("id_idx", "BTREE", "remap"), ("cat_idx", "BTREE", "remap")}
    metrics = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=10_000)
    assert metrics["indices_remapped"] == 2

    a, b = lance.dataset(ours), lance.dataset(theirs)
    a.validate()
    assert a.version == b.version  # ReserveFragments + Rewrite, as pylance commits
    assert [(f.fragment_id, f.metadata.physical_rows) for f in a.get_fragments()] == \
        [(f.fragment_id, f.metadata.physical_rows) for f in b.get_fragments()]
    assert coverage(a) == coverage(b) == {"id_idx": [6], "cat_idx": [6]}
    assert not old_uuids & {i["uuid"] for i in a.list_indices()}
    for name in ("id_idx", "cat_idx"):
        mine, pylance_made = index_tables(ours, name), index_tables(theirs, name)
        for f in mine:
            assert mine[f].equals(pylance_made[f]), (name, f)
            assert mine[f].schema.metadata == pylance_made[f].schema.metadata
    # the committed index entries and the Rewrite carry what pylance's do (files with sizes)
    ours_mf, theirs_mf = lance_ops.dataset(ours).manifest_file, lance_ops.dataset(theirs).manifest_file
    for mi, ti in zip(ours_mf.index_section.indices, theirs_mf.index_section.indices):
        assert (mi.name, mi.dataset_version, mi.index_version, mi.fragment_bitmap, mi.index_details) == \
            (ti.name, ti.dataset_version, ti.index_version, ti.fragment_bitmap, ti.index_details)
        assert [n for n, _ in listed_files(mi)] == [n for n, _ in listed_files(ti)]
    rewritten = ours_mf.transaction.rewrite.rewritten_indices
    assert len(rewritten) == 2 and all(len(listed_files(e, 5)) == 2 for e in rewritten)
    stats = a.stats.index_stats("id_idx")
    assert stats["num_indexed_rows"] + stats["num_unindexed_rows"] == len(expected)
    check_queries(a, expected)

    # pylance's own maintenance keeps working on top
    a.optimize.optimize_indices()
    lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=10_000)
    lance.dataset(ours).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    final = lance.dataset(ours)
    final.validate()
    check_queries(final, expected)


@pytest.mark.parametrize("stable", [False, True], ids=["addr", "stable"])
def test_materialize_deletions_remaps_btree(tmp_path, stable):
    uri = str(tmp_path / "t.lance")
    expected = build(uri, "2.2", stable)
    dry = materialize_deletions(lance_ops.dataset(uri), 0.05, dry_run=True)
    assert [(s["fragment_ids"], s["index_action"]) for s in dry["plan"]] == [
        ([0], "remap"), ([1], "remap"), ([2], "remap"), ([3], "remap")]
    materialize_deletions(lance_ops.dataset(uri), 0.05)
    ds = lance.dataset(uri)
    ds.validate()
    assert coverage(ds) == {"id_idx": [6, 7, 8, 9], "cat_idx": [6, 7, 8, 9]}
    assert all(f.metadata.deletion_file is None for f in ds.get_fragments())
    check_queries(ds, expected)

    # lance_ops cleanup keeps exactly the index dirs a retained version references
    indices = tmp_path / "t.lance" / "_indices"
    live = {i["uuid"] for i in ds.list_indices()}
    assert live < {p.name for p in indices.iterdir()}
    lance_ops.dataset(uri).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    assert {p.name for p in indices.iterdir() if any(p.iterdir())} == live
    final = lance.dataset(uri)
    final.validate()
    check_queries(final, expected)


def test_failed_rewrite_after_reserve_then_rerun(tmp_path, monkeypatch):
    """A Rewrite that fails after the ReserveFragments version: nothing duplicated, index dirs of the
    failed attempt removed, and a re-run (same idempotency key) commits exactly once."""
    uri = str(tmp_path / "t.lance")
    expected = build(uri, "2.1", False)
    version0 = lance.dataset(uri).version
    real = commit_mod.commit_transaction

    def fail_rewrite(store, base, txn, *args, **kwargs):
        if txn.WhichOneof("operation") == "rewrite":
            raise CommitError("injected: the store refused the Rewrite manifest")
        return real(store, base, txn, *args, **kwargs)

    monkeypatch.setattr(commit_mod, "commit_transaction", fail_rewrite)
    dirs_before = {p.name for p in (tmp_path / "t.lance" / "_indices").iterdir()}
    with pytest.raises(CommitError, match="injected"):
        compact_files(lance_ops.dataset(uri), target_rows_per_fragment=10_000, idempotency_key="k1")
    ds = lance.dataset(uri)
    assert ds.version == version0 + 1  # only the reserve landed
    ds.validate()
    assert {p.name for p in (tmp_path / "t.lance" / "_indices").iterdir() if any(p.iterdir())} == dirs_before
    check_queries(ds, expected)

    monkeypatch.setattr(commit_mod, "commit_transaction", real)
    first = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=10_000, idempotency_key="k1")
    again = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=10_000, idempotency_key="k1")
    assert again["already_committed"] is True and again["version"] == first["version"]
    ds = lance.dataset(uri)
    ds.validate()
    assert ds.count_rows() == len(expected)
    check_queries(ds, expected)


def test_partial_group_is_refused(tmp_path):
    """A result mixing indexed and unindexed fragments (never planned) is refused before writing."""
    from lance_ops.maintenance.compaction.plan import plan_compaction

    uri = str(tmp_path / "t.lance")
    build(uri, "2.2", False)
    ds = lance_ops.dataset(uri)
    plan = plan_compaction(ds, target_rows_per_fragment=10_000)
    task = plan.tasks[0]
    mixed = type(task).from_dict({**task.to_dict()})
    mixed.fragments = mixed.fragments + [f for f in ds.manifest.fragments if f.id == 4]
    mixed.live_rows = mixed.live_rows + [100]
    mixed.output_rows = [sum(mixed.live_rows)]
    result = mixed.execute(uri)
    version = ds.version
    with pytest.raises(lance_ops.errors.LanceOpsError, match="covers only"):
        commit_mod.commit_compaction(uri, [result])
    assert lance.dataset(uri).version == version


def test_multi_page_btree_matches_pylance(tmp_path):
    """Several 4096-row pages with duplicate values and nulls: pages and lookup as pylance cuts them."""
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    n = 10_000
    vals = pa.array([None if i % 13 == 0 else (i * 7919) % 997 for i in range(n)], pa.int32())
    lance.write_dataset(pa.table({"id": pa.array(np.arange(n)), "v": vals}), ours, max_rows_per_file=2500)
    ds = lance.dataset(ours)
    ds.create_scalar_index("v", "BTREE")
    ds.delete("id % 3 = 0")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files()
    compact_files(lance_ops.dataset(ours))
    mine, pylance_made = index_tables(ours, "v_idx"), index_tables(theirs, "v_idx")
    assert mine["page_lookup.lance"].num_rows == 2
    for f in mine:
        assert mine[f].equals(pylance_made[f]), f
    a = lance.dataset(ours)
    a.validate()
    for f in ["v = 5", "v < 100", "v is null", "v between 300 and 310"]:
        assert sorted(a.to_table(filter=f, use_scalar_index=True)["id"].to_pylist()) == \
            sorted(a.to_table(filter=f, use_scalar_index=False)["id"].to_pylist()), f


def _fake_remapper(action):
    def remap(request):
        from lance_ops.maintenance.index_remap import RemapOutcome

        return RemapOutcome(action)

    return remap


@pytest.mark.parametrize("stable", [False, True], ids=["addr", "stable"])
def test_keep_and_drop_outcomes(tmp_path, monkeypatch, stable):
    """"drop" leaves the entry as it was (pylance's Drop); "keep" only makes sense with stable row
    ids (bitmap recalculated, files kept) and is refused otherwise, before the Rewrite."""
    from lance_ops.maintenance.index_remap.registry import REMAPPERS

    uri = str(tmp_path / "t.lance")
    table = pa.table({"id": pa.array(np.arange(1000)), "c": pa.array([f"k{i % 5}" for i in range(1000)])})
    ds = lance.write_dataset(table, uri, max_rows_per_file=250, enable_stable_row_ids=stable)
    ds.create_scalar_index("c", "BITMAP")
    ds.delete("id % 4 = 0")
    before = {i["uuid"]: sorted(i["fragment_ids"]) for i in lance.dataset(uri).list_indices()}
    monkeypatch.setitem(REMAPPERS, "BITMAP", _fake_remapper("drop"))
    compact_files(lance_ops.dataset(uri))
    after = lance.dataset(uri)
    after.validate()
    if stable:  # row-id kind: the recalculation follows the data
        assert {u: sorted(i) for u, i in ((i["uuid"], i["fragment_ids"]) for i in after.list_indices())} == \
            {u: [4] for u in before}
    else:
        assert {i["uuid"]: sorted(i["fragment_ids"]) for i in after.list_indices()} == before
    expected = sorted(i for i in range(1000) if i % 4)
    assert sorted(after.to_table(filter="c = 'k1'")["id"].to_pylist()) == [i for i in expected if i % 5 == 1]

    uri2 = str(tmp_path / "t2.lance")
    ds = lance.write_dataset(table, uri2, max_rows_per_file=250, enable_stable_row_ids=stable)
    ds.create_scalar_index("c", "BITMAP")
    ds.delete("id % 4 = 0")
    monkeypatch.setitem(REMAPPERS, "BITMAP", _fake_remapper("keep"))
    if not stable:
        version = lance.dataset(uri2).version
        with pytest.raises(lance_ops.errors.UnsupportedError, match="without stable row ids"):
            compact_files(lance_ops.dataset(uri2))
        assert lance.dataset(uri2).version == version + 1  # the reserve only
        return
    compact_files(lance_ops.dataset(uri2))
    kept = lance.dataset(uri2)
    kept.validate()
    assert [sorted(i["fragment_ids"]) for i in kept.list_indices()] == [[4]]
    assert sorted(kept.to_table(filter="c = 'k1'", use_scalar_index=True)["id"].to_pylist()) == \
        [i for i in expected if i % 5 == 1]


def test_btree_remap_on_s3(s3_bucket, moto_server):
    uri = f"{s3_bucket}/remap.lance"
    opts = moto_server.storage_options
    n = 1000
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64))})
    lance.write_dataset(table, uri, max_rows_per_file=250, storage_options=opts)
    ds = lance.dataset(uri, storage_options=opts)
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id % 3 = 0")
    m = compact_files(lance_ops.dataset(uri, storage_options=opts))
    assert m["indices_remapped"] == 1
    after = lance.dataset(uri, storage_options=opts)
    after.validate()
    assert [sorted(i["fragment_ids"]) for i in after.list_indices()] == [[4]]
    assert sorted(after.to_table(filter="id < 40", use_scalar_index=True)["id"].to_pylist()) == \
        [i for i in range(40) if i % 3]
    assert after.to_table(filter="id = 501", use_scalar_index=True)["id"].to_pylist() == []
    assert after.to_table(filter="id = 500", use_scalar_index=True)["id"].to_pylist() == [500]


def test_index_created_since_the_plan_is_a_retryable_conflict(tmp_path):
    from lance_ops.errors import RetryableCommitConflictError
    from lance_ops.maintenance.compaction.plan import plan_compaction

    uri = str(tmp_path / "t.lance")
    expected = build(uri, "2.2", False)
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=10_000)
    results = [t.execute(uri) for t in plan.tasks]
    lance.dataset(uri).create_scalar_index("x", "BTREE")
    version = lance.dataset(uri).version
    with pytest.raises(RetryableCommitConflictError, match="x_idx"):
        commit_mod.commit_compaction(uri, results)
    assert lance.dataset(uri).version == version
    # compact_files re-plans and remaps all three
    assert compact_files(lance_ops.dataset(uri), target_rows_per_fragment=10_000)["indices_remapped"] == 3
    ds = lance.dataset(uri)
    ds.validate()
    check_queries(ds, expected)
    assert ds.to_table(filter="x = 10.5", use_scalar_index=True)["id"].to_pylist() == [21]
