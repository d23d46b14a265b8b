"""Vectorised decoding of many mini-block chunks at once.

A batch is a set of chunks (of one page, or of pages with the same encodings) held back to back
in one uint8 buffer. Chunk headers all have the same size for a given layout, so they are parsed
for every chunk with a few numpy gathers; the common value encodings (flat, variable, FSST,
inline and out-of-line bitpacking, fixed-size lists of those) are then decoded for the whole
batch in one pass per buffer. Any other encoding falls back to the per-chunk decoders of
:mod:`v2_1.compression.decode`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import bitpack_decode as bp
from lance_ops.format.v2_1.compression import decode as comp
from lance_ops.format.v2_1.compression.decode import EncodingCorrupt, Vals
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}

Spans = tuple[np.ndarray, np.ndarray]  # (start, size) per chunk, int64


# --------------------------------------------------------------------------------------------
# chunk tables
# --------------------------------------------------------------------------------------------
#: (chunk metadata bytes, word size, items, data buffer size) -> :func:`chunk_table` (read-only
#: arrays): a pure function of the key; small files of one dataset often repeat the same table
_TABLES: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]] = {}
_TABLES_LIMIT = 4096


def chunk_table(meta: bytes, large: bool, num_items: int, data_size: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """A mini-block page's chunk table from its metadata buffer: (chunk sizes, chunk start offsets
    with the end appended, value counts, value counts' prefix sums from 0; int64, read-only), and
    whether every chunk holds a value."""
    key = (meta, large, num_items, data_size)
    got = _TABLES.get(key)
    if got is not None:
        return got
    word = 4 if large else 2
    if len(meta) % word:
        raise EncodingCorrupt(f"chunk metadata of {len(meta)} bytes is not a whole number of words")
    words = np.frombuffer(meta, dtype=f"<u{word}").astype(np.int64)
    nchunks = len(words)
    sizes = ((words >> 4) + 1) * 8
    logs = words & 0xF
    counts = np.where(np.arange(nchunks) < nchunks - 1, np.left_shift(1, logs), 0).astype(np.int64)
    if nchunks:
        last = num_items - int(counts[:-1].sum())
        if last < 0:
            raise EncodingCorrupt("chunk value counts exceed the page's item count")
        counts[-1] = last
    elif num_items:
        raise EncodingCorrupt("page has items but no chunks")
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if nchunks and offsets[-1] > data_size:
        raise EncodingCorrupt("mini-block chunks run past their buffer")
    arrays = (sizes, offsets, counts, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    for a in arrays:
        a.flags.writeable = False
    table = (*arrays, bool((counts > 0).all()))
    if len(_TABLES) >= _TABLES_LIMIT:
        _TABLES.clear()
    _TABLES[key] = table
    return table


_WHOLE_PARTS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def whole_part(nchunks: int, num_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a mini-block page plans to decode all its rows (every chunk id, rows ``[0, num_rows)``),
    read-only and memoised: pages of many small files share it."""
    got = _WHOLE_PARTS.get((nchunks, num_rows))
    if got is None:
        got = (np.arange(nchunks), np.zeros(1, np.int64), np.full(1, num_rows, np.int64))
        for a in got:
            a.flags.writeable = False
        if len(_WHOLE_PARTS) < _TABLES_LIMIT:
            _WHOLE_PARTS[(nchunks, num_rows)] = got
    return got


# --------------------------------------------------------------------------------------------
# byte helpers
# --------------------------------------------------------------------------------------------
def window(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position, as a (len(pos), width) matrix (one gather)."""
    if len(pos) and (int(pos.min()) < 0 or int(pos.max()) + width > len(buf)):
        raise EncodingCorrupt("mini-block chunk field runs past the data")
    if width == 0 or len(buf) < width:
        return np.zeros((len(pos), width), np.uint8)
    if buf.dtype == np.uint8 and buf.flags.c_contiguous:  # (the ndarray constructor is far cheaper than as_strided)
        win = np.ndarray((len(buf) - width + 1, width), np.uint8, buffer=buf, strides=(1, 1))
    else:
        win = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - width + 1, width), strides=(buf.strides[0], 1))
    return win[pos]


def read_uint(buf: np.ndarray, pos: np.ndarray, nbytes: int) -> np.ndarray:
    """Little-endian unsigned integers of ``nbytes`` (1/2/4/8) at byte positions ``pos``."""
    m = window(buf, pos, nbytes)
    return np.ascontiguousarray(m).view(f"<u{nbytes}").reshape(-1).astype(np.int64)


def spans_index(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(a[i], b[i])`` over all i."""
    lens = b - a
    total = int(lens.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    offs = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=offs[1:])
    return np.repeat(a - offs, lens) + np.arange(total, dtype=np.int64)


def take_spans(arr: np.ndarray, first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``arr[first[i]:first[i] + counts[i]]`` of all i, back to back. Spans that follow each other
    merge into one slice, so a batch of pages with one short chunk each (its last) costs a few
    slices instead of an index of every value."""
    brk = np.flatnonzero(first[1:] != first[:-1] + counts[:-1]) + 1
    if len(brk) > 64:
        return arr[spans_index(first, first + counts)]
    ends = first + counts
    a = [int(first[0])] + first[brk].tolist()
    b = ends[brk - 1].tolist() + [int(ends[-1])]
    return np.concatenate([arr[x:y] for x, y in zip(a, b)]) if len(a) > 1 else arr[a[0]:b[0]]


def gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, spare: int = 0) -> np.ndarray:
    """The bytes ``buf[starts[i]:starts[i] + lens[i]]`` of all i, back to back (a view if possible).

    ``spare`` extra bytes of unspecified content follow when available (the FSST decoder uses one)."""
    k = len(starts)
    if k == 0:
        return np.zeros(0, np.uint8)
    if int(starts.min()) < 0 or int((starts + lens).max()) > len(buf) or (k and int(lens.min()) < 0):
        raise EncodingCorrupt("mini-block buffer runs past its chunk")
    total = int(lens.sum())
    if k == 1 or bool((starts[1:] == starts[:-1] + lens[:-1]).all()):
        s = int(starts[0])
        return buf[s:s + total + spare]
    if k > 2 and total >= 32 * k:
        body = _uniform_body(buf, starts, lens)
        if body is not None:  # equal chunks at an equal stride (all but the last): one strided copy
            out = np.empty(total + spare, np.uint8)
            n = body.size
            out[:n].reshape(body.shape)[...] = body
            s = int(starts[-1])
            out[n:total] = buf[s:s + int(lens[-1])]
            return out
    if total >= 32 * k:  # long spans: slice and concatenate (no index array)
        parts = [buf[s:s + n] for s, n in zip(starts.tolist(), lens.tolist())]
        if not spare:
            return np.concatenate(parts)
        out = np.empty(total + spare, np.uint8)
        np.concatenate(parts, out=out[:total])
        return out
    if spare:
        out = np.empty(total + spare, np.uint8)
        np.take(buf, spans_index(starts, starts + lens), out=out[:total])
        return out
    return buf[spans_index(starts, starts + lens)]


def _uniform_body(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Optional[np.ndarray]:
    """A (k - 1, length) strided view of all spans but the last when they have one length and
    follow each other at one stride (the usual shape of a page's chunks); else None."""
    head, step = lens[:-1], np.diff(starts[:-1])
    length = int(head[0])
    stride = int(starts[1] - starts[0])
    if stride < length or length == 0 or bool((head != length).any()) or bool((step != stride).any()):
        return None
    first = buf[int(starts[0]):]
    return np.lib.stride_tricks.as_strided(first, shape=(len(head), length), strides=(stride * buf.strides[0], buf.strides[0]),
                                           writeable=False)


def _pad8(x: np.ndarray) -> np.ndarray:
    return (x + 7) & ~7


def excl_cumsum(x: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum of ``x`` (int64): where each item starts when they are laid end to end."""
    out = np.zeros(len(x), np.int64)
    if len(x) > 1:
        np.cumsum(x[:-1], out=out[1:])
    return out


# --------------------------------------------------------------------------------------------
# chunk headers
# --------------------------------------------------------------------------------------------
@dataclass
class Parsed:
    """Where each chunk's levels and value buffers are."""

    num_levels: np.ndarray
    rep: Optional[Spans]
    defs: Optional[Spans]
    bufs: list  # [Spans] per value buffer


def parse_headers(buf: np.ndarray, pos: np.ndarray, size: np.ndarray, counts: np.ndarray,
                  has_rep: bool, has_def: bool, num_buffers: int, large: bool) -> Parsed:
    """Parse the headers of all chunks (``u16 levels, [u16 rep], [u16 def], sizes..., pad``)."""
    sw = 4 if large else 2
    hlen = 2 + 2 * has_rep + 2 * has_def + sw * num_buffers
    if len(pos) and int(size.min()) < hlen:
        raise EncodingCorrupt("mini-block chunk header is truncated")
    hdr = np.ascontiguousarray(window(buf, pos, hlen))
    fields = hdr[:, :2 + 2 * has_rep + 2 * has_def].view("<u2").astype(np.int64)
    num_levels = fields[:, 0]
    cur = pos + ((hlen + 7) & ~7)
    end = pos + size
    rep = defs = None
    col = 1
    if has_rep:
        rs = fields[:, col]
        col += 1
        rep = (cur, rs)
        cur = cur + _pad8(rs)
    if has_def:
        ds = fields[:, col]
        col += 1
        defs = (cur, ds)
        cur = cur + _pad8(ds)
    bstart = 2 + 2 * has_rep + 2 * has_def
    sizes = hdr[:, bstart:].view(f"<u{sw}").astype(np.int64) if num_buffers else np.zeros((len(pos), 0), np.int64)
    bufs = []
    for j in range(num_buffers):
        bs = sizes[:, j]
        bufs.append((cur, bs))
        cur = cur + _pad8(bs)
    if not (has_rep or has_def):
        num_levels = counts
    else:
        short = counts - num_levels
        if len(short) and int(short.max()) > 0:  # a u16 count that wrapped around in a large chunk
            num_levels = num_levels + np.where(short > 0, (short + 0xFFFF) >> 16 << 16, 0)
    ends = [s + z for s, z in ([rep] if rep else []) + ([defs] if defs else []) + bufs]
    if ends and len(pos) and bool((np.maximum.reduce(ends) > end).any()):
        raise EncodingCorrupt("mini-block chunk buffer runs past the chunk")
    return Parsed(num_levels, rep, defs, bufs)


# --------------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------------
def batch_values(enc: pb.CompressiveEncoding, buf: np.ndarray, bufs: Sequence[Spans], counts: np.ndarray,
                 defer_fsst: bool = False) -> tuple[Vals, Optional[FsstTable]]:
    """Decode the value buffers of a batch of chunks (``counts`` values each) into one ``Vals``.

    With ``defer_fsst`` an FSST-compressed result is returned still compressed, with its table,
    so that the caller can select rows before decompressing.
    """
    which = enc.WhichOneof("compression")
    total = int(counts.sum())
    if which == "flat" and not enc.flat.HasField("data") and bufs:
        bits = enc.flat.bits_per_value
        if bits == 0 and total:
            raise EncodingCorrupt(f"flat encoding of {total} values with a bit width of 0")
        s, z = bufs[0]
        if bits and bits % 8 == 0:
            w = bits // 8
            need = counts * w
            if bool((z < need).any()):
                raise EncodingCorrupt(f"flat chunk cannot hold its values of {w} bytes")
            return Vals.fixed(gather(buf, s, need), w, total), None
        if bits == 1:
            return Vals("bool", total, _bits(buf, s, z, counts)), None
    if which == "variable" and _plain_variable(enc.variable) and bufs:
        return _variable(buf, bufs[0], counts, enc.variable.offsets.flat.bits_per_value // 8), None
    if which == "fsst" and enc.fsst.values.WhichOneof("compression") == "variable" \
            and _plain_variable(enc.fsst.values.variable) and bufs:
        v = _variable(buf, bufs[0], counts, enc.fsst.values.variable.offsets.flat.bits_per_value // 8, spare=1)
        table = FsstTable(bytes(enc.fsst.symbol_table))
        if defer_fsst:
            return v, table
        return fsst_decode(v, table), None
    if which == "inline_bitpacking" and not enc.inline_bitpacking.HasField("values") and bufs \
            and enc.inline_bitpacking.uncompressed_bits_per_value in _UINT:
        bits = enc.inline_bitpacking.uncompressed_bits_per_value
        vals = _inline(buf, bufs[0], counts, bits)
        return Vals.fixed(vals.view(np.uint8), bits // 8, total), None
    if which == "out_of_line_bitpacking" and bufs:
        o = enc.out_of_line_bitpacking
        bits = o.uncompressed_bits_per_value
        if bits in _UINT and o.values.WhichOneof("compression") == "flat" and not o.values.flat.HasField("data") \
                and 0 < o.values.flat.bits_per_value <= bits:
            vals = _out_of_line(buf, bufs[0], counts, bits, o.values.flat.bits_per_value)
            return Vals.fixed(vals.view(np.uint8), bits // 8, total), None
    if which == "fixed_size_list":
        got = _fsl(enc.fixed_size_list, buf, bufs, counts)
        if got is not None:
            return got, None
    return _per_chunk(enc, buf, bufs, counts), None


def fsst_decode(v: Vals, table: FsstTable) -> Vals:
    """Variable-width values ``v`` expanded through the FSST symbol ``table``."""
    offs, data = table.decode(v.data, v.var_offsets())
    return Vals("var", v.n, data, offs)


def batch_levels(enc: pb.CompressiveEncoding, buf: np.ndarray, spans: Spans, counts: np.ndarray) -> np.ndarray:
    """Repetition or definition levels (u16) of a batch of chunks."""
    keep = counts > 0
    if not bool(keep.all()):
        spans, counts = (spans[0][keep], spans[1][keep]), counts[keep]
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.uint16)
    if enc.WhichOneof("compression") not in ("flat", "inline_bitpacking", "out_of_line_bitpacking"):
        # levels are block encoded (e.g. RLE framing differs from mini-block values): per chunk
        mv = memoryview(buf)  # type: ignore[arg-type]  # numpy's stubs lack __buffer__; ndarray is a buffer
        parts = [comp.decode_levels(enc, mv[a:a + b], n)
                 for a, b, n in zip(spans[0].tolist(), spans[1].tolist(), counts.tolist())]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    v, _ = batch_values(enc, buf, [spans], counts)
    if v.n < total:
        raise EncodingCorrupt(f"decoded {v.n} levels, expected {total}")
    if v.kind == "bool":
        return v.data[:total].astype(np.uint16)
    w = v.width
    if w not in (1, 2, 4, 8):
        raise EncodingCorrupt(f"levels of {w} bytes")
    return np.ascontiguousarray(v.data[:total]).reshape(-1).view(f"<u{w}").astype(np.uint16, copy=False)


def _plain_variable(v: pb.Variable) -> bool:
    ob = v.offsets
    return not v.HasField("values") and ob.WhichOneof("compression") == "flat" \
        and not ob.flat.HasField("data") and ob.flat.bits_per_value in (32, 64)


def _bits(buf: np.ndarray, s: np.ndarray, z: np.ndarray, counts: np.ndarray) -> np.ndarray:
    nbytes = (counts + 7) >> 3
    if bool((z < nbytes).any()):
        raise EncodingCorrupt("bit-packed chunk cannot hold its values")
    raw = gather(buf, s, nbytes)
    bits = np.unpackbits(raw, bitorder="little").astype(bool)
    total = int(counts.sum())
    if len(counts) <= 1 or not bool((counts[:-1] & 7).any()):
        return bits[:total]
    first = excl_cumsum(nbytes) * 8
    return take_spans(bits, first, counts)


def _variable(buf: np.ndarray, spans: Spans, counts: np.ndarray, ow: int, spare: int = 0) -> Vals:
    """Mini-block Variable chunks: ``n + 1`` offsets (relative to the buffer) then the bytes."""
    s, z = spans
    if bool((z < (counts + 1) * ow).any()):
        raise EncodingCorrupt("variable chunk cannot hold its offsets")
    first = read_uint(buf, s, ow)
    last = read_uint(buf, s + counts * ow, ow)
    if bool((last > z).any()) or bool((last < first).any()):
        raise EncodingCorrupt("variable offsets are out of order or past the chunk")
    total = int(counts.sum())
    offs = np.empty(total + 1, np.int64)
    offs[0] = 0
    if total:
        shift = excl_cumsum(last - first) - first
        k = len(counts)
        c = int(counts[0])
        if k > 2 and c and bool((counts[:-1] == c).all()):
            # equal chunks (all but the last): one 2-d gather and a broadcast add
            body = offs[1:1 + (k - 1) * c].reshape(k - 1, c)
            body[...] = np.ascontiguousarray(window(buf, s[:-1] + ow, c * ow)).view(f"<u{ow}")
            body += shift[:-1, None]
            m = int(counts[-1])
            if m:
                a = int(s[-1]) + ow
                offs[1 + (k - 1) * c:] = np.frombuffer(buf[a:a + m * ow], dtype=f"<u{ow}")
                offs[1 + (k - 1) * c:] += int(shift[-1])
        else:
            offs[1:] = np.ascontiguousarray(gather(buf, s + ow, counts * ow)).view(f"<u{ow}")
            offs[1:] += int(shift[0]) if k == 1 else np.repeat(shift, counts)
        if bool((offs[1:] < offs[:-1]).any()):
            raise EncodingCorrupt("variable offsets are out of order or past the chunk")
    data = gather(buf, s + first, last - first, spare)
    return Vals("var", total, data, offs)


def _inline(buf: np.ndarray, spans: Spans, counts: np.ndarray, t_bits: int) -> np.ndarray:
    """Inline bitpacking: per 1024-value block a width word then the FastLanes block."""
    s, z = spans
    tb = t_bits // 8
    dtype = _UINT[t_bits]
    nblk = (counts + bp.BLOCK - 1) // bp.BLOCK
    total_blocks = int(nblk.sum())
    total = int(counts.sum())
    if total_blocks == 0:
        return np.zeros(0, dtype)
    end = s + z
    cur = s.copy()
    blk_base = excl_cumsum(nblk)
    rec_out, rec_pos, rec_w = [], [], []
    for b in range(int(nblk.max())):
        act = np.flatnonzero(nblk > b) if b else np.flatnonzero(nblk > 0)
        p = cur[act]
        if bool((p + tb > end[act]).any()):
            raise EncodingCorrupt("inline bitpacking block header runs past the buffer")
        width = read_uint(buf, p, tb)
        if bool((width > t_bits).any()):
            raise EncodingCorrupt(f"inline bitpacking width exceeds {t_bits} bits")
        nxt = p + tb + width * (bp.BLOCK // 8)
        if bool((nxt > end[act]).any()):
            raise EncodingCorrupt("inline bitpacking block runs past the buffer")
        rec_out.append(blk_base[act] + b)
        rec_pos.append(p + tb)
        rec_w.append(width)
        cur[act] = nxt
    out_blk = np.concatenate(rec_out) if len(rec_out) > 1 else rec_out[0]
    pos = np.concatenate(rec_pos) if len(rec_pos) > 1 else rec_pos[0]
    widths = np.concatenate(rec_w) if len(rec_w) > 1 else rec_w[0]
    out = np.empty((total_blocks, bp.BLOCK), dtype)
    uniq = np.unique(widths)
    dt = np.uint8 if tb == 1 else f"<u{tb}"
    for w in uniq.tolist():
        sel = np.flatnonzero(widths == w) if len(uniq) > 1 else None
        p = pos if sel is None else pos[sel]
        dst = out_blk if sel is None else out_blk[sel]
        if w == 0:
            out[dst] = 0
            continue
        nbytes = w * (bp.BLOCK // 8)
        words = np.ascontiguousarray(window(buf, p, nbytes)).reshape(-1).view(dt)
        d0 = int(dst[0])
        if int(dst[-1]) - d0 + 1 == len(dst) and bool((np.diff(dst) == 1).all()):
            # blocks of one width usually follow each other: unpack straight into the result
            bp.unpack_blocks(words, t_bits, w, len(p), out=out[d0:d0 + len(dst)])
        else:
            out[dst] = bp.unpack_blocks(words, t_bits, w, len(p)).reshape(len(p), bp.BLOCK)
    flat = out.reshape(-1)
    if len(counts) == 1 or not bool((counts[:-1] % bp.BLOCK).any()):
        return flat[:total]
    first = blk_base * bp.BLOCK
    return take_spans(flat, first, counts)


def _out_of_line(buf: np.ndarray, spans: Spans, counts: np.ndarray, t_bits: int, width: int) -> np.ndarray:
    """Out-of-line bitpacking: whole FastLanes blocks of one width; a partial tail block is packed
    (padded) or stored raw, told apart by the buffer length."""
    s, z = spans
    tb = t_bits // 8
    dtype = _UINT[t_bits]
    wpb = bp.words_per_block(t_bits, width)
    nwords = z // tb
    whole, tail = counts // bp.BLOCK, counts % bp.BLOCK
    raw_tail = (tail > 0) & (nwords == whole * wpb + tail)
    nblk = whole + ((tail > 0) & ~raw_tail)
    if bool((nwords < nblk * wpb).any()):
        raise EncodingCorrupt("out-of-line bitpacked buffer is too short")
    total = int(counts.sum())
    total_blk = int(nblk.sum())
    dt = np.uint8 if tb == 1 else f"<u{tb}"
    if total_blk:
        words = np.ascontiguousarray(gather(buf, s, nblk * wpb * tb)).view(dt)
        flat = bp.unpack_blocks(words, t_bits, width, total_blk)
    else:
        flat = np.zeros(0, dtype)
    if not bool(raw_tail.any()) and (len(counts) == 1 or not bool((counts[:-1] % bp.BLOCK).any())):
        return flat[:total]
    # chunk by chunk: its unpacked values, then its raw tail (slices only)
    npacked = np.where(raw_tail, whole * bp.BLOCK, counts).tolist()
    bstart = (excl_cumsum(nblk) * bp.BLOCK).tolist()
    rpos = (s + whole * wpb * tb).tolist()
    rlen = np.where(raw_tail, tail * tb, 0).tolist()
    parts = []
    if tb > 1 and buf.dtype == np.uint8 and buf.flags.c_contiguous and all(r % tb == 0 for r in rpos):
        # the raw tails lie on word boundaries: slices of one word view of the buffer
        words = buf[:len(buf) - len(buf) % tb].view(dt)
        for b0, k, r0, rn in zip(bstart, npacked, rpos, rlen):
            parts.append(flat[b0:b0 + k])
            parts.append(words[r0 // tb:(r0 + rn) // tb])
        return np.concatenate(parts).astype(dtype, copy=False)
    for b0, k, r0, rn in zip(bstart, npacked, rpos, rlen):
        parts.append(flat[b0:b0 + k])
        if rn:
            parts.append(buf[r0:r0 + rn].view(dt))
    return np.concatenate(parts).astype(dtype, copy=False)


def _fsl(f: pb.FixedSizeList, buf: np.ndarray, bufs: Sequence[Spans], counts: np.ndarray) -> Optional[Vals]:
    """Fixed-size lists without validity: the items, grouped."""
    cum = 1
    cur = f
    while True:
        if cur.has_validity:
            return None
        cum *= cur.items_per_value
        inner = cur.values
        if inner.WhichOneof("compression") != "fixed_size_list":
            break
        cur = inner.fixed_size_list
    items, _ = batch_values(inner, buf, bufs, counts * cum)
    return comp.group_items(items, int(counts.sum()), cum)


def _per_chunk(enc: pb.CompressiveEncoding, buf: np.ndarray, bufs: Sequence[Spans], counts: np.ndarray) -> Vals:
    mv = memoryview(buf)  # type: ignore[arg-type]  # numpy's stubs lack __buffer__; ndarray is a buffer
    cols = [(s.tolist(), z.tolist()) for s, z in bufs]
    parts = []
    for i, n in enumerate(counts.tolist()):
        chunk_bufs = [mv[ss[i]:ss[i] + zz[i]] for ss, zz in cols]
        parts.append(comp.decode_miniblock(enc, chunk_bufs, n))
    if not parts:
        return Vals.empty_like("fixed")
    return Vals.concat(parts)
