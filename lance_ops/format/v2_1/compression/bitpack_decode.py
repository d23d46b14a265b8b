"""FastLanes bit-unpacking (the 1024-value transposed layout used by Lance 2.1+ bitpacking).

A block holds 1024 values of an unsigned type of ``T`` bits (8/16/32/64) packed to ``W`` bits
each, as ``1024 * W / T`` words of type ``T``. The block is viewed as ``LANES = 1024 / T``
independent lanes; word ``k`` of lane ``l`` is stored at word index ``k * LANES + l``. Within a
lane the values are packed back to back, least significant bits first, so value ``r`` of the lane
(``r`` in ``0..T``) occupies bits ``[r*W, r*W + W)`` of the lane's bit stream (it may straddle two
words). Value ``r`` of lane ``l`` is logical element ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l``
with ``FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)``.

Everything below is vectorised over all blocks, lanes and rows: a gather of the source word of
every row (ordered so rows come out in logical order), shifts, and a gather of the spill words.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

BLOCK = 1024
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


def unpack_blocks(words: np.ndarray, t_bits: int, width: int, nblocks: int | None = None,
                  out: np.ndarray | None = None) -> np.ndarray:
    """Unpack ``nblocks`` FastLanes blocks (``words``: 1-d array of uint<T>, ``nblocks * 1024 * W / T``
    words) into ``nblocks * 1024`` values of uint<T>.

    ``out``, when given, is a C-contiguous uint<T> array of exactly that many values that receives
    them (saves the caller a copy into a bigger result); it is also what is returned."""
    dtype = _UINT[t_bits]
    words = np.asarray(words, dtype=dtype)
    lanes = BLOCK // t_bits
    if width == 0:
        zeros = np.zeros((nblocks or 0) * BLOCK, dtype=dtype)
        if out is not None:
            out.reshape(-1)[...] = zeros
            return out
        return zeros
    if width > t_bits:
        raise ValueError(f"bit width {width} exceeds the {t_bits}-bit word")
    wpb = words_per_block(t_bits, width)
    if wpb == 0 or len(words) % wpb:
        raise ValueError(f"{len(words)} words is not a whole number of {width}-bit FastLanes blocks")
    nblocks = len(words) // wpb
    packed = words.reshape(nblocks, width, lanes)  # [block, word k, lane]
    k, shift, k2, spill_shift, spills = _row_plan(t_bits, width)
    # rows come out in logical order (the FastLanes row order is folded into the plan), so one
    # gather per word stream and no reordering pass
    if out is not None:
        if out.dtype != dtype or out.size != nblocks * BLOCK or not out.flags.c_contiguous:
            raise ValueError("unpack_blocks: out must be a C-contiguous array of the unpacked values")
        rows = np.take(packed, k, axis=1, out=out.reshape(nblocks, t_bits, lanes))
    else:
        rows = np.take(packed, k, axis=1)
    if width == t_bits:
        return rows.reshape(-1) if out is None else out
    rows >>= shift
    if spills:
        # rows that do not spill read an all-zero word (index ``width``): no masking pass
        padded = np.zeros((nblocks, width + 1, lanes), dtype=dtype)
        padded[:, :width] = packed
        spill = np.take(padded, k2, axis=1)
        spill <<= spill_shift
        rows |= spill
    rows &= dtype((1 << width) - 1)
    return rows.reshape(-1) if out is None else out


@lru_cache(maxsize=None)
def _row_plan(t_bits: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """For each output row of ``LANES`` logical elements (in logical order): its lane row's source
    word, right shift, spill word (``width``, an all-zero word, when the value does not spill) and
    left shift; and whether any value spills."""
    dtype = _UINT[t_bits]
    lanes = BLOCK // t_bits
    r = np.arange(t_bits)
    k, s = np.divmod(r * width, t_bits)
    spill = s + width > t_bits
    k2 = np.where(spill, k + 1, width)
    hs = np.where(spill, t_bits - s, 0).astype(dtype)
    # lane row r holds logical elements lane_positions[r * LANES] + 0..LANES: output row q of r
    order = np.argsort(lane_positions(t_bits)[::lanes] // lanes)
    return (k[order], s.astype(dtype)[order][None, :, None], k2[order], hs[order][None, :, None],
            bool(spill.any()))


def unpack_zero_width(nblocks: int, t_bits: int) -> np.ndarray:
    """The ``nblocks * 1024`` zeros that blocks packed at width 0 decode to."""
    return np.zeros(nblocks * BLOCK, dtype=_UINT[t_bits])
