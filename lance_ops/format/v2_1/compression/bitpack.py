"""FastLanes bit-packing for the Lance 2.1+ writer (the inverse of ``v2_1.compression.bitpack_decode``).

A block is 1024 unsigned values of ``T`` bits (8/16/32/64) packed to ``W`` bits each into
``1024 * W / T`` words of type ``T``: the block is viewed as ``1024 / T`` lanes, value ``r`` of lane
``l`` is logical element ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l`` and occupies bits
``[r*W, r*W + W)`` of the lane's LSB-first bit stream; word ``k`` of lane ``l`` is stored at word
index ``k * lanes + l`` (layout constants shared with the reader's ``v2_1.compression.bitpack_decode``).

Two framings are produced here:

* inline bitpacking (mini-block values and small level blocks): per 1024-value block one word of
  type ``T`` holding the block's bit width, then the packed block; a partial block is zero-padded;
* out-of-line bitpacking (level blocks): whole blocks of one page-wide width; a partial tail block
  is packed (padded) when that is smaller than storing its values raw, else stored raw.

Everything is vectorised over blocks and lanes; the only Python loop runs over the ``T`` rows of a
lane (at most 64 iterations).
"""
from __future__ import annotations

import numpy as np

from lance_ops.format.v2_1.compression.bitpack_decode import BLOCK, FL_ORDER

UINT_TYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def as_uint(values: np.ndarray, t_bits: int) -> np.ndarray:
    """Reinterpret fixed-width values as the unsigned integer type of ``t_bits`` bits."""
    dt = np.dtype(UINT_TYPES[t_bits])
    arr = np.ascontiguousarray(values)
    if arr.dtype.itemsize != dt.itemsize:
        arr = arr.reshape(-1).view(np.uint8).view(dt)
    return arr.reshape(-1).view(dt)


def bit_width(values: np.ndarray) -> int:
    """Bits needed for the largest (unsigned) value: ``T - leading_zeros(OR of all values)``."""
    if len(values) == 0:
        return 0
    acc = int(np.bitwise_or.reduce(values))
    return acc.bit_length()


def block_widths(values: np.ndarray) -> np.ndarray:
    """Bit width of every 1024-value block (the last one may be partial)."""
    n = len(values)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    nblocks = (n + BLOCK - 1) // BLOCK
    pad = nblocks * BLOCK - n
    v = values if pad == 0 else np.concatenate([values, np.zeros(pad, values.dtype)])
    ors = np.bitwise_or.reduce(v.reshape(nblocks, BLOCK), axis=1)
    return _bit_lengths(ors, values.dtype.itemsize * 8)


def _bit_lengths(x: np.ndarray, t_bits: int) -> np.ndarray:
    x = x.astype(np.uint64)
    out = np.zeros(len(x), dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        if shift >= t_bits and t_bits < 64:
            continue
        big = x >= (np.uint64(1) << np.uint64(shift))
        out[big] += shift
        x = np.where(big, x >> np.uint64(shift), x)
    out += (x > 0).astype(np.int64)
    return out


def _row_groups(t_bits: int) -> list[int]:
    """For each group ``o`` of 8 rows, which ``lanes``-wide slice of a 128-value line its lanes read:
    row ``r = 8 * o + s`` of a block is ``block[s * 128 + g[o] * lanes : ... + lanes]``, since
    ``FL_ORDER[o] * 16`` is a multiple of the lane count for every row group of ``T``."""
    lanes = BLOCK // t_bits
    return [FL_ORDER[o] * 16 // lanes for o in range(t_bits // 8)]


def pack_blocks(values: np.ndarray, t_bits: int, width: int) -> np.ndarray:
    """Pack ``values`` (a whole number of 1024-value blocks of uint<T>) to ``width`` bits each.

    Returns the packed words (uint<T>, ``nblocks * 1024 * width / T`` of them). Every row of every
    block is read as a strided view (no gather of the values into lane order)."""
    dtype = UINT_TYPES[t_bits]
    values = np.asarray(values, dtype=dtype)
    nblocks = len(values) // BLOCK
    lanes = BLOCK // t_bits
    if width == 0 or nblocks == 0:
        return np.zeros(0, dtype=dtype)
    groups = _row_groups(t_bits)
    lines = values[:nblocks * BLOCK].reshape(nblocks, 8, 128 // lanes, lanes)  # [block, s, slice, lane]
    if width == t_bits:
        return np.ascontiguousarray(lines[:, :, groups, :].transpose(0, 2, 1, 3)).reshape(-1)
    words = np.zeros((nblocks, width, lanes), dtype=dtype)
    for r in range(t_bits):
        k, s = divmod(r * width, t_bits)
        v = lines[:, r % 8, groups[r // 8], :]
        words[:, k, :] |= (v << dtype(s)) if s else v
        if s + width > t_bits:
            words[:, k + 1, :] |= v >> dtype(t_bits - s)
    return words.reshape(-1)


def _padded(values: np.ndarray) -> np.ndarray:
    n = len(values)
    pad = (-n) % BLOCK
    if pad == 0:
        return values
    return np.concatenate([values, np.zeros(pad, values.dtype)])


def inline_pack(values: np.ndarray, t_bits: int) -> tuple[np.ndarray, list[int]]:
    """Inline-bitpack ``values``: per 1024-value block a width word then the packed block.

    Returns the bytes (uint8) and the byte size of every block (chunk)."""
    dtype = UINT_TYPES[t_bits]
    values = as_uint(values, t_bits)
    widths = block_widths(values)
    padded = _padded(values)
    nblocks = len(padded) // BLOCK
    if nblocks == 0:
        return np.zeros(0, np.uint8), []
    blocks = padded.reshape(nblocks, BLOCK)
    nwords = 1 + BLOCK * widths // t_bits
    start = np.zeros(nblocks, dtype=np.int64)
    np.cumsum(nwords[:-1], out=start[1:])
    data = np.empty(int(nwords.sum()), dtype=dtype)
    data[start] = widths.astype(dtype)
    # pack all blocks of one width together (one numpy pass per distinct width), placed by index
    for w in np.unique(widths).tolist():
        wpb = BLOCK * w // t_bits
        if wpb == 0:
            continue
        idx = np.flatnonzero(widths == w)
        packed = pack_blocks(blocks[idx].reshape(-1), t_bits, w).reshape(len(idx), wpb)
        if len(idx) == nblocks:
            data.reshape(nblocks, 1 + wpb)[:, 1:] = packed
        else:
            data[(start[idx] + 1)[:, None] + np.arange(wpb, dtype=np.int64)[None, :]] = packed
    return data.view(np.uint8), (nwords * (t_bits // 8)).tolist()


def inline_pack_sizes(widths: np.ndarray, t_bits: int) -> int:
    """Bytes of the inline-bitpacked blocks with bit ``widths`` (one width word plus the packed words each), to compare
    encodings without packing.
    """
    w = np.asarray(widths, dtype=np.int64)
    return int((1 + BLOCK * w // t_bits).sum()) * (t_bits // 8)


def out_of_line_pack(values: np.ndarray, t_bits: int, width: int) -> np.ndarray:
    """Out-of-line bitpacking of ``values`` with one ``width``; returns bytes (uint8)."""
    values = as_uint(values, t_bits)
    n = len(values)
    whole, tail = divmod(n, BLOCK)
    parts = []
    if whole:
        parts.append(pack_blocks(values[: whole * BLOCK], t_bits, width))
    if tail:
        padding_cost = width * (BLOCK - tail)
        savings = (t_bits - width) * tail
        if padding_cost < savings:
            parts.append(pack_blocks(_padded(values[whole * BLOCK:]), t_bits, width))
        else:
            parts.append(values[whole * BLOCK:])
    if not parts:
        return np.zeros(0, np.uint8)
    return np.concatenate(parts).astype(UINT_TYPES[t_bits], copy=False).view(np.uint8)


def out_of_line_size(n: int, t_bits: int, width: int) -> int:
    """Bytes of ``n`` values out-of-line bitpacked at ``width`` bits: whole blocks packed, the tail packed only when
    that is smaller.
    """
    whole, tail = divmod(n, BLOCK)
    words = whole * BLOCK * width // t_bits
    if tail:
        if width * (BLOCK - tail) < (t_bits - width) * tail:
            words += BLOCK * width // t_bits
        else:
            words += tail
    return words * (t_bits // 8)
