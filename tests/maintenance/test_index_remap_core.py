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
