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
from typing import Any

import numpy as np

BLOCK = 1024
_FEW_BLOCKS = 48  # up to this many blocks, unpack all rows at once instead of row by row
FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_UINT: dict[int, type[np.unsignedinteger[Any]]] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@lru_cache(maxsize=None)
def lane_positions(t_bits: int) -> np.ndarray:
    """Logical element index of (row r, lane l), flattened as r * LANES + l."""
    lanes = BLOCK // t_bits
    rows = np.arange(t_bits)
    base = np.array(FL_ORDER)[rows // 8] * 16 + (rows % 8) * 128
    return (base[:, None] + np.arange(lanes)[None, :]).reshape(-1)


def words_per_block(t_bits: int, width: int) -> int:
    """Words of ``t_bits`` bits one FastLanes block of 1024 values packed at ``width`` bits takes."""
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
    if nblocks <= _FEW_BLOCKS:
        return _unpack_few(packed, t_bits, width)
    # value r of every lane lands in one contiguous run of ``lanes`` logical elements
    out = np.empty((nblocks, BLOCK), dtype=dtype)
    mask = dtype((1 << width) - 1) if width < t_bits else None
    tmp = np.empty((nblocks, lanes), dtype=dtype)
    for r in range(t_bits):
        base = FL_ORDER[r // 8] * 16 + (r % 8) * 128
        dst = out[:, base:base + lanes]
        if mask is None:
            dst[...] = packed[:, r, :]
            continue
        # value r of a lane is bits [r*W, r*W + W) of the lane's LSB-first word stream
        k, s = divmod(r * width, t_bits)
        if s:
            np.right_shift(packed[:, k, :], dtype(s), out=dst)
        else:
            dst[...] = packed[:, k, :]
        if s + width > t_bits:
            np.left_shift(packed[:, k + 1, :], dtype(t_bits - s), out=tmp)
            dst |= tmp
        dst &= mask
    return out.reshape(-1)


@lru_cache(maxsize=None)
def _row_plan(t_bits: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per lane row r: source word k, right shift, spill word, left shift and spill mask; and the
    gather order from row-major (r, lane) to logical element order."""
    dtype = _UINT[t_bits]
    r = np.arange(t_bits)
    k, s = np.divmod(r * width, t_bits)
    spill = s + width > t_bits
    k2 = np.where(spill, k + 1, k)
    hs = np.where(spill, t_bits - s, 0).astype(dtype)
    smask = np.where(spill, np.iinfo(dtype).max, 0).astype(dtype)
    order = np.argsort(lane_positions(t_bits))
    return k, s.astype(dtype)[None, :, None], k2, hs[None, :, None], smask[None, :, None], order


def _unpack_few(packed: np.ndarray, t_bits: int, width: int) -> np.ndarray:
    """``unpack_blocks`` for a few blocks: every row at once (a handful of numpy calls)."""
    nblocks, _, lanes = packed.shape
    k, s, k2, hs, smask, order = _row_plan(t_bits, width)
    if width == t_bits:
        rows = packed
    else:
        dtype = _UINT[t_bits]
        rows = packed[:, k, :] >> s
        rows |= (packed[:, k2, :] << hs) & smask
        rows &= dtype((1 << width) - 1)
    return rows.reshape(nblocks, BLOCK)[:, order].reshape(-1)


def unpack_zero_width(nblocks: int, t_bits: int) -> np.ndarray:
    """The ``nblocks * 1024`` zeros that blocks packed at width 0 decode to."""
    return np.zeros(nblocks * BLOCK, dtype=_UINT[t_bits])
