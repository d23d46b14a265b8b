"""AddressMap (pylance's transpose rule) and the remap interface types."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_ops.errors import InvalidArgumentError
from lance_ops.maintenance.index_remap import AddressMap, RemapOutcome
from lance_ops.maintenance.index_remap.registry import REMAPPERS


def addr(frag: int, off: int) -> int:
    return (frag << 32) | off


def test_from_groups_zips_survivors_onto_new_fragments_in_order():
    amap = AddressMap.from_groups([
        ([(2, np.array([0, 2], np.uint64)), (1, np.array([1], np.uint64))], [(10, 2), (11, 1)]),
    ])
    assert amap.rewritten == frozenset({1, 2})
    mapped, keep = amap.apply(np.array([addr(1, 1), addr(2, 0), addr(2, 2), addr(2, 1),
                                        addr(1, 0), addr(5, 7)], np.uint64))
    assert keep.tolist() == [True, True, True, False, False, True]
    assert mapped[keep].tolist() == [addr(10, 0), addr(10, 1), addr(11, 0), addr(5, 7)]
    assert amap.new_fragments == frozenset({10, 11})


def test_count_mismatch_is_refused():
    with pytest.raises(InvalidArgumentError, match="2 surviving rows but 3 new rows"):
        AddressMap.from_groups([([(0, np.array([0, 1], np.uint64))], [(4, 3)])])


def test_empty_inputs():
    amap = AddressMap.from_groups([])
    mapped, keep = amap.apply(np.array([addr(0, 1)], np.uint64))
    assert mapped.tolist() == [addr(0, 1)] and keep.tolist() == [True]
    gone = AddressMap.from_groups([([(0, np.array([], np.uint64))], [])])
    mapped, keep = gone.apply(np.array([addr(0, 0), addr(1, 0)], np.uint64))
    assert keep.tolist() == [False, True]
    assert amap.apply(np.array([], np.uint64))[0].dtype == np.uint64


def test_outcome_rejects_unknown_action():
    assert RemapOutcome("keep").files == []
    with pytest.raises(ValueError, match="unknown remap action"):
        RemapOutcome("maybe")


def test_registry_is_a_kind_dict():
    assert all(isinstance(k, str) and k == k.upper() for k in REMAPPERS)


@st.composite
def groups_strategy(draw):
    """Random groups: old fragments with random deletions, new fragments splitting the survivors."""
    next_frag = 0
    groups, survivors = [], []
    for _ in range(draw(st.integers(0, 3))):
        olds = []
        for _ in range(draw(st.integers(1, 3))):
            rows = draw(st.integers(0, 20))
            alive = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
            offs = np.flatnonzero(np.array(alive, bool)).astype(np.uint64)
            olds.append((next_frag, offs))
            survivors.append((next_frag, rows, offs))
            next_frag += 1
        groups.append(olds)
    total_new = 100
    built = []
    for olds in groups:
        n = sum(len(o) for _, o in olds)
        cut = draw(st.integers(0, n))
        news = [(total_new, cut), (total_new + 1, n - cut)]
        total_new += 2
        built.append((olds, news))
    return built, survivors


@settings(max_examples=60, deadline=None)
@given(groups_strategy())
def test_apply_matches_a_per_row_reference(data):
    groups, survivors = data
    amap = AddressMap.from_groups(groups)
    reference: dict[int, int] = {}
    for olds, news in groups:
        old_list = [addr(f, int(o)) for f, offs in sorted(olds, key=lambda x: x[0]) for o in offs]
        new_list = [addr(f, o) for f, rows in news for o in range(rows)]
        reference.update(zip(old_list, new_list))
    probe = [addr(f, o) for f, rows, _ in survivors for o in range(rows)] + [addr(999, 3)]
    mapped, keep = amap.apply(np.array(probe, np.uint64))
    for a, m, k in zip(probe, mapped.tolist(), keep.tolist()):
        if a >> 32 == 999:
            assert k and m == a
        elif a in reference:
            assert k and m == reference[a]
        else:
            assert not k
    # the mapping is injective and lands on every new row
    assert len(set(amap.new.tolist())) == len(amap.new)
    assert sorted(amap.new.tolist()) == sorted(reference.values())


# --- the manifest build of a Rewrite (index section) and ReserveFragments ------------------------
import uuid as uuid_mod  # noqa: E402

from pyroaring import BitMap  # noqa: E402

from lance_ops._proto import table_pb2, transaction_pb2  # noqa: E402
from lance_ops.errors import CommitError  # noqa: E402
from lance_ops.table.index_files import add_rewritten_files, listed_files, set_index_files  # noqa: E402
from lance_ops.table.manifest.index_rewrite import apply_rewrite  # noqa: E402


def _segment(name, frags, url="/lance.table.BTreeIndexDetails", files=(("a.lance", 10),)):
    idx = table_pb2.IndexMetadata(name=name, fragment_bitmap=BitMap(frags).serialize(), dataset_version=3)
    idx.uuid.uuid = uuid_mod.uuid4().bytes
    idx.index_details.type_url = url
    set_index_files(idx, list(files))
    return idx


def _rewrite(groups, rewritten=()):
    txn = transaction_pb2.Transaction(read_version=3)
    for old, new in groups:
        g = txn.rewrite.groups.add()
        g.old_fragments.extend(table_pb2.DataFragment(id=i) for i in old)
        g.new_fragments.extend(table_pb2.DataFragment(id=i) for i in new)
    for old_idx, new_uuid, files in rewritten:
        e = txn.rewrite.rewritten_indices.add()
        e.old_id.uuid = bytes(old_idx.uuid.uuid)
        e.new_id.uuid = new_uuid
        add_rewritten_files(e, files)
    return txn


def _ids(idx):
    return sorted(BitMap.deserialize(bytes(idx.fragment_bitmap)))


def test_apply_rewrite_follows_pylance_rule():
    bt, other, zm = _segment("bt", [0, 1, 2]), _segment("other", [0, 1, 2]), _segment(
        "zm", [0, 1, 2, 5], "/lance.table.ZoneMapIndexDetails")
    section = table_pb2.IndexSection(indices=[bt, other, zm])
    new_uuid = uuid_mod.uuid4().bytes
    txn = _rewrite([([0, 1], [7]), ([4], [8])], [(bt, new_uuid, [("page_data.lance", 5), ("page_lookup.lance", 6)])])
    out = apply_rewrite(section, txn, stable_row_ids=False)
    got_bt, got_other, got_zm = out.indices
    assert bytes(got_bt.uuid.uuid) == new_uuid and _ids(got_bt) == [2, 7]
    assert listed_files(got_bt) == [("page_data.lance", 5), ("page_lookup.lance", 6)]
    assert (got_bt.name, got_bt.dataset_version, got_bt.index_details) == ("bt", 3, bt.index_details)
    assert got_other == other and got_zm == zm  # not rewritten, no stable ids: unchanged
    assert section.indices[0] == bt  # the input is not modified
    stable = apply_rewrite(section, txn, stable_row_ids=True)
    assert _ids(stable.indices[1]) == [2, 7]  # row ids survive: follows its data
    assert _ids(stable.indices[2]) == [2, 5]  # address-domain kind: rewritten fragments withdrawn


def test_apply_rewrite_refuses_a_split_group_and_skips_gone_segments():
    bt = _segment("bt", [0, 1])
    section = table_pb2.IndexSection(indices=[bt])
    with pytest.raises(CommitError, match="splits indexed"):
        apply_rewrite(section, _rewrite([([1, 2], [7])], [(bt, uuid_mod.uuid4().bytes, [])]), stable_row_ids=False)
    gone = _segment("gone", [0])
    out = apply_rewrite(section, _rewrite([([0, 1], [7])], [(gone, uuid_mod.uuid4().bytes, [])]),
                        stable_row_ids=False)
    assert out.indices[0] == bt
    with pytest.raises(CommitError, match="twice"):
        apply_rewrite(section, _rewrite([([0, 1], [7])], [(bt, b"1" * 16, []), (bt, b"2" * 16, [])]),
                      stable_row_ids=False)


def test_reserve_fragments_commit_is_what_pylance_reads(tmp_path):
    import lance
    import pyarrow as pa

    import lance_ops
    from lance_ops.maintenance.compaction.remap import reserve_fragment_ids

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": list(range(10))}), uri, max_rows_per_file=5)
    lance.dataset(uri).create_scalar_index("a", "BTREE")
    ds = lance_ops.dataset(uri)
    version, ids = reserve_fragment_ids(ds.store, ds.base, ds.manifest_file, 3, "2.0")
    assert version == ds.version + 1 and ids == [2, 3, 4]
    after = lance_ops.dataset(uri)
    assert after.manifest.max_fragment_id == 4
    assert after.manifest_file.transaction.reserve_fragments.num_fragments == 3
    assert list(after.manifest.fragments) == list(ds.manifest.fragments)
    assert after.manifest_file.index_section == ds.manifest_file.index_section
    py = lance.dataset(uri)
    py.validate()
    lance.write_dataset(pa.table({"a": [99]}), uri, mode="append")
    assert [f.fragment_id for f in lance.dataset(uri).get_fragments()] == [0, 1, 5]


def test_segment_refusal_holds_fragments_back_at_planning(tmp_path, monkeypatch):
    """A remapper's ``segment_refusal`` is asked at planning: such a segment's fragments are held
    back (dry run names the reason) and a threshold that needs them refuses before any version,
    ReserveFragments included, is written."""
    import lance
    import pyarrow as pa

    import lance_ops
    from lance_ops.errors import UnsupportedError
    from lance_ops.maintenance.compaction import materialize_deletions
    from lance_ops.maintenance.compaction.plan import plan_compaction
    from lance_ops.maintenance.index_remap import registry

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(400), pa.int64())}), uri, max_rows_per_file=100)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).delete("id % 4 = 0")
    btree = REMAPPERS["BTREE"]

    def refusing(request):  # pragma: no cover - must never be called
        raise AssertionError("remap called for a refused segment")

    setattr(refusing, "segment_refusal", lambda store, base, index, stable: "a layout this test refuses")
    monkeypatch.setattr(registry, "REMAPPERS", {**REMAPPERS, "BTREE": refusing})
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=1000, explain=True)
    assert plan.tasks == [] and [t.fragment_ids for t in plan.held_back] == [[0, 1, 2, 3]]
    assert plan.held_back[0].indices[0]["refusal"] == "a layout this test refuses"
    assert "a layout this test refuses" in plan.refusal
    versions = [v["version"] for v in lance.dataset(uri).versions()]
    with pytest.raises(UnsupportedError, match="id_idx.*a layout this test refuses"):
        materialize_deletions(lance_ops.dataset(uri), threshold=0.1)
    assert [v["version"] for v in lance.dataset(uri).versions()] == versions
    monkeypatch.setattr(registry, "REMAPPERS", {**REMAPPERS, "BTREE": btree})
    assert len(plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=1000).tasks) == 1
