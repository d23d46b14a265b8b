"""FSST longest-match machinery of the writer (``v2_1.compression.fsst``, ADRs 0046, 0057).

The strings, cut into 511-byte segments like upstream, are laid end to end with a *terminator*
byte after each (``expand``; the sample's least frequent byte, which no multi-byte symbol
contains, as upstream), so no match can run past its segment; a table without 3+ byte symbols
needs no terminators (only a segment's last byte is re-matched, ``single``). ``match`` gives the
longest symbol at every position from one 2-byte table lookup plus hashed probes, longest length
first, of the symbols of 3+ bytes that share the position's first three bytes; ``tokens`` finds
the greedy parse: the *sync points* (no match before them runs past them: tokens of every parse)
plus the chains of matches between them, or for 1-2 byte matches carries over the positions'
bits (ADR 0057).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

SEGMENT = 511
ESCAPE = 255
MAX_SYMBOLS = 255
MASKS = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
_CHUNK = 1 << 17


class Table:
    """A symbol table (values and lengths in code order, at most 255) and its terminator byte;
    the lookup structures of :func:`match` are built on first use (training builds a last table
    that is only ever exported)."""

    def __init__(self, vals: np.ndarray, lens: np.ndarray, term: int) -> None:
        self.vals = np.asarray(vals, dtype=np.uint64)
        self.lens = np.asarray(lens, dtype=np.int64)
        self.term = int(term)
        self._lookups: Optional[tuple[np.ndarray, Optional[tuple]]] = None

    def lookups(self) -> tuple[np.ndarray, Optional[tuple]]:
        """(the 2-byte window table, the 3+-byte symbol lookup of :func:`_long_lookup` or None).

        The 65,536-entry table over the 2-byte window holds ``code | length << 8`` of the 2-byte
        symbol, else of the 1-byte symbol of the first byte, else escape (255, length 1)."""
        if self._lookups is None:
            codes = np.arange(len(self.vals), dtype=np.uint16)
            one = np.full(256, ESCAPE | (1 << 8), dtype=np.uint16)
            is1, is2 = self.lens == 1, self.lens == 2
            one[self.vals[is1].astype(np.intp)] = codes[is1] | np.uint16(1 << 8)
            two = np.tile(one, 256)
            two[self.vals[is2].astype(np.intp)] = codes[is2] | np.uint16(2 << 8)
            self._lookups = (two, _long_lookup(self.vals, self.lens, codes))
        return self._lookups


def _hash(keys: np.ndarray, dtype: type) -> tuple:
    """A collision-free multiplicative hash over distinct ``keys`` (at most 255): (multiplier,
    shift, number of slots, slot per key). The table has more than k**2 slots (at most 65,536)
    so that a random odd multiplier is collision-free with probability >= ~0.6 per try."""
    bits = min(16, max(8, (len(keys) * len(keys)).bit_length()))
    width = 8 * np.dtype(dtype).itemsize
    shift = dtype(width - bits)
    rng = np.random.default_rng(0x46535354)
    for _ in range(256):
        mult = dtype(int(rng.integers(1, 2**(width - 1), dtype=np.uint64)) * 2 + 1)
        h = (keys * mult) >> shift
        if len(np.unique(h)) == len(h):
            return mult, shift, 1 << bits, h.astype(np.intp)
    raise RuntimeError("FSST: no collision-free hash found")  # pragma: no cover - p < 0.4**256


def _long_lookup(vals: np.ndarray, lens: np.ndarray, codes: np.ndarray) -> Optional[tuple]:
    """Symbols of 3+ bytes: a collision-free hash of their distinct first three bytes -- (multiplier,
    shift, prefix per slot (0xFFFFFFFF when empty: no 3-byte window equals it), bit L set when some
    symbol of length L has that prefix) -- and, longest first, per length L present: (L, its mask,
    multiplier, shift, value per slot, ``code | L << 8`` per slot) of a collision-free hash of
    the symbols of that length (an empty slot holds a value that hashes elsewhere)."""
    idx = np.flatnonzero(lens >= 3)
    if not len(idx):
        return None
    p3 = (vals[idx] & np.uint64(0xFFFFFF)).astype(np.uint32)
    uniq, inv = np.unique(p3, return_inverse=True)
    mult, shift, size, h = _hash(uniq, np.uint32)
    hp3 = np.full(size, 0xFFFFFFFF, dtype=np.uint32)
    hp3[h] = uniq
    lenbits = np.zeros(size, dtype=np.uint16)
    np.bitwise_or.at(lenbits, h[inv], (np.uint16(1) << lens[idx].astype(np.uint16)))
    per_len = []
    for L in range(8, 2, -1):
        sel = idx[lens[idx] == L]
        if not len(sel):
            continue
        keys = vals[sel]
        m, sh, lsize, hh = _hash(keys, np.uint64)
        hk = np.full(lsize, keys[0], dtype=np.uint64)
        hk[hh] = keys
        hcl = np.zeros(lsize, dtype=np.uint16)
        hcl[hh] = codes[sel] | np.uint16(L << 8)
        per_len.append((L, MASKS[L], m, sh, hk, hcl))
    return mult, shift, hp3, lenbits, per_len


def _view(buf: np.ndarray, dtype: str, width: int) -> np.ndarray:
    """The little-endian ``width``-byte window starting at every position of ``buf`` (a strided,
    unaligned, read-only view: no copy)."""
    v = np.ndarray(shape=(len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    v.flags.writeable = False
    return v


def expand(data: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray,
           term: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments (which tile ``data`` in order) laid end to end with ``term`` after each, plus
    8 bytes of ``term`` padding: (buffer, segment starts, segment ends = terminator positions).

    One Arrow ``take`` of the segments interleaved with a one-byte terminator (a copy per
    segment) instead of a boolean scatter over every byte."""
    k = len(seg_start)
    n = len(data)
    shift = np.arange(k, dtype=np.int64)
    st = seg_start + shift
    en = seg_end + shift
    if not k or not n:
        return np.full(n + k + 8, term, dtype=np.uint8), st, en
    src = np.empty(n + 9, dtype=np.uint8)
    src[:n] = data
    src[n:] = term
    offs = np.empty(k + 3, dtype=np.int64)
    offs[:k] = seg_start
    offs[k:] = (n, n + 1, n + 9)  # then the terminator, then the padding
    idx = np.empty(2 * k + 1, dtype=np.int64)
    idx[0:2 * k:2] = shift
    idx[1:2 * k:2] = k
    idx[2 * k] = k + 1
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), k + 2, [None, pa.py_buffer(offs), pa.py_buffer(src)])
    got = arr.take(pa.array(idx))
    buf = np.frombuffer(got.buffers()[2], dtype=np.uint8, count=n + k + 8)
    if not buf.flags.writeable:  # pragma: no cover - Arrow's take result is freshly allocated
        buf = buf.copy()
    return buf, st, en


def match(buf: np.ndarray, table: Table) -> tuple[np.ndarray, np.ndarray]:
    """(code, length), both u8, of the longest symbol starting at every position of ``buf`` but
    its last 8 bytes, which are only read (the padding of :func:`expand`'s buffer, or the 8 bytes
    after a window of the input); code 255 = escape (length 1)."""
    n = len(buf) - 8
    code = np.empty(n, dtype=np.uint8)
    lens = np.empty(n, dtype=np.uint8)
    w2 = _view(buf, "<u2", 2)
    two, lk = table.lookups()
    if lk is not None:
        mult, shift, hp3 = lk[:3]
        w4 = _view(buf, "<u4", 4)
        w8 = _view(buf, "<u8", 8)
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        cl = np.take(two, w2[a:b])  # (np.take: cheaper than fancy indexing)
        if lk is not None:
            w3 = w4[a:b] & np.uint32(0xFFFFFF)
            h = w3 * mult
            h >>= shift
            cand = np.flatnonzero(np.take(hp3, h) == w3)
            if len(cand):
                _probe(cl, cand, np.take(h, cand), w8[cand + a], lk)
        code[a:b] = cl  # the low byte (contiguous casts: cheaper than strided byte views)
        cl >>= 8
        lens[a:b] = cl
    return code, lens


def _probe(cl: np.ndarray, cand: np.ndarray, s: np.ndarray, w: np.ndarray, lk: tuple) -> None:
    """Overwrite ``cl`` at the positions ``cand`` (prefix slot ``s``, 8-byte window ``w``) that
    start with a symbol of 3+ bytes: lengths longest first, only where the prefix has a symbol
    of that length, each position leaving the search at its first hit (its longest match)."""
    _, _, _, lenbits, per_len = lk
    bits = np.take(lenbits, s)
    for L, mask, mult, shift, hk, hcl in per_len:
        sub = np.flatnonzero(bits & np.uint16(1 << L))
        if not len(sub):
            continue
        key = w[sub] & mask
        hh = key * mult
        hh >>= shift
        hi = hh.view(np.int64)  # < the table size
        hit = np.take(hk, hi) == key
        if not hit.any():
            continue
        done = sub[hit]
        cl[cand[done]] = hcl[hi[hit]]
        bits[done] = 0  # found: no shorter length is looked up


def single(win: np.ndarray, pos: np.ndarray, table: Table) -> np.ndarray:
    """The code (u8) of the one-byte symbol (or escape) of the bytes ``win[pos]``: the match of a
    segment's last byte, which must not run past it. It is the 2-byte window table's entry for
    (byte, terminator), as no multi-byte symbol holds the terminator."""
    two, _ = table.lookups()
    return np.take(two, np.take(win, pos).astype(np.intp) | (table.term << 8)).astype(np.uint8)


def sync_points(lens: np.ndarray, max_len: int) -> np.ndarray:
    """Positions no match before them runs past, for every position and the one after the last
    (bool, ``len(lens) + 1``; ``lens`` the match length at every position, ``max_len`` the
    longest symbol). Every greedy token that covers the byte before such a position ends exactly
    there, so the greedy parse of a segment passes through all of its sync points: they are
    tokens whatever came before. Segment starts are sync points when no match runs past a
    segment's end (terminators, or :func:`single` matches at the ends).

    ``q`` is a sync point when ``lens[q - k] <= k`` for k = 1 .. max_len - 1: the reach past ``q``
    of the matches before it, computed by doubling windows over int8 excesses."""
    n = len(lens)
    sync = np.empty(n + 1, dtype=bool)
    sync[0] = True
    if max_len <= 2:
        np.less_equal(lens, 1, out=sync[1:])
        return sync
    over = np.empty(n + 1, dtype=np.int8)  # how far past q the matches at q-1, q-2, ... reach
    over[0] = 0
    np.subtract(lens.view(np.int8), np.int8(1), out=over[1:])
    w = 1
    while w < max_len - 1:
        np.maximum(over[w:], over[:-w] - np.int8(w), out=over[w:])
        w *= 2
    np.less_equal(over, 0, out=sync)
    return sync


def tokens(lens: np.ndarray, max_len: int, en: Optional[np.ndarray] = None) -> np.ndarray:
    """Where the greedy tokens start (bool per position) of segments laid end to end, no match
    running past a segment's end (``lens``: the match length at every position); terminators
    ``en``, when given, are unmarked.

    The sync points (:func:`sync_points`) are tokens; the others are found by following the
    chains of matches from every sync point that two non-sync positions follow (after one, the
    match ends on the next sync point), until they land on the next sync point -- one numpy step
    per token, but only for the few tokens between two sync points (most tokens of text are
    sync points). Matches of at most 2 bytes take :func:`_short_tokens` instead."""
    if max_len <= 2:
        is_tok = _short_tokens(lens)
        if en is not None:
            is_tok[en] = False
        return is_tok
    sync = sync_points(lens, max_len)
    is_tok = sync[:-1].copy()
    if len(lens) > 1:
        p = np.flatnonzero(sync[:-2] > (sync[1:-1] | sync[2:]))
        open_ = ~sync
        while len(p):
            p += np.take(lens, p)
            p = np.compress(np.take(open_, p), p)
            is_tok[p] = True
    if en is not None:
        is_tok[en] = False
    return is_tok


def _short_tokens(lens: np.ndarray) -> np.ndarray:
    """:func:`tokens` for matches of 1 or 2 bytes, on the positions' bits as one Python integer.

    With ``M`` the 2-byte matches, ``q`` is a sync point unless ``q - 1`` is in ``M``; inside a
    run of ``M`` starting at ``r`` the tokens are ``r, r + 2, ...``, so the non-sync position
    ``q`` is a token when ``q - 1 - r`` is odd. The runs starting at even positions are those a
    carry clears when their start bit is added (``M + starts``: the carry runs through the run
    and stops on the zero after it); their bits at even positions, and the other runs' bits at
    odd positions, are the even offsets."""
    n = len(lens)
    full = (1 << n) - 1
    two = int.from_bytes(np.packbits(lens > 1, bitorder="little").tobytes(), "little")
    even = int.from_bytes(b"\x55" * ((n + 7) // 8), "little") & full
    from_even = two & ~(two + (two & ~(two << 1) & even))  # runs that start at even positions
    even_offset = (from_even & even) | ((two ^ from_even) & ~even)
    toks = (~(two << 1) | ((two ^ even_offset) << 1)) & full
    packed = np.frombuffer(toks.to_bytes((n + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(packed, count=n, bitorder="little").view(bool)


def segments(offs: np.ndarray) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
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
