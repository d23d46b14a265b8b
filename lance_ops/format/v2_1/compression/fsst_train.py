"""FSST symbol-table training for the writer (``v2_1.compression.fsst``, ADR 0046), counted per code.

Six rounds over a ~16 KiB sample, in upstream's spirit: compress the sample with the current table,
count every code and every pair of adjacent codes of one segment (numpy ``bincount`` over code
numbers: 0-255 an escaped byte, 256 + i symbol i), turn the counts into candidates -- the symbols
themselves (single bytes x8), the first byte after a multi-byte symbol, and (not in the last round)
the concatenation of adjacent symbols, and a symbol plus the next one's first byte -- and keep the
255 with the highest ``count * length``; the table of the round with the highest gain wins. The
terminator (the sample's least frequent byte) never enters a multi-byte symbol, as upstream.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from lance_ops.format.v2_1.compression.fsst_match import (
    ESCAPE, MASKS, MAX_SYMBOLS, Table, expand, match, segments, tokens,
)

_ROUNDS = (8, 38, 68, 98, 108, 128)
_NCODES = 512
_BINCOUNT_MAX = 1 << 18  # keys counted by bincount (else by sorting): the pair keys of 512 x 512 codes


def _group(v: np.ndarray, ln: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (value, length) pairs with their summed ``weight``."""
    if not len(v):
        return v, ln, weight
    order = np.lexsort((v, ln))
    v, ln = v[order], ln[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = (v[1:] != v[:-1]) | (ln[1:] != ln[:-1])
    starts = np.flatnonzero(new)
    return v[starts], ln[starts], np.add.reduceat(weight[order], starts)


def _nonzero_counts(keys: np.ndarray, size: int, threshold: int) -> tuple[np.ndarray, np.ndarray]:
    """(key, count) of the keys (< ``size``) counted at least ``max(threshold, 1)`` times,
    ascending: a ``bincount`` over few keys, a sort of the keys over many."""
    if size <= _BINCOUNT_MAX:
        c = np.bincount(keys, minlength=size)
        k = np.flatnonzero(c >= max(threshold, 1))
        return k, c[k]
    k, c = np.unique(keys, return_counts=True)
    ok = c >= max(threshold, 1)
    return k[ok], c[ok]


def build_table(sample: np.ndarray, s_offs: np.ndarray) -> Table:
    """The symbol table trained on ``sample`` (strings at ``s_offs``); empty when nothing pays."""
    hist = np.bincount(sample, minlength=256)
    term = int(np.argmin(hist))
    seg_s, seg_e, _ = segments(s_offs)
    buf, st, en = expand(sample, seg_s, seg_e, term)
    table = Table(np.zeros(0, np.uint64), np.zeros(0, np.int64), term)
    not_term = np.ones(len(buf) - 8, dtype=bool)
    not_term[en] = False
    best: Optional[Table] = None
    best_gain = -1
    for frac in _ROUNDS:
        if len(table.vals):
            codes, lens = match(buf, table)
            tok = np.flatnonzero(tokens(lens, int(table.lens.max()), en))
            code = codes[tok]
            tlen = lens[tok].astype(np.int64)
        else:  # the empty table escapes every byte: no walk (one step per byte on long strings)
            tok = np.flatnonzero(not_term)
            code = np.full(len(tok), ESCAPE, dtype=np.uint8)
            tlen = np.ones(len(tok), dtype=np.int64)
        # code numbers: 0-255 an escaped byte, 256 + i symbol i
        num = np.where(code == ESCAPE, buf[tok].astype(np.intp), code.astype(np.intp) + 256)
        symval = np.concatenate([np.arange(256, dtype=np.uint64), table.vals])
        symlen = np.concatenate([np.ones(256, dtype=np.int64), table.lens])
        c1 = np.bincount(num, minlength=_NCODES)
        gain = int((c1[256:256 + len(table.vals)] * (table.lens - 1)).sum())
        if gain >= best_gain:
            best, best_gain = table, gain
        if frac == _ROUNDS[-1] and best is not None and len(best.vals):
            break  # the last round's table would only be returned in place of an empty best
        threshold = (5 * frac) // 128
        cands: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (value, length, score)
        # the symbols and escaped bytes themselves: single bytes are promoted (x8), as upstream
        k = np.flatnonzero(c1 >= max(threshold, 1))
        ln = symlen[k]
        cands.append((symval[k], ln, c1[k] * ln * np.where(ln == 1, 8, 1)))
        # adjacent tokens of one segment: contiguous in the expanded buffer
        adj = np.flatnonzero(tok[1:] == tok[:-1] + tlen[:-1])
        a, b = num[adj], num[adj + 1]
        la = symlen[a]
        fb = buf[tok[adj + 1]]  # first byte of the next token
        # first byte of a token that follows a multi-byte symbol
        k, c = _nonzero_counts(fb[la > 1], 256, threshold)
        cands.append((k.astype(np.uint64), np.ones(len(k), np.int64), c * 8))
        if frac < 128:
            first_a = (symval[a] & np.uint64(0xFF)).astype(np.intp)
            ok = (la < 8) & (first_a != term) & (fb != term)
            a, b, fb, la = a[ok], b[ok], fb[ok], la[ok]
            # concatenations of adjacent symbols (cut at 8 bytes), counted by pair then by value
            k, c = _nonzero_counts(a * _NCODES + b, _NCODES * _NCODES, 1)
            pa_, pb = k // _NCODES, k % _NCODES
            lpa = symlen[pa_]
            cln = np.minimum(lpa + symlen[pb], 8)
            cv = (symval[pa_] | (symval[pb] << (8 * lpa).astype(np.uint64))) & MASKS[cln]
            gv, gl, gc = _group(cv, cln, c)
            ok = gc >= threshold
            cands.append((gv[ok], gl[ok], gc[ok] * gl[ok]))
            # a symbol plus the first byte of a following multi-byte symbol
            multi = symlen[b] > 1
            k, c = _nonzero_counts(a[multi] * 256 + fb[multi], _NCODES * 256, threshold)
            pa_, pf = k // 256, (k % 256).astype(np.uint64)
            lpa = symlen[pa_]
            cands.append((symval[pa_] | (pf << (8 * lpa).astype(np.uint64)), lpa + 1, c * (lpa + 1)))
        v, ln, score = _group(*(np.concatenate([c[i] for c in cands]) for i in range(3)))
        score = score.astype(np.int64)
        top = np.lexsort((v, ln, -score))[:MAX_SYMBOLS]
        table = Table(v[top], ln[top], term)
    assert best is not None
    return best if len(best.vals) else table
