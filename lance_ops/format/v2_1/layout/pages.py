"""Page layouts of the Lance 2.1+ writer: mini-block, full-zip, all-null and constant pages.

Byte formats (as pylance 14 writes them; the reader's ``v2_1.decode`` documents the same):

* **mini-block** -- buffer 0: one metadata word per chunk (u16 in 2.1, u32 in 2.2 where the layout
  sets ``has_large_chunk``, field 10): ``(chunk_bytes / 8 - 1) << 4 | log2(values)`` (log 0 for
  the last chunk, except a full last chunk of flat / fixed-size-list values, which keeps its log). Buffer 1: the chunks, each ``u16 num_levels`` (0 without levels), ``u16 rep
  bytes``, ``u16 def bytes`` (when present), the size of every value buffer (u16 / u32 large),
  0xFE padding to 8, then rep, def and value buffers each padded to 8 with 0xFE. Then the optional
  dictionary buffer and, with lists, the repetition index (two u64 per chunk: rows that end in
  the chunk, trailing items of a row that continues in the next chunk).
* **full-zip** -- buffer 0: per level entry a control word ``rep << bits_def | def`` (1/2/4 bytes,
  absent when there are no levels) followed, for visible entries, by the value (fixed width), or by
  a length (u32/u64) and the bytes for valid values (variable width). Buffer 1 (variable width or
  lists): byte offset of every row start and the end, byte-packed to 1/2/4/8 bytes by the
  worst-case buffer size.
* **all-null** -- no buffers when a single nullable layer says everything; otherwise raw u16
  repetition and definition buffers.
* **constant** (2.2) -- an all-null layout with the value inline (field 6, fixed width) or in a
  leading value buffer (``u32 buffer count, u32 sizes, the Arrow buffers`` of a one-value array),
  plus raw u16 level buffers when there are levels.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import Message

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import bitpack as bp
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.version import FileVersion

_Msg = TypeVar("_Msg", bound=Message)

FILL = 0xFE
MINIBLOCK_ALIGNMENT = 8
MAX_CHUNK_BYTES_2_1 = 32 * 1024


def _pad8(n: int) -> int:
    return (-n) % 8


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _with_unknown(msg: _Msg, extra: bytes) -> _Msg:
    """``msg`` re-parsed with extra (newer, unknown to our proto) fields appended."""
    if not extra:
        return msg
    out = type(msg)()
    out.ParseFromString(msg.SerializeToString() + extra)
    return out


def field_varint(num: int, value: int) -> bytes:
    """Protobuf wire bytes of varint field ``num`` = ``value`` (for fields newer than our .proto)."""
    return _varint(num << 3) + _varint(value)


def field_bytes(num: int, value: bytes) -> bytes:
    """Protobuf wire bytes of length-delimited field ``num`` = ``value`` (for fields newer than our .proto)."""
    return _varint(num << 3 | 2) + _varint(len(value)) + value


# --------------------------------------------------------------------------------------------
# levels
# --------------------------------------------------------------------------------------------
@dataclass
class LevelCodec:
    """How one page's repetition or definition levels are compressed: flat, bitpacked or RLE."""

    kind: str  # "flat" | "inline" | "ool" | "rle"
    width: int = 16

    def encoding(self) -> pb.CompressiveEncoding:
        """The compressive encoding message describing this codec's 16-bit levels."""
        if self.kind == "inline":
            return ev.enc_inline_bitpacking(16)
        if self.kind == "ool":
            return ev.enc_out_of_line_bitpacking(16, self.width)
        if self.kind == "rle":
            return ev.enc_rle(16)
        return ev.enc_flat(16)


def _block_bitpack_bytes(n: int, max_w: int) -> int:
    if n <= 1024:
        return (1 + 1024 * max_w // 16) * 2
    return bp.out_of_line_size(n, 16, max_w)


def _rle_block_bytes(levels: np.ndarray) -> int:
    starts = ev.run_starts(levels)
    lens = np.diff(np.append(starts, len(levels)))
    return int(((lens + 254) // 255).sum()) * 3 + 8


def choose_level_codec(levels: np.ndarray, version: str = FileVersion.V2_1) -> LevelCodec:
    """Block compression of a page's u16 levels, chosen on the whole page (2.2 adds RLE)."""
    n = len(levels)
    if n == 0:
        return LevelCodec("flat")
    widths = bp.block_widths(levels)
    mx = int(widths.max())
    bitpack_ok = mx < 16 and not (len(widths) == 1 and (1024 * int(widths[0]) + 7) // 8 >= 2 * n)
    if version >= FileVersion.V2_2:
        rle = _rle_block_bytes(levels)
        if rle < 2 * n and not (mx < 16 and _block_bitpack_bytes(n, mx) < rle and _block_bitpack_bytes(n, mx) < 2 * n):
            return LevelCodec("rle")
    if not bitpack_ok:
        return LevelCodec("flat")
    if n <= 1024:
        return LevelCodec("inline")
    return LevelCodec("ool", mx)


def rle_block(levels: np.ndarray) -> bytes:
    """Block RLE of u16 levels: u64 byte size of the run values, the values, u8 run lengths."""
    levels = np.asarray(levels, dtype=np.uint16)
    if len(levels) == 0:
        return (0).to_bytes(8, "little")
    starts = ev.run_starts(levels)
    lens = np.diff(np.append(starts, len(levels)))
    pieces = (lens + 254) // 255
    vals = np.repeat(levels[starts], pieces).astype("<u2")
    rl = np.repeat(lens, pieces)
    first = np.concatenate([[0], np.cumsum(pieces)[:-1]])
    k = np.arange(len(rl)) - np.repeat(first, pieces)
    rl = np.minimum(rl - 255 * k, 255).astype(np.uint8)
    vb = vals.tobytes()
    return len(vb).to_bytes(8, "little") + vb + rl.tobytes()


def compress_level_block(codec: LevelCodec, levels: np.ndarray) -> bytes:
    """``levels`` compressed with ``codec`` as one opaque block (all-null pages, 2.2)."""
    levels = np.asarray(levels, dtype=np.uint16)
    if codec.kind == "flat":
        return np.ascontiguousarray(levels, dtype="<u2").tobytes()
    if codec.kind == "inline":
        return bp.inline_pack(levels, 16)[0].tobytes()
    if codec.kind == "rle":
        return rle_block(levels)
    return bp.out_of_line_pack(levels, 16, codec.width).tobytes()


def compress_level_chunks(codec: LevelCodec, chunks: Sequence[np.ndarray]) -> list[bytes]:
    """``chunks`` of levels compressed with ``codec``, one block per mini-block chunk."""
    if not len(chunks):
        return []
    lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    bounds = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum(lens, out=bounds[1:])
    col = level_column(codec, np.concatenate(chunks), bounds)
    return [col.chunk(i) for i in range(len(chunks))]


def level_column(codec: LevelCodec, levels: np.ndarray, bounds: np.ndarray) -> ev.ChunkColumn:
    """A page's ``levels`` cut at ``bounds`` (int64, one more than chunks) and compressed with
    ``codec`` one block per mini-block chunk, as a column (no per-chunk loop; ADR 0059)."""
    levels = np.ascontiguousarray(levels, dtype="<u2")
    bounds = np.asarray(bounds, dtype=np.int64)
    if codec.kind == "flat":
        return ev.ChunkColumn([(levels.view(np.uint8), bounds * 2)])
    if codec.kind == "rle":
        return _rle_column(levels, bounds)
    if codec.kind == "inline":
        return _inline_column(levels, bounds)
    return _ool_column(levels, bounds, codec.width)


def _rle_column(levels: np.ndarray, bounds: np.ndarray) -> ev.ChunkColumn:
    """``rle_block`` of every chunk: per chunk a u64 header (bytes of its run values), its run
    values and its run lengths (runs cut at the chunk starts and split at 255)."""
    vals, rl, pbounds = ev.rle_chunk_runs(levels, bounds)
    head = (np.diff(pbounds) * 2).astype("<u8").view(np.uint8)
    nch = len(bounds) - 1
    return ev.ChunkColumn([(head, np.arange(nch + 1, dtype=np.int64) * 8),
                           (vals.astype("<u2", copy=False).view(np.uint8), pbounds * 2), (rl, pbounds)])


def _inline_column(levels: np.ndarray, bounds: np.ndarray) -> ev.ChunkColumn:
    """Inline bitpacking of every chunk (a page of at most 1024 levels): each non-empty chunk is one
    zero-padded block with its own width word, so all chunks pack as one run of blocks."""
    lens = np.diff(bounds)
    nch = len(lens)
    if nch == 0 or int(lens.min()) == 0 or int(lens.max()) > bp.BLOCK:
        return ev.ChunkColumn.of_list([compress_level_block(LevelCodec("inline"), levels[x:y])
                                       for x, y in zip(bounds[:-1].tolist(), bounds[1:].tolist())])
    mat = np.zeros(nch * bp.BLOCK, dtype=np.uint16)
    mat[np.arange(len(levels), dtype=np.int64) + np.repeat(np.arange(nch) * bp.BLOCK - bounds[:-1], lens)] = levels
    data, sizes = bp.inline_pack(mat, 16)
    offs = np.zeros(nch + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offs[1:])
    return ev.ChunkColumn([(data, offs)])


def _ool_column(cat: np.ndarray, bounds: np.ndarray, width: int) -> ev.ChunkColumn:
    """Out-of-line bitpacking of every chunk with one numpy pass over all their blocks.

    Per chunk: its whole 1024-level blocks packed, then its tail either packed as one more block
    (zero padded) or raw u16, whichever is smaller: a column of two parts, the packed blocks and
    the raw tails."""
    lens = np.diff(bounds)
    nch = len(lens)
    first = bounds[:-1]
    whole, tail = lens // 1024, lens % 1024
    pack_tail = (tail > 0) & (width * (1024 - tail) < (16 - width) * tail)
    nblk = whole + pack_tail
    packed_n = np.where(pack_tail, lens, whole * 1024)  # levels of each chunk that go into blocks
    blk_offs = np.zeros(nch + 1, dtype=np.int64)
    np.cumsum(nblk, out=blk_offs[1:])
    blk0 = blk_offs[:-1]
    total_blk = int(blk_offs[-1])
    per_block = 1024 * width // 8
    all_packed = bool(np.all(packed_n == lens))
    raw_mask: Optional[np.ndarray] = None
    if not all_packed:
        # the raw tails (True) after each chunk's packed levels (False)
        runs = np.empty(2 * nch, dtype=np.int64)
        runs[0::2], runs[1::2] = packed_n, lens - packed_n
        raw_mask = np.repeat(np.tile(np.array([False, True]), nch), runs)
    if total_blk:
        allv = np.zeros(total_blk * 1024, dtype=np.uint16)
        if all_packed and bool(np.all(blk0 * 1024 == first)):
            allv[:len(cat)] = cat
        else:
            src = cat if raw_mask is None else cat[~raw_mask]
            # each chunk's packed levels fill its blocks from the start, zeros after: a boolean
            # mask of the filled slots (cheaper than an index array per level)
            fill = np.full(total_blk, 1024, dtype=np.int64)
            has = nblk > 0
            fill[(blk0 + nblk - 1)[has]] = (packed_n - (nblk - 1) * 1024)[has]
            slots = np.arange(1024, dtype=np.int64)[None, :] < fill[:, None]
            allv.reshape(total_blk, 1024)[slots] = src
        packed = bp.pack_blocks(allv, 16, width).view(np.uint8)
    else:
        packed = np.zeros(0, dtype=np.uint8)
    parts = [(packed, blk_offs * per_block)]
    if raw_mask is not None:
        raw_offs = np.zeros(nch + 1, dtype=np.int64)
        np.cumsum((lens - packed_n) * 2, out=raw_offs[1:])
        parts.append((np.ascontiguousarray(cat[raw_mask]).view(np.uint8), raw_offs))
    return ev.ChunkColumn(parts)


def rep_index(rep_chunks: Sequence[np.ndarray], max_rep: int) -> np.ndarray:
    """Two u64 per chunk: rows finishing in the chunk, trailing levels of an unfinished row."""
    nch = len(rep_chunks)
    if nch == 0:
        return np.zeros((0, 2), dtype=np.uint64)
    lens = np.fromiter(map(len, rep_chunks), dtype=np.int64, count=nch)
    bounds = np.zeros(nch + 1, dtype=np.int64)
    np.cumsum(lens, out=bounds[1:])
    return rep_index_at(np.concatenate(rep_chunks), bounds, max_rep)


def rep_index_at(rep: np.ndarray, bounds: np.ndarray, max_rep: int) -> np.ndarray:
    """Two u64 per chunk of ``rep`` cut at ``bounds``: rows finishing in the chunk, trailing levels
    of an unfinished row.

    Computed for all chunks at once from the positions of the row starts (``rep == max_rep``)."""
    nch = len(bounds) - 1
    out = np.zeros((nch, 2), dtype=np.uint64)
    if nch <= 0:
        return out
    lens = np.diff(bounds)
    first = bounds[:-1]
    is_start = rep == max_rep
    starts = np.flatnonzero(is_start)
    # row starts per chunk (all of them) and whether the chunk's first level starts a row
    lo = np.searchsorted(starts, first)
    hi = np.searchsorted(starts, first + lens)
    nstart = hi - lo
    opens = np.zeros(nch, dtype=bool)
    has = lens > 0
    opens[has] = is_start[first[has]]
    rows = nstart - opens  # row starts after the chunk's first level
    last_start = np.where(nstart > 0, starts[np.maximum(hi - 1, 0)] - first if len(starts) else 0, -1)
    left = np.where(nstart > 0, lens - last_start, lens)
    left[-1] = 0
    rows[-1] += 1
    # a chunk that starts a row closes the previous chunk's unfinished row
    close = np.zeros(nch, dtype=bool)
    close[1:] = opens[1:] & (left[:-1] != 0)
    prev = np.flatnonzero(close[1:])
    rows[prev] += 1
    left[prev] = 0
    out[:, 0] = rows
    out[:, 1] = left
    return out


# --------------------------------------------------------------------------------------------
# pages
# --------------------------------------------------------------------------------------------
@dataclass
class PageOut:
    """One encoded page: its layout message and its buffers, each a list of byte chunks to write."""

    layout: pb.PageLayout
    buffers: list[list]  # each: list of byte chunks


def miniblock_page(values: ev.MiniBlocks, rep: Optional[np.ndarray], defs: Optional[np.ndarray],
                   layers: Sequence[int], max_visible: Optional[int], num_items: int, large: bool,
                   dictionary: Optional[tuple[pb.CompressiveEncoding, bytes, int]] = None,
                   limit_21: bool = False) -> Optional[PageOut]:
    """Assemble a mini-block page; None if a chunk would not fit the 2.1 limits."""
    counts = values.counts
    nch = len(counts)
    has_levels = rep is not None or defs is not None
    # every chunk's levels are one slice of the page's levels: cut once at ``bounds``
    bounds = np.zeros(nch + 1, dtype=np.int64)
    nlev = np.zeros(nch, dtype=np.int64)
    if has_levels:
        some_levels = rep if rep is not None else defs
        assert some_levels is not None  # has_levels
        cum = np.cumsum(np.asarray(counts, dtype=np.int64))
        if rep is not None and defs is not None and max_visible is not None:
            cut = np.flatnonzero(defs <= max_visible)[cum[:-1] - 1] + 1
        else:
            cut = cum[:-1]
        bounds[1:-1] = cut
        bounds[-1] = len(some_levels)
        nlev = np.diff(bounds)
        if nch and int(nlev.max()) > 0xFFFF:
            return None
    version = FileVersion.V2_2 if large else FileVersion.V2_1
    rep_codec = choose_level_codec(rep, version) if rep is not None else None
    def_codec = choose_level_codec(defs, version) if defs is not None else None
    rep_bytes = level_column(rep_codec, rep, bounds) if rep_codec is not None and rep is not None else None
    def_bytes = level_column(def_codec, defs, bounds) if def_codec is not None and defs is not None else None
    got = _chunk_bytes(values, nlev, rep_bytes, def_bytes, large, limit_21)
    if got is None:
        return None
    meta_words, body = got
    m = pb.MiniBlockLayout()
    if rep_codec is not None:
        m.rep_compression.CopyFrom(rep_codec.encoding())
    if def_codec is not None:
        m.def_compression.CopyFrom(def_codec.encoding())
    m.value_compression.CopyFrom(values.encoding)
    if dictionary is not None:
        m.dictionary.CopyFrom(dictionary[0])
        m.num_dictionary_items = dictionary[2]
    m.layers.extend(layers)
    m.num_buffers = values.num_buffers
    max_rep = sum(1 for lay in layers if lay in (pb.REPDEF_ALL_VALID_LIST, pb.REPDEF_NULLABLE_LIST,
                                                  pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST))
    if rep is not None:
        m.repetition_index_depth = 1
    m.num_items = num_items
    if large:
        m = _with_unknown(m, field_varint(10, 1))
    layout = pb.PageLayout()
    layout.mini_block_layout.CopyFrom(m)
    buffers: list[list] = [[meta_words.tobytes()], [body]]
    if dictionary is not None:
        buffers.append([dictionary[1]])
    if rep is not None:
        buffers.append([rep_index_at(rep, bounds, max_rep).astype("<u8").tobytes()])
    return PageOut(layout, buffers)


def _chunk_bytes(values: ev.MiniBlocks, nlev: np.ndarray, rep_bytes: Optional[ev.ChunkColumn],
                 def_bytes: Optional[ev.ChunkColumn], large: bool,
                 limit_21: bool) -> Optional[tuple[np.ndarray, bytes | np.ndarray]]:
    """The chunk metadata words and the chunk bytes of a mini-block page (None past a limit).

    Every chunk is ``u16 levels, [u16 rep bytes], [u16 def bytes], value buffer sizes`` padded to
    8, then its rep, def and value buffers each padded to 8 (0xFE): headers are built for all
    chunks as one byte matrix and the body is one element-wise join of the columns (header, each
    buffer, its padding) over all chunks."""
    nch = len(values.counts)
    cols: list[ev.ChunkColumn] = [c for c in (rep_bytes, def_bytes) if c is not None]
    nlevel_cols = len(cols)
    nb = values.num_buffers
    bufs = values.bufs
    if isinstance(bufs, ev.ColumnChunks):
        if len(bufs.columns) != nb:
            raise ValueError("mini-block chunks disagree on their number of value buffers")
    elif not isinstance(bufs, ev.UniformChunks) and any(len(bb) != nb for bb in bufs):
        raise ValueError("mini-block chunks disagree on their number of value buffers")
    uniform = bufs if isinstance(bufs, ev.UniformChunks) and not nlevel_cols else None
    if uniform is not None:
        plen = uniform.sizes().reshape(nch, 1)
    else:
        cols.extend(ev.buffer_columns(bufs, nb))
        plen = np.stack([c.sizes() for c in cols], axis=1) if cols else np.zeros((nch, 0), np.int64)
    if nlevel_cols and nch and int(plen[:, :nlevel_cols].max()) > 0xFFFF:
        return None
    if not large and nb and nch and int(plen[:, nlevel_cols:].max()) > 0xFFFF:
        return None
    sw = 4 if large else 2
    hfields = 2 + 2 * nlevel_cols + sw * nb
    hlen = hfields + _pad8(hfields)
    hdr = np.full((nch, hlen), FILL, dtype=np.uint8)
    hdr[:, 0:2] = nlev.astype("<u2").view(np.uint8).reshape(nch, 2)
    at = 2
    for j in range(nlevel_cols):
        hdr[:, at:at + 2] = plen[:, j].astype("<u2").view(np.uint8).reshape(nch, 2)
        at += 2
    for j in range(nb):
        dt = "<u4" if large else "<u2"
        hdr[:, at:at + sw] = plen[:, nlevel_cols + j].astype(dt).view(np.uint8).reshape(nch, sw)
        at += sw
    pads = (-plen) & 7
    size = hlen + (plen + pads).sum(axis=1)
    if limit_21 and nch and int(size.max()) > MAX_CHUNK_BYTES_2_1:
        return None
    logs = np.frexp(np.asarray(values.counts, dtype=np.float64))[1].astype(np.int64) - 1  # bit_length - 1
    if nch and not values.last_full:
        logs[-1] = 0
    words = ((size // 8 - 1) << 4) | logs
    if nch and (int(words.max()) > (0xFFFFFFFF if large else 0xFFFF) or int(words.min()) < 0):
        raise OverflowError("mini-block chunk metadata word out of range")
    meta_words = words.astype(np.uint32 if large else np.uint16)
    if uniform is not None:
        return meta_words, _uniform_body(uniform, hdr, hlen, size)
    return meta_words, _joined_body(hdr, cols, pads, int(size.sum()))


def _binary(data: np.ndarray, offs: np.ndarray) -> pa.Array:
    """A large_binary array (no copy) whose value ``i`` is ``data[offs[i]:offs[i + 1]]``."""
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offs) - 1,
        [None, pa.py_buffer(np.ascontiguousarray(offs, dtype=np.int64)),
         pa.py_buffer(np.ascontiguousarray(data, dtype=np.uint8))])


def _joined_body(hdr: np.ndarray, cols: Sequence[ev.ChunkColumn], pads: np.ndarray, total: int) -> np.ndarray:
    """Chunk ``i`` is its header row, then per column its bytes and its 0xFE padding: every chunk
    is joined by one Arrow kernel over the columns (each part of a column one binary array)."""
    nch, hlen = hdr.shape
    if nch == 0:
        return np.zeros(0, dtype=np.uint8)
    fill = np.full(7 * nch, FILL, dtype=np.uint8)
    arrays = [_binary(hdr.reshape(-1), np.arange(nch + 1, dtype=np.int64) * hlen)]
    pad_offs = np.zeros(nch + 1, dtype=np.int64)
    for j, col in enumerate(cols):
        arrays.extend(_binary(d, o) for d, o in col.parts)
        np.cumsum(pads[:, j], out=pad_offs[1:])
        arrays.append(_binary(fill, pad_offs.copy()))
    joined = pc.binary_join_element_wise(*arrays, pa.scalar(b"", pa.large_binary()))
    jb = joined.buffers()
    jo = np.frombuffer(jb[1], dtype=np.int64, count=nch + 1, offset=joined.offset * 8)
    body = np.frombuffer(jb[2], dtype=np.uint8)[int(jo[0]):int(jo[-1])]
    assert len(body) == total, "mini-block chunk bytes disagree with their sizes"
    return body


def _uniform_body(chunks: ev.UniformChunks, hdr: np.ndarray, hlen: int, size: np.ndarray) -> np.ndarray:
    """The chunk bytes of a page whose chunks are one value buffer each, all but the last of one
    size and without levels: header, value bytes and 0xFE padding per chunk, written for all the
    full chunks with one strided copy."""
    nch = chunks.nchunks
    body = np.empty(int(size.sum()), dtype=np.uint8)
    step = chunks.step
    if nch > 1:
        full = int(size[0])
        mat = body[:(nch - 1) * full].reshape(nch - 1, full)
        mat[:, :hlen] = hdr[:-1]
        mat[:, hlen:hlen + step] = chunks.data[:(nch - 1) * step].reshape(nch - 1, step)
        mat[:, hlen + step:] = FILL
    if nch:
        at = int(size[:-1].sum())
        rest = chunks.data[(nch - 1) * step:]
        body[at:at + hlen] = hdr[-1]
        body[at + hlen:at + hlen + len(rest)] = rest
        body[at + hlen + len(rest):] = FILL
    return body


def _bytepacked(values: np.ndarray, max_value: int) -> bytes:
    if max_value == 0:
        return b""
    for dt, lim in (("<u1", 0xFF), ("<u2", 0xFFFF), ("<u4", 0xFFFFFFFF)):
        if max_value <= lim:
            return values.astype(dt).tobytes()
    return values.astype("<u8").tobytes()


def _control_words(rep: Optional[np.ndarray], defs: Optional[np.ndarray], n: int) -> tuple[int, int, int, Optional[np.ndarray]]:
    max_rep = int(rep.max()) if rep is not None and len(rep) else 0
    max_def = int(defs.max()) if defs is not None and len(defs) else 0
    bits_rep = max_rep.bit_length() if rep is not None else 0
    bits_def = max_def.bit_length() if defs is not None else 0
    total = bits_rep + bits_def
    if total == 0:
        return 0, 0, 0, None
    cw = 1 if total <= 8 else 2 if total <= 16 else 4
    word = np.zeros(n, dtype=np.uint32)
    if defs is not None:
        word |= defs.astype(np.uint32)
    if rep is not None:
        word |= rep.astype(np.uint32) << np.uint32(bits_def)
    wb = word.astype(f"<u{cw}").view(np.uint8).reshape(n, cw)
    return bits_rep, bits_def, cw, wb


def fullzip_page(pv: ev.PerValue, rep: Optional[np.ndarray], defs: Optional[np.ndarray], valid: Optional[np.ndarray],
                 layers: Sequence[int], max_visible: Optional[int], num_values: int,
                 index_estimate: Optional[int] = None) -> PageOut:
    """Zip levels and values; ``valid``: leaf validity per visible value (None: all valid).
    ``index_estimate`` overrides the size estimate that picks the repetition index's width."""
    n_entries = len(rep) if rep is not None else num_values
    bits_rep, bits_def, cw, words = _control_words(rep, defs, n_entries)
    if defs is not None and max_visible is not None:
        visible = defs <= max_visible
    else:
        visible = np.ones(n_entries, dtype=bool)
    z = pb.FullZipLayout()
    z.bits_rep = bits_rep
    z.bits_def = bits_def
    z.num_items = n_entries
    z.num_visible_items = num_values
    z.value_compression.CopyFrom(pv.encoding)
    z.layers.extend(layers)
    buffers: list[list] = []
    if pv.matrix is not None:
        w = pv.fixed_bytes
        z.bits_per_value = w * 8
        if cw == 0:
            buf = np.ascontiguousarray(pv.matrix).reshape(-1)
        else:
            assert words is not None  # cw > 0
            full = np.zeros((n_entries, cw + w), dtype=np.uint8)
            full[:, :cw] = words
            full[visible, cw:] = pv.matrix
            if visible.all():
                buf = full.reshape(-1)
            else:
                mask = np.ones((n_entries, cw + w), dtype=bool)
                mask[~visible, cw:] = False
                buf = full[mask]
        buffers.append([buf])
        if rep is not None:
            sizes = np.where(visible, cw + w, cw).astype(np.int64)
            ends = np.cumsum(sizes)
            starts = ends - sizes
            row_starts = starts[rep == int(rep.max())] if len(rep) else np.zeros(0, np.int64)
            est = len(pv.matrix) * w + cw * n_entries
            idx = np.append(row_starts, int(ends[-1]) if len(ends) else 0)
            buffers.append([_bytepacked(idx, est)])
    else:
        lb = pv.offset_bits // 8
        z.bits_per_offset = pv.offset_bits
        offs = np.asarray(pv.offsets, dtype=np.int64)
        lens = np.diff(offs)
        vv = np.ones(num_values, dtype=bool) if valid is None else valid
        # per entry: the index of its value (visible entries only)
        val_of = np.cumsum(visible) - 1
        has_val = visible.copy()
        has_val[visible] = vv
        plen = np.full(n_entries, cw, dtype=np.int64) + np.where(has_val, lb, 0)
        poffs = np.zeros(n_entries + 1, dtype=np.int64)
        np.cumsum(plen, out=poffs[1:])
        prefix = np.zeros(int(poffs[-1]), dtype=np.uint8)
        if cw:
            assert words is not None  # cw > 0
            pos = (poffs[:-1][:, None] + np.arange(cw)[None, :]).reshape(-1)
            prefix[pos] = words.reshape(-1)
        ent_len = np.zeros(n_entries, dtype=np.int64)
        ent_len[has_val] = lens[val_of[has_val]]
        if lb:
            hv = np.flatnonzero(has_val)
            lbytes = ent_len[hv].astype(f"<u{lb}").view(np.uint8).reshape(-1, lb)
            pos = (poffs[hv][:, None] + cw + np.arange(lb)[None, :]).reshape(-1)
            prefix[pos] = lbytes.reshape(-1)
        # entry data: the value's bytes (for entries with a valid value)
        doffs = np.zeros(n_entries + 1, dtype=np.int64)
        np.cumsum(ent_len, out=doffs[1:])
        data = np.asarray(pv.data, dtype=np.uint8)
        src_start = np.zeros(n_entries, dtype=np.int64)
        src_start[has_val] = offs[:-1][val_of[has_val]]
        # gather the value bytes in entry order with Arrow (no per-byte index arrays)
        values_arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), num_values, [None, pa.py_buffer(offs.astype(np.int64).tobytes()), pa.py_buffer(data.tobytes())])
        take_idx = np.where(has_val, val_of, -1)
        taken = values_arr.take(pa.array(np.maximum(take_idx, 0), pa.int64()))
        taken = pc.if_else(pa.array(has_val), taken, pa.scalar(b"", pa.large_binary()))
        prefix_arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n_entries, [None, pa.py_buffer(poffs.tobytes()), pa.py_buffer(prefix.tobytes())])
        joined = pc.binary_join_element_wise(prefix_arr, taken, pa.scalar(b"", pa.large_binary()))
        jb = joined.buffers()
        jo = np.frombuffer(jb[1], dtype=np.int64, count=n_entries + 1, offset=joined.offset * 8)
        buf = np.frombuffer(jb[2], dtype=np.uint8)[int(jo[0]):int(jo[-1])] if n_entries else np.zeros(0, np.uint8)
        buffers.append([buf])
        ends = jo - jo[0]
        if rep is not None:
            row_start_entries = np.flatnonzero(rep == int(rep.max())) if len(rep) else np.zeros(0, np.int64)
        else:
            row_start_entries = np.arange(n_entries)
        idx = np.append(ends[row_start_entries], int(ends[-1]))
        est = int(lens.sum()) + cw * n_entries + lb * num_values if index_estimate is None else index_estimate
        buffers.append([_bytepacked(idx, est)])
    layout = pb.PageLayout()
    layout.full_zip_layout.CopyFrom(z)
    return PageOut(layout, buffers)


def all_null_page(layers: Sequence[int], rep: Optional[np.ndarray], defs: Optional[np.ndarray],
                  simple: bool, version: str = FileVersion.V2_1) -> PageOut:
    """A page with no values: only levels (none at all for a simple nullable leaf). 2.2 block-compresses the levels
    and records them in fields newer than our .proto."""
    a = pb.AllNullLayout()
    layout = pb.PageLayout()
    if simple:
        a.layers.append(pb.REPDEF_NULLABLE_ITEM)
        layout.all_null_layout.CopyFrom(a)
        return PageOut(layout, [])
    a.layers.extend(layers)
    if version >= FileVersion.V2_2:
        # 2.2: levels block-compressed, described by fields 7/8 with value counts in 9/10
        extra = b""
        rb = db = b""
        if rep is not None:
            rc = choose_level_codec(rep, version)
            extra += field_bytes(7, rc.encoding().SerializeToString())
            rb = compress_level_block(rc, rep)
        if defs is not None:
            dc = choose_level_codec(defs, version)
            extra += field_bytes(8, dc.encoding().SerializeToString())
            db = compress_level_block(dc, defs)
        if rep is not None:
            extra += field_varint(9, len(rep))
        if defs is not None:
            extra += field_varint(10, len(defs))
        a = _with_unknown(a, extra)
        layout.all_null_layout.CopyFrom(a)
        return PageOut(layout, [[rb], [db]])
    layout.all_null_layout.CopyFrom(a)
    rb = np.ascontiguousarray(rep, dtype="<u2").tobytes() if rep is not None else b""
    db = np.ascontiguousarray(defs, dtype="<u2").tobytes() if defs is not None else b""
    return PageOut(layout, [[rb], [db]])


def constant_page(layers: Sequence[int], rep: Optional[np.ndarray], defs: Optional[np.ndarray],
                  inline: Optional[bytes], value_buffer: Optional[bytes]) -> PageOut:
    """A page whose visible values are all one scalar: the value inline (or in ``value_buffer``) plus raw levels."""
    a = pb.AllNullLayout()
    a.layers.extend(layers)
    extra = field_bytes(6, inline) if inline is not None else b""
    a = _with_unknown(a, extra)
    layout = pb.PageLayout()
    layout.all_null_layout.CopyFrom(a)
    buffers: list[list] = []
    if value_buffer is not None:
        buffers.append([value_buffer])
    if rep is not None or defs is not None:
        rb = np.ascontiguousarray(rep, dtype="<u2").tobytes() if rep is not None else b""
        db = np.ascontiguousarray(defs, dtype="<u2").tobytes() if defs is not None else b""
        buffers.extend([[rb], [db]])
    elif value_buffer is not None:
        pass
    return PageOut(layout, buffers)


def scalar_value_buffer(arrow_buffers: Sequence[bytes]) -> bytes:
    """The buffers of one Arrow scalar framed for a constant page: count, u32 lengths, then the bytes."""
    head = struct.pack("<I", len(arrow_buffers)) + b"".join(struct.pack("<I", len(b)) for b in arrow_buffers)
    return head + b"".join(arrow_buffers)
