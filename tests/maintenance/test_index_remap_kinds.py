"""BITMAP, LABEL_LIST, NGRAM, ZONEMAP and BLOOMFILTER remappers against pylance 14.0.2 (the oracle).

For a pylance-made dataset with deletions, a copy is compacted by pylance; the remappers run on
the original with the AddressMap of the same rewrite groups. BITMAP / LABEL_LIST / NGRAM files
must decode to what pylance's own remap wrote (same keys, same row sets, same bytes); ZONEMAP must
equal a zone map pylance trains afresh over the compacted data; BLOOMFILTER zones must equal a
fresh one's and their filters hold every bit of it (superset: OR-merged). Storage 2.0/2.1/2.2 x
stable row ids on/off, plus a partial rewrite with an unindexed tail appended after the index.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.format.version import FileVersion
from lance_ops.maintenance.index_remap import codecs
from lance_ops.maintenance.index_remap.registry import REMAPPERS
from tests.maintenance.index_remap_helpers import (
    Compacted, compact_copy, make_table, pylance_files, remap_request, segment)

lance = pytest.importorskip("lance")
from lance.indices import IndexConfig  # noqa: E402

ZONE_CFG = IndexConfig(index_type="zonemap", parameters={"rows_per_zone": 256})
BLOOM_CFG = IndexConfig(index_type="bloomfilter", parameters={"number_of_items": 256, "probability": 0.01})
COMBOS = [(v, s) for v in ("2.0", "2.1", "2.2") for s in (False, True)]


def _build(path: str, storage: str, stable: bool) -> None:
    ds = lance.write_dataset(make_table(), path, max_rows_per_file=500, data_storage_version=storage,
                             enable_stable_row_ids=stable)
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    ds.create_scalar_index("text", "NGRAM")
    ds.create_scalar_index("x", ZONE_CFG)
    ds.create_scalar_index("s", BLOOM_CFG)


@pytest.fixture(scope="module", params=COMBOS, ids=[f"v{v}-{'stable' if s else 'addr'}" for v, s in COMBOS])
def compacted(request, tmp_path_factory) -> Compacted:  # type: ignore[no-untyped-def]
    storage, stable = request.param
    tmp = tmp_path_factory.mktemp(f"kinds_{storage}_{stable}")
    path = str(tmp / "ds")
    _build(path, storage, stable)
    lance.dataset(path).delete("id % 10 = 3 or id < 100 or (id >= 1500 and id < 1600)")
    return compact_copy(path, tmp)


def _file(path: str) -> tuple[pa.Table, dict[bytes, bytes], list[bytes], tuple[int, int]]:
    from lance.file import LanceFileReader

    reader = LanceFileReader(path)
    meta = reader.metadata()
    buffers = [bytes(reader.read_global_buffer(i)) for i in range(1, len(meta.global_buffers))]
    return reader.read_all().to_table(), dict(meta.schema.metadata or {}), buffers, (
        meta.major_version, meta.minor_version)


def _ours(c: Compacted, new_uuid: str, name: str) -> tuple[pa.Table, dict[bytes, bytes], list[bytes], tuple[int, int]]:
    return _file(f"{c.path}/_indices/{new_uuid}/{name}")


def _expected_footer(c: Compacted) -> tuple[int, int]:
    return FileVersion.parse(lance.dataset(c.path).data_storage_version).footer


@pytest.mark.parametrize("name,file,column,decode", [
    ("cat_idx", "bitmap_page_lookup.lance", "bitmaps", lambda b: codecs.decode_row_addr_treemap(b).addresses),
    ("labels_idx", "bitmap_page_lookup.lance", "bitmaps", lambda b: codecs.decode_row_addr_treemap(b).addresses),
    ("text_idx", "ngram_postings.lance", "posting_list", codecs.decode_roaring_treemap),
])
def test_row_address_kinds_match_pylance_remap(compacted, name, file, column, decode):
    req = remap_request(compacted, name)
    outcome = REMAPPERS[req.kind](req)
    if compacted.stable:
        # row ids survive compaction: pylance kept the segment's uuid and files, so do we
        assert outcome.action == "keep" and outcome.files == []
        assert segment(compacted.copy, name).uuid.uuid == req.index.uuid.uuid
        return
    assert outcome.action == "remap"
    ours, ours_meta, ours_buffers, footer = _ours(compacted, req.new_uuid, file)
    theirs, theirs_meta, theirs_buffers, theirs_footer = _file(f"{pylance_files(compacted, name)}/{file}")
    assert footer == theirs_footer == _expected_footer(compacted)
    assert outcome.files == [(file, (compacted_path := __import__("pathlib").Path(
        f"{compacted.path}/_indices/{req.new_uuid}/{file}")).stat().st_size)]
    assert compacted_path.exists()
    key = "keys" if "keys" in ours.column_names else "tokens"
    assert ours.column(key).to_pylist() == theirs.column(key).to_pylist()
    ours_sets = [decode(b).tolist() for b in ours.column(column).to_pylist()]
    theirs_sets = [decode(b).tolist() for b in theirs.column(column).to_pylist()]
    assert ours_sets == theirs_sets
    assert ours.schema == theirs.schema and ours.equals(theirs)  # same bytes per bitmap too
    assert ours_meta == theirs_meta and ours_buffers == theirs_buffers
    # no deleted row and no old fragment is left in any set
    live = set(int(a) for a in compacted.amap.new)
    assert all(a in live for s in ours_sets for a in s)


def _fresh(c: Compacted, column: str, cfg: IndexConfig, file: str) -> tuple[pa.Table, dict, list, tuple]:
    """The index pylance trains afresh over the compacted copy (the oracle of a rebuild)."""
    ds = lance.dataset(c.copy)
    ds.create_scalar_index(column, cfg, name=f"fresh_{column}", replace=True)
    fresh = next(i for i in lance.dataset(c.copy).describe_indices() if i.name == f"fresh_{column}")
    return _file(f"{c.copy}/_indices/{fresh.segments[0].uuid}/{file}")


def test_zonemap_rebuild_equals_a_fresh_pylance_zonemap(compacted):
    req = remap_request(compacted, "x_idx")
    outcome = REMAPPERS["ZONEMAP"](req)
    assert outcome.action == "rebuild" and [f for f, _ in outcome.files] == ["zonemap.lance"]
    ours, meta, buffers, footer = _ours(compacted, req.new_uuid, "zonemap.lance")
    theirs, theirs_meta, theirs_buffers, theirs_footer = _fresh(compacted, "x", ZONE_CFG, "zonemap.lance")
    assert footer == theirs_footer and ours.schema == theirs.schema
    assert ours.to_pandas().equals(theirs.to_pandas())  # NaN maxima compare equal here
    assert meta == theirs_meta and buffers == theirs_buffers  # rows_per_zone, exact null bitmap


def test_bloomfilter_rebuild_zones_equal_and_filters_cover_a_fresh_one(compacted):
    req = remap_request(compacted, "s_idx")
    outcome = REMAPPERS["BLOOMFILTER"](req)
    assert outcome.action == "rebuild" and [f for f, _ in outcome.files] == ["bloomfilter.lance"]
    ours, meta, buffers, footer = _ours(compacted, req.new_uuid, "bloomfilter.lance")
    theirs, theirs_meta, theirs_buffers, theirs_footer = _fresh(compacted, "s", BLOOM_CFG, "bloomfilter.lance")
    assert footer == theirs_footer and ours.schema == theirs.schema
    assert ours.drop_columns(["bloom_filter_data"]).equals(theirs.drop_columns(["bloom_filter_data"]))
    for mine, fresh in zip(ours.column("bloom_filter_data").to_pylist(), theirs.column("bloom_filter_data").to_pylist()):
        a, b = np.frombuffer(mine, np.uint8), np.frombuffer(fresh, np.uint8)
        assert len(a) == len(b) and ((a & b) == b).all()
    assert meta == theirs_meta and buffers == theirs_buffers


def test_partial_rewrite_with_unindexed_tail(tmp_path):
    """Only fragment 1 of the indexed ones is rewritten (its deletions pass the threshold); the
    tail appended after the indices is compacted in its own group. Untouched fragments keep
    their entries and zones; the tail appears in no remapped file."""
    path = str(tmp_path / "ds")
    _build(path, "2.2", False)
    tail = make_table(300, seed=1).set_column(0, "id", pa.array(np.arange(2000, 2300), pa.int64()))
    lance.write_dataset(tail, path, mode="append", max_rows_per_file=100)
    lance.dataset(path).delete("(id >= 500 and id < 700) or id = 2050")
    c = compact_copy(path, tmp_path, target_rows_per_fragment=500)
    assert c.amap.rewritten == {1, 4, 5, 6}
    indexed_new = {f.id for f in c.new_fragments if f.physical_rows == 300}
    assert len(indexed_new) == 1
    for name, file in [("cat_idx", "bitmap_page_lookup.lance"), ("labels_idx", "bitmap_page_lookup.lance"),
                       ("text_idx", "ngram_postings.lance")]:
        req = remap_request(c, name)
        assert REMAPPERS[req.kind](req).action == "remap"
        ours = _ours(c, req.new_uuid, file)
        theirs = _file(f"{pylance_files(c, name)}/{file}")
        assert ours[0].equals(theirs[0]) and ours[2] == theirs[2]
    req = remap_request(c, "x_idx")
    assert REMAPPERS["ZONEMAP"](req).action == "rebuild"
    zones = _ours(c, req.new_uuid, "zonemap.lance")[0]
    assert sorted(set(zones.column("fragment_id").to_pylist())) == sorted({0, 2, 3} | indexed_new)
    fresh = _fresh(c, "x", ZONE_CFG, "zonemap.lance")[0]
    fresh = fresh.filter(pa.compute.is_in(fresh.column("fragment_id"), pa.array(sorted({0, 2, 3} | indexed_new),
                                                                                 pa.uint64())))
    assert zones.to_pandas().equals(fresh.to_pandas())
    req = remap_request(c, "s_idx")
    assert REMAPPERS["BLOOMFILTER"](req).action == "rebuild"
    blooms = _ours(c, req.new_uuid, "bloomfilter.lance")[0]
    old = _file(f"{c.path}/_indices/{req.old_uuid}/bloomfilter.lance")[0]
    kept = old.filter(pa.compute.is_in(old.column("fragment_id"), pa.array([0, 2, 3], pa.uint64())))
    assert blooms.slice(0, kept.num_rows).equals(kept)
    assert set(blooms.column("fragment_id").to_pylist()[kept.num_rows:]) == indexed_new


# --- full lance-ops compaction, checked with pylance ------------------------------------------------

QUERIES = {
    "cat_idx": ["cat = 'c3'", "cat IN ('c1', 'c4')", "cat IS NULL"],
    "labels_idx": ["array_has_any(labels, ['l1'])", "array_has_all(labels, ['l0', 'l2'])"],
    "text_idx": ["contains(text, 'foo3')", "text LIKE '%bar12%'"],
    "x_idx": ["x > 50", "x BETWEEN 10 AND 20", "x IS NULL"],
    "s_idx": ["s = 's00555'", "s IN ('s00555', 's01234', 's02100')", "s IS NULL"],
}
DELETED = "id % 10 = 3 OR id < 100 OR id = 2050"


def _assert_queries_exact(ds, deleted: set[int], stale: tuple[str, ...] = ()) -> None:
    """Every query equals brute force, has no deleted row, and goes through its index (unless
    the index is in ``stale``: pylance's own compaction leaves ZONEMAP / BLOOMFILTER stale)."""
    for name, queries in QUERIES.items():
        for q in queries:
            plan = ds.scanner(filter=q, columns=["id"], use_scalar_index=True).explain_plan()
            assert (f"@{name}(" in plan) == (name not in stale), (q, plan)
            got = ds.to_table(filter=q, columns=["id"], use_scalar_index=True).column("id").to_pylist()
            want = ds.to_table(filter=q, columns=["id"], use_scalar_index=False).column("id").to_pylist()
            assert sorted(got) == sorted(want), q
            assert not deleted & set(got), q


@pytest.mark.parametrize("storage,stable", COMBOS, ids=[f"v{v}-{'stable' if s else 'addr'}" for v, s in COMBOS])
def test_lance_ops_compaction_keeps_every_kind_exact(tmp_path, storage, stable):
    """lance-ops compacts the indexed fragments (and the unindexed tail apart); pylance then
    validates, lists every index covering the new fragment, and answers every query through
    the index as a brute-force scan does; its own optimize_indices / compact_files keep working."""
    import lance_ops
    from lance_ops.maintenance.compaction import compact_files

    path = str(tmp_path / "ds")
    _build(path, storage, stable)
    tail = make_table(300, seed=1).set_column(0, "id", pa.array(np.arange(2000, 2300), pa.int64()))
    lance.write_dataset(tail, path, mode="append", max_rows_per_file=100)
    before = {i.name: i.segments[0].uuid for i in lance.dataset(path).describe_indices()}
    deleted = set(lance.dataset(path).to_table(filter=DELETED, columns=["id"]).column("id").to_pylist())
    lance.dataset(path).delete(DELETED)

    dry = compact_files(lance_ops.dataset(path), dry_run=True)
    planned = {i["kind"]: i["action"] for task in dry["plan"] for i in task["indices"]}
    row_ids = "keep" if stable else "remap"
    assert planned == {"BITMAP": row_ids, "LABEL_LIST": row_ids, "NGRAM": row_ids, "ZONEMAP": "rebuild",
                       "BLOOMFILTER": "rebuild"}
    metrics = compact_files(lance_ops.dataset(path))
    assert metrics["fragments_removed"] == 7 and metrics["fragments_added"] == 2
    assert sorted(metrics["index_actions"].values()) == sorted(planned.values())

    ds = lance.dataset(path)
    ds.validate()
    frags = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    indexed_frag = next(f for f, n in frags.items() if n == 1710)
    indices = {i.name: i for i in ds.describe_indices()}
    assert set(indices) == set(before)  # every index still listed
    for name, info in indices.items():
        assert [sorted(s.fragment_ids) for s in info.segments] == [[indexed_frag]], name
        stats = ds.stats.index_stats(name)
        assert (stats["num_indexed_rows"], stats["num_unindexed_rows"]) == (1710, 269), name
        kept = info.segments[0].uuid == before[name]
        # row-id kinds keep their files with stable row ids (as pylance); the rest get a new uuid
        assert kept == (stable and name in ("cat_idx", "labels_idx", "text_idx")), name
    _assert_queries_exact(ds, deleted)

    # pylance's own maintenance keeps working on what lance-ops committed
    lance.write_dataset(make_table(50, seed=2).set_column(0, "id", pa.array(np.arange(5000, 5050), pa.int64())),
                        path, mode="append")
    lance.dataset(path).optimize.optimize_indices()
    _assert_queries_exact(lance.dataset(path), deleted)
    lance.dataset(path).optimize.compact_files()
    ds = lance.dataset(path)
    ds.validate()
    _assert_queries_exact(ds, deleted, stale=("x_idx", "s_idx"))


@pytest.mark.parametrize("storage,stable", [("2.0", False), ("2.2", True)], ids=["v2.0-addr", "v2.2-stable"])
def test_materialize_deletions_then_cleanup_keep_every_kind_exact(tmp_path, storage, stable):
    """Standalone deletion materialization rewrites one indexed fragment (untouched ones keep
    their entries and zones); lance-ops cleanup then removes exactly the superseded index dirs."""
    import os
    from datetime import timedelta

    import lance_ops

    path = str(tmp_path / "ds")
    _build(path, storage, stable)
    lance.dataset(path).delete("id >= 500 AND id < 700")
    uuids_before = set(os.listdir(f"{path}/_indices"))
    metrics = lance_ops.dataset(path).optimize.materialize_deletions()
    assert metrics["fragments_removed"] == 1
    actions = sorted(metrics["index_actions"].values())
    assert actions == sorted(["keep" if stable else "remap"] * 3 + ["rebuild", "rebuild"])
    ds = lance.dataset(path)
    ds.validate()
    new_frag = max(f.fragment_id for f in ds.get_fragments())
    for info in ds.describe_indices():
        assert sorted(info.segments[0].fragment_ids) == [0, 2, 3, new_frag], info.name
    _assert_queries_exact(ds, set(range(500, 700)))

    lance_ops.dataset(path).cleanup_old_versions(older_than=timedelta(0))
    live = {i.segments[0].uuid for i in lance.dataset(path).describe_indices()}
    # (a local store keeps the emptied directories; object stores have none)
    assert {d for d in os.listdir(f"{path}/_indices") if os.listdir(f"{path}/_indices/{d}")} == live
    assert len(uuids_before - live) == actions.count("remap") + actions.count("rebuild")  # superseded, only
    _assert_queries_exact(lance.dataset(path), set(range(500, 700)))


def test_emptied_keys_dropped_and_old_layouts_remapped_as_pylance(tmp_path):
    """Keys (and the NULL key) whose rows were all deleted leave BITMAP / LABEL_LIST files, tokens
    stay in NGRAM ones, as pylance's remap writes them; a pylance v0.20 dataset's BITMAP (keys
    unordered) and BTREE (old layout) come out as pylance 14.0.2 remaps them."""
    import shutil
    from pathlib import Path

    path = str(tmp_path / "ds")
    n = 1000
    table = pa.table({"id": pa.array(np.arange(n)),
                      "cat": pa.array([f"k{i % 50}" if i % 7 else None for i in range(n)]),
                      "labels": pa.array([[f"a{i % 40}"] if i % 9 else None for i in range(n)]),
                      "text": pa.array([f"zz{i % 45:02d}qq" for i in range(n)])})
    ds = lance.write_dataset(table, path, max_rows_per_file=250, data_storage_version="2.2")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    ds.create_scalar_index("text", "NGRAM")
    lance.dataset(path).delete("id % 50 = 7 OR id % 40 = 3 OR id % 45 = 11 OR id % 7 = 0")
    c = compact_copy(path, tmp_path)
    old = Path(__file__).parents[1] / "data" / "historical" / "v0.20.0" / "old_btree_bitmap_indices.lance"
    old_path = str(tmp_path / "old")
    shutil.copytree(old, old_path)
    lance.dataset(old_path).delete("btree < 3")
    (tmp_path / "old_copy").mkdir()
    c_old = compact_copy(old_path, tmp_path / "old_copy", materialize_deletions_threshold=0.01)
    cases = [(c, "cat_idx", "bitmap_page_lookup.lance"), (c, "labels_idx", "bitmap_page_lookup.lance"),
             (c, "text_idx", "ngram_postings.lance"), (c_old, "bitmap_idx", "bitmap_page_lookup.lance"),
             (c_old, "btree_idx", "page_data.lance"), (c_old, "btree_idx", "page_lookup.lance")]
    for comp, name, file in cases:
        req = remap_request(comp, name)
        assert REMAPPERS[req.kind](req).action == "remap"
        ours, theirs = _ours(comp, req.new_uuid, file), _file(f"{pylance_files(comp, name)}/{file}")
        assert ours[0].equals(theirs[0]) and ours[1:] == theirs[1:], (name, file)
    assert _file(f"{pylance_files(c, 'cat_idx')}/bitmap_page_lookup.lance")[0].num_rows == 49  # 51 keys before
