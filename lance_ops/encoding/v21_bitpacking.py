"""FastLanes bit-unpacking (the 1024-value transposed layout used by Lance 2.1+ bitpacking).

A block holds 1024 values of an unsigned type of ``T`` bits (8/16/32/64) packed to ``W`` bits
each, as ``1024 * W / T`` words of type ``T``. The block is viewed as ``LANES = 1024 / T``
independent lanes; word ``k`` of lane ``l`` is stored at word index ``k * LANES + l``. Within a
lane the values are packed back to back, least significant bits first, so value ``r`` of the lane
(``r`` in ``0..T``) occupies bits ``[r*W, r*W + W)`` of the lane's bit stream (it may straddle two
words). Value ``r`` of lane ``l`` is logical element ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l``
with ``FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)``.

Everything below is vectorised over all blocks and lanes; the only Python loop runs over the
``T`` rows of a lane (at most 64 iterations for any number of values).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

BLOCK = 1024
FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@lru_cache(maxsize=None)
def _positions(t_bits: int) -> np.ndarray:
    """Logical element index of (row r, lane l), flattened as r * LANES + l."""
    lanes = BLOCK // t_bits
    rows = np.arange(t_bits)
    base = np.array(FL_ORDER)[rows // 8] * 16 + (rows % 8) * 128
    return (base[:, None] + np.arange(lanes)[None, :]).reshape(-1)


def words_per_block(t_bits: int, width: int) -> int:
    return BLOCK * width // t_bits


def unpack_blocks(words: np.ndarray, t_bits: int, width: int, nblocks: int | None = None) -> np.ndarray:
    """Unpack ``nblocks`` FastLanes blocks (``words``: 1-d array of uint<T>, ``nblocks * 1024 * W / T``
    words) into ``nblocks * 1024`` values of uint<T>."""
    dtype = _UINT[t_bits]
    words = np.asarray(words, dtype=dtype)
    lanes = BLOCK // t_bits
    if width == 0:
        return np.zeros((nblocks or 0) * BLOCK, dtype=dtype)
    if width > t_bits:
        raise ValueError(f"bit width {width} exceeds the {t_bits}-bit word")
    wpb = words_per_block(t_bits, width)
    if wpb == 0 or len(words) % wpb:
        raise ValueError(f"{len(words)} words is not a whole number of {width}-bit FastLanes blocks")
    nblocks = len(words) // wpb
    packed = words.reshape(nblocks, width, lanes)  # [block, word k, lane]
    if width == t_bits:
        rows = packed
    else:
        # value r of a lane is bits [r*W, r*W + W) of the lane's LSB-first word stream
        rows = np.empty((nblocks, t_bits, lanes), dtype=dtype)
        mask = dtype((1 << width) - 1)
        for r in range(t_bits):
            k, s = divmod(r * width, t_bits)
            v = packed[:, k, :] >> dtype(s) if s else packed[:, k, :].copy()
            if s + width > t_bits:
                v |= packed[:, k + 1, :] << dtype(t_bits - s)
            np.bitwise_and(v, mask, out=rows[:, r, :])
    out = np.empty((nblocks, BLOCK), dtype=dtype)
    out[:, _positions(t_bits)] = rows.reshape(nblocks, BLOCK)
    return out.reshape(-1)


def unpack_zero_width(nblocks: int, t_bits: int) -> np.ndarray:
    return np.zeros(nblocks * BLOCK, dtype=_UINT[t_bits])
