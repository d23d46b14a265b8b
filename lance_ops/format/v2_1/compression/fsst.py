"""FSST string compression for the Lance 2.1+ writer (vectorised numpy; the decoder is ``v2_1.compression.fsst_decode``).

Format (what Lance's FSST decoder reads): a 2,312-byte symbol table -- ``u64 info`` (``"FSST" <<
32 | encoder_switch << 24 | n_symbols``), then ``n`` little-endian u64 symbols (first byte in the
lowest bits) and ``n`` u8 lengths, zero padded -- and the compressed strings, each a sequence of
codes: ``c < 255`` stands for symbol ``c``, ``255`` escapes the literal byte that follows. Strings
are compressed independently (offsets map 1:1). When the input is smaller than 32 KiB the encoder
switch is off and the strings are stored as they are (upstream does the same).

The symbol table is built in upstream's spirit (six rounds over a ~16 KiB sample: compress, count
symbols and pairs of adjacent symbols, keep the 255 with the highest ``count * length``), with a
deterministic sample, its statistics counted per code (``fsst_train``). Compression is greedy
longest-match for all strings at once within 511-byte segments (``fsst_match``, ADR 0046), a
cache-sized chunk of whole segments at a time: match, greedy parse from sync points, output
(ADR 0057).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from lance_ops.format.v2_1.compression.fsst_match import ESCAPE, Table, expand, match, segments, single, tokens
from lance_ops.format.v2_1.compression.fsst_train import build_table

MAGIC = 0x46535354 << 32
TABLE_SIZE = 8 + 256 * 8 + 256
LEAST_INPUT_SIZE = 32 * 1024
SAMPLE_TARGET = 1 << 14
_NONE = np.zeros(0, dtype=np.intp)
_CHUNK = 1 << 19  # positions (bytes, or of the expanded buffer) per step of the encoder
_BITS_PER_BYTE = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def table_bits_set(a: np.ndarray) -> np.ndarray:
    """Bits set in every byte of ``a`` (uint8) by a table lookup: for numpy 1.26, which the project
    supports and which has no ``np.bitwise_count``."""
    return np.take(_BITS_PER_BYTE, a)


#: bits set per byte: numpy 2's one kernel where it exists
_bits_set: Callable[[np.ndarray], np.ndarray] = getattr(np, "bitwise_count", table_bits_set)


def export_table(vals: "list[int] | np.ndarray", lens: "list[int] | np.ndarray", enabled: bool) -> bytes:
    """The symbol table bytes stored in an FSST encoding: header word, symbol values and lengths."""
    n = len(vals)
    out = np.zeros(TABLE_SIZE, dtype=np.uint8)
    out[:8] = np.array([MAGIC | (int(enabled) << 24) | (n & 0xFF)], dtype="<u8").view(np.uint8)
    if n:
        out[8:8 + 8 * n] = np.asarray(vals, dtype="<u8").view(np.uint8)
        out[8 + 8 * n:8 + 9 * n] = np.asarray(lens, dtype=np.uint8)
    return out.tobytes()


def _sample(offs: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic sample of about 16 KiB of whole strings, evenly spread (upstream samples
    random strings until 16 KiB)."""
    total = int(offs[-1] - offs[0])
    n = len(offs) - 1
    if total <= SAMPLE_TARGET:
        return data[int(offs[0]):int(offs[-1])], offs - offs[0]
    lens = np.diff(offs)
    avg = max(1, total // max(n, 1))
    want = min(n, SAMPLE_TARGET // avg + 1)
    idx = np.unique(np.linspace(0, n - 1, want).astype(np.int64))
    sl = lens[idx]
    keep = np.cumsum(sl) <= SAMPLE_TARGET + int(sl.max())
    idx, sl = idx[keep], sl[keep]
    s_offs = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(sl, out=s_offs[1:])
    src = np.repeat(offs[:-1][idx] - s_offs[:-1], sl) + np.arange(int(s_offs[-1]), dtype=np.int64)
    return data[src], s_offs


def _raw(rel: np.ndarray, raw: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    return export_table([], [], False), rel, raw


def compress(offs: np.ndarray, data: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """FSST-compress the strings ``data[offs[i]:offs[i+1]]``.

    Returns (symbol table, int64 offsets starting at 0, compressed bytes)."""
    offs = np.asarray(offs, dtype=np.int64)
    data = np.asarray(data, dtype=np.uint8)
    raw = data[int(offs[0]):int(offs[-1])]
    rel = offs - offs[0]
    if len(raw) < LEAST_INPUT_SIZE:
        return _raw(rel, raw)
    table = build_table(*_sample(offs, data))
    if not len(table.vals):
        return _raw(rel, raw)
    seg_s, seg_e, owner = segments(rel)
    if int(table.lens.max()) <= 2:
        # no symbol of 3+ bytes: only a segment's last byte can match past its end; no terminators
        last = seg_e[seg_e > seg_s] - 1
        out, new_offs = _encode(raw, len(raw), table, seg_e, rel, last=last)
    else:
        buf, st, en = expand(raw, seg_s, seg_e, table.term)
        n = len(buf) - 8
        # where every string starts in the expanded buffer (its first segment's start), then the end
        starts = np.append(st, n)
        if owner is not None:
            starts = starts[np.searchsorted(owner, np.arange(len(rel) - 1))]
            starts = np.append(starts, n)
        out, new_offs = _encode(buf, n, table, en + 1, starts, en=en)
    if len(out) >= len(raw):
        return _raw(rel, raw)
    return export_table(table.vals, table.lens, True), new_offs, out


def _count_before(mask: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many of ``mask`` are set before every position ``at`` (each < ``len(mask)``): a running
    sum of the bit counts of the packed mask (one number per 8 positions), plus the bits of the
    last partial byte."""
    packed = np.packbits(mask, bitorder="little")
    run = np.zeros(len(packed) + 1, dtype=np.int32)
    np.cumsum(_bits_set(packed), out=run[1:])
    q = at >> 3
    low = np.left_shift(np.uint8(1), (at & 7).astype(np.uint8)) - np.uint8(1)
    return run[q] + _bits_set(np.take(packed, q) & low)


def _encode(buf: np.ndarray, n: int, table: Table, bounds: np.ndarray, starts: np.ndarray,
            last: Optional[np.ndarray] = None,
            en: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """The compressed bytes of segments laid end to end in ``buf[:n]`` (``bounds``: where
    segments end, ascending) -- every greedy token's code, and after an escape (255) its literal
    byte -- and the output offset of every position in ``starts`` (ascending).

    Either the segments are separated by terminators ``en`` (no match runs past one) or, for a
    table without symbols of 3+ bytes, ``last`` lists every segment's last byte, whose match is
    cut to one byte when it runs on. Segment starts are then sync points (:func:`tokens`), so a
    cache-sized chunk of whole segments is matched, parsed and output on its own (no array the
    size of the input is made but the output: fresh memory costs page faults)."""
    max_len = int(table.lens.max())
    offs = np.empty(len(starts), dtype=np.int64)
    # chunk ends: the first segment end at or after every multiple of the chunk size
    cut = bounds[np.searchsorted(bounds, np.arange(_CHUNK, n, _CHUNK))]
    cut = np.unique(np.concatenate([[0], cut, [n]]))
    fix = last if last is not None else en
    assert fix is not None
    f_cut = np.searchsorted(fix, cut)
    s_cut = np.searchsorted(starts, cut)
    pieces = []
    base = 0
    for i in range(len(cut) - 1):
        a, b = int(cut[i]), int(cut[i + 1])
        if b + 8 <= len(buf):
            win = buf[a:b + 8]
        else:  # the input's last bytes: 8 readable bytes after every position
            win = np.full(b - a + 8, table.term, dtype=np.uint8)
            win[:b - a] = buf[a:b]
        code, lens = match(win, table)
        at = fix[f_cut[i]:f_cut[i + 1]] - a
        if last is not None:
            at = at[np.take(lens, at) > 1]
            if len(at):
                code[at] = single(win, at, table)
                lens[at] = 1
            m = tokens(lens, max_len)
        else:
            m = tokens(lens, max_len, at)
        c = np.compress(m, code)
        e = np.flatnonzero(c == ESCAPE) if len(c) and c.max() == ESCAPE else _NONE
        lo, hi = s_cut[i], s_cut[i + 1]
        if hi > lo:
            before = _count_before(m, starts[lo:hi] - a)  # tokens before, then their literals
            offs[lo:hi] = base + before + (np.searchsorted(e, before) if len(e) else 0)
        if len(e):
            c = np.insert(c, e + 1, np.take(win, np.take(np.flatnonzero(m), e)))
        pieces.append(c)
        base += len(c)
    offs[s_cut[-1]:] = base
    out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    return out, offs
