"""FSST string compression for the Lance 2.1+ writer (vectorised numpy; the decoder is ``v21_fsst``).

Format (what Lance's FSST decoder reads): a 2,312-byte symbol table -- ``u64 info`` (``"FSST" <<
32 | encoder_switch << 24 | n_symbols``), then ``n`` little-endian u64 symbols (first byte in the
lowest bits) and ``n`` u8 lengths, zero padded -- and the compressed strings, each a sequence of
codes: ``c < 255`` stands for symbol ``c``, ``255`` escapes the literal byte that follows. Strings
are compressed independently (offsets map 1:1). When the input is smaller than 32 KiB the encoder
switch is off and the strings are stored as they are (upstream does the same).

The symbol table is built in upstream's spirit (a few rounds over a ~16 KiB sample: compress,
count symbols and pairs of adjacent symbols, keep the 255 with the highest ``count * length``),
with a deterministic sample. Compression is greedy longest-match, run for all strings at once: one
numpy step per emitted code, strings cut into 511-byte segments like upstream.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional

import numpy as np

MAGIC = 0x46535354 << 32
TABLE_SIZE = 8 + 256 * 8 + 256
LEAST_INPUT_SIZE = 32 * 1024
SAMPLE_TARGET = 1 << 14
SEGMENT = 511
ESCAPE = 255
MAX_SYMBOLS = 255
_ROUNDS = (8, 38, 68, 98, 108, 128)
_MASKS = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [0xFFFFFFFFFFFFFFFF], dtype=np.uint64)


def export_table(vals: list[int], lens: list[int], enabled: bool) -> bytes:
    n = len(vals)
    info = MAGIC | (int(enabled) << 24) | (n & 0xFF)
    out = bytearray(TABLE_SIZE)
    out[0:8] = info.to_bytes(8, "little")
    pos = 8
    for v in vals:
        out[pos:pos + 8] = int(v).to_bytes(8, "little")
        pos += 8
    for ln in lens:
        out[pos] = ln
        pos += 1
    return bytes(out)


class _Table:
    def __init__(self, vals: list[int], lens: list[int]):
        self.vals = vals
        self.lens = lens
        self.by_len = {}
        # direct lookup tables for 1- and 2-byte symbols (-1: none)
        self.lut1 = np.full(256, -1, dtype=np.int64)
        self.lut2 = np.full(65536, -1, dtype=np.int64)
        for i, (v, ln) in enumerate(zip(vals, lens)):
            if ln == 1:
                self.lut1[v] = i
            elif ln == 2:
                self.lut2[v] = i
        for L in range(3, 9):
            idx = [i for i, ln in enumerate(lens) if ln == L]
            if idx:
                keys = np.array([vals[i] for i in idx], dtype=np.uint64)
                order = np.argsort(keys)
                self.by_len[L] = (keys[order], np.array(idx, dtype=np.int64)[order])


def _padded(data: np.ndarray) -> np.ndarray:
    padded = np.zeros(len(data) + 16, dtype=np.uint8)
    padded[:len(data)] = data
    return padded


_ARANGE8 = np.arange(8, dtype=np.int64)


_GATHER_DTYPE = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def _gather(padded: np.ndarray, p: np.ndarray, width: int = 8) -> np.ndarray:
    """The little-endian value of the ``width`` bytes starting at every position ``p`` (as u64)."""
    if width == 1:
        return padded[p].astype(np.uint64)
    raw = np.ascontiguousarray(padded[p[:, None] + _ARANGE8[:width]]).view(_GATHER_DTYPE[width]).reshape(-1)
    return raw.astype(np.uint64, copy=False)


def _parse(data: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray, table: _Table):
    """Greedy longest-match tokenisation of every segment at once.

    Returns per token, in (segment, position) order: segment id, step, code (-1 = escape),
    token length, token value."""
    seg, stp, code, tlen, tval, dest = _parse_steps(data, seg_start, seg_end, table, values=True)
    order = np.empty(len(seg), dtype=np.int64)
    order[dest] = np.arange(len(seg))
    return seg[order], stp[order], code[order], tlen[order], tval[order]


def _parse_steps(data: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray, table: _Table,
                 values: bool = False):
    """Like ``_parse`` but in step-major order, plus each token's index in (segment, position) order.

    Compact dtypes (int32 segments, int16 steps/codes, int8 lengths); token values are the full
    u64 when ``values`` else only their first byte (what an escape needs)."""
    views = _padded(data)
    max_sym = max(table.lens) if table.lens else 1
    gw = 1 if max_sym == 1 else 2 if max_sym == 2 else 4 if max_sym <= 4 else 8
    pos = seg_start.astype(np.int64).copy()
    active = np.flatnonzero(pos < seg_end)
    out_seg, out_step, out_code, out_len, out_val = [], [], [], [], []
    step = 0
    while len(active):
        p = pos[active]
        rem = seg_end[active] - p
        w = _gather(views, p, gw)
        lmax = np.minimum(rem, gw)
        w = w & _MASKS[lmax]
        code = np.full(len(active), -1, dtype=np.int64)
        tlen = np.ones(len(active), dtype=np.int64)
        todo = np.ones(len(active), dtype=bool)
        for L in range(8, 2, -1):
            if L not in table.by_len:
                continue
            cand = np.flatnonzero(todo & (lmax >= L))
            if not len(cand):
                continue
            keys, codes = table.by_len[L]
            key = w[cand] & _MASKS[L]
            i = np.searchsorted(keys, key)
            i = np.minimum(i, len(keys) - 1)
            hit = keys[i] == key
            hc = cand[hit]
            code[hc] = codes[i[hit]]
            tlen[hc] = L
            todo[hc] = False
        for L, lut in ((2, table.lut2), (1, table.lut1)):
            cand = np.flatnonzero(todo & (lmax >= L))
            if not len(cand):
                continue
            c = lut[(w[cand] & _MASKS[L]).astype(np.int64)]
            hit = c >= 0
            hc = cand[hit]
            code[hc] = c[hit]
            tlen[hc] = L
            todo[hc] = False
        out_seg.append(active.astype(np.int32))
        out_step.append(np.full(len(active), step, dtype=np.int16))
        out_code.append(code.astype(np.int16))
        out_len.append(tlen.astype(np.int8))
        out_val.append(w & _MASKS[tlen] if values else (w & np.uint64(0xFF)).astype(np.uint8))
        pos[active] = p + tlen
        active = active[pos[active] < seg_end[active]]
        step += 1
    if not out_seg:
        z = np.zeros(0, np.int64)
        return z, z, z, z, np.zeros(0, np.uint64), z
    seg = np.concatenate(out_seg)
    stp = np.concatenate(out_step)
    # (segment, step) order without sorting: a segment's tokens are its steps 0..k-1
    counts = np.bincount(seg, minlength=len(seg_start))
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    dest = first[seg] + stp
    return (seg, stp, np.concatenate(out_code).astype(np.int64), np.concatenate(out_len).astype(np.int64),
            np.concatenate(out_val), dest)


def _segments(offs: np.ndarray):
    """Cut strings into <= 511-byte segments; returns (start, end, owning string)."""
    lens = np.diff(offs)
    nseg = np.maximum((lens + SEGMENT - 1) // SEGMENT, 0)
    owner = np.repeat(np.arange(len(lens)), nseg)
    first = np.concatenate([[0], np.cumsum(nseg)[:-1]]) if len(nseg) else np.zeros(0, np.int64)
    k = np.arange(len(owner)) - np.repeat(first, nseg)
    start = offs[:-1][owner] + k * SEGMENT
    end = np.minimum(start + SEGMENT, offs[1:][owner])
    return start.astype(np.int64), end.astype(np.int64), owner


def _build_table(sample: np.ndarray, s_offs: np.ndarray) -> _Table:
    table = _Table([], [])
    best, best_gain = table, -1
    seg_s, seg_e, _ = _segments(s_offs)
    for frac in _ROUNDS:
        seg, stp, code, tlen, tval = _parse(sample, seg_s, seg_e, table)
        sym = code >= 0
        gain = int((tlen[sym] - 1).sum())
        if gain >= best_gain:
            best, best_gain = table, gain
        threshold = (5 * frac) // 128
        cands: Counter = Counter()
        singles = Counter(zip(tval.tolist(), tlen.tolist()))
        # single-byte symbols are promoted (x8), as upstream does
        for (v, ln), c in singles.items():
            if c >= threshold:
                cands[(v, ln)] += c * ln * (8 if ln == 1 else 1)
        same_seg = np.zeros(len(seg), dtype=bool)
        if len(seg) > 1:
            same_seg[1:] = seg[1:] == seg[:-1]
        nxt = np.flatnonzero(same_seg)  # token i has a predecessor i-1 in its segment
        prev = nxt - 1
        # first byte of a token that follows a multi-byte symbol
        fb = nxt[tlen[prev] > 1]
        for (v, c) in Counter((tval[fb] & np.uint64(0xFF)).tolist()).items():
            if c >= threshold:
                cands[(v, 1)] += c * 8
        if frac < 128:
            ok = tlen[prev] < 8
            a, b = prev[ok], nxt[ok]
            la, lb = tlen[a], tlen[b]
            cl = np.minimum(la + lb, 8)
            shift = (8 * la).astype(np.uint64)
            cv = (tval[a] | (tval[b] << shift)) & _MASKS[cl]
            for (v, ln), c in Counter(zip(cv.tolist(), cl.tolist())).items():
                if c >= threshold:
                    cands[(v, ln)] += c * ln
            multi = lb > 1
            cv2 = (tval[a[multi]] | ((tval[b[multi]] & np.uint64(0xFF)) << shift[multi])) & _MASKS[la[multi] + 1]
            for (v, ln), c in Counter(zip(cv2.tolist(), (la[multi] + 1).tolist())).items():
                if c >= threshold:
                    cands[(v, ln)] += c * ln
        top = sorted(cands.items(), key=lambda kv: (-kv[1], kv[0][1], kv[0][0]))[:MAX_SYMBOLS]
        table = _Table([v for (v, _), _ in top], [ln for (_, ln), _ in top])
    return best if best.vals else table


def _sample(offs: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def compress(offs: np.ndarray, data: np.ndarray) -> Optional[tuple[bytes, np.ndarray, np.ndarray]]:
    """FSST-compress the strings ``data[offs[i]:offs[i+1]]``.

    Returns (symbol table, int64 offsets starting at 0, compressed bytes)."""
    offs = np.asarray(offs, dtype=np.int64)
    data = np.asarray(data, dtype=np.uint8)
    raw = data[int(offs[0]):int(offs[-1])]
    rel = offs - offs[0]
    if len(raw) < LEAST_INPUT_SIZE:
        return export_table([], [], False), rel, raw
    sample, s_offs = _sample(offs, data)
    table = _build_table(sample, s_offs)
    if not table.vals:
        return export_table([], [], False), rel, raw
    seg_s, seg_e, owner = _segments(rel)
    seg, _stp, code, tlen, tval, dest = _parse_steps(raw, seg_s, seg_e, table)
    # scatter only compact per-token bytes into string order
    ntok = len(seg)
    esc_s = code < 0
    code8 = np.empty(ntok, dtype=np.uint8)
    code8[dest] = np.where(esc_s, ESCAPE, code).astype(np.uint8)
    lit8 = np.empty(ntok, dtype=np.uint8)
    lit8[dest] = tval
    esc = code8 == ESCAPE
    # output position of token i: i + number of escapes before it
    n_esc_before = np.cumsum(esc, dtype=np.int64)
    n_esc_before -= esc
    starts = np.arange(ntok, dtype=np.int64) + n_esc_before
    total = ntok + (int(n_esc_before[-1]) + int(esc[-1]) if ntok else 0)
    out = np.empty(total, dtype=np.uint8)
    out[starts] = code8
    out[starts[esc] + 1] = lit8[esc]
    tok_owner = owner[seg]
    per_string = np.bincount(tok_owner, minlength=len(rel) - 1) + \
        np.bincount(tok_owner[esc_s], minlength=len(rel) - 1)
    new_offs = np.zeros(len(rel), dtype=np.int64)
    np.cumsum(per_string, out=new_offs[1:])
    if total >= len(raw):
        return export_table([], [], False), rel, raw
    return export_table(table.vals, table.lens, True), new_offs, out
