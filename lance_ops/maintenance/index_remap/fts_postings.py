"""Codecs of an INVERTED (full-text) index's posting lists, as pylance 14.0.2 writes them.

Facts (checked bit for bit against pylance 14.0.2 output; docs/adr/0012-fts-index-remap.md):

* ``part_<p>_invert.lance`` holds one row per token id: ``_posting`` (one binary per block of
  128 documents), ``_max_score`` f32 (best block score), ``_length`` u32 (document count),
  ``_impacts`` (one binary per block, then one per 32 blocks) and, with positions,
  ``_compressed_position`` / ``_position_block_offset``.
* A **full block** is f32 block score, u32 first doc id, u8 bit width + BitPacker4x of the doc-id
  deltas (the first 0), u8 bit width + BitPacker4x of the frequencies. The **last, partial
  block** (``posting_tail_codec = varint_delta_v1``) is the f32 score then LEB128 varints: doc-id
  deltas (the first absolute), then the frequencies.
* BitPacker4x packs 128 u32 values as four interleaved lanes (value ``i`` in lane ``i % 4``),
  each lane LSB first into 32-bit words, word ``w`` of lane ``j`` stored as u32 ``4w + j``.
* Block score = ``max(f / (f + K1 * ((1 - B) + B * dl / avgdl))) * (idf(n, N) * (K1 + 1))`` in
  f32 with the partition's own ``N`` (documents) and ``avgdl`` (``total_tokens / N``), ``n`` the
  posting length; ``idf = ln((N - n + 0.5) / (n + 0.5) + 1)`` (libm ``logf``, correctly rounded).
* An impact entry is the (frequency, length) frontier of its documents: per frequency the
  shortest document, pairs another pair beats on both counts dropped, lengths quantized (below 8
  as they are, else 3 mantissa bits and a shift, Lucene's ``longToInt4``), equal codes merged
  keeping the highest frequency. Written as varints ``last doc id``, ``pair count``, then per pair
  ``(freq delta - 1) << 1 | explicit`` and, when explicit, one byte ``length-code delta``
  (implicit delta 1).

All functions are vectorised over numpy arrays except the per-block loops, whose count is the
posting length / 128.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct
from typing import Callable, Sequence

import numpy as np

from lance_ops.errors import CorruptFileError, UnsupportedError

#: the path named by errors raised here (the remapper re-raises them with the file's path)
WHERE = "INVERTED index posting list"
#: documents per posting block (``posting_block_size``); pylance 14.0.2 writes 128
BLOCK_SIZE = 128
#: impact entries: one per block, then one per this many blocks
IMPACT_GROUP_BLOCKS = 32
#: BM25 parameters of lance-index (f32)
K1 = np.float32(1.2)
B = np.float32(0.75)
_F32 = np.float32
_U64 = np.uint64
_SHIFTS = np.arange(64, dtype=np.uint64)


# --- LEB128 varints -------------------------------------------------------------------------
def encode_varints(values: np.ndarray) -> bytes:
    """LEB128 encoding of non-negative integers, concatenated (vectorised)."""
    vals = np.asarray(values, dtype=np.uint64)
    if vals.size == 0:
        return b""
    nbytes = np.maximum(1, (_bit_length(vals) + 6) // 7)
    width = int(nbytes.max())
    groups = (vals[:, None] >> (_SHIFTS[:width] * _U64(7))) & _U64(0x7F)
    idx = np.arange(width)[None, :]
    cont = (idx < (nbytes[:, None] - 1)).astype(np.uint64) << _U64(7)
    out = (groups | cont).astype(np.uint8)
    return out[idx < nbytes[:, None]].tobytes()


def decode_varints(data: bytes | memoryview) -> np.ndarray:
    """Every LEB128 varint of ``data`` (which must end on a varint boundary), as uint64."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0:
        return np.zeros(0, dtype=np.uint64)
    ends = np.flatnonzero(raw < 0x80)
    if ends.size == 0 or ends[-1] != raw.size - 1:
        raise CorruptFileError(WHERE, "truncated varint in an INVERTED posting block")
    starts = np.concatenate(([0], ends[:-1] + 1))
    pos_in_value = np.arange(raw.size) - np.repeat(starts, ends - starts + 1)
    parts = (raw & 0x7F).astype(np.uint64) << (pos_in_value.astype(np.uint64) * _U64(7))
    return np.add.reduceat(parts, starts).astype(np.uint64)


def _bit_length(values: np.ndarray) -> np.ndarray:
    """Bits needed per value (0 for 0)."""
    vals = np.asarray(values, dtype=np.uint64)
    out = np.zeros(vals.shape, dtype=np.int64)
    v = vals.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        big = v >= (_U64(1) << _U64(shift))
        out[big] += shift
        v[big] >>= _U64(shift)
    out[v > 0] += 1
    return out


# --- BitPacker4x ----------------------------------------------------------------------------
def pack4x(values: np.ndarray, bits: int) -> bytes:
    """BitPacker4x layout of exactly 128 values at ``bits`` bits each (16 * bits bytes)."""
    if bits == 0:
        return b""
    lanes = np.asarray(values, dtype=np.uint64).reshape(32, 4).T
    flat = ((lanes[:, :, None] >> _SHIFTS[:bits]) & _U64(1)).astype(np.uint8).reshape(4, 32 * bits)
    words = np.ascontiguousarray(np.packbits(flat, axis=1, bitorder="little")).view("<u4").reshape(4, bits)
    return np.ascontiguousarray(words.T).astype("<u4").tobytes()


def unpack4x(data: bytes | memoryview, bits: int) -> np.ndarray:
    """The 128 values of one BitPacker4x group of ``bits`` bits (uint64)."""
    if bits == 0:
        return np.zeros(BLOCK_SIZE, dtype=np.uint64)
    words = np.frombuffer(data, dtype="<u4", count=4 * bits).reshape(bits, 4)
    lanes = np.ascontiguousarray(words.T).view(np.uint8).reshape(4, 4 * bits)
    flat = np.unpackbits(lanes, axis=1, bitorder="little").reshape(4, 32, bits).astype(np.uint64)
    return (flat << _SHIFTS[:bits]).sum(axis=2).T.reshape(BLOCK_SIZE)


def bits_needed(values: np.ndarray) -> int:
    """BitPacker's ``num_bits``: the bit length of the largest value."""
    top = int(np.max(values)) if len(values) else 0
    return top.bit_length()


# --- posting blocks ---------------------------------------------------------------------------
def decode_posting(blocks: Sequence[bytes], length: int) -> tuple[np.ndarray, np.ndarray]:
    """(doc ids, frequencies) of one token's posting list (uint64 arrays of ``length``)."""
    docs: list[np.ndarray] = []
    freqs: list[np.ndarray] = []
    full = length // BLOCK_SIZE
    for i, blk in enumerate(blocks):
        view = memoryview(blk)
        if i < full:
            first = struct.unpack_from("<I", view, 4)[0]
            dbits = view[8]
            deltas = unpack4x(view[9:9 + 16 * dbits], dbits)
            pos = 9 + 16 * dbits
            fbits = view[pos]
            freq = unpack4x(view[pos + 1:pos + 1 + 16 * fbits], fbits)
            if pos + 1 + 16 * fbits != len(view):
                raise CorruptFileError(WHERE, "INVERTED posting block has trailing bytes")
            docs.append(_U64(first) + np.cumsum(deltas, dtype=np.uint64))
            freqs.append(freq)
        else:
            vals = decode_varints(view[4:])
            half = vals.size // 2
            docs.append(np.cumsum(vals[:half], dtype=np.uint64))
            freqs.append(vals[half:])
    out_docs = np.concatenate(docs) if docs else np.zeros(0, dtype=np.uint64)
    out_freqs = np.concatenate(freqs) if freqs else np.zeros(0, dtype=np.uint64)
    if out_docs.size != length or out_freqs.size != length:
        raise CorruptFileError(WHERE, f"INVERTED posting list holds {out_docs.size} documents, _length says {length}")
    return out_docs, out_freqs


def encode_posting(docs: np.ndarray, freqs: np.ndarray, scores: np.ndarray) -> list[bytes]:
    """The blocks of one posting list (sorted doc ids, frequencies, one f32 score per block)."""
    out = []
    n = len(docs)
    for b, start in enumerate(range(0, n, BLOCK_SIZE)):
        d = np.asarray(docs[start:start + BLOCK_SIZE], dtype=np.uint64)
        f = np.asarray(freqs[start:start + BLOCK_SIZE], dtype=np.uint64)
        head = struct.pack("<f", float(scores[b]))
        if len(d) == BLOCK_SIZE:
            deltas = np.diff(d, prepend=d[:1])
            dbits, fbits = bits_needed(deltas), bits_needed(f)
            out.append(head + struct.pack("<IB", int(d[0]), dbits) + pack4x(deltas, dbits)
                       + bytes([fbits]) + pack4x(f, fbits))
        else:
            deltas = np.diff(d, prepend=_U64(0))
            out.append(head + encode_varints(np.concatenate((deltas, f))))
    return out


# --- scores ---------------------------------------------------------------------------------
def _libm_logf() -> Callable[[float], float]:
    """The C library's ``logf``: Rust's ``f32::ln`` calls it, and glibc's is not correctly rounded
    (about 2 in 10^4 arguments differ by one ulp from ``log`` in f64 rounded to f32), so block
    scores match pylance's bits only through the same function. Falls back to ``math.log``."""
    name = ctypes.util.find_library("m")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        lib = None
    if lib is None or not hasattr(lib, "logf"):
        return math.log
    logf = lib.logf
    logf.argtypes = [ctypes.c_float]
    logf.restype = ctypes.c_float
    return logf


_LOGF = _libm_logf()


def idf(token_docs: int, num_docs: int) -> np.float32:
    """lance-index's BM25 idf in f32 (``logf`` of the f32 argument)."""
    x = (_F32(num_docs) - _F32(token_docs) + _F32(0.5)) / (_F32(token_docs) + _F32(0.5)) + _F32(1.0)
    return _F32(_LOGF(float(x)))


def block_scores(freqs: np.ndarray, doc_lengths: np.ndarray, num_docs: int, avgdl: np.float32) -> np.ndarray:
    """One f32 upper-bound score per 128-document block of a posting list."""
    f = np.asarray(freqs, dtype=np.float32)
    dl = np.asarray(doc_lengths, dtype=np.float32)
    norm = K1 * ((_F32(1.0) - B) + (B * dl) / avgdl)
    weight = (f / (f + norm)).astype(np.float32)
    starts = np.arange(0, len(f), BLOCK_SIZE)
    best = np.maximum.reduceat(weight, starts) if len(f) else np.zeros(0, np.float32)
    factor = _F32(idf(len(f), num_docs) * (K1 + _F32(1.0)))
    return (best * factor).astype(np.float32)


def average_length(total_tokens: int, num_docs: int) -> np.float32:
    """The partition's ``avgdl`` in f32 (total tokens / documents)."""
    return _F32(_F32(total_tokens) / _F32(num_docs)) if num_docs else _F32(0.0)


# --- impacts --------------------------------------------------------------------------------
def length_code(lengths: np.ndarray) -> np.ndarray:
    """Lucene ``longToInt4``: below 8 exact, else 3 mantissa bits and a shift (rounds down)."""
    vals = np.asarray(lengths, dtype=np.uint64)
    nbits = _bit_length(vals)
    shift = np.maximum(nbits - 4, 0).astype(np.uint64)
    normal = ((vals >> shift) & _U64(7)) | ((shift + _U64(1)) << _U64(3))
    return np.where(nbits < 4, vals, normal).astype(np.int64)


def impact_entry(freqs: np.ndarray, lengths: np.ndarray, last_doc: int) -> bytes:
    """One encoded impact entry of the documents (freqs, lengths) ending at ``last_doc``."""
    f = np.asarray(freqs, dtype=np.int64)
    code = length_code(lengths)
    # frontier: for growing frequency, a pair survives when its code beats every higher frequency's
    order = np.lexsort((code, -f))            # frequency descending, then code ascending
    f_sorted, c_sorted = f[order], code[order]
    first_of_freq = np.concatenate(([True], f_sorted[1:] != f_sorted[:-1]))
    f_u, c_u = f_sorted[first_of_freq], c_sorted[first_of_freq]   # min code per frequency, desc freq
    best_higher = np.minimum.accumulate(np.concatenate(([np.iinfo(np.int64).max], c_u[:-1])))
    keep = c_u < best_higher                  # strictly shorter than every higher frequency
    f_k, c_k = f_u[keep][::-1], c_u[keep][::-1]   # ascending frequency, ascending code
    df = np.diff(f_k, prepend=0)
    dc = np.diff(c_k, prepend=0)
    if np.any(dc > 255) or np.any(df < 1):
        raise UnsupportedError("INVERTED impact entry out of range")
    explicit = dc != 1
    head = encode_varints(np.array([last_doc, len(f_k)], dtype=np.uint64))
    body = bytearray()
    tags = encode_varints(((df - 1) << 1 | explicit).astype(np.uint64))
    # tags are varints; interleave each with its optional length byte
    tag_arr = np.frombuffer(tags, dtype=np.uint8)
    tag_ends = np.flatnonzero(tag_arr < 0x80)
    start = 0
    for i, end in enumerate(tag_ends.tolist()):
        body += tag_arr[start:end + 1].tobytes()
        if explicit[i]:
            body.append(int(dc[i]))
        start = end + 1
    return head + bytes(body)


def encode_impacts(docs: np.ndarray, freqs: np.ndarray, doc_lengths: np.ndarray) -> list[bytes]:
    """The impact entries of one posting list: one per block, then one per 32 blocks."""
    out = []
    n = len(docs)
    for size in (BLOCK_SIZE, BLOCK_SIZE * IMPACT_GROUP_BLOCKS):
        for start in range(0, n, size):
            stop = min(start + size, n)
            out.append(impact_entry(freqs[start:stop], doc_lengths[start:stop], int(docs[stop - 1])))
    return out


# --- positions (positions_layout shared_stream_v2, positions_codec packed_delta_v1) ---------------
def decode_block_positions(stream: bytes | memoryview, count: int) -> np.ndarray:
    """The ``count`` position values (per-document deltas, first absolute) of one block."""
    view = memoryview(stream)
    out = []
    pos = 0
    for _ in range(count // BLOCK_SIZE):
        bits = view[pos]
        out.append(unpack4x(view[pos + 1:pos + 1 + 16 * bits], bits))
        pos += 1 + 16 * bits
    tail = decode_varints(view[pos:])
    if tail.size != count % BLOCK_SIZE:
        raise CorruptFileError(WHERE, "INVERTED position block holds the wrong number of positions")
    out.append(tail)
    return np.concatenate(out)


def encode_block_positions(values: np.ndarray) -> bytes:
    """One block's position stream: groups of 128 bit-packed, the rest as varints."""
    vals = np.asarray(values, dtype=np.uint64)
    full = int(len(vals) // BLOCK_SIZE * BLOCK_SIZE)
    parts = []
    for start in range(0, full, BLOCK_SIZE):
        group = vals[start:start + BLOCK_SIZE]
        bits = bits_needed(group)
        parts.append(bytes([bits]) + pack4x(group, bits))
    parts.append(encode_varints(vals[full:]))
    return b"".join(parts)


def decode_positions(stream: bytes, offsets: Sequence[int], freqs: np.ndarray) -> np.ndarray:
    """Every position value of a posting list, in posting order (per-document deltas)."""
    bounds = list(offsets) + [len(stream)]
    out = []
    for b in range(len(offsets)):
        count = int(np.sum(freqs[b * BLOCK_SIZE:(b + 1) * BLOCK_SIZE]))
        out.append(decode_block_positions(memoryview(stream)[bounds[b]:bounds[b + 1]], count))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint64)


def encode_positions(values: np.ndarray, freqs: np.ndarray) -> tuple[bytes, list[int]]:
    """(stream, per-block byte offsets) of a posting list's positions (``values`` in posting
    order, ``freqs[i]`` of them per document)."""
    ends = np.cumsum(np.asarray(freqs, dtype=np.int64))
    starts = np.concatenate(([0], ends[:-1]))
    parts = []
    offsets = []
    size = 0
    for b in range(0, len(freqs), BLOCK_SIZE):
        lo = int(starts[b])
        hi = int(ends[min(b + BLOCK_SIZE, len(freqs)) - 1])
        offsets.append(size)
        part = encode_block_positions(values[lo:hi])
        parts.append(part)
        size += len(part)
    return b"".join(parts), offsets
