"""Encode-side speed paths of the 2.1+ writer (issues 20/23, ADR 0038), held to the decisions and
bytes of the straightforward versions: variable-width chunk counts, the digest lower bound of the
string dictionary test, uniform mini-block chunks and FSST tails (whole files: the interop tests).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.format.v2_1 import leaf_values as lv
from lance_ops.format.v2_1.compression import fsst
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.v2_1.layout import pages as lay


def _walk_counts(offsets: np.ndarray, width: int, limit: int = ev.AIM_MINICHUNK_SIZE) -> list[int]:
    """The chunk counts of variable-width values, one chunk at a time (the rule the writer follows)."""
    n = len(offsets) - 1
    counts, start = [], 0
    while start < n:
        remaining = n - start
        if remaining <= 1:
            counts.append(remaining)
            break
        fit = 0  # values from start whose bytes + offsets fit the limit
        while start + fit < n and (offsets[start + fit + 1] - offsets[start]) + (fit + 2) * width <= limit:
            fit += 1
        q = min(max(4, 1 << remaining.bit_length()), max(4, 1 << fit.bit_length()), ev.MAX_MINIBLOCK_VALUES)
        num = q // 2 if q > 4 else 2
        if q > remaining and start + fit >= n:
            num = remaining
        counts.append(num)
        start += num
    return counts


@pytest.mark.parametrize("seed", range(6))
def test_variable_chunk_counts_follow_the_one_chunk_at_a_time_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    lens = [rng.integers(0, 40, n), np.full(n, int(rng.integers(0, 300))), rng.integers(0, 3000, n),
            np.where(rng.random(n) < 0.02, 2000, rng.integers(5, 9, n)), rng.integers(0, 2, n),
            rng.integers(0, 9, n)][seed]
    offs = 17 + np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    for width in (4, 8):
        assert ev._var_chunk_counts(offs, width) == _walk_counts(offs, width)


def test_distinct_lower_bound_never_exceeds_the_distinct_count() -> None:
    rng = np.random.default_rng(3)
    cases = [["a", "b", "a", ""], ["abcdefgh1", "abcdefgh2", "x" * 20, ""], [f"k{i % 50}" for i in range(1000)],
             [str(i) for i in range(5000)], ["".join(rng.choice(list("ab"), int(k))) for k in rng.integers(0, 12, 3000)]]
    for values in cases:
        arr = pa.array(values)
        offs, data, _ = lv.var_parts(arr)
        bound = lv.distinct_lower_bound(offs, data)
        assert bound <= len(set(values))
        if all(len(v.encode()) < 8 for v in values):
            assert bound == len(set(values))  # short values: the digest is the value
    sliced = pa.array([f"v{i}" for i in range(100)]).slice(10, 50)
    offs, data, _ = lv.var_parts(sliced)
    assert lv.distinct_lower_bound(offs, data) == 50


@pytest.mark.parametrize("rows", [0, 1, 7, 8, 1000, 1024, 5000])
def test_uniform_chunks_assemble_the_bytes_of_per_chunk_lists(rows: int) -> None:
    data = np.random.default_rng(rows).integers(0, 256, rows * 12, dtype=np.uint8)
    uniform = ev.fsl_miniblock(data, rows, 32, [3], [None])
    assert isinstance(uniform.bufs, ev.UniformChunks)
    listed = ev.MiniBlocks(uniform.encoding, uniform.counts, [[bytes(b[0])] for b in uniform.bufs], 1, uniform.last_full)
    assert [bytes(b[0]) for b in uniform.bufs] == [bytes(uniform.bufs[i][0]) for i in range(len(uniform.bufs))]
    assert int(uniform.bufs.sizes().sum()) == rows * 12
    for large in (False, True):
        nlev = np.zeros(len(uniform.counts), dtype=np.int64)
        a = lay._chunk_bytes(uniform, nlev, None, None, large, False)
        b = lay._chunk_bytes(listed, nlev, None, None, large, False)
        assert a is not None and b is not None
        assert a[0].tobytes() == b[0].tobytes() and bytes(a[1]) == bytes(b[1])


def test_fsst_tails_never_match_past_their_string() -> None:
    # symbols learnt across the key-like strings must not run into the next string
    values = [f"s{k}" for k in np.random.default_rng(5).permutation(300000)[:20000].tolist()]
    arr = pa.array(values)
    offs, data, _ = lv.var_parts(arr)
    table, new_offs, out = fsst.compress(offs, data)
    from lance_ops.format.v2_1.compression.fsst_decode import FsstTable

    got_offs, got = FsstTable(table).decode(np.asarray(out, dtype=np.uint8), np.asarray(new_offs, dtype=np.int64))
    decoded = [bytes(got[int(a):int(b)]).decode() for a, b in zip(got_offs[:-1], got_offs[1:])]
    assert decoded == values
