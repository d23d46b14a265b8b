"""Pure byte -> Arrow decoding for the legacy (v0.1) Lance file encodings.

No I/O happens here: the legacy reader fetches the bytes and these functions turn them into Arrow
arrays. Every function takes the bytes of one or more *spans* (a contiguous run of rows of one
page, one span per batch) and returns a single array covering all spans in order.

Encodings (as upstream's ``lance-io`` writes them, verified against pylance 14.0.2):

* **plain** -- fixed-stride values back to back: ``bit_width/8`` bytes per value; booleans are
  bit-packed LSB-first; ``fixed_size_list`` stores its flattened items (recursively) and
  ``fixed_size_binary`` its bytes. There is no validity: a null slot stores whatever value the
  Arrow array held (booleans: ``false``).
* **var-binary** -- the bytes of all values, followed by an ``int64`` array of ``rows + 1``
  *absolute file positions* (the page position points at this array). When the field is
  nullable, a value whose start equals its end reads as null (so empty strings read as null).
* **list offsets** -- plain ``int32`` (``list``) / ``int64`` (``large_list``) offsets, ``rows + 1`` of
  them, relative to the start of the batch's item page. No validity: null lists read as empty.
* **dictionary** -- plain keys of the index type; the values live elsewhere (see the reader).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from lance_ops.errors import UnsupportedTypeError

__all__ = [
    "PlainLayout",
    "plain_layout",
    "plain_byte_range",
    "decode_plain",
    "decode_positions",
    "decode_binary",
    "decode_offsets",
    "is_binary_like",
    "is_list_like",
]

_BINARY_LIKE = (pa.types.is_string, pa.types.is_binary, pa.types.is_large_string, pa.types.is_large_binary)


def is_binary_like(dt: pa.DataType) -> bool:
    """String and binary types (regular and large): the var-binary encoding."""
    return any(check(dt) for check in _BINARY_LIKE)


def is_list_like(dt: pa.DataType) -> bool:
    """List and large list types: an offsets page plus a child field for the items."""
    return pa.types.is_list(dt) or pa.types.is_large_list(dt)


class PlainLayout:
    """How a plain (fixed-stride) type lies on disk: ``multiplier`` leaf values of ``bits`` bits per row."""

    __slots__ = ("dtype", "leaf", "multiplier", "bits", "wrappers")

    def __init__(self, dtype: pa.DataType) -> None:
        self.dtype = dtype
        wrappers = []
        mult = 1
        leaf = dtype
        while pa.types.is_fixed_size_list(leaf):
            wrappers.append(leaf)
            mult *= leaf.list_size
            leaf = leaf.value_type
        if pa.types.is_boolean(leaf):
            bits = 1
        elif pa.types.is_fixed_size_binary(leaf):
            bits = leaf.byte_width * 8
        elif (pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_temporal(leaf)
              or pa.types.is_decimal(leaf)):
            bits = leaf.bit_width
        else:
            raise UnsupportedTypeError(f"type {dtype} has no plain (fixed-stride) legacy encoding")
        self.leaf = leaf
        self.multiplier = mult
        self.bits = bits
        self.wrappers = wrappers[::-1]  # innermost first

    def __repr__(self) -> str:
        return f"PlainLayout({self.dtype}, leaf={self.leaf}, x{self.multiplier}, {self.bits} bits)"


_LAYOUTS: dict[pa.DataType, PlainLayout] = {}


def plain_layout(dtype: pa.DataType) -> PlainLayout:
    """The (cached) :class:`PlainLayout` of ``dtype``; UnsupportedTypeError if it has none."""
    layout = _LAYOUTS.get(dtype)
    if layout is None:
        layout = _LAYOUTS[dtype] = PlainLayout(dtype)
    return layout


def plain_byte_range(layout: PlainLayout, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets (relative to the page) ``[lo, hi)`` holding rows ``[starts, ends)``."""
    s = np.asarray(starts, dtype=np.int64) * layout.multiplier
    e = np.asarray(ends, dtype=np.int64) * layout.multiplier
    if layout.bits == 1:
        return s // 8, (e + 7) // 8
    width = layout.bits // 8
    return s * width, e * width


def _bits(blobs: Sequence[bytes | memoryview], starts: np.ndarray, counts: np.ndarray) -> pa.Buffer:
    """Concatenate bit runs: blob i holds ``counts[i]`` bits starting at bit ``starts[i] % 8``."""
    parts = []
    for blob, start, count in zip(blobs, starts.tolist(), counts.tolist()):
        bits = np.unpackbits(np.frombuffer(blob, dtype=np.uint8), bitorder="little")
        off = start % 8
        if bits.size < off + count:
            raise ValueError(f"bit-packed page holds {bits.size - off} values, expected {count}")
        parts.append(bits[off:off + count])
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
    return pa.py_buffer(np.packbits(flat, bitorder="little").tobytes())


def decode_plain(layout: PlainLayout, blobs: Sequence[bytes | memoryview], starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """One array of ``layout.dtype`` from the plain bytes of several row spans.

    ``blobs[i]`` must be exactly the byte range :func:`plain_byte_range` gives for span i.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    rows = int((ends - starts).sum())
    n_leaf = rows * layout.multiplier
    if layout.bits == 1:
        buf = _bits(blobs, starts * layout.multiplier, (ends - starts) * layout.multiplier)
    else:
        width = layout.bits // 8
        data = b"".join(blobs)
        if len(data) != n_leaf * width:
            raise ValueError(f"plain page holds {len(data)} bytes, expected {n_leaf * width}")
        buf = pa.py_buffer(data)
    arr = pa.Array.from_buffers(layout.leaf, n_leaf, [None, buf], null_count=0)
    for wrapper in layout.wrappers:
        arr = pa.FixedSizeListArray.from_arrays(arr, type=wrapper)
    return arr


def decode_positions(blob: bytes | memoryview, count: int, width: int = 8) -> np.ndarray:
    """``count`` little-endian signed integers of ``width`` bytes as int64."""
    dtype = "<i8" if width == 8 else "<i4"
    if len(blob) != count * width:
        raise ValueError(f"position array holds {len(blob)} bytes, expected {count * width}")
    return np.frombuffer(blob, dtype=dtype).astype(np.int64)


def decode_binary(dtype: pa.DataType, nullable: bool, positions: Sequence[np.ndarray],
                  blobs: Sequence[bytes | memoryview]) -> pa.Array:
    """A binary-like array from per-span absolute position arrays and the bytes they delimit."""
    if positions:
        lengths = np.concatenate([np.diff(p) for p in positions])
    else:
        lengths = np.zeros(0, dtype=np.int64)
    if lengths.size and lengths.min() < 0:
        raise ValueError("var-binary positions decrease")
    n = int(lengths.size)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(blobs)
    if len(data) != int(offsets[-1]):
        raise ValueError(f"var-binary page holds {len(data)} bytes, positions say {int(offsets[-1])}")
    large = pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype)
    if not large:
        if offsets[-1] > np.iinfo(np.int32).max:
            raise UnsupportedTypeError(f"{dtype} value bytes exceed 2 GiB; read it as the large variant")
        offsets = offsets.astype(np.int32)
    validity = None
    null_count = 0
    if nullable:
        valid = lengths != 0
        null_count = int(n - np.count_nonzero(valid))
        if null_count:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(dtype, n, [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)],
                                 null_count=null_count)


def decode_offsets(dtype: pa.DataType, offsets: Sequence[np.ndarray], values: pa.Array) -> pa.Array:
    """A (large) list array from per-span offsets (relative to each span's item run) and the items.

    ``offsets[i]`` has one more entry than span i has rows; the items of span i are the
    ``offsets[i][-1] - offsets[i][0]`` values following those of span i-1 in ``values``.
    """
    lengths = np.concatenate([np.diff(o) for o in offsets]) if offsets else np.zeros(0, dtype=np.int64)
    if lengths.size and lengths.min() < 0:
        raise ValueError("list offsets decrease")
    out = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    if int(out[-1]) != len(values):
        raise ValueError(f"list offsets cover {int(out[-1])} items, item page gave {len(values)}")
    if pa.types.is_large_list(dtype):
        return pa.LargeListArray.from_arrays(pa.array(out, pa.int64()), values, type=dtype)
    return pa.ListArray.from_arrays(pa.array(out.astype(np.int32), pa.int32()), values, type=dtype)
