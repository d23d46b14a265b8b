"""``chunks.take_spans`` (ADR 0058): the values of every span back to back, exactly as slicing
and concatenating them, whether spans merge into a few slices or need an index of every value."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_ops.format.v2_1.layout import chunks


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), min_size=1, max_size=150), st.integers(0, 2**32 - 1))
def test_take_spans_equals_slicing(spans: list[tuple[int, int]], seed: int) -> None:
    # spans of ``count`` values after a gap of ``gap`` (0: they touch the previous span)
    counts = np.array([c for c, _ in spans], np.int64)
    gaps = np.array([g for _, g in spans], np.int64)
    first = np.cumsum(gaps + np.concatenate([[0], counts[:-1]]))
    arr = np.random.default_rng(seed).integers(0, 1 << 16, int(first[-1] + counts[-1]) + 5).astype(np.uint16)
    want = np.concatenate([arr[a:a + c] for a, c in zip(first.tolist(), counts.tolist())])
    got = chunks.take_spans(arr, first, counts)
    assert got.dtype == arr.dtype
    assert got.tolist() == want.tolist()


def test_pages_with_a_short_last_chunk_each() -> None:
    # three pages of 1024-value chunks, each page's last chunk short: three slices, exact values
    arr = np.arange(9 * 1024, dtype=np.uint32)
    counts = np.array([1024, 1024, 300] * 3, np.int64)
    first = np.arange(9, dtype=np.int64) * 1024
    got = chunks.take_spans(arr, first, counts)
    want = np.concatenate([arr[p * 3072:p * 3072 + 2048 + 300] for p in range(3)])
    assert got.tolist() == want.tolist()
