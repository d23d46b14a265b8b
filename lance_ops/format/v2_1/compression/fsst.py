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
longest-match for all strings at once within 511-byte segments (``fsst_match``, ADR 0046).
"""
from __future__ import annotations

import numpy as np

from lance_ops.format.v2_1.compression.fsst_match import ESCAPE, Table, expand, match, segments, tokens
from lance_ops.format.v2_1.compression.fsst_train import build_table

MAGIC = 0x46535354 << 32
TABLE_SIZE = 8 + 256 * 8 + 256
LEAST_INPUT_SIZE = 32 * 1024
SAMPLE_TARGET = 1 << 14
_CHUNK = 1 << 17  # positions of the expanded buffer per step of the encoder


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
    buf, st, en = expand(raw, seg_s, seg_e, table.term)
    n = len(buf) - 8
    # where every string starts in the expanded buffer (its first segment's start), then the end
    starts = np.append(st, n)
    if owner is not None:
        starts = starts[np.searchsorted(owner, np.arange(len(rel) - 1))]
        starts = np.append(starts, n)
    out, new_offs = _encode(buf, table, en, starts)
    if len(out) >= len(raw):
        return _raw(rel, raw)
    return export_table(table.vals, table.lens, True), new_offs, out


def _encode(buf: np.ndarray, table: Table, en: np.ndarray,
            starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The compressed bytes of an expanded buffer (terminators at ``en``) -- every greedy token's
    code, and after an escape (255) its literal byte -- and the output offset of every position
    in ``starts`` (ascending). Match, parse and output run on a cache-sized chunk of whole
    segments at a time (segment starts are sync points: a chunk parses on its own), so no array
    the size of the buffer is made but the output (fresh memory costs page faults)."""
    n = len(buf) - 8
    max_len = int(table.lens.max())
    offs = np.empty(len(starts), dtype=np.int64)
    # chunk ends: one past the first terminator at or after every multiple of the chunk size
    cut = en[np.searchsorted(en, np.arange(_CHUNK - 1, n - 1, _CHUNK))] + 1
    cut = np.unique(np.concatenate([[0], cut, [n]]))
    e_cut = np.searchsorted(en, cut)
    s_cut = np.searchsorted(starts, cut)
    pieces = []
    base = 0
    for i in range(len(cut) - 1):
        a, b = int(cut[i]), int(cut[i + 1])
        code, lens = match(buf[a:b + 8], table)
        m = tokens(lens, en[e_cut[i]:e_cut[i + 1]] - a, max_len)
        t = np.flatnonzero(m)
        c = np.take(code, t)
        e = np.flatnonzero(c == ESCAPE)
        lo, hi = s_cut[i], s_cut[i + 1]
        if hi > lo:
            at = starts[lo:hi] - a
            before = np.cumsum(m, dtype=np.int32)[at] - m[at]  # tokens before, then their literals
            offs[lo:hi] = base + before + (np.searchsorted(e, before) if len(e) else 0)
        if len(e):
            c = np.insert(c, e + 1, np.take(buf[a:b], np.take(t, e)))
        pieces.append(c)
        base += len(c)
    offs[s_cut[-1]:] = base
    out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    return out, offs
