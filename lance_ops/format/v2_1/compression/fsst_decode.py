"""FSST decompression (the symbol-table format of Lance's FSST implementation).

Symbol table (2,312 bytes when exported in full; only the used prefix matters):
``u64 info`` (little-endian: bits 0..7 number of symbols, bit 24 "encoder switch" -- when clear
the payload is stored uncompressed, bits 32..63 a magic), then ``n`` little-endian u64 symbols
(the symbol's bytes, first byte in the lowest bits), then ``n`` u8 symbol lengths (1..8).

Compressed strings: each byte is a code; code ``c < 255`` expands to symbol ``c`` and code 255
(escape) means "the next byte is a literal". Strings are compressed independently, so the
decoder works on the concatenated bytes and maps the offsets afterwards.

Short symbols (the longest one *used* at most ``LANE_MAX`` bytes, as in tables trained on names,
identifiers or random text) decode by *byte lanes* (ADR 0058): every code's output position is the
running sum of its symbol's length, and lane ``j`` writes byte ``j`` of every code's symbol at
``position + j`` -- one numpy gather and one scatter per lane, highest lane first. A byte a code
writes past its own symbol lands on a later code's position at a lower lane, which is written
afterwards, so every output byte ends as the right one whatever order numpy applies one lane's
writes in (positions within a lane are distinct). Longer symbols decode by one Arrow ``take`` of
the codes from a binary "dictionary" of the symbols: the result's data buffer is the decompressed
text and its offsets give every code's output position. Large inputs without escapes take code
*pairs* (u16) from a 65,536-entry dictionary of symbol pairs, halving the per-element work.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

ESCAPE = 255
_PAIR_MIN_CODES = 1 << 18  # below this, building the pair dictionary costs more than it saves
_INT32_LIMIT = (1 << 31) - 1
_SHARED: dict[bytes, dict] = {}
_SHARED_MAX = 32  # distinct symbol tables whose dictionaries are kept
_BLOCK = 1 << 15  # codes per block of the lane decode (index temporaries of 256 KiB)
LANE_MAX = 4  # byte lanes up to this symbol length (measured: each lane costs ~1/4 of an Arrow take)


class FsstTable:
    """A parsed FSST symbol table that expands compressed strings back to their bytes.

    Decoding is vectorised through Arrow takes over the symbol (and symbol pair) table."""

    def __init__(self, table: bytes) -> None:
        if len(table) < 8:
            raise ValueError(f"FSST symbol table is {len(table)} bytes, too short")
        info = int.from_bytes(table[:8], "little")
        self.enabled = bool(info & (1 << 24))
        n = info & 0xFF
        if len(table) < 8 + 9 * n:
            raise ValueError(f"FSST symbol table of {len(table)} bytes cannot hold {n} symbols")
        syms = np.frombuffer(table, dtype="<u8", count=n, offset=8)
        lens = np.frombuffer(table, dtype=np.uint8, count=n, offset=8 + 8 * n).astype(np.int64)
        if n and (lens.min() < 1 or lens.max() > 8):
            raise ValueError("FSST symbol length out of range")
        # 256 x 8 byte matrix of symbol bytes; code 255 (escape) and unused codes expand to nothing
        self.sym_bytes = np.zeros((256, 8), dtype=np.uint8)
        self.sym_bytes[:n] = syms.astype("<u8").view(np.uint8).reshape(n, 8)
        self.sym_lens = np.zeros(256, dtype=np.int64)
        self.sym_lens[:n] = lens
        self.max_len = int(lens.max()) if n else 1
        self.n = n
        # byte lanes: entry ``c`` of lane ``j`` is byte ``j`` of symbol ``c``; entries 256..511 are
        # the escaped literal bytes (lane 0) and the escape code 255 has length 0
        self.lane_lens = np.concatenate([self.sym_lens, np.ones(256, np.int64)]).astype(np.uint8)
        self.lanes = np.zeros((8, 512), dtype=np.uint8)
        self.lanes[:, :256] = self.sym_bytes.T
        self.lanes[0, 256:] = np.arange(256, dtype=np.uint8)
        # the symbol (pair) dictionaries depend only on the symbols: shared by equal tables (a
        # file's pages and batches usually repeat one table, and every read parses it afresh)
        key = bytes(table[:8 + 9 * n])
        if len(_SHARED) >= _SHARED_MAX and key not in _SHARED:
            _SHARED.clear()
        self._dicts: dict = _SHARED.setdefault(key, {})

    # --- dictionaries ---------------------------------------------------------------------
    def _single(self, large: bool) -> pa.Array:
        """512 entries: symbols 0..254 (255 = escape = empty), then the 256 literal bytes."""
        key = ("single", large)
        if key not in self._dicts:
            lens = np.concatenate([self.sym_lens, np.ones(256, np.int64)])
            keep = np.arange(8)[None, :] < self.sym_lens[:, None]
            data = np.concatenate([self.sym_bytes[keep], np.arange(256, dtype=np.uint8)])
            offs = np.zeros(513, np.int64)
            np.cumsum(lens, out=offs[1:])
            t = pa.large_binary() if large else pa.binary()
            offs = offs if large else offs.astype(np.int32)
            self._dicts[key] = pa.Array.from_buffers(t, 512, [None, pa.py_buffer(offs), pa.py_buffer(data)])
        return self._dicts[key]

    def _pairs(self, large: bool) -> pa.Array:
        """65,536 entries: entry ``lo | hi << 8`` is symbol ``lo`` then symbol ``hi``."""
        key = ("pairs", large)
        if key not in self._dicts:
            both = np.empty((65536, 2), np.uint16)
            both[:, 0] = np.tile(np.arange(256, dtype=np.uint16), 256)
            both[:, 1] = np.repeat(np.arange(256, dtype=np.uint16), 256)
            got = self._single(large).take(pa.array(both.reshape(-1)))
            ow = 8 if large else 4
            offs = np.frombuffer(got.buffers()[1], dtype=f"<i{ow}", count=2 * 65536 + 1)[::2].copy()
            t = pa.large_binary() if large else pa.binary()
            self._dicts[key] = pa.Array.from_buffers(t, 65536, [None, pa.py_buffer(offs), got.buffers()[2]])
        return self._dicts[key]

    # --- decoding -------------------------------------------------------------------------
    def decode(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decode concatenated compressed strings; returns (new int64 offsets, bytes)."""
        data = np.asarray(data, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        o0, o1 = int(offsets[0]), int(offsets[-1])
        base = offsets - o0 if o0 else offsets
        if not self.enabled:
            return base, data[o0:o1]
        codes = data[o0:o1]
        n = len(codes)
        if n == 0:
            return base, np.zeros(0, np.uint8)
        top = int(codes.max())
        large = n * self.max_len > _INT32_LIMIT
        if top == ESCAPE:
            return self._decode_escaped(codes, base, large)
        if top >= self.n:
            raise ValueError("FSST code refers to a symbol that is not in the table")
        if n < _PAIR_MIN_CODES:
            # byte lanes beat one take per code; from _PAIR_MIN_CODES on, the take of code pairs
            # below does half the work per code and beats both (one 300k-string page: 2x)
            got = self._lanes(codes, base, None)
            if got is not None:
                return got
            res = self._single(large).take(pa.array(codes))
            out = _out_offsets(res, n + 1, large, base)
            return out, _out_data(res, out)
        # pairs of codes; an odd tail is paired with the next byte of ``data`` when there is one
        # (any byte >= the symbol count expands to nothing and the output is cut at the last
        # offset), else with the (empty) escape code
        npairs = (n + 1) // 2
        if n % 2 and o1 < len(data):
            codes_p = data[o0:o1 + 1]
        elif n % 2:
            codes_p = np.full(2 * npairs, ESCAPE, np.uint8)
            codes_p[:n] = codes
        else:
            codes_p = codes
        res = self._pairs(large).take(pa.array(codes_p.view("<u2")))
        pos = _out_offsets(res, npairs + 1, large, base >> 1)
        odd = np.flatnonzero(base & 1)  # strings starting mid-pair: add the pair's first symbol
        if len(odd):
            pos[odd] += self.sym_lens[codes[base[odd] - 1]]
        return pos, _out_data(res, pos)

    def _decode_escaped(self, codes: np.ndarray, base: np.ndarray, large: bool) -> tuple[np.ndarray, np.ndarray]:
        """Codes with escapes: the escape expands to nothing, its literal to the byte itself."""
        n = len(codes)
        is_ff = codes == ESCAPE
        # within a run of 0xFF bytes the escapes are at even positions of the run, literals at odd
        idx = np.arange(n)
        run_start = np.empty(n, dtype=bool)
        run_start[0] = is_ff[0]
        run_start[1:] = is_ff[1:] & ~is_ff[:-1]
        start_pos = np.maximum.accumulate(np.where(run_start, idx, 0))
        escape = is_ff & ((idx - start_pos) % 2 == 0)
        literal = np.zeros(n, dtype=bool)
        literal[1:] = escape[:-1]
        if escape[-1]:
            raise ValueError("FSST data ends with an escape code")
        sym = ~(escape | literal)
        if sym.any() and int(np.compress(sym, codes).max()) >= self.n:
            raise ValueError("FSST code refers to a symbol that is not in the table")
        ids = codes.astype(np.uint16)
        ids += literal.view(np.uint8).astype(np.uint16) << 8
        got = self._lanes(ids, base, ~escape)
        if got is not None:
            return got
        res = self._single(large).take(pa.array(ids))
        out = _out_offsets(res, n + 1, large, base)
        return out, _out_data(res, out)

    def _lanes(self, ids: np.ndarray, base: np.ndarray,
               keep: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """Byte-lane decode of ``ids`` (u8 codes, or u16 0..511: symbols, then literal bytes), or
        None when a used symbol is longer than ``LANE_MAX`` (a table often holds long symbols
        its data never uses, so the lengths of the used ones decide). ``keep`` drops the escape
        codes (length 0) from the writes, which would otherwise share their literal's position.

        Two passes over blocks of ``_BLOCK`` codes (output positions, then bytes) keep the index
        temporaries small; the arrays that scale with the page come from Arrow's memory pool,
        whose freed memory is reused (a fresh numpy array of that size is mapped afresh and
        faults on each 4 KiB page, which costs as much as the decoding)."""
        n = len(ids)
        pos = pool_array(n + 1, np.int64)
        pos[0] = 0
        width = 0
        for s in range(0, n, _BLOCK):
            e = min(s + _BLOCK, n)
            lens = self.lane_lens.take(ids[s:e].astype(np.intp))
            width = max(width, int(lens.max()))
            if width > LANE_MAX:
                return None
            run = pos[s + 1:e + 1]
            np.cumsum(lens, out=run)
            run += pos[s]
        total = int(pos[n])
        out = pool_array(total + width, np.uint8)
        for s in range(0, n, _BLOCK):
            e = min(s + _BLOCK, n)
            blk, at = ids[s:e].astype(np.intp), pos[s:e]
            if keep is not None:
                k = keep[s:e]
                blk, at = blk[k], at[k]
            for j in range(width - 1, -1, -1):  # highest lane first: lower lanes overwrite spill-over
                out[j:][at] = self.lanes[j].take(blk)
        return pos[base], out[:total]


def pool_array(count: int, dtype: type) -> np.ndarray:
    """An uninitialised writable array whose memory comes from Arrow's default pool."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(pa.allocate_buffer(count * size), dtype=dtype)


def _out_offsets(res: pa.Array, count: int, large: bool, at: np.ndarray) -> np.ndarray:
    """The take result's offsets at positions ``at``, as int64."""
    offs = np.frombuffer(res.buffers()[1], dtype="<i8" if large else "<i4", count=count + res.offset)
    return offs[at + res.offset if res.offset else at].astype(np.int64)


def _out_data(res: pa.Array, offsets: np.ndarray) -> np.ndarray:
    buf = res.buffers()[2]
    end = int(offsets[-1])
    return np.frombuffer(buf, dtype=np.uint8, count=end) if end else np.zeros(0, np.uint8)
