"""read_ranges: correct slices in input order, and nearby ranges coalesced into few requests."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops.io import LocalStore
from lance_ops.io.ranges import as_ranges, coalesce, cut

DATA = os.urandom(3 * 1024 * 1024 + 123)


@pytest.fixture
def blob(sr):
    path = sr.p("blob.bin")
    sr.store.put(path, DATA)
    sr.store.metrics.reset()
    return path


def test_slices_in_input_order(sr, blob):
    ranges = [(5000, 10), (0, 3), (4990, 30), (100, 0), (len(DATA) - 7, 7), (2_000_000, 1)]
    got = sr.store.read_ranges(blob, ranges)
    assert got == [DATA[s : s + n] for s, n in ranges]


def test_empty_range_list(sr, blob):
    assert sr.store.read_ranges(blob, []) == []
    assert sr.store.metrics.get_requests == 0


def test_nearby_ranges_cost_one_request(sr, blob):
    gap = sr.store.coalesce_gap
    step = max(1, gap // 4)
    ranges = [(1000 + i * step, 50) for i in range(10)][::-1]  # reversed: order must not matter
    got = sr.store.read_ranges(blob, ranges)
    assert got == [DATA[s : s + n] for s, n in ranges]
    assert sr.store.metrics.get_requests == 1


def test_far_ranges_cost_one_request_each(sr, blob):
    gap = sr.store.coalesce_gap
    ranges = [(i * (gap + 1000), 100) for i in range(3)]
    assert max(s for s, _ in ranges) + 100 < len(DATA)
    got = sr.store.read_ranges(blob, ranges)
    assert got == [DATA[s : s + n] for s, n in ranges]
    assert sr.store.metrics.get_requests == 3
    assert sr.store.metrics.bytes_read == 300


def test_two_clusters_cost_two_requests(sr, blob):
    gap = sr.store.coalesce_gap
    far = 2 * gap + 4096
    ranges = [(i * 100, 10) for i in range(10)] + [(far + i * 100, 10) for i in range(10)]
    got = sr.store.read_ranges(blob, ranges)
    assert got == [DATA[s : s + n] for s, n in ranges]
    assert sr.store.metrics.get_requests == 2


def test_overlapping_and_duplicate_ranges(sr, blob):
    ranges = [(10, 100), (50, 10), (10, 100), (0, 500)]
    assert sr.store.read_ranges(blob, ranges) == [DATA[s : s + n] for s, n in ranges]
    assert sr.store.metrics.get_requests == 1


def test_negative_ranges_rejected(sr, blob):
    with pytest.raises(ValueError):
        sr.store.read_ranges(blob, [(-1, 5)])
    with pytest.raises(ValueError):
        sr.store.read_ranges(blob, [(1, -5)])


def test_coalesce_plan_shape():
    plan = coalesce(np.array([100, 0, 10, 1000]), np.array([5, 5, 5, 5]), gap=10)
    assert plan.group_starts.tolist() == [0, 100, 1000]
    assert plan.group_ends.tolist() == [15, 105, 1005]
    assert plan.range_group.tolist() == [1, 0, 0, 2]
    assert plan.range_offset.tolist() == [0, 0, 10, 0]


ranges_strategy = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(0, 300)), min_size=0, max_size=60
)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=0, max_size=2400), ranges=ranges_strategy, gap=st.integers(0, 500))
def test_coalesce_property(data, ranges, gap):
    ranges = [(s, n) for s, n in ranges if s + n <= len(data)]
    starts, lengths = as_ranges(ranges)
    plan = coalesce(starts, lengths, gap)
    blobs = [data[s:e] for s, e in zip(plan.group_starts.tolist(), plan.group_ends.tolist())]
    assert cut(plan, blobs) == [data[s : s + n] for s, n in ranges]
    # merged reads are disjoint, sorted, and separated by more than the gap
    gs, ge = plan.group_starts, plan.group_ends
    assert (ge >= gs).all()
    assert ((gs[1:] - ge[:-1]) > gap).all()
    # each merged read is no bigger than the span of its ranges
    for g in range(len(plan)):
        members = plan.range_group == g
        assert gs[g] == starts[members].min()
        assert ge[g] == (starts + lengths)[members].max()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=1, max_size=20000), ranges=ranges_strategy, gap=st.integers(0, 5000))
def test_local_read_ranges_property(tmp_path_factory, data, ranges, gap):
    store = LocalStore(coalesce_gap=gap)
    path = str(tmp_path_factory.getbasetemp() / "prop.bin")
    store.put(path, data)
    ranges = [(s, n) for s, n in ranges if s + n <= len(data)]
    assert store.read_ranges(path, ranges) == [data[s : s + n] for s, n in ranges]
