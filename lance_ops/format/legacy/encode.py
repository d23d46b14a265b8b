"""Pure Arrow -> bytes encoding for legacy (v0.1) Lance data files; the inverse of ``legacy.decode``.

No I/O: the legacy file writer asks for the bytes of one page and writes them. The rules (as
pylance 14.0.2's legacy writer lays pages out; checked byte for byte in
``tests/file/test_legacy_writer.py``):

* **plain** -- fixed-stride values back to back, exactly the Arrow value buffer of the (sliced)
  array: whatever a null slot holds is written. Booleans are bit-packed LSB first with nulls
  written as ``false`` (the last byte's spare bits are zero); ``fixed_size_list`` writes its
  flattened items (recursively); ``fixed_size_binary`` its bytes.
* **var-binary** -- the value bytes (of the whole slice, including bytes under null slots), then
  ``rows + 1`` int64 *absolute file positions*; the page position is that of the positions array.
* **list offsets** -- ``rows + 1`` int32 (``list``) / int64 (``large_list``) offsets rebased to
  start at 0; the items are the child slice they cover.
* **dictionary** -- the keys, plain.

The page statistics (null count, min, max per batch) follow upstream's legacy collector; see
:func:`page_statistics`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.errors import UnsupportedTypeError
from lance_ops.format.legacy.decode import is_binary_like, is_list_like

__all__ = [
    "plain_bytes",
    "binary_page",
    "list_page",
    "supports_statistics",
    "page_statistics",
    "STATS_PREFIX_BYTES",
]

#: max bytes of a string/binary value kept in the statistics
STATS_PREFIX_BYTES = 64


def _leaf_width(dt: pa.DataType) -> int:
    """Bytes per value of a non-boolean fixed-width leaf type."""
    if pa.types.is_fixed_size_binary(dt):
        return dt.byte_width
    if (pa.types.is_integer(dt) or pa.types.is_floating(dt) or pa.types.is_temporal(dt)
            or pa.types.is_decimal(dt)):
        return dt.bit_width // 8
    raise UnsupportedTypeError(f"type {dt} has no plain (fixed-stride) legacy encoding")


def plain_bytes(arr: pa.Array) -> bytes:
    """The plain page of a fixed-stride array (primitive, boolean, fixed-size binary/list)."""
    dt = arr.type
    if pa.types.is_fixed_size_list(dt):
        size = dt.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        return plain_bytes(values)
    if pa.types.is_boolean(dt):
        n = len(arr)
        if n == 0:
            return b""
        bits = arr.fill_null(False) if arr.null_count else arr
        buf = bits.buffers()[1]
        flat = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")[bits.offset:bits.offset + n]
        return np.packbits(flat, bitorder="little").tobytes()
    width = _leaf_width(dt)
    buf = arr.buffers()[1]
    start = arr.offset * width
    if buf is None:
        return b"\x00" * (len(arr) * width)
    return bytes(memoryview(buf)[start:start + len(arr) * width])


def _offsets(arr: pa.Array, large: bool) -> np.ndarray:
    """The ``len + 1`` raw offsets of a (large) binary/list array, honouring its slice offset."""
    dtype = np.int64 if large else np.int32
    buf = arr.buffers()[1]
    n = len(arr)
    if buf is None:
        return np.zeros(n + 1, dtype=np.int64)
    return np.frombuffer(buf, dtype=dtype, count=n + 1, offset=arr.offset * np.dtype(dtype).itemsize).astype(np.int64)


def binary_page(arr: pa.Array, position: int) -> tuple[bytes, bytes]:
    """``(value bytes, positions bytes)`` of a var-binary page whose bytes start at ``position``."""
    dt = arr.type
    large = pa.types.is_large_string(dt) or pa.types.is_large_binary(dt)
    offs = _offsets(arr, large)
    lo, hi = int(offs[0]), int(offs[-1])
    data_buf = arr.buffers()[2]
    data = bytes(memoryview(data_buf)[lo:hi]) if data_buf is not None and hi > lo else b""
    positions = (offs - lo + position).astype("<i8")
    return data, positions.tobytes()


def list_page(arr: pa.Array) -> tuple[bytes, pa.Array]:
    """``(offsets page bytes, items)`` of a (large) list array: offsets rebased to 0."""
    large = pa.types.is_large_list(arr.type)
    offs = _offsets(arr, large)
    lo, hi = int(offs[0]), int(offs[-1])
    rebased = (offs - lo).astype("<i8" if large else "<i4")
    return rebased.tobytes(), arr.values.slice(lo, hi - lo)


# --------------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------------
def supports_statistics(dt: pa.DataType) -> bool:
    """Types upstream's legacy writer records page statistics for."""
    return (pa.types.is_boolean(dt) or pa.types.is_integer(dt) or pa.types.is_float32(dt)
            or pa.types.is_float64(dt) or pa.types.is_date32(dt) or pa.types.is_date64(dt)
            or is_binary_like(dt) or pa.types.is_decimal128(dt))


def _one(value: object, dt: pa.DataType) -> pa.Array:
    return pa.array([value], type=dt)


def _raw_one(raw: bytes, dt: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(dt, 1, [None, pa.py_buffer(raw)], null_count=0)


def _int_limits(dt: pa.DataType) -> tuple[int, int]:
    storage = {pa.date32(): pa.int32(), pa.date64(): pa.int64()}.get(dt, dt)
    info = np.iinfo(storage.to_pandas_dtype())
    return int(info.min), int(info.max)


def _truncate_utf8(data: bytes, length: int) -> bytes:
    """The longest prefix of valid UTF-8 ``data`` ending on a character boundary, <= ``length`` bytes."""
    cut = length
    while cut > 0 and (data[cut] & 0xC0) == 0x80:  # data[cut] is a continuation byte
        cut -= 1
    return data[:cut]


def _increment_utf8(data: bytes) -> Optional[bytes]:
    """Increment bytes right to left until the result is valid UTF-8 (upstream's rule)."""
    buf = bytearray(data)
    for idx in range(len(buf) - 1, -1, -1):
        original = buf[idx]
        byte = original + 1
        while byte <= 0xFF:
            buf[idx] = byte
            try:
                bytes(buf).decode("utf-8")
                return bytes(buf)
            except UnicodeDecodeError:
                byte += 1
        buf[idx] = original
    return None


def _increment(data: bytes) -> Optional[bytes]:
    """Increment bytes right to left with carry; None when every byte was 0xFF."""
    buf = bytearray(data)
    for idx in range(len(buf) - 1, -1, -1):
        if buf[idx] == 0xFF:
            buf[idx] = 0
            continue
        buf[idx] += 1
        return bytes(buf)
    return None


def page_statistics(arr: pa.Array) -> tuple[int, pa.Array, pa.Array]:
    """``(null_count, min, max)`` of one batch of a field, as upstream's legacy writer records them.

    ``min``/``max`` are one-element arrays of the field's type (possibly null for strings).
    Integers, dates and decimals with no value record the type's full range; floats ignore NaN and
    record ``(-inf, inf)`` when nothing is left, a zero min is ``-0.0`` and a zero max ``+0.0``;
    booleans record ``(all true, any true or none false)``; strings/binaries compare bytewise
    prefixes of at most 64 bytes (UTF-8 safe for strings) and, when any value was cut, the max
    is incremented (null if impossible).
    """
    dt = arr.type
    nulls = int(arr.null_count)
    n = len(arr)
    has_values = nulls < n
    if pa.types.is_boolean(dt):
        valid = arr.drop_null() if nulls else arr
        trues = int(pc.sum(valid.cast(pa.int64())).as_py() or 0)
        true_present = trues > 0
        false_present = trues < len(valid)
        return nulls, _one(true_present and not false_present, dt), _one(true_present or not false_present, dt)
    if pa.types.is_floating(dt):
        np_type = np.float32 if pa.types.is_float32(dt) else np.float64
        vals = arr.drop_null().to_numpy(zero_copy_only=False).astype(np_type) if has_values else np.zeros(0, np_type)
        vals = vals[~np.isnan(vals)]
        if vals.size == 0:
            lo, hi = -np.inf, np.inf
        else:
            lo, hi = vals.min(), vals.max()
        if lo == 0:
            lo = -0.0
        if hi == 0:
            hi = 0.0
        return nulls, _one(float(lo), dt), _one(float(hi), dt)
    if pa.types.is_integer(dt) or pa.types.is_date32(dt) or pa.types.is_date64(dt):
        if not has_values:
            lo, hi = _int_limits(dt)
            storage = {pa.date32(): pa.int32(), pa.date64(): pa.int64()}.get(dt, dt)
            return nulls, _one(lo, storage).cast(dt), _one(hi, storage).cast(dt)
        mm = pc.min_max(arr)
        return nulls, pa.array([mm["min"]], dt), pa.array([mm["max"]], dt)
    if pa.types.is_decimal128(dt):
        if not has_values:
            lowest = (-(2**127)).to_bytes(16, "little", signed=True)
            highest = (2**127 - 1).to_bytes(16, "little", signed=True)
            return nulls, _raw_one(lowest, dt), _raw_one(highest, dt)
        raw = np.frombuffer(arr.buffers()[1], dtype="<u8", count=2 * (arr.offset + n))[2 * arr.offset:].reshape(n, 2)
        valid = np.asarray(arr.is_valid())
        ints = [int(h.astype(np.int64)) * 2**64 + int(l) for l, h in raw[valid]]
        lo, hi = min(ints), max(ints)
        return (nulls, _raw_one(lo.to_bytes(16, "little", signed=True), dt),
                _raw_one(hi.to_bytes(16, "little", signed=True), dt))
    if is_binary_like(dt):
        string = pa.types.is_string(dt) or pa.types.is_large_string(dt)
        if not has_values:
            return nulls, pa.nulls(1, dt), pa.nulls(1, dt)
        mm = pc.min_max(arr)
        lo = mm["min"].as_py()
        hi = mm["max"].as_py()
        lo_b = lo.encode() if string else lo
        hi_b = hi.encode() if string else hi
        truncated = int(pc.max(pc.binary_length(arr)).as_py()) > STATS_PREFIX_BYTES
        cut = _truncate_utf8 if string else (lambda b, k: b[:k])
        if len(lo_b) > STATS_PREFIX_BYTES:
            lo_b = cut(lo_b, STATS_PREFIX_BYTES)
        if len(hi_b) > STATS_PREFIX_BYTES:
            hi_b = cut(hi_b, STATS_PREFIX_BYTES)
        if truncated:
            hi_b = _increment_utf8(hi_b) if string else _increment(hi_b)
        lo_v = lo_b.decode() if string else lo_b
        hi_v = None if hi_b is None else (hi_b.decode() if string else hi_b)
        return nulls, _one(lo_v, dt), _one(hi_v, dt)
    raise UnsupportedTypeError(f"no legacy page statistics for {dt}")


def is_nested(dt: pa.DataType) -> bool:
    """Struct and list types: the legacy writer gives them child fields and no page of their own values."""
    return pa.types.is_struct(dt) or is_list_like(dt)
