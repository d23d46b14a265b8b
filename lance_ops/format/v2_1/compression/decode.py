"""Decoders for the compressive encodings of Lance 2.1+ (``lance.encodings21.CompressiveEncoding``).

Decoded values are held in :class:`Vals`, a small columnar container that supports the few
operations the structural layer needs (concatenate, take, slice) on numpy arrays:

* ``fixed``: ``data`` is a ``(n, width_bytes)`` uint8 matrix (fixed-size lists are flattened into
  one row per value; ``item_validity`` then holds one bool per item when the items are nullable);
* ``bool``: ``data`` is a bool vector (1-bit values);
* ``var``: ``offsets`` (int64, ``n + 1``) into the uint8 ``data``.

Three contexts use these encodings, with different buffer conventions:

* mini-block (``decode_miniblock``): a chunk's value buffers, decoded per chunk;
* block (``decode_block``): one opaque buffer (levels, dictionaries);
* per value (full-zip): handled by the full-zip layout, using ``fullzip_value_kind``.

Many mini-block chunks are decoded at once by :mod:`v2_1.layout.chunks` (``batch_values``,
``batch_levels``), which builds on this module and falls back to ``decode_miniblock``.

Byte formats (reverse-engineered against pylance 14.0.2 and checked with the upstream sources):

* Flat: values back to back (LSB-first bits for 1-bit values).
* Variable (mini-block): ``n + 1`` offsets (u32/u64) that are relative to the start of the buffer,
  followed by the bytes. Variable (block): ``u32|u64 bits_per_offset``, ``u32|u64 bytes_start``,
  ``n + 1`` offsets, bytes (offsets relative to the bytes region start of the original data).
* InlineBitpacking: per 1024-value block, one word of the uncompressed type holding the packed bit
  width, then the FastLanes block (the last block is zero padded to 1024 values).
* OutOfLineBitpacking: whole FastLanes blocks of one width; a partial tail block is either packed
  (padded) or stored raw -- told apart by the buffer length.
* Rle: two buffers, the run values (child encoding) and u8 run lengths.
* ByteStreamSplit: ``bytes_per_value`` streams of ``n`` bytes each.
* General: LZ4 block with a u32 LE uncompressed-size prefix, or zstd with a u64 LE size prefix
  (or a bare zstd frame). In a mini-block only the first buffer of the chunk is compressed.
* Fsst: symbol table in the encoding; the child (Variable) holds the compressed strings.
* FixedSizeList: buffers = one validity bitmap per nullable FSL layer, then the flat items.
* PackedStruct: row-major rows of the struct's fixed-width children.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import bitpack_decode as bp
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable, pool_array

_UINT: dict[int, type[np.unsignedinteger[Any]]] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}

#: what the decoders accept as a buffer: file bytes, views of them, or uint8 arrays
Buffer = Union[bytes, bytearray, memoryview, np.ndarray]


class EncodingUnsupported(Exception):
    """An encoding this decoder does not implement (the reader adds file and column)."""


class EncodingCorrupt(Exception):
    """The bytes do not match the encoding (the reader adds file and column)."""


# --------------------------------------------------------------------------------------------
# value container
# --------------------------------------------------------------------------------------------
@dataclass
class Vals:
    """Decoded values of one page or chunk: fixed-width rows, booleans or variable-width bytes.

    The common currency between the value decoders and the assembly of Arrow arrays; ``kind`` says
    which of ``data`` (and ``offsets`` for "var") holds them."""

    kind: str  # "fixed" | "bool" | "var"
    n: int
    data: np.ndarray
    offsets: Optional[np.ndarray] = None
    item_validity: Optional[np.ndarray] = None  # per FSL item (n * items_per_value)
    items_per_value: int = 1
    packed: Optional[tuple] = None  # variable packed struct rows: ((kind, nbytes), ...) per field

    @staticmethod
    def fixed(data: np.ndarray, width: int, n: Optional[int] = None) -> "Vals":
        """``n`` fixed-width values of ``width`` bytes from ``data`` (as an ``(n, width)`` byte matrix)."""
        data = np.asarray(data, dtype=np.uint8).reshape(-1)
        if n is None:
            n = len(data) // width if width else 0
        need = n * width
        if len(data) < need:
            raise EncodingCorrupt(f"{len(data)} bytes cannot hold {n} values of {width} bytes")
        return Vals("fixed", n, data[:need].reshape(n, width))

    @staticmethod
    def empty_like(kind: str, width: int = 0) -> "Vals":
        """No values of ``kind`` (and ``width`` bytes for fixed values): the neutral part of a concat."""
        if kind == "var":
            return Vals("var", 0, np.zeros(0, np.uint8), np.zeros(1, np.int64))
        if kind == "bool":
            return Vals("bool", 0, np.zeros(0, bool))
        return Vals("fixed", 0, np.zeros((0, width), np.uint8))

    @property
    def width(self) -> int:
        """Bytes per value of fixed values (0 for booleans and variable-width values)."""
        return int(self.data.shape[1]) if self.kind == "fixed" else 0

    def as_uint(self, bits: int) -> np.ndarray:
        """Fixed values as an unsigned integer vector (little-endian)."""
        if self.kind == "bool":
            return self.data.astype(_UINT[bits])
        w = bits // 8
        if self.width != w:
            raise EncodingCorrupt(f"expected {w}-byte values, got {self.width}-byte values")
        return np.ascontiguousarray(self.data).reshape(-1).view(f"<u{w}").astype(_UINT[bits], copy=False)

    def var_offsets(self) -> np.ndarray:
        """The ``n + 1`` offsets of variable-width values (kind "var" always carries them)."""
        if self.offsets is None:
            raise EncodingCorrupt(f"values of kind {self.kind} have no offsets")
        return self.offsets

    def take(self, idx: np.ndarray) -> "Vals":
        """The values at positions ``idx`` (a gather; FSL item validity and packed layout follow)."""
        idx = np.asarray(idx, dtype=np.int64)
        iv = None
        if self.item_validity is not None:
            ipv = self.items_per_value
            iv = self.item_validity.reshape(-1, ipv)[idx].reshape(-1)
        if self.kind == "var":
            offsets = self.var_offsets()
            lens = (offsets[1:] - offsets[:-1])[idx]
            new_off = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(lens, out=new_off[1:])
            total = int(new_off[-1])
            starts = offsets[:-1][idx]
            src = np.repeat(starts - new_off[:-1], lens) + np.arange(total, dtype=np.int64)
            return Vals("var", len(idx), self.data[src], new_off, packed=self.packed)
        return Vals(self.kind, len(idx), self.data[idx], None, iv, self.items_per_value)

    def slice(self, start: int, stop: int) -> "Vals":
        """The values ``start:stop`` (offsets rebased to 0 for variable-width values)."""
        if self.kind == "var":
            off = self.var_offsets()[start:stop + 1]
            return Vals("var", stop - start, self.data[off[0]:off[-1]], off - off[0], packed=self.packed)
        iv = None
        if self.item_validity is not None:
            ipv = self.items_per_value
            iv = self.item_validity[start * ipv: stop * ipv]
        return Vals(self.kind, stop - start, self.data[start:stop], None, iv, self.items_per_value)

    @staticmethod
    def concat(parts: Sequence["Vals"]) -> "Vals":
        """The values of ``parts`` one after the other (all of one kind and width; ``None`` parts skipped)."""
        parts = [p for p in parts if p is not None]
        if len(parts) == 1:
            return parts[0]
        kinds = {p.kind for p in parts}
        if len(kinds) != 1:
            raise EncodingCorrupt(f"cannot combine values of kinds {sorted(kinds)}")
        kind = parts[0].kind
        n = sum(p.n for p in parts)
        if kind == "var":
            datas, offs, base = [], [np.zeros(1, np.int64)], 0
            for p in parts:
                p_off = p.var_offsets()
                datas.append(p.data[p_off[0]:p_off[-1]])
                offs.append(p_off[1:] - p_off[0] + base)
                base += int(p_off[-1] - p_off[0])
            return Vals("var", n, _joined(datas) if datas else np.zeros(0, np.uint8), np.concatenate(offs),
                        packed=parts[0].packed)
        ipvs = {p.items_per_value for p in parts}
        ipv = max(ipvs)
        iv = None
        if any(p.item_validity is not None for p in parts):
            iv = np.concatenate([
                p.item_validity if p.item_validity is not None else np.ones(p.n * p.items_per_value, bool)
                for p in parts
            ])
        if kind == "fixed":
            widths = {p.width for p in parts if p.n}
            if len(widths) > 1:
                raise EncodingCorrupt(f"cannot combine values of widths {sorted(widths)}")
            w = widths.pop() if widths else parts[0].width
            if not n:
                return Vals("fixed", n, np.zeros((0, w), np.uint8), None, iv, ipv)
            joined = adjacent_view([p.data for p in parts])
            data = (joined if joined is not None else _joined([p.data.reshape(-1) for p in parts])).reshape(n, w)
            return Vals("fixed", n, data, None, iv, ipv)
        joined = adjacent_view([p.data for p in parts])
        return Vals(kind, n, joined if joined is not None else _joined([p.data for p in parts]), None, iv, ipv)


#: joins of at least this many bytes take their memory from Arrow's pool (see :func:`_joined`)
_POOL_JOIN_BYTES = 1 << 20


def _joined(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(arrays)``; a big result is written into memory from Arrow's pool, which
    keeps freed pages mapped: fresh numpy memory of that size is mapped anew on each join, and its
    page faults cost as much as the copy (the values of many files read together)."""
    total = sum(a.nbytes for a in arrays)
    dtypes = {a.dtype for a in arrays}
    if total < _POOL_JOIN_BYTES or len(dtypes) != 1 or any(a.ndim != 1 for a in arrays):
        return np.concatenate(arrays)
    out = pool_array(sum(len(a) for a in arrays), dtypes.pop().type)
    return np.concatenate(arrays, out=out)


def adjacent_view(arrays: Sequence[np.ndarray]) -> Optional[np.ndarray]:
    """One uint8 view over ``arrays`` when they lie back to back in one buffer (pages read as one
    range and decoded without a copy), else None: concatenating them would copy for nothing."""
    if len(arrays) < 2 or any(a.dtype != np.uint8 or not a.flags.c_contiguous for a in arrays):
        return None
    root = arrays[0]
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.base is not None:  # a view of bytes, a bytearray, an mmap (or a memoryview of one): view all of it
        base = root.base.obj if isinstance(root.base, memoryview) and root.base.obj is not None else root.base
        try:
            root = np.frombuffer(base, dtype=np.uint8)
        except (TypeError, ValueError):
            return None
    if not root.flags.c_contiguous:
        return None
    root_at = root.__array_interface__["data"][0]
    at = arrays[0].__array_interface__["data"][0]
    end = at
    for a in arrays:
        if a.__array_interface__["data"][0] != end:
            return None
        end += a.nbytes
    if at < root_at or end > root_at + root.nbytes:
        return None
    flat = root.reshape(-1).view(np.uint8)
    return flat[at - root_at:end - root_at].reshape((-1,) + arrays[0].shape[1:])


# --------------------------------------------------------------------------------------------
# general compression
# --------------------------------------------------------------------------------------------
def _zstd_content_size(buf: bytes) -> Optional[int]:
    if len(buf) < 6 or buf[:4] != b"\x28\xb5\x2f\xfd":
        return None
    fhd = buf[4]
    fcs_flag, single, did_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag]
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or len(buf) < pos + size:
        return None
    v = int.from_bytes(buf[pos:pos + size], "little")
    return v + 256 if size == 2 else v


def general_decompress(comp: pb.BufferCompression, buf: Buffer) -> bytes:
    """Decompress ``buf`` written by the general compressor ``comp`` (LZ4 or zstd with a size prefix)."""
    buf = bytes(buf)
    scheme = comp.scheme
    if scheme == pb.COMPRESSION_ALGORITHM_LZ4:
        if len(buf) < 4:
            raise EncodingCorrupt("LZ4 buffer shorter than its size prefix")
        size = int.from_bytes(buf[:4], "little")
        if size == 0:
            return b""
        return pa.Codec("lz4_raw").decompress(buf[4:], decompressed_size=size, asbytes=True)
    if scheme == pb.COMPRESSION_ALGORITHM_ZSTD:
        if not buf:
            return b""
        raw_size = _zstd_content_size(buf)
        if raw_size is not None:
            return pa.Codec("zstd").decompress(buf, decompressed_size=raw_size, asbytes=True)
        if len(buf) < 8:
            raise EncodingCorrupt("zstd buffer shorter than its size prefix")
        size = int.from_bytes(buf[:8], "little")
        if size == 0:
            return b""
        return pa.Codec("zstd").decompress(buf[8:], decompressed_size=size, asbytes=True)
    if scheme == pb.COMPRESSION_ALGORITHM_UNSPECIFIED:
        return buf
    raise EncodingUnsupported(f"general compression scheme {scheme}")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
# CompressiveEncoding oneof members added upstream after our compiled proto
_NEWER_ENCODINGS = {14: "range", 15: "delta"}


def describe(enc: pb.CompressiveEncoding) -> str:
    """A compact name for an encoding tree, e.g. ``fsst(variable(flat32))``."""
    which = enc.WhichOneof("compression")
    if which is None:
        from google.protobuf import unknown_fields

        nums = sorted({u.field_number for u in unknown_fields.UnknownFieldSet(enc)})
        names = [_NEWER_ENCODINGS.get(k, f"field {k}") for k in nums]
        return f"unknown compressive encoding ({', '.join(names) or 'empty'})"
    sub = getattr(enc, which)
    kids = []
    for f, v in sub.ListFields():
        if isinstance(v, pb.CompressiveEncoding):
            kids.append(describe(v))
        elif f.name in ("bits_per_value", "uncompressed_bits_per_value", "items_per_value") and not isinstance(v, (list, tuple)):
            try:
                kids.append(str(int(v)))
            except TypeError:
                pass
        elif isinstance(v, pb.BufferCompression):
            kids.append(pb.CompressionScheme.Name(v.scheme).replace("COMPRESSION_ALGORITHM_", "").lower())
    return f"{which}({','.join(kids)})" if kids else which


def _bits(data: Buffer, bits: int) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype=np.uint8) if bits == 8 else np.frombuffer(bytes(data), dtype=f"<u{bits // 8}")


def _flat(f: pb.Flat, buf: Buffer, n: int) -> Vals:
    if f.HasField("data"):
        buf = general_decompress(f.data, buf)
    bits = f.bits_per_value
    if bits == 0 and n:  # as upstream: flat values need a positive width (a damaged layout)
        raise EncodingCorrupt(f"flat encoding of {n} values with a bit width of 0")
    arr = np.frombuffer(bytes(buf), dtype=np.uint8)
    if bits == 1:
        if len(arr) * 8 < n:
            raise EncodingCorrupt(f"{len(arr)} bytes cannot hold {n} bits")
        return Vals("bool", n, np.unpackbits(arr, count=n, bitorder="little").astype(bool))
    if bits % 8:
        # sub-byte flat values (levels packed by an outer encoding): unpack little-endian bitfields
        bitsarr = np.unpackbits(arr, bitorder="little")
        if len(bitsarr) < n * bits:
            raise EncodingCorrupt(f"{len(arr)} bytes cannot hold {n} values of {bits} bits")
        v = bitsarr[: n * bits].reshape(n, bits).astype(np.uint64) << np.arange(bits, dtype=np.uint64)
        vals = v.sum(axis=1)
        w = max(1, (bits + 7) // 8)
        return Vals.fixed(vals.astype(f"<u{w}" if w in (1, 2, 4, 8) else "<u8").view(np.uint8), w if w in (1, 2, 4, 8) else 8, n)
    return Vals.fixed(arr, bits // 8, n)


def _unpack_inline(buf: Buffer, t_bits: int, n: int) -> np.ndarray:
    """A run of inline-bitpacked 1024-value blocks (each with its own width word)."""
    raw = bytes(buf)
    tb = t_bits // 8
    out = []
    pos = 0
    remaining = n
    while remaining > 0:
        if pos + tb > len(raw):
            raise EncodingCorrupt("inline bitpacking block header runs past the buffer")
        width = int.from_bytes(raw[pos:pos + tb], "little")
        pos += tb
        if width > t_bits:
            raise EncodingCorrupt(f"inline bitpacking width {width} exceeds {t_bits} bits")
        nbytes = bp.BLOCK * width // 8
        if pos + nbytes > len(raw):
            raise EncodingCorrupt("inline bitpacking block runs past the buffer")
        words = np.frombuffer(raw, dtype=f"<u{tb}" if tb > 1 else np.uint8, count=nbytes // tb, offset=pos)
        out.append(bp.unpack_blocks(words, t_bits, width, 1))
        pos += nbytes
        remaining -= bp.BLOCK
    if not out:
        return np.zeros(0, dtype=_UINT[t_bits])
    return np.concatenate(out)[:n] if len(out) > 1 else out[0][:n]


def _unpack_out_of_line(words: np.ndarray, t_bits: int, width: int, n: int) -> np.ndarray:
    wpb = bp.words_per_block(t_bits, width)
    whole, tail = divmod(n, bp.BLOCK)
    parts = []
    if whole:
        if len(words) < whole * wpb:
            raise EncodingCorrupt("out-of-line bitpacked buffer is too short")
        parts.append(bp.unpack_blocks(words[: whole * wpb], t_bits, width, whole))
    if tail:
        rest = words[whole * wpb:]
        if len(rest) == tail:
            parts.append(rest.astype(_UINT[t_bits]))
        elif len(rest) >= wpb:
            parts.append(bp.unpack_blocks(rest[:wpb], t_bits, width, 1)[:tail])
        else:
            raise EncodingCorrupt("out-of-line bitpacked tail has an unexpected length")
    if not parts:
        return np.zeros(0, dtype=_UINT[t_bits])
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _uint_vals(values: np.ndarray, bits: int) -> Vals:
    return Vals.fixed(np.ascontiguousarray(values.astype(f"<u{bits // 8}")).view(np.uint8), bits // 8, len(values))


def _variable_mini(v: pb.Variable, buf: Buffer, n: int) -> Vals:
    ob = v.offsets
    if ob.WhichOneof("compression") != "flat":
        raise EncodingUnsupported(f"variable offsets encoded with {describe(ob)}")
    bits = ob.flat.bits_per_value
    if bits not in (32, 64):
        raise EncodingUnsupported(f"variable offsets of {bits} bits")
    raw = bytes(buf)
    ow = bits // 8
    if len(raw) < (n + 1) * ow:
        raise EncodingCorrupt(f"variable chunk of {len(raw)} bytes cannot hold {n + 1} offsets")
    offs = np.frombuffer(raw, dtype=f"<u{ow}", count=n + 1).astype(np.int64)
    data = np.frombuffer(raw, dtype=np.uint8)
    if v.HasField("values"):
        head = offs[0]
        body = general_decompress(v.values, raw[head:])
        data = np.frombuffer(body, dtype=np.uint8)
        offs = offs - head
    if n and (offs[0] < 0 or offs[-1] > len(data) or np.any(offs[1:] < offs[:-1])):
        raise EncodingCorrupt("variable offsets are out of order or past the chunk")
    return Vals("var", n, data[offs[0]:offs[-1]], offs - offs[0])


def _variable_block(buf: Buffer, n: int) -> Vals:
    raw = bytes(buf)
    if len(raw) < 8:
        raise EncodingCorrupt("variable block is shorter than its header")
    if raw[1] or raw[2] or raw[3]:
        bits = raw[0]  # older header: u8 bits, then u32/u64 count, then bytes_start
        if bits == 32:
            start, head = int.from_bytes(raw[5:9], "little"), 9
        else:
            start, head = int.from_bytes(raw[9:17], "little"), 17
    else:
        bits = int.from_bytes(raw[:4], "little")
        if bits == 32:
            start, head = int.from_bytes(raw[4:8], "little"), 8
        elif bits == 64:
            start, head = int.from_bytes(raw[8:16], "little"), 16
        else:
            raise EncodingCorrupt(f"variable block with {bits}-bit offsets")
    ow = bits // 8
    offs = np.frombuffer(raw, dtype=f"<u{ow}", count=(start - head) // ow, offset=head).astype(np.int64)
    if len(offs) < n + 1:
        raise EncodingCorrupt(f"variable block holds {len(offs)} offsets, need {n + 1}")
    offs = offs[: n + 1]
    data = np.frombuffer(raw, dtype=np.uint8, offset=start)
    rel = offs - offs[0]
    if rel[-1] > len(data):
        raise EncodingCorrupt("variable block offsets run past the data")
    return Vals("var", n, data[: rel[-1]], rel)


def _fixed_width_bits(enc: pb.CompressiveEncoding) -> int:
    which = enc.WhichOneof("compression")
    if which == "flat":
        return enc.flat.bits_per_value
    if which in ("inline_bitpacking", "out_of_line_bitpacking"):
        return getattr(enc, which).uncompressed_bits_per_value
    if which in ("byte_stream_split", "general"):
        return _fixed_width_bits(getattr(enc, which).values)
    if which == "rle":
        return _fixed_width_bits(enc.rle.values)
    raise EncodingUnsupported(f"cannot tell the value width of {describe(enc)}")


def _rle(r: pb.Rle, buffers: Sequence, n: int, ctx: str) -> Vals:
    if len(buffers) < 2:
        raise EncodingCorrupt("RLE needs a values and a run-lengths buffer")
    lens_enc = r.run_lengths
    lbits = _fixed_width_bits(lens_enc)
    vbits = _fixed_width_bits(r.values)
    # the number of runs is what the buffers hold
    nruns = len(buffers[1]) * 8 // lbits if lens_enc.WhichOneof("compression") == "flat" else None
    if nruns is None:
        raise EncodingUnsupported(f"RLE run lengths encoded with {describe(lens_enc)}")
    lengths = decode_block(lens_enc, buffers[1], nruns).as_uint(lbits).astype(np.int64)
    values = decode_block(r.values, buffers[0], nruns)
    if values.n < nruns:
        raise EncodingCorrupt("RLE has fewer run values than run lengths")
    total = int(lengths.sum())
    if total < n:
        raise EncodingCorrupt(f"RLE runs cover {total} values, expected {n}")
    idx = np.repeat(np.arange(nruns), lengths)[:n]
    del vbits
    return values.take(idx)


def _bss(b: pb.ByteStreamSplit, buf: Buffer, n: int) -> Vals:
    bits = _fixed_width_bits(b.values)
    w = bits // 8
    inner = b.values
    raw = bytes(buf)
    if inner.WhichOneof("compression") == "general":
        raw = general_decompress(inner.general.compression, raw)
    arr = np.frombuffer(raw, dtype=np.uint8)
    if len(arr) < n * w:
        raise EncodingCorrupt(f"byte-stream-split buffer of {len(arr)} bytes cannot hold {n} values")
    return Vals.fixed(np.ascontiguousarray(arr[: n * w].reshape(w, n).T), w, n)


def _fsl_mini(f: pb.FixedSizeList, buffers: Sequence, n: int) -> Vals:
    layers = []
    cur = f
    while True:
        layers.append((cur.items_per_value, cur.has_validity))
        inner = cur.values
        if inner.WhichOneof("compression") == "fixed_size_list":
            cur = inner.fixed_size_list
            continue
        break
    cum = 1
    validity = None
    bufs = list(buffers)
    nvalid = sum(1 for _, hv in layers if hv)
    if len(bufs) < nvalid + 1:
        raise EncodingCorrupt("fixed-size-list chunk is missing a validity buffer")
    vi = 0
    for dim, hv in layers:
        cum *= dim
        if hv:
            bits = np.unpackbits(np.frombuffer(bytes(bufs[vi]), np.uint8), count=n * cum, bitorder="little").astype(bool)
            vi += 1
            if validity is None:
                validity = (bits, cum)
            else:  # nested nullable layers: combine at the innermost granularity
                pv, pc_ = validity
                validity = (np.repeat(pv, cum // pc_) & bits if cum >= pc_ else bits, cum)
    items = decode_miniblock(inner, bufs[nvalid:], n * cum)
    out = group_items(items, n, cum)
    if validity is not None:
        bits_, c = validity
        out.item_validity = np.repeat(bits_, cum // c) if c != cum else bits_
    return out


def group_items(items: Vals, n: int, cum: int) -> Vals:
    """``n`` fixed-size-list values: ``items`` grouped ``cum`` per value."""
    if items.kind == "bool":
        # FSL<bool>: keep the bits, one row per value
        return Vals("bool", n * cum, items.data, None, None, cum) if cum > 1 else items
    if items.kind != "fixed":
        raise EncodingUnsupported("fixed-size lists of variable-width values")
    w = items.width
    out = Vals.fixed(items.data.reshape(-1), w * cum, n)
    out.items_per_value = cum
    return out


def decode_miniblock(enc: pb.CompressiveEncoding, buffers: Sequence, n: int) -> Vals:
    """Decode the value buffers of one mini-block chunk holding ``n`` values."""
    which = enc.WhichOneof("compression")
    if which == "flat":
        return _flat(enc.flat, buffers[0], n)
    if which == "variable":
        return _variable_mini(enc.variable, buffers[0], n)
    if which == "inline_bitpacking":
        bits = enc.inline_bitpacking.uncompressed_bits_per_value
        if bits not in _UINT:
            raise EncodingUnsupported(f"inline bitpacking of {bits}-bit values")
        raw = buffers[0]
        if enc.inline_bitpacking.HasField("values"):
            raw = general_decompress(enc.inline_bitpacking.values, raw)
        return _uint_vals(_unpack_inline(raw, bits, n), bits)
    if which == "out_of_line_bitpacking":
        return decode_block(enc, buffers[0], n)
    if which == "fsst":
        inner = decode_miniblock(enc.fsst.values, buffers, n)
        return fsst_apply(enc.fsst, inner)
    if which == "rle":
        return _rle(enc.rle, buffers, n, "miniblock")
    if which == "byte_stream_split":
        return _bss(enc.byte_stream_split, buffers[0], n)
    if which == "general":
        first = general_decompress(enc.general.compression, buffers[0])
        return decode_miniblock(enc.general.values, [first, *buffers[1:]], n)
    if which == "fixed_size_list":
        return _fsl_mini(enc.fixed_size_list, buffers, n)
    if which == "packed_struct":
        return decode_miniblock(enc.packed_struct.values, buffers, n)
    if which == "constant":
        return _constant(enc.constant, n)
    raise EncodingUnsupported(describe(enc))


def _constant(c: pb.Constant, n: int) -> Vals:
    v = np.frombuffer(bytes(c.value), dtype=np.uint8)
    if len(v) == 0:
        return Vals.fixed(np.zeros(0, np.uint8), 0, n) if n == 0 else Vals("fixed", n, np.zeros((n, 0), np.uint8))
    return Vals("fixed", n, np.broadcast_to(v, (n, len(v))).copy())


def fsst_apply(f: pb.Fsst, inner: Vals) -> Vals:
    """Values ``inner`` decompressed with the FSST symbol table of ``f``."""
    if inner.kind != "var":
        raise EncodingCorrupt("FSST child did not decode to variable-width values")
    table = FsstTable(bytes(f.symbol_table))
    offs, data = table.decode(inner.data, inner.var_offsets())
    return Vals("var", inner.n, data, offs)


def decode_block(enc: pb.CompressiveEncoding, buf: Buffer, n: int) -> Vals:
    """Decode one opaque buffer holding ``n`` values (levels, dictionaries, run values)."""
    which = enc.WhichOneof("compression")
    if which == "flat":
        return _flat(enc.flat, buf, n)
    if which == "variable":
        return _variable_block(buf, n)
    if which == "inline_bitpacking":
        bits = enc.inline_bitpacking.uncompressed_bits_per_value
        raw = buf
        if enc.inline_bitpacking.HasField("values"):
            raw = general_decompress(enc.inline_bitpacking.values, raw)
        return _uint_vals(_unpack_inline(raw, bits, n), bits)
    if which == "out_of_line_bitpacking":
        o = enc.out_of_line_bitpacking
        bits = o.uncompressed_bits_per_value
        if bits not in _UINT:
            raise EncodingUnsupported(f"out-of-line bitpacking of {bits}-bit values")
        inner = o.values
        raw = bytes(buf)
        iw = inner.WhichOneof("compression")
        if iw == "general":
            raw = general_decompress(inner.general.compression, raw)
            inner = inner.general.values
            iw = inner.WhichOneof("compression")
        if iw != "flat":
            raise EncodingUnsupported(f"out-of-line bitpacking over {describe(inner)}")
        width = inner.flat.bits_per_value
        tb = bits // 8
        words = np.frombuffer(raw, dtype=f"<u{tb}" if tb > 1 else np.uint8, count=len(raw) // tb)
        return _uint_vals(_unpack_out_of_line(words, bits, width, n), bits)
    if which == "general":
        return decode_block(enc.general.values, general_decompress(enc.general.compression, buf), n)
    if which == "rle":
        # block framing: u64 byte size of the run values, the run values, then the run lengths
        raw = bytes(buf)
        if len(raw) < 8:
            raise EncodingCorrupt("RLE block is shorter than its header")
        vsize = int.from_bytes(raw[:8], "little")
        if 8 + vsize > len(raw):
            raise EncodingCorrupt("RLE block values run past the buffer")
        return _rle(enc.rle, [raw[8:8 + vsize], raw[8 + vsize:]], n, "block")
    if which == "constant":
        return _constant(enc.constant, n)
    if which == "fsst":
        return fsst_apply(enc.fsst, decode_block(enc.fsst.values, buf, n))
    if which == "byte_stream_split":
        return _bss(enc.byte_stream_split, buf, n)
    if which == "fixed_size_list":
        return _fsl_mini(enc.fixed_size_list, [buf], n)
    raise EncodingUnsupported(describe(enc))


def decode_levels(enc: pb.CompressiveEncoding, buf: Buffer, n: int) -> np.ndarray:
    """Repetition or definition levels (u16) of one chunk / page."""
    v = decode_block(enc, buf, n)
    if v.n < n:
        raise EncodingCorrupt(f"decoded {v.n} levels, expected {n}")
    if v.kind == "bool":
        return v.data[:n].astype(np.uint16)
    w = v.width
    arr = np.ascontiguousarray(v.data[:n]).reshape(-1).view(f"<u{w}") if w in (1, 2, 4, 8) else None
    if arr is None:
        raise EncodingCorrupt(f"levels of {w} bytes")
    return arr.astype(np.uint16)

