"""FSST decompression (the symbol-table format of Lance's FSST implementation).

Symbol table (2,312 bytes when exported in full; only the used prefix matters):
``u64 info`` (little-endian: bits 0..7 number of symbols, bit 24 "encoder switch" -- when clear
the payload is stored uncompressed, bits 32..63 a magic), then ``n`` little-endian u64 symbols
(the symbol's bytes, first byte in the lowest bits), then ``n`` u8 symbol lengths (1..8).

Compressed strings: each byte is a code; code ``c < 255`` expands to symbol ``c`` and code 255
(escape) means "the next byte is a literal". Strings are compressed independently, so the
decoder works on the concatenated bytes and maps the offsets afterwards.
"""
from __future__ import annotations

import numpy as np

ESCAPE = 255
_ARANGE8 = np.arange(8, dtype=np.uint8)
_FIRST_ONLY = _ARANGE8 == 0
_MAGIC_MASK = 0xFFFFFFFF00000000


class FsstTable:
    def __init__(self, table: bytes):
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
        # 256 x 8 byte matrix of symbol bytes; code 255 is the escape
        self.sym_bytes = np.zeros((256, 8), dtype=np.uint8)
        self.sym_bytes[:n] = syms.astype("<u8").view(np.uint8).reshape(n, 8)
        self.sym_lens = np.zeros(256, dtype=np.int64)
        self.sym_lens[:n] = lens
        self.sym_lens8 = self.sym_lens.astype(np.uint8)
        self.max_len = int(lens.max()) if n else 1
        self.sym_rows = np.ascontiguousarray(self.sym_bytes[:, :self.max_len])
        # per code: which of the row's bytes the symbol uses
        self.sym_keep = _ARANGE8[None, :self.max_len] < self.sym_lens8[:, None]
        self.n = n

    def decode(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decode concatenated compressed strings; returns (new int64 offsets, bytes)."""
        data = np.asarray(data, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        if not self.enabled:
            return offsets - offsets[0], data[offsets[0]:offsets[-1]].copy()
        data = data[offsets[0]:offsets[-1]]
        base = offsets - offsets[0]
        n = len(data)
        if n == 0:
            return base, data.copy()
        is_ff = data == ESCAPE
        escape = literal = None
        if is_ff.any():
            # within each run of 0xFF bytes the escapes are at even positions of the run, literals at odd
            idx = np.arange(n)
            run_start = np.empty(n, dtype=bool)
            run_start[0] = is_ff[0]
            run_start[1:] = is_ff[1:] & ~is_ff[:-1]
            start_pos = np.maximum.accumulate(np.where(run_start, idx, 0))
            pos_in_run = idx - start_pos
            escape = is_ff & (pos_in_run % 2 == 0)
            literal = np.zeros(n, dtype=bool)
            literal[1:] = escape[:-1]
            code = ~(escape | literal)
            if code.any() and int(data[code].max()) >= self.n:
                raise ValueError("FSST code refers to a symbol that is not in the table")
        elif int(data.max()) >= self.n:
            raise ValueError("FSST code refers to a symbol that is not in the table")
        # one row of (up to) the longest symbol's bytes per code, then keep the first len bytes of each
        width = self.max_len
        out_len = np.take(self.sym_lens8, data)
        rows = np.take(self.sym_rows, data, axis=0)
        if escape is not None:
            out_len[escape] = 0
            out_len[literal] = 1
            rows[literal, 0] = data[literal]
        if width == 1:
            out = rows.reshape(-1) if escape is None else rows.reshape(-1)[out_len.astype(bool)]
        else:
            keep = np.take(self.sym_keep, data, axis=0)
            if escape is not None:
                keep[escape] = False
                keep[literal] = _FIRST_ONLY[:width]
            out = rows[keep]
        cum = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(out_len, out=cum[1:])
        return cum[base], out
