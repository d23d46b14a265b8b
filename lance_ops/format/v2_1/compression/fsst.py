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

from lance_ops.format.v2_1.compression.fsst_match import ESCAPE, expand, match, segments, walk
from lance_ops.format.v2_1.compression.fsst_train import build_table

MAGIC = 0x46535354 << 32
TABLE_SIZE = 8 + 256 * 8 + 256
LEAST_INPUT_SIZE = 32 * 1024
SAMPLE_TARGET = 1 << 14
_EMIT_CHUNK = 1 << 20


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
    cl = match(buf, table)
    pair = cl.view(np.uint8).reshape(-1, 2)  # little-endian: [code, length]
    is_tok = walk(pair[:, 1], st, en)
    n = len(is_tok)
    # where every string starts in the expanded buffer (its first segment's start), then the end
    ends = np.append(st, n)
    if owner is not None:
        ends = ends[np.searchsorted(owner, np.arange(len(rel) - 1))]
        ends = np.append(ends, n)
    out, new_offs = _emit(pair[:, 0], is_tok, buf, ends)
    if len(out) >= len(raw):
        return _raw(rel, raw)
    return export_table(table.vals, table.lens, True), new_offs, out


def _emit(code: np.ndarray, is_tok: np.ndarray, buf: np.ndarray,
          starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The compressed bytes -- every token's code, and after an escape (255) its literal byte --
    and the output offset of every position in ``starts`` (ascending). A chunk of positions at a
    time, so no array the size of all tokens is allocated (fresh memory costs page faults)."""
    n = len(is_tok)
    offs = np.empty(len(starts), dtype=np.int64)
    pieces = []
    base = 0
    for a in range(0, n, _EMIT_CHUNK):
        b = min(n, a + _EMIT_CHUNK)
        t = np.flatnonzero(is_tok[a:b])
        c = np.take(code[a:b], t)
        e = np.flatnonzero(c == ESCAPE)
        lo, hi = np.searchsorted(starts, [a, b])
        if hi > lo:
            before = np.searchsorted(t, starts[lo:hi] - a)  # tokens before, plus their literals
            offs[lo:hi] = base + before + np.searchsorted(e, before)
        if len(e):
            c = np.insert(c, e + 1, np.take(buf[a:b], np.take(t, e)))
        pieces.append(c)
        base += len(c)
    offs[np.searchsorted(starts, n):] = base
    out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
    return out, offs
