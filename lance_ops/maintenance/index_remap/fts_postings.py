"""Codecs of an INVERTED (full-text) index's posting lists, as pylance 14.0.2 writes them.

Facts (checked bit for bit against pylance 14.0.2 output; docs/adr/0014-fts-index-remap.md):

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
    return _encode_items(vals, np.zeros(vals.size, dtype=bool))[0]


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
    """Bits needed per value (0 for 0); exact below 2**53 (through the float exponent)."""
    vals = np.asarray(values, dtype=np.uint64)
    if vals.size and int(vals.max()) >= 1 << 53:
        return np.array([int(v).bit_length() for v in vals.tolist()], dtype=np.int64)
    return np.frexp(vals.astype(np.float64))[1].astype(np.int64)


def _encode_items(values: np.ndarray, raw: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Varints of ``values``, except items flagged ``raw`` (single bytes, < 256); also each item's
    byte length."""
    vals = np.asarray(values, dtype=np.uint64)
    nbytes = np.where(raw, 1, np.maximum(1, (_bit_length(vals) + 6) // 7))
    width = int(nbytes.max()) if vals.size else 1
    groups = (vals[:, None] >> (_SHIFTS[:width] * _U64(7))) & _U64(0x7F)
    groups[raw, 0] = vals[raw]
    idx = np.arange(width)[None, :]
    cont = (idx < (nbytes[:, None] - 1)).astype(np.uint64) << _U64(7)
    out = (groups | cont).astype(np.uint8)
    return out[idx < nbytes[:, None]].tobytes(), nbytes


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


def encode_impacts(docs: np.ndarray, freqs: np.ndarray, doc_lengths: np.ndarray) -> list[bytes]:
    """The impact entries of one posting list: one per block, then one per 32 blocks.

    Vectorised over the entries: every (entry, frequency, code) is sorted once; the frontier is a
    segmented running minimum (entries offset so earlier ones never reach into later ones)."""
    n = len(docs)
    if n == 0:
        return []
    f_all = np.asarray(freqs, dtype=np.int64)
    c_all = length_code(doc_lengths)
    pos = np.arange(n)
    group_parts, f_parts, c_parts, last_docs = [], [], [], []
    base = 0
    for size in (BLOCK_SIZE, BLOCK_SIZE * IMPACT_GROUP_BLOCKS):
        gid = pos // size
        count = int(gid[-1]) + 1
        group_parts.append(gid + base)
        f_parts.append(f_all)
        c_parts.append(c_all)
        ends = np.minimum((np.arange(count) + 1) * size, n) - 1
        last_docs.append(np.asarray(docs, dtype=np.uint64)[ends])
        base += count
    g = np.concatenate(group_parts)
    f = np.concatenate(f_parts)
    c = np.concatenate(c_parts)
    order = np.lexsort((c, -f, g))        # per entry: frequency descending, code ascending
    g, f, c = g[order], f[order], c[order]
    first = np.ones(len(g), dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (f[1:] != f[:-1])
    g, f, c = g[first], f[first], c[first]  # smallest code per (entry, frequency)
    big = np.int64(int(c.max()) + 2)
    key = (np.int64(base) - g) * big + c  # earlier entries carry larger keys
    best_higher = np.empty_like(key)
    best_higher[0] = np.iinfo(np.int64).max
    best_higher[1:] = np.minimum.accumulate(key)[:-1]
    keep = key < best_higher
    g, f, c = g[keep][::-1], f[keep][::-1], c[keep][::-1]  # entries descending, frequency ascending
    start = np.ones(len(g), dtype=bool)
    start[1:] = g[1:] != g[:-1]
    df = f.copy()
    df[1:] -= f[:-1]
    dc = c.copy()
    dc[1:] -= c[:-1]
    df[start], dc[start] = f[start], c[start]
    if np.any(dc > 255) or np.any(df < 1):
        raise UnsupportedError("INVERTED impact entry out of range")
    explicit = dc != 1
    tags = ((df - 1) << 1) | explicit
    entries = base
    counts = np.bincount(g, minlength=entries)
    # item stream per entry: last doc, pair count, then per pair its tag and (explicit) code delta
    pair_items = 1 + explicit.astype(np.int64)
    per_entry_items = 2 + np.bincount(g, weights=pair_items, minlength=entries).astype(np.int64)
    entry_start = np.concatenate(([0], np.cumsum(per_entry_items)[:-1]))
    total = int(per_entry_items.sum())
    values = np.zeros(total, dtype=np.uint64)
    raw = np.zeros(total, dtype=bool)
    lasts = np.concatenate(last_docs)
    values[entry_start] = lasts
    values[entry_start + 1] = counts.astype(np.uint64)
    # pairs are in descending entry order; lay them out ascending within each entry's slot
    g_asc = g[::-1]
    tags_asc, dc_asc, ex_asc, items_asc = tags[::-1], dc[::-1], explicit[::-1], pair_items[::-1]
    # g_asc is ascending by entry but pairs inside an entry are now in descending frequency
    within = np.lexsort((np.arange(len(g_asc))[::-1], g_asc))
    g_asc, tags_asc, dc_asc, ex_asc, items_asc = (a[within] for a in (g_asc, tags_asc, dc_asc, ex_asc, items_asc))
    seg_first = np.ones(len(g_asc), dtype=bool)
    seg_first[1:] = g_asc[1:] != g_asc[:-1]
    cum = np.cumsum(items_asc)
    seg_base = np.maximum.accumulate(np.where(seg_first, cum - items_asc, 0))
    tag_slot = entry_start[g_asc] + 2 + (cum - items_asc - seg_base)
    values[tag_slot] = tags_asc.astype(np.uint64)
    values[tag_slot[ex_asc] + 1] = dc_asc[ex_asc].astype(np.uint64)
    raw[tag_slot[ex_asc] + 1] = True
    data, nbytes = _encode_items(values, raw)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(np.repeat(np.arange(entries), per_entry_items),
                                                         weights=nbytes, minlength=entries).astype(np.int64))))
    return [data[int(bounds[i]):int(bounds[i + 1])] for i in range(entries)]


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
