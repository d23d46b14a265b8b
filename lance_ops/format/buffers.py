"""Offset-aware access to the raw buffers of (possibly sliced) Arrow arrays.

Every helper here is vectorised (numpy / Arrow C++) and zero-copy where the layout allows it: a
fixed-width value buffer or a byte-aligned bitmap of a sliced array is returned as a slice of the
original Arrow buffer, never copied.

A page buffer is represented as a list of *chunks* (objects supporting the buffer protocol:
``pa.Buffer``, ``memoryview``, ``bytes``, contiguous ``numpy`` arrays) that are written back to back,
so that large Arrow buffers reach the output sink without being concatenated first.
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import pyarrow as pa

Chunk = Union[pa.Buffer, memoryview, bytes, bytearray, np.ndarray]


def chunk_size(chunk: Chunk) -> int:
    """Bytes in ``chunk``, whichever buffer type it is (the writer sums them to place pages)."""
    if isinstance(chunk, np.ndarray):
        return chunk.nbytes
    if isinstance(chunk, pa.Buffer):
        return chunk.size
    if isinstance(chunk, memoryview):
        return chunk.nbytes
    return len(chunk)


def join_chunks(chunks: Sequence[Chunk]) -> bytes:
    """One ``bytes`` object holding all chunks (used for compression and in tests)."""
    return b"".join(
        memoryview(c).cast("B")  # type: ignore[arg-type]  # numpy's stubs give ndarray no __buffer__ before 3.12
        if not isinstance(c, (bytes, bytearray)) else c for c in chunks)


# --- bit-packed buffers ----------------------------------------------------------------------

_TAIL_MASKS = [0xFF, 0x01, 0x03, 0x07, 0x0F, 0x1F, 0x3F, 0x7F]


def bitmap_chunks(buf: pa.Buffer, bit_offset: int, length: int) -> list[Chunk]:
    """The ``length`` bits starting at ``bit_offset`` as a fresh LSB-first bitmap of ceil(n/8) bytes.

    Bits past ``length`` in the last byte are zeroed (a slice would otherwise leak the following
    rows' bits). Byte-aligned slices are zero-copy apart from a possibly rewritten last byte.
    """
    nbytes = (length + 7) // 8
    if nbytes == 0:
        return []
    if bit_offset % 8 == 0:
        start = bit_offset // 8
        view = memoryview(buf).cast("B")[start:start + nbytes]
        tail = length % 8
        if tail:
            last = view[nbytes - 1]
            masked = last & _TAIL_MASKS[tail]
            if masked != last:
                return [view[:nbytes - 1], bytes([masked])]
        return [view]
    first = bit_offset // 8
    last_byte = (bit_offset + length + 7) // 8
    raw = np.frombuffer(buf, dtype=np.uint8, count=last_byte - first, offset=first)
    bits = np.unpackbits(raw, bitorder="little")
    shift = bit_offset % 8
    return [np.packbits(bits[shift:shift + length], bitorder="little")]


def validity_chunks(arr: pa.Array) -> list[Chunk]:
    """LSB-first validity bitmap (1 = valid) of ``arr``'s logical range."""
    buf = arr.buffers()[0]
    n = len(arr)
    if buf is None:
        return [np.full((n + 7) // 8, 0xFF, dtype=np.uint8)] if n else []
    return bitmap_chunks(buf, arr.offset, n)


def valid_mask(arr: pa.Array) -> np.ndarray:
    """Validity of ``arr`` as a numpy bool array (True = valid)."""
    n = len(arr)
    buf = arr.buffers()[0]
    if buf is None or arr.null_count == 0:
        return np.ones(n, dtype=bool)
    first = arr.offset // 8
    last_byte = (arr.offset + n + 7) // 8
    raw = np.frombuffer(buf, dtype=np.uint8, count=last_byte - first, offset=first)
    shift = arr.offset % 8
    return np.unpackbits(raw, bitorder="little")[shift:shift + n].astype(bool)


# --- fixed-width values -----------------------------------------------------------------------


def fixed_width_bits(dt: pa.DataType) -> int | None:
    """Bits per value of a fixed-width (non-nested) type, or None."""
    if pa.types.is_boolean(dt):
        return 1
    if pa.types.is_fixed_size_binary(dt):  # includes decimals in pyarrow
        return dt.byte_width * 8
    if (pa.types.is_integer(dt) or pa.types.is_floating(dt) or pa.types.is_temporal(dt)
            or pa.types.is_decimal(dt)):
        try:
            return dt.bit_width
        except ValueError:
            return None
    return None


def value_chunks(arr: pa.Array, bits: int) -> list[Chunk]:
    """The dense value buffer of ``arr``'s logical range (bit-packed for booleans)."""
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0:
        return []
    if bits == 1:
        return bitmap_chunks(buf, arr.offset, n)
    width = bits // 8
    return [buf.slice(arr.offset * width, n * width)]


# --- variable-width and list offsets ----------------------------------------------------------


def offsets_array(arr: pa.Array) -> np.ndarray:
    """The ``len+1`` offsets of a (large) binary/string/list array's logical range, as numpy."""
    dt = arr.type
    large = (pa.types.is_large_binary(dt) or pa.types.is_large_string(dt) or pa.types.is_large_list(dt))
    dtype = np.int64 if large else np.int32
    n = len(arr)
    buf = arr.buffers()[1]
    if buf is None:  # a zero-length array built without buffers
        return np.zeros(n + 1, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=n + 1, offset=arr.offset * dtype().itemsize)


def end_offsets_u64(offsets: np.ndarray, base: int, valid: np.ndarray | None, null_adjustment: int) -> np.ndarray:
    """End offsets without the leading start, rebased to ``base``; nulls get ``+ null_adjustment``."""
    out = offsets[1:].astype(np.int64)
    delta = base - int(offsets[0])
    if delta:
        out += delta
    out = out.view(np.uint64)
    if valid is not None:
        out[~valid] += np.uint64(null_adjustment)
    return out
