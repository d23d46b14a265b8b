"""Value compression of the Lance 2.1+ writer: leaf values -> mini-block chunks or per-value bytes.

Mini-block compressors cut a page's values into chunks (every chunk but the last holds a power of
two number of values, at most 4096) and return, per chunk, the bytes of each of its value
buffers. What each produces (byte formats shared with the reader in ``v2_1.compression.decode``):

* flat: values back to back; chunks of the largest power of two values below ~8 KiB (4 KiB of
  values) -- bits for booleans;
* fixed-size list: optional validity bitmaps (one per nullable FSL layer) then the flattened items;
* inline bitpacking: 1024-value chunks, each a width word and a FastLanes block;
* RLE: run values (flat) and u8 run lengths (runs split at 255 and at chunk boundaries);
* variable: ``n + 1`` offsets relative to the chunk buffer (u32/u64) then the bytes, padded with
  0x48 to the offset width; chunks of the largest power of two values that fit 4 KiB;
* FSST: the variable layout over FSST-compressed strings, with the symbol table in the encoding;
* general (zstd / lz4): the first buffer of every chunk compressed on its own;
* byte stream split: see ``v2_1.compression.bss``.

Block compressors (levels of all-null pages, dictionaries) produce one opaque buffer.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence, overload

import numpy as np
import pyarrow as pa

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import bitpack as bp

MAX_MINIBLOCK_BYTES = 8 * 1024 - 6
MAX_MINIBLOCK_VALUES = 4096
AIM_MINICHUNK_SIZE = 4 * 1024
VAR_PAD_BYTE = 72
MIN_BUFFER_SIZE_FOR_COMPRESSION = 4 * 1024


# --------------------------------------------------------------------------------------------
# encoding descriptions
# --------------------------------------------------------------------------------------------
def enc_flat(bits: int, compression: Optional[pb.BufferCompression] = None) -> pb.CompressiveEncoding:
    """Flat encoding of ``bits``-bit values, optionally with a buffer ``compression``."""
    e = pb.CompressiveEncoding()
    e.flat.bits_per_value = bits
    if compression is not None:
        e.flat.data.CopyFrom(compression)
    return e


def enc_variable(offset_bits: int) -> pb.CompressiveEncoding:
    """Variable-width encoding with ``offset_bits``-bit flat offsets."""
    e = pb.CompressiveEncoding()
    e.variable.offsets.CopyFrom(enc_flat(offset_bits))
    return e


def enc_inline_bitpacking(bits: int) -> pb.CompressiveEncoding:
    """Inline bitpacking encoding of ``bits``-bit values (width stored per block)."""
    e = pb.CompressiveEncoding()
    e.inline_bitpacking.uncompressed_bits_per_value = bits
    return e


def enc_out_of_line_bitpacking(bits: int, width: int) -> pb.CompressiveEncoding:
    """Out-of-line bitpacking encoding of ``bits``-bit values packed at one ``width``."""
    e = pb.CompressiveEncoding()
    e.out_of_line_bitpacking.uncompressed_bits_per_value = bits
    e.out_of_line_bitpacking.values.CopyFrom(enc_flat(width))
    return e


def enc_rle(bits: int) -> pb.CompressiveEncoding:
    """RLE encoding: ``bits``-bit run values and u8 run lengths."""
    e = pb.CompressiveEncoding()
    e.rle.values.CopyFrom(enc_flat(bits))
    e.rle.run_lengths.CopyFrom(enc_flat(8))
    return e


def enc_fsl(dims: list[int], validity: list[bool], inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    """``inner`` wrapped in one fixed-size-list layer per dimension of ``dims`` (outermost first)."""
    out = inner
    for dim, hv in reversed(list(zip(dims, validity))):
        e = pb.CompressiveEncoding()
        e.fixed_size_list.items_per_value = dim
        e.fixed_size_list.values.CopyFrom(out)
        if hv:
            e.fixed_size_list.has_validity = True
        out = e
    return out


def enc_general(compression: pb.BufferCompression, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    """``inner`` with its buffers compressed by the general ``compression``."""
    e = pb.CompressiveEncoding()
    e.general.compression.CopyFrom(compression)
    e.general.values.CopyFrom(inner)
    return e


def enc_fsst(symbol_table: bytes, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    """FSST encoding with ``symbol_table`` over the variable encoding ``inner``."""
    e = pb.CompressiveEncoding()
    e.fsst.symbol_table = symbol_table
    e.fsst.values.CopyFrom(inner)
    return e


def buffer_compression(scheme: str, level: Optional[int]) -> pb.BufferCompression:
    """The buffer compression message of ``scheme`` ("lz4" or "zstd") at ``level`` (``None``: default)."""
    c = pb.BufferCompression()
    c.scheme = {"lz4": pb.COMPRESSION_ALGORITHM_LZ4, "zstd": pb.COMPRESSION_ALGORITHM_ZSTD}[scheme]
    if level is not None:
        c.level = int(level)
    return c


# --------------------------------------------------------------------------------------------
# general-purpose compression (byte formats of upstream's buffer compressors)
# --------------------------------------------------------------------------------------------
def general_compress(scheme: str, level: Optional[int], data: bytes | bytearray | memoryview | np.ndarray) -> bytes:
    """``data`` compressed with ``scheme`` in the byte format of upstream's buffer compressors (size prefix)."""
    raw = bytes(data)
    if scheme == "lz4":
        comp = pa.Codec("lz4_raw").compress(raw, asbytes=True) if raw else b""
        return len(raw).to_bytes(4, "little") + comp
    if scheme == "zstd":
        lvl = level if level is not None else 3
        codec = pa.Codec("zstd", compression_level=lvl if lvl != 0 else 3)  # zstd level 0 = default (3)
        return len(raw).to_bytes(8, "little") + codec.compress(raw, asbytes=True)
    raise ValueError(f"unknown compression scheme {scheme}")


# --------------------------------------------------------------------------------------------
# mini-block results
# --------------------------------------------------------------------------------------------
@dataclass
class MiniBlocks:
    """One page's values cut into mini-block chunks: the encoding and per chunk its count and buffers."""

    encoding: pb.CompressiveEncoding
    counts: list[int]  # values per chunk
    bufs: Sequence[list]  # per chunk: the bytes of each value buffer (a list, or UniformChunks)
    num_buffers: int = 1
    # flat and fixed-size-list chunks: a last chunk that is full still records its log2 count
    # (pylance writes 0 only for a short last chunk there; other compressors always write 0)
    last_full: bool = False

    @property
    def logs(self) -> list[int]:
        """log2 of each chunk's value count as the chunk metadata records it (0 for a short last chunk)."""
        out = []
        for i, c in enumerate(self.counts):
            last = i == len(self.counts) - 1
            out.append(0 if last and not self.last_full else int(c).bit_length() - 1)
        return out

    def size(self) -> int:
        """Total bytes of the chunks' value buffers (to compare candidate encodings)."""
        if isinstance(self.bufs, (ColumnChunks, UniformChunks)):
            return sum(int(c.sizes().sum()) for c in buffer_columns(self.bufs, self.num_buffers))
        return sum(sum(len(b) for b in bb) for bb in self.bufs)


@dataclass
class ChunkColumn:
    """One buffer (value or level) of every mini-block chunk of a page, held columnar: chunk ``i``
    is the concatenation over ``parts`` of ``data[offs[i]:offs[i + 1]]`` (``data`` uint8, ``offs``
    int64 with one entry more than chunks). The page assembly joins the columns of all chunks
    with one Arrow kernel instead of a loop over chunks (ADR 0059)."""

    parts: list[tuple[np.ndarray, np.ndarray]]

    def sizes(self) -> np.ndarray:
        """Bytes of this buffer in every chunk (int64)."""
        out = np.diff(self.parts[0][1])
        for _, o in self.parts[1:]:
            out = out + np.diff(o)
        return out

    def chunk(self, i: int) -> bytes:
        """The bytes of chunk ``i`` (for per-chunk consumers: general compression, tests)."""
        return b"".join(d[int(o[i]):int(o[i + 1])].tobytes() for d, o in self.parts)

    @staticmethod
    def of_list(chunks: Sequence) -> "ChunkColumn":
        """The column of per-chunk byte strings ``chunks`` (one join)."""
        lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
        offs = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        data = np.frombuffer(b"".join(map(bytes, chunks)), dtype=np.uint8)
        return ChunkColumn([(data, offs)])


class _ChunkSequence(Sequence[list]):
    """Chunks held other than as per-chunk lists that read like ``MiniBlocks.bufs`` (chunk ``i``
    is a list of the bytes of each of its buffers); subclasses say what chunk ``i`` is."""

    nchunks: int

    def _chunk(self, i: int) -> list:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.nchunks

    @overload
    def __getitem__(self, i: int) -> list: ...

    @overload
    def __getitem__(self, i: slice) -> list[list]: ...

    def __getitem__(self, i: int | slice) -> list | list[list]:
        if isinstance(i, slice):
            return [self._chunk(j) for j in range(*i.indices(self.nchunks))]
        if i < 0:
            i += self.nchunks
        if not 0 <= i < self.nchunks:
            raise IndexError(i)
        return self._chunk(i)

    def __iter__(self) -> Iterator[list]:
        for i in range(self.nchunks):
            yield self._chunk(i)


class ColumnChunks(_ChunkSequence):
    """``MiniBlocks.bufs`` held as one :class:`ChunkColumn` per value buffer."""

    def __init__(self, columns: list[ChunkColumn], nchunks: int) -> None:
        self.columns = columns
        self.nchunks = nchunks

    def _chunk(self, i: int) -> list:
        return [c.chunk(i) for c in self.columns]


def buffer_columns(bufs: Sequence[list], num_buffers: int) -> list[ChunkColumn]:
    """The value buffers of mini-block chunks ``bufs`` as one :class:`ChunkColumn` each."""
    if isinstance(bufs, ColumnChunks):
        return bufs.columns
    if isinstance(bufs, UniformChunks):
        return [bufs.column()]
    return [ChunkColumn.of_list([bb[j] for bb in bufs]) for j in range(num_buffers)]


class UniformChunks(_ChunkSequence):
    """The chunks of one value buffer held back to back in ``data``: every chunk but the last is
    ``step`` bytes. Reads like ``MiniBlocks.bufs`` (per chunk, a one-element list of bytes, here
    numpy views) and lets the page assembly copy every chunk with one strided numpy copy instead
    of a per-chunk loop (flat and fixed-size-list values)."""

    def __init__(self, data: np.ndarray, step: int, nchunks: int) -> None:
        self.data = data
        self.step = step
        self.nchunks = nchunks

    def _chunk(self, i: int) -> list:
        end = (i + 1) * self.step if i < self.nchunks - 1 else len(self.data)
        return [self.data[i * self.step:end]]

    def __iter__(self) -> Iterator[list]:
        step, data = self.step, self.data
        for i in range(self.nchunks - 1):
            yield [data[i * step:(i + 1) * step]]
        if self.nchunks:
            yield [data[(self.nchunks - 1) * step:]]

    def sizes(self) -> np.ndarray:
        """Bytes of every chunk (int64)."""
        out = np.full(self.nchunks, self.step, dtype=np.int64)
        if self.nchunks:
            out[-1] = len(self.data) - (self.nchunks - 1) * self.step
        return out

    def column(self) -> ChunkColumn:
        """The chunks as a :class:`ChunkColumn` (no copy)."""
        offs = np.arange(self.nchunks + 1, dtype=np.int64) * self.step
        if self.nchunks:
            offs[-1] = len(self.data)
        return ChunkColumn([(np.asarray(self.data, dtype=np.uint8).reshape(-1), offs)])


def _vals_per_chunk(bytes_per_word: int, values_per_word: int) -> int:
    size = 2 * bytes_per_word
    n = 2 if values_per_word == 1 else 8
    while 2 * size < MAX_MINIBLOCK_BYTES and 2 * n <= MAX_MINIBLOCK_VALUES:
        size *= 2
        n *= 2
    return n


def _even_counts(n: int, per: int) -> list[int]:
    full, rest = divmod(n, per)
    return [per] * full + ([rest] if rest else [])


def flat_miniblock(data: np.ndarray, n: int, bits: int) -> MiniBlocks:
    """Fixed-width values (``data``: n * bits/8 bytes, or LSB-first bits when ``bits == 1``)."""
    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if bits % 8 == 0:
        per = _vals_per_chunk(bits // 8, 1)
    else:
        per = _vals_per_chunk(bits, 8)
    counts = _even_counts(n, per)
    bufs = UniformChunks(data, per * bits // 8, len(counts))
    return MiniBlocks(enc_flat(bits), counts, bufs, last_full=n > 0 and n % per == 0)


def fsl_miniblock(data: np.ndarray, n: int, item_bits: int, dims: list[int],
                  validities: list[Optional[np.ndarray]]) -> MiniBlocks:
    """FSL<...<FSL<fixed>>> rows: ``data`` holds the flattened items, ``validities[j]`` (bool, one
    per element of layer ``j``'s child, or None) the nulls below FSL layer ``j``."""
    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    cum = 1
    ceil_validity = 0
    cums = []
    for dim, v in zip(dims, validities):
        cum *= dim
        cums.append(cum)
        if v is not None:
            ceil_validity += (cum + 7) // 8
    cum_bits = item_bits * cum
    if cum_bits % 8 == 0:
        bpw, vpw = cum_bits // 8, 1
    else:
        bpw, vpw = cum_bits, 8
    est = ceil_validity * vpw + bpw
    per = _vals_per_chunk(est, vpw)
    counts = _even_counts(n, per)
    if all(v is None for v in validities) and (per * cum * item_bits) % 8 == 0:
        nbytes = (n * cum * item_bits + 7) // 8
        return MiniBlocks(enc_fsl(dims, [False] * len(dims), enc_flat(item_bits)), counts,
                          UniformChunks(data[:nbytes], per * cum * item_bits // 8, len(counts)), 1,
                          last_full=n > 0 and n % per == 0)
    nb = 1 + sum(1 for v in validities if v is not None)
    enc = enc_fsl(dims, [v is not None for v in validities], enc_flat(item_bits))
    last_full = n > 0 and n % per == 0
    if all(v is None or (per * cm) % 8 == 0 for cm, v in zip(cums, validities)) and (per * cum * item_bits) % 8 == 0:
        # every chunk but the last starts on a byte of each buffer: pack each buffer once and cut
        first = np.arange(len(counts), dtype=np.int64) * per
        cols = []
        for cm, v in zip(cums, validities):
            if v is not None:
                packed = np.packbits(np.asarray(v[:n * cm], dtype=bool), bitorder="little")
                cols.append(ChunkColumn([(packed, np.append(first * cm // 8, (n * cm + 7) // 8))]))
        ends = np.append(first * cum * item_bits // 8, (n * cum * item_bits + 7) // 8)
        cols.append(ChunkColumn([(data, ends)]))
        return MiniBlocks(enc, counts, ColumnChunks(cols, len(counts)), nb, last_full=last_full)
    bufs: list[list] = []
    row = 0
    for c in counts:
        chunk = []
        for cm, v in zip(cums, validities):
            if v is not None:
                bits = v[row * cm:(row + c) * cm]
                chunk.append(np.packbits(bits, bitorder="little").tobytes())
        a = row * cum * item_bits // 8
        b = ((row + c) * cum * item_bits + 7) // 8
        chunk.append(data[a:b].tobytes())
        bufs.append(chunk)
        row += c
    return MiniBlocks(enc, counts, bufs, nb, last_full=last_full)


def bitpack_estimate(values: np.ndarray, t_bits: int) -> Optional[int]:
    """Bytes of inline bitpacking, or None when it does not beat the raw values."""
    if t_bits not in (8, 16, 32, 64) or len(values) == 0:
        return None
    widths = bp.block_widths(values)
    est = bp.inline_pack_sizes(widths, t_bits)
    if est >= len(values) * t_bits // 8:
        return None
    return est


def bitpack_miniblock(values: np.ndarray, t_bits: int) -> MiniBlocks:
    """Inline-bitpacked chunks of 1024 ``t_bits``-bit values each."""
    data, sizes = bp.inline_pack(values, t_bits)
    n = len(values)
    counts = _even_counts(n, 1024)
    offs = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offs[1:])
    return MiniBlocks(enc_inline_bitpacking(t_bits), counts, ColumnChunks([ChunkColumn([(data, offs)])], len(counts)))


# --- RLE -------------------------------------------------------------------------------------
def run_starts(values: np.ndarray) -> np.ndarray:
    """Indices where a new run of equal values starts in ``values``."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.empty(len(values), dtype=bool)
    change[0] = True
    change[1:] = values[1:] != values[:-1]
    return np.flatnonzero(change)


def rle_estimate(values: np.ndarray, t_bits: int) -> int:
    """Bytes of RLE with u8 run lengths over 4096-value segments."""
    n = len(values)
    if n == 0:
        return 0
    is_start = np.empty(n, dtype=bool)
    is_start[0] = True
    np.not_equal(values[1:], values[:-1], out=is_start[1:])
    is_start[::MAX_MINIBLOCK_VALUES] = True
    starts = np.flatnonzero(is_start)
    lens = np.diff(np.append(starts, n))
    pieces = int(((lens + 254) // 255).sum())
    return pieces * (t_bits // 8 + 1)


def run_count(values: np.ndarray) -> int:
    """Number of runs of equal values in ``values``."""
    if len(values) == 0:
        return 0
    return 1 + int(np.count_nonzero(values[1:] != values[:-1]))


def rle_chunk_runs(values: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RLE of ``values`` cut into chunks at ``bounds`` (int64, one more than chunks), all chunks at
    once: runs are cut at every chunk start and split at 255. Returns the run values, the u8 run
    lengths and, per chunk, the bounds of its runs in those two arrays."""
    n = len(values)
    is_start = np.empty(n, dtype=bool)
    if n:
        is_start[0] = True
        np.not_equal(values[1:], values[:-1], out=is_start[1:])
        cut = bounds[:-1]
        is_start[cut[cut < n]] = True
    starts = np.flatnonzero(is_start)
    lens = np.diff(np.append(starts, n))
    pieces = (lens + 254) // 255
    pcum = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(pieces, out=pcum[1:])
    vals = np.repeat(values[starts], pieces)
    rl = np.repeat(lens, pieces)
    k = np.arange(len(rl), dtype=np.int64) - np.repeat(pcum[:-1], pieces)
    rl = np.minimum(rl - 255 * k, 255).astype(np.uint8)
    return vals, rl, pcum[np.searchsorted(starts, bounds)]


def rle_miniblock(values: np.ndarray, t_bits: int) -> MiniBlocks:
    """RLE chunks of ``t_bits``-bit ``values``: run values and u8 run lengths per chunk.

    A chunk is the rest of the page when it fits, else the largest power of two (<= 4096) values
    whose runs fit: sizes are tried from prefix sums of the page's runs (a few scalar steps per
    chunk), and the runs of all chunks are then cut in one pass."""
    n = len(values)
    w = t_bits // 8
    starts = run_starts(values)
    lens = np.diff(np.append(starts, n))
    pcum = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum((lens + 254) // 255, out=pcum[1:])
    starts_l, pcum_l = starts.tolist(), pcum.tolist()
    room = MAX_MINIBLOCK_BYTES // (w + 1)  # most runs a chunk holds

    def pieces(a: int, b: int) -> int:
        """Runs of values[a:b] (cut at a and b, split at 255)."""
        i0 = bisect.bisect_right(starts_l, a) - 1
        i1 = bisect.bisect_right(starts_l, b - 1) - 1
        if i0 == i1:
            return (b - a + 254) // 255
        return ((starts_l[i0 + 1] - a + 254) // 255 + pcum_l[i1] - pcum_l[i0 + 1]
                + (b - starts_l[i1] + 254) // 255)

    counts = []
    pos = 0
    while pos < n:
        rem = n - pos
        if rem <= MAX_MINIBLOCK_VALUES and pieces(pos, n) <= room:
            counts.append(rem)
            break
        k = min(12, (rem.bit_length() - 1))
        while k > 0 and pieces(pos, pos + (1 << k)) > room:
            k -= 1
        counts.append(1 << k)
        pos += 1 << k
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=bounds[1:])
    vals, rl, pb = rle_chunk_runs(values, bounds)
    vbytes = np.ascontiguousarray(vals).view(np.uint8).reshape(-1)
    cols = [ChunkColumn([(vbytes, pb * w)]), ChunkColumn([(rl, pb)])]
    return MiniBlocks(enc_rle(t_bits), counts, ColumnChunks(cols, len(counts)), 2)


# --- variable width --------------------------------------------------------------------------
def _var_chunk_counts(offsets: np.ndarray, width: int, limit: int = AIM_MINICHUNK_SIZE) -> list[int]:
    """Values per chunk: the largest power of two (>= 2, <= 2048) whose bytes + offsets fit
    ``limit``; the rest in one chunk when it fits.

    With ``g[i] = offsets[i] + i * width`` a chunk of ``k`` values from ``s`` takes
    ``g[s + k] - g[s] + width`` bytes, so one search gives every start's largest fitting count;
    the walk from chunk to chunk is then a few integer operations per chunk."""
    n = len(offsets) - 1
    if n <= 0:
        return []
    g = np.asarray(offsets, dtype=np.int64)[:n + 1] - int(offsets[0]) + np.arange(n + 1, dtype=np.int64) * width
    top = MAX_MINIBLOCK_VALUES  # the walk stops at this many values (it never takes them)
    counts = []
    start = 0
    # the last end that fits is searched only where a chunk starts; a run of chunks of one count
    # (the usual case) is taken at once when its chunks all fit
    while start < n:
        remaining = n - start
        if remaining <= 1:
            counts.append(remaining)
            break
        end = int(g.searchsorted(g[start] + (limit - width), side="right")) - 1
        # the walk over 4, 8, ... stops at the first size past the rest, past the fit, or at the top
        q = min(max(4, 1 << remaining.bit_length()), max(4, 1 << (end - start).bit_length()), top)
        num = q // 2 if q > 4 else 2
        if q > remaining and end >= n:
            counts.append(remaining)
            break
        run = _same_count_run(g, start, num, limit - width, n)
        counts.extend([num] * run)
        start += num * run
    return counts


def _same_count_run(g: np.ndarray, start: int, num: int, room: int, n: int) -> int:
    """How many chunks of ``num`` values from ``start`` on the walk of ``_var_chunk_counts`` takes
    (at least 1): a chunk keeps the count while its ``num`` values fit and the next power of two
    does not (or would reach the top), and it is not the end of the page."""
    k = min((n - start) // num, 256)  # whole chunks of num values left (a bounded look-ahead)
    if k <= 1 or num < 4:
        return 1
    s = start + num * np.arange(k, dtype=np.int64)
    fits = g[s + num] - g[s] <= room
    nxt = 2 * num
    if nxt < MAX_MINIBLOCK_VALUES:
        over = np.minimum(s + nxt, n)
        fits &= (g[over] - g[s] > room) | (s + nxt > n)
    # a chunk whose rest would end the page in one piece is decided by the scalar walk
    fits &= (n - s) > 2 * num
    bad = np.flatnonzero(~fits)
    return max(1, int(bad[0]) if len(bad) else k)


def variable_miniblock(offsets: np.ndarray, data: np.ndarray, offset_bits: int,
                       limit: int = AIM_MINICHUNK_SIZE) -> MiniBlocks:
    """Variable-width values: ``offsets`` (int64, n+1, starting anywhere) into ``data``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    data = np.asarray(data, dtype=np.uint8)
    width = offset_bits // 8
    counts = _var_chunk_counts(offsets, width, limit)
    odt = np.dtype(f"<u{width}")
    if not counts:
        return MiniBlocks(enc_variable(offset_bits), counts, [])
    # every chunk is its c + 1 offsets (relative to the chunk, after them), its bytes, then
    # padding to the offset width: the offsets of all chunks are computed at once and each chunk
    # is joined from slices of two byte strings
    cnt = np.asarray(counts, dtype=np.int64)
    first = np.zeros(len(cnt), dtype=np.int64)
    np.cumsum(cnt[:-1], out=first[1:])
    nent = cnt + 1
    ent0 = np.zeros(len(cnt), dtype=np.int64)
    np.cumsum(nent[:-1], out=ent0[1:])
    o0, o1 = offsets[first], offsets[first + cnt]
    head = nent * width
    idx = np.arange(int(nent.sum()), dtype=np.int64) - np.repeat(ent0 - first, nent)
    rel = (offsets[idx] - np.repeat(o0 - head, nent)).astype(odt).view(np.uint8)
    base = int(offsets[0])
    body = data[base:int(offsets[-1])]
    pads = (-(head + o1 - o0)) % width
    nch = len(cnt)
    rel_offs = np.zeros(nch + 1, dtype=np.int64)
    rel_offs[1:] = (ent0 + nent) * width
    body_offs = np.append(o0, o1[-1]) - base  # chunks take consecutive values
    pad_offs = np.zeros(nch + 1, dtype=np.int64)
    np.cumsum(pads, out=pad_offs[1:])
    pad = np.full(int(pad_offs[-1]), VAR_PAD_BYTE, dtype=np.uint8)
    col = ChunkColumn([(rel, rel_offs), (body, body_offs), (pad, pad_offs)])
    return MiniBlocks(enc_variable(offset_bits), counts, ColumnChunks([col], nch))


def general_wrap(mb: MiniBlocks, scheme: str, level: Optional[int]) -> MiniBlocks:
    """Compress the first buffer of every chunk (when that pays off)."""
    total = int(buffer_columns(mb.bufs, mb.num_buffers)[0].sizes().sum()) if len(mb.bufs) else 0
    if not len(mb.bufs) or total < MIN_BUFFER_SIZE_FOR_COMPRESSION:
        return mb
    new = []
    csize = 0
    for b in mb.bufs:
        c = general_compress(scheme, level, b[0])
        csize += len(c)
        new.append([c] + b[1:])
    if csize >= total:
        return mb
    return MiniBlocks(enc_general(buffer_compression(scheme, level), mb.encoding), mb.counts, new, mb.num_buffers,
                      mb.last_full)


# --------------------------------------------------------------------------------------------
# block compression (dictionaries)
# --------------------------------------------------------------------------------------------
def variable_block(offsets: np.ndarray, data: np.ndarray, offset_bits: int) -> bytes:
    """One opaque variable-width block (dictionary values): bit width, header size, offsets, then bytes."""
    offsets = np.asarray(offsets, dtype=np.int64)
    rel = offsets - offsets[0]
    body = np.asarray(data, dtype=np.uint8)[int(offsets[0]):int(offsets[-1])]
    if offset_bits == 32:
        head = 8 + 4 * len(rel)
        return (32).to_bytes(4, "little") + head.to_bytes(4, "little") + rel.astype("<u4").tobytes() + body.tobytes()
    head = 16 + 8 * len(rel)
    return (64).to_bytes(8, "little") + head.to_bytes(8, "little") + rel.astype("<u8").tobytes() + body.tobytes()


# --------------------------------------------------------------------------------------------
# full-zip (per value)
# --------------------------------------------------------------------------------------------
@dataclass
class PerValue:
    """One page's values compressed one by one for the full-zip layout.

    Fixed-width values are a byte ``matrix``; variable-width ones ``offsets`` into ``data``.
"""

    encoding: pb.CompressiveEncoding
    fixed_bytes: int = 0  # bytes per value for fixed-width values
    # fixed: (n, fixed_bytes) uint8 matrix; variable: offsets (int64, n+1) + data
    matrix: Optional[np.ndarray] = None
    offsets: Optional[np.ndarray] = None
    data: Optional[np.ndarray] = None
    offset_bits: int = 0
    extra: dict = field(default_factory=dict)
