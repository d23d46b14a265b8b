"""FSST string compression for the Lance 2.1+ writer (vectorised numpy; the decoder is ``v2_1.compression.fsst_decode``).

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
    """The symbol table bytes stored in an FSST encoding: header word, symbol values and lengths."""
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
    # one row gather from an overlapping (position, 8 bytes) view: no per-byte index array
    win = np.lib.stride_tricks.as_strided(padded, shape=(max(len(padded) - 7, 0), 8), strides=(padded.strides[0], 1),
                                          writeable=False)
    raw = np.ascontiguousarray(win[p]).view("<u8").reshape(-1)
    return raw if width == 8 else raw & _MASKS[width]


_HASH_BITS = 12


def _hash_lookup(keys: np.ndarray, codes: np.ndarray, length: int) -> tuple[np.uint64, np.uint64, np.ndarray, np.ndarray]:
    """A collision-free multiplicative hash over ``keys`` (<= 255 distinct u64 symbol values):
    (multiplier, shift, key per slot, code per slot). An empty slot holds ``keys[0]``, which
    hashes to another slot, so no lookup landing there can match."""
    keys = np.asarray(keys, dtype=np.uint64)
    shift = np.uint64(64 - _HASH_BITS)
    rng = np.random.default_rng(0x46535354)
    for _ in range(64):
        mult = np.uint64(int(rng.integers(1, 2**63, dtype=np.int64)) * 2 + 1)
        h = ((keys * mult) >> shift).astype(np.intp)
        if len(np.unique(h)) == len(h):
            break
    else:  # pragma: no cover - practically unreachable for 255 keys in 4096 slots
        raise RuntimeError("FSST: no collision-free hash found")
    hkeys = np.full(1 << _HASH_BITS, keys[0], dtype=np.uint64)
    hcl = np.zeros(1 << _HASH_BITS, dtype=np.uint16)
    hkeys[h] = keys
    # (code | length << 8) per slot, as ``_match`` stores them
    hcl[h] = np.asarray(codes, dtype=np.uint16) | np.uint16(length << 8)
    return mult, shift, hkeys, hcl


def _w2(padded: np.ndarray, a: int, b: int) -> np.ndarray:
    """The 2-byte little-endian windows starting at positions a..b-1."""
    w2 = padded[a:b].astype(np.uint16)
    w2 |= padded[a + 1:b + 1].astype(np.uint16) << np.uint16(8)
    return w2


def _tails(seg_start: np.ndarray, seg_end: np.ndarray, k: int) -> np.ndarray:
    """Positions ``k`` bytes before the end of their own segment."""
    idx = seg_end - k
    return idx[idx >= seg_start]


_CHUNK = 1 << 17


def _match(data: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray,
           table: _Table) -> tuple[np.ndarray, np.ndarray]:
    """Longest symbol match at every byte position (vectorised over all positions).

    Returns (code per position: u8, 255 = escape; match length per position: u8), both strided
    views of one u16 array."""
    n = len(data)
    padded = _padded(data)
    # one 65,536-entry table over the 2-byte window: 2-byte symbol, else 1-byte symbol, else escape
    one = np.where(table.lut1 >= 0, table.lut1 | (1 << 8), ESCAPE | (1 << 8)).astype(np.uint16)
    two = np.tile(one, 256)  # index = b0 | b1 << 8 -> entry of b0
    hit2 = table.lut2 >= 0
    two[hit2] = (table.lut2[hit2] | (2 << 8)).astype(np.uint16)
    has2 = bool(hit2.any())
    longer = sorted(table.by_len)  # lengths >= 3, ascending: longer matches override shorter ones
    lookups = {L: _hash_lookup(*table.by_len[L], L) for L in longer}
    starts_long = np.zeros(65536, dtype=bool)
    for L in longer:
        starts_long[(table.by_len[L][0] & np.uint64(0xFFFF)).astype(np.intp)] = True
    out = np.empty(n, dtype=np.uint16)
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        if has2:
            w2 = _w2(padded, a, b)
            cl = two[w2]
        else:
            cl = one[padded[a:b]]
        if longer:
            # only positions whose first two bytes start some longer symbol
            cand = np.flatnonzero(starts_long[w2 if has2 else _w2(padded, a, b)])
            if len(cand):
                # the 8 bytes starting at every position, as little-endian u64
                w8 = np.lib.stride_tricks.as_strided(padded[a:], shape=(b - a, 8), strides=(1, 1)).copy()
                w8 = w8.view("<u8").reshape(-1)
                sub = len(cand) < (b - a) // 2
                if sub:
                    w8 = w8[cand]
                ccl = cl[cand] if sub else cl
                key = np.empty(len(w8), dtype=np.uint64)
                h = np.empty(len(w8), dtype=np.uint64)
                hi = h.view(np.int64)  # hash values are < 2**_HASH_BITS
                for L in longer:
                    mult, shift, hkeys, hcl = lookups[L]
                    np.bitwise_and(w8, _MASKS[L], out=key)
                    np.multiply(key, mult, out=h)
                    np.right_shift(h, shift, out=h)
                    hit = hkeys[hi] == key
                    np.copyto(ccl, hcl[hi], where=hit)
                if sub:
                    cl[cand] = ccl
        out[a:b] = cl
    # matches must not run past their segment's end: redo the positions among the last
    # (max length - 1) of every segment whose longest match does not fit, allowing only symbols
    # that fit (a longest match that fits stays the longest fitting one)
    max_len = max(table.lens, default=1)
    if max_len > 1:
        for k in range(max_len - 1, 0, -1):
            pos = _tails(seg_start, seg_end, k)
            if len(pos):
                pos = pos[(out[pos] >> np.uint16(8)) > k]
            if not len(pos):
                continue
            cl = one[data[pos]]
            if k >= 2 and has2:
                w2 = data[pos].astype(np.uint16) | (data[pos + 1].astype(np.uint16) << np.uint16(8))
                cl = two[w2]
            if k >= 3 and longer:
                w8 = _gather(padded, pos, 8)
                for L in longer:
                    if L > k:
                        break
                    mult, shift, hkeys, hcl = lookups[L]
                    key = w8 & _MASKS[L]
                    hh = ((key * mult) >> shift).astype(np.intp)
                    hit = hkeys[hh] == key
                    np.copyto(cl, hcl[hh], where=hit)
            out[pos] = cl
    pair = out.view(np.uint8).reshape(-1, 2)  # little-endian: [code, length]
    return pair[:, 0], pair[:, 1]


_COMPACT_EVERY = 4  # chain steps between drops of the chains that reached their segment's end


def _token_positions(n: int, tlen: np.ndarray, seg_start: np.ndarray,
                     seg_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start positions of the greedy tokens (ascending) and the number of tokens of every
    segment: follow the match chains of all segments at once, one step per token.

    Segments that tile ``[0, n)`` in order (what :func:`compress` and the table builder pass)
    clamp each chain at its segment's end, which is the next segment's first token anyway, so
    finished chains are dropped only every few steps and the counts come from one search."""
    k = len(seg_start)
    if k == 0 or n == 0 or int(seg_start[0]) != 0 or int(seg_end[-1]) != n \
            or not bool(np.all(seg_start[1:] == seg_end[:-1])):
        return _token_positions_general(n, tlen, seg_start, seg_end)
    # matches never run past their segment's end (``_match``), so a chain that reaches its end
    # stands on the next segment's first token and, until it is dropped, walks that segment's own
    # tokens again (harmless: the same positions); the last one stops on the sentinel at n
    tl = np.empty(n + 1, dtype=np.uint8)
    tl[:n] = tlen[:n]
    tl[n] = 0
    is_tok = np.zeros(n + 1, dtype=bool)
    live = seg_start < seg_end
    p = seg_start[live].astype(np.intp)
    e = seg_end[live].astype(np.intp)
    step = 0
    while len(p):
        is_tok[p] = True
        p += tl[p]
        step += 1
        if step % _COMPACT_EVERY == 0:
            keep = p < e
            p, e = p[keep], e[keep]
    tok = np.flatnonzero(is_tok[:n])
    ends = np.searchsorted(tok, seg_end)
    counts = np.empty(k, dtype=np.int64)
    counts[0] = ends[0]
    np.subtract(ends[1:], ends[:-1], out=counts[1:])
    return tok, counts


def _token_positions_general(n: int, tlen: np.ndarray, seg_start: np.ndarray,
                             seg_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_token_positions` for any ascending, disjoint segments (one step per token)."""
    is_tok = np.zeros(n + 1, dtype=bool)
    counts = np.zeros(len(seg_start), dtype=np.int64)
    p = seg_start.astype(np.intp)
    e = seg_end.astype(np.intp)
    ids = np.flatnonzero(p < e)
    p, e = p[ids], e[ids]
    step = 0
    while len(p):
        is_tok[p] = True
        p = p + tlen[p]
        step += 1
        keep = p < e
        if not keep.all():
            counts[ids[~keep]] = step
            p, e, ids = p[keep], e[keep], ids[keep]
    return np.flatnonzero(is_tok[:n]), counts


def _parse(data: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray,
           table: _Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Greedy longest-match tokenisation of every segment at once.

    Returns per token, in (segment, position) order: segment id, step (unused: zeros), code
    (-1 = escape), token length, token value."""
    seg_start = np.asarray(seg_start, dtype=np.int64)
    seg_end = np.asarray(seg_end, dtype=np.int64)
    pcode, plen = _match(data, seg_start, seg_end, table)
    tok, counts = _token_positions(len(data), plen, seg_start, seg_end)
    tlen = plen[tok].astype(np.int64)
    code = pcode[tok].astype(np.int64)
    code[code == ESCAPE] = -1
    seg = np.repeat(np.arange(len(seg_start)), counts)
    tval = _gather(_padded(data), tok, 8) & _MASKS[tlen]
    return seg, np.zeros(len(tok), dtype=np.int64), code, tlen, tval


def _segments(offs: np.ndarray) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Cut strings into <= 511-byte segments; returns (start, end, owning string). Empty strings
    may appear as empty segments."""
    lens = np.diff(offs)
    if not len(lens) or int(lens.max()) <= SEGMENT:
        return offs[:-1], offs[1:], None
    nseg = np.maximum((lens + SEGMENT - 1) // SEGMENT, 0)
    owner = np.repeat(np.arange(len(lens)), nseg)
    first = np.concatenate([[0], np.cumsum(nseg)[:-1]]) if len(nseg) else np.zeros(0, np.int64)
    k = np.arange(len(owner)) - np.repeat(first, nseg)
    start = offs[:-1][owner] + k * SEGMENT
    end = np.minimum(start + SEGMENT, offs[1:][owner])
    return start.astype(np.int64), end.astype(np.int64), owner


def _group(v: np.ndarray, ln: np.ndarray, weight: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (value, length) pairs with their number of occurrences (or summed ``weight``)."""
    if not len(v):
        return v, ln, np.zeros(0, dtype=np.int64)
    order = np.lexsort((v, ln))
    v, ln = v[order], ln[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = (v[1:] != v[:-1]) | (ln[1:] != ln[:-1])
    starts = np.flatnonzero(new)
    if weight is None:
        tot = np.diff(np.append(starts, len(v)))
    else:
        tot = np.add.reduceat(weight[order], starts)
    return v[starts], ln[starts], tot


def _build_table(sample: np.ndarray, s_offs: np.ndarray) -> _Table:
    table = _Table([], [])
    best, best_gain = table, -1
    seg_s, seg_e, _ = _segments(s_offs)
    for frac in _ROUNDS:
        seg, _stp, code, tlen, tval = _parse(sample, seg_s, seg_e, table)
        sym = code >= 0
        gain = int((tlen[sym] - 1).sum())
        if gain >= best_gain:
            best, best_gain = table, gain
        threshold = (5 * frac) // 128
        # candidate (value, length, score) from every source; a source's count must reach the
        # threshold on its own, scores of the same candidate add up
        cv_, cl_, cs_ = [], [], []

        def add(v: np.ndarray, ln: np.ndarray, mult_by_len: bool, single_boost: bool) -> None:
            gv, gl, c = _group(v, ln)
            ok = c >= threshold
            gv, gl, c = gv[ok], gl[ok], c[ok]
            score = c * 8 if not mult_by_len else c * gl * np.where(gl == 1, 8 if single_boost else 1, 1)
            cv_.append(gv)
            cl_.append(gl)
            cs_.append(score.astype(np.int64))

        # single-byte symbols are promoted (x8), as upstream does
        add(tval, tlen, True, True)
        same_seg = np.zeros(len(seg), dtype=bool)
        if len(seg) > 1:
            same_seg[1:] = seg[1:] == seg[:-1]
        nxt = np.flatnonzero(same_seg)  # token i has a predecessor i-1 in its segment
        prev = nxt - 1
        # first byte of a token that follows a multi-byte symbol
        fb = nxt[tlen[prev] > 1]
        add(tval[fb] & np.uint64(0xFF), np.ones(len(fb), dtype=np.int64), False, False)
        if frac < 128:
            ok = tlen[prev] < 8
            a, b = prev[ok], nxt[ok]
            la, lb = tlen[a], tlen[b]
            cl = np.minimum(la + lb, 8)
            shift = (8 * la).astype(np.uint64)
            cv = (tval[a] | (tval[b] << shift)) & _MASKS[cl]
            add(cv, cl, True, False)
            multi = lb > 1
            cv2 = (tval[a[multi]] | ((tval[b[multi]] & np.uint64(0xFF)) << shift[multi])) & _MASKS[la[multi] + 1]
            add(cv2, la[multi] + 1, True, False)
        v, ln, score = _group(np.concatenate(cv_), np.concatenate(cl_), np.concatenate(cs_))
        top = np.lexsort((v, ln, -score))[:MAX_SYMBOLS]
        table = _Table(v[top].tolist(), ln[top].tolist())
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


def compress(offs: np.ndarray, data: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
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
    pcode, plen = _match(raw, seg_s, seg_e, table)
    tok, counts = _token_positions(len(raw), plen, seg_s, seg_e)
    ntok = len(tok)
    out = pcode[tok]  # one byte per token (255 = escape) ...
    # ... the first token of each string; rel[-1] maps to ntok
    if owner is not None:
        counts = np.bincount(owner, weights=counts, minlength=len(rel) - 1).astype(np.int64)
    k = np.zeros(len(rel), dtype=np.int64)
    np.cumsum(counts, out=k[1:])
    esc_at = np.flatnonzero(out == ESCAPE)
    if len(esc_at):
        # ... plus the literal byte after every escape
        total = ntok + len(esc_at)
        if total >= len(raw):
            return export_table([], [], False), rel, raw
        tok_out = np.arange(ntok, dtype=np.int64)  # output position of every token
        shift = np.zeros(ntok + 1, dtype=np.int64)
        shift[esc_at + 1] = 1
        np.cumsum(shift, out=shift)
        tok_out += shift[:-1]
        full = np.empty(total, dtype=np.uint8)
        full[tok_out] = out
        full[tok_out[esc_at] + 1] = raw[tok[esc_at]]
        out = full
        new_offs = k + shift[k]
    else:
        if ntok >= len(raw):
            return export_table([], [], False), rel, raw
        new_offs = k.astype(np.int64)
    return export_table(table.vals, table.lens, True), new_offs, out
