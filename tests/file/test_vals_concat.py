"""``Vals.concat``: decoded values of several pages joined (big joins take Arrow-pool memory)."""
from __future__ import annotations

import numpy as np
import pytest

from lance_ops.format.v2_1.compression.decode import Vals


def _fixed(rng: np.random.Generator, n: int, w: int) -> Vals:
    return Vals("fixed", n, rng.integers(0, 256, (n, w), dtype=np.uint8), None)


@pytest.mark.parametrize("n", [3, 5_000])  # under and over the pool threshold (1 MiB)
def test_fixed_parts_join_in_order(n):
    rng = np.random.default_rng(n)
    parts = [_fixed(rng, n, 512), _fixed(rng, n + 1, 512), _fixed(rng, 0, 512)]
    got = Vals.concat(parts)
    assert got.kind == "fixed" and got.n == 2 * n + 1
    assert got.data.shape == (2 * n + 1, 512)
    assert np.array_equal(got.data, np.concatenate([p.data for p in parts]))
    got.data[0, 0] ^= 1  # a join is a fresh, writable array, not a view of a part
    assert parts[0].data[0, 0] != got.data[0, 0]


@pytest.mark.parametrize("n", [4, 100_000])
def test_variable_parts_join_with_rebased_offsets(n):
    rng = np.random.default_rng(7)
    parts = []
    for k in (n, n // 2 + 1):
        lens = rng.integers(0, 40, k)
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        parts.append(Vals("var", k, rng.integers(0, 256, int(offs[-1]), dtype=np.uint8), offs))
    got = Vals.concat(parts)
    want = [p.data[p.var_offsets()[i]:p.var_offsets()[i + 1]].tobytes() for p in parts for i in range(p.n)]
    offs = got.var_offsets()
    assert [got.data[offs[i]:offs[i + 1]].tobytes() for i in range(got.n)] == want
