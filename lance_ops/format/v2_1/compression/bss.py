"""Byte-stream-split (BSS) mini-block compression of the Lance 2.1+ writer.

When pylance 14 uses it (fixed-width mini-block values only; full-zip, fixed-size lists, packed
structs and booleans never):

* only when the field asks for a compression (``lance-encoding:compression`` set and not
  ``none``: ``zstd``, ``lz4`` and even ``fsst``) -- BSS only reorders bytes, the general
  compressor wrapped around it (zstd / lz4) does the compressing;
* only for 32- and 64-bit values (floats, but also ints, dates, timestamps...);
* ``lance-encoding:bss``: ``on`` always, ``off`` never, ``auto`` (the default; unknown values
  count as ``auto``) when the mean Shannon entropy of the byte positions, measured on the first 64
  values, is below 4 bits (``entropy * 1000`` truncated to an integer per position first);
* it is tried before RLE and bitpacking, so it replaces them when chosen.

Byte format: chunks of 1024 values (32-bit) or 512 values (64-bit), the last one shorter; each
chunk is one buffer holding its ``bytes_per_value`` streams of ``count`` bytes each (byte ``j`` of
every value of the chunk, then byte ``j + 1``...). The encoding is
``ByteStreamSplit(values=Flat(bits))``, wrapped in ``General`` when zstd / lz4 compression of the
chunks pays off.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import values as ev

SAMPLE_VALUES = 64
SENSITIVITY = {"off": 0.0, "on": 1.0, "auto": 0.5}
CHUNK_VALUES = {32: 1024, 64: 512}


def parse_mode(value: Optional[str]) -> str:
    """``on`` / ``off`` / ``auto`` from the ``lance-encoding:bss`` value (anything else: auto)."""
    if value is None:
        return "auto"
    v = value.strip().lower()
    return v if v in SENSITIVITY else "auto"


def byte_position_entropy(data: np.ndarray, n: int, width: int) -> np.ndarray:
    """Per byte position: Shannon entropy (bits) of the first 64 values, times 1000, truncated."""
    k = min(n, SAMPLE_VALUES)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    sample = np.ascontiguousarray(data[: k * width]).reshape(k, width)
    out = np.zeros(width, dtype=np.int64)
    for j in range(width):  # at most 8 positions
        counts = np.bincount(sample[:, j], minlength=256)
        p = counts[counts > 0] / float(k)
        out[j] = int(float(-(p * np.log2(p)).sum()) * 1000.0)
    return out


def should_use(data: np.ndarray, n: int, bits: int, mode: str) -> bool:
    """pylance's choice for ``bits``-wide values under ``mode`` (see the module docstring)."""
    if bits not in CHUNK_VALUES:
        return False
    sens = SENSITIVITY[mode]
    if sens <= 0.0:
        return False
    if sens >= 1.0:
        return True
    ent = byte_position_entropy(data, n, bits // 8)
    if len(ent) == 0:
        return False
    avg = float(ent.sum()) / len(ent) / 1000.0
    return avg < sens * 8.0


def enc_bss(bits: int) -> pb.CompressiveEncoding:
    """The byte-stream-split encoding description of ``bits``-bit values (their bytes as flat values)."""
    e = pb.CompressiveEncoding()
    e.byte_stream_split.values.CopyFrom(ev.enc_flat(bits))
    return e


def bss_miniblock(data: np.ndarray, n: int, bits: int) -> ev.MiniBlocks:
    """BSS chunks of ``n`` values of ``bits`` bits (``data``: their n * bits/8 bytes)."""
    w = bits // 8
    per = CHUNK_VALUES[bits]
    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)[: n * w]
    full, rest = divmod(n, per)
    bufs: list[list[bytes]] = []
    if full:
        # (chunk, value, byte) -> (chunk, byte, value): every chunk's streams back to back
        blocks = data[: full * per * w].reshape(full, per, w).transpose(0, 2, 1)
        flat = np.ascontiguousarray(blocks).reshape(full, per * w)
        bufs.extend([row.tobytes()] for row in flat)
    if rest:
        tail = data[full * per * w:].reshape(rest, w).T
        bufs.append([np.ascontiguousarray(tail).tobytes()])
    counts = [per] * full + ([rest] if rest else [])
    return ev.MiniBlocks(enc_bss(bits), counts, bufs)
