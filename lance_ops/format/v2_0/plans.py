"""Partial reads of Lance 2.0 pages: which encodings can be read by byte range (plans), and the
assembly of the ranges read into Arrow arrays.

The plain decoders of :mod:`lance_ops.format.v2_0.decode` decode whole pages; the reader uses a plan
when only a few rows of a large page are wanted, to fetch just their bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops.format.v2_0.decode import (
    DecodeContext, describe, encoding_kind, gather_bits, make_fixed, strip_no_nulls, var_binary, with_validity,
)


# --------------------------------------------------------------------------------------------
# partial layouts (reading some rows of a page with ranged reads)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FixedPlan:
    """Row ``i`` of the page is ``bits_per_row`` bits at ``i * bits_per_row`` of ``values``.

    ``validity`` (optional) is a 1-bit-per-row bitmap buffer; ``item_bits``/``dims`` describe the
    fixed-size-list nesting (``dims`` empty for plain values). ``all_null`` pages need no I/O.
    """

    values: Optional[pb.Buffer]
    validity: Optional[pb.Buffer]
    bits_per_row: int
    item_bits: int
    dims: tuple[int, ...]
    all_null: bool = False


@dataclass(frozen=True)
class BinaryPlan:
    """Variable-width rows: u64 end offsets in ``offsets``, data in ``data``."""

    offsets: pb.Buffer
    data: pb.Buffer
    null_adjustment: int


def _plain_flat(enc: pb.ArrayEncoding) -> Optional[pb.Flat]:
    if encoding_kind(enc) != "flat":
        return None
    flat = enc.flat
    if not flat.HasField("buffer"):
        return None
    if flat.HasField("compression") and flat.compression.scheme.lower() not in ("", "none"):
        return None
    return flat



def fixed_plan(enc: pb.ArrayEncoding) -> Optional[FixedPlan]:
    """The fixed-width layout of a page, or None if rows cannot be located without decoding."""
    validity = None
    if encoding_kind(enc) == "nullable":
        case = enc.nullable.WhichOneof("nullability")
        if case == "all_nulls":
            return FixedPlan(None, None, 0, 0, (), all_null=True)
        if case == "no_nulls":
            values = enc.nullable.no_nulls.values
        elif case == "some_nulls":
            vflat = _plain_flat(enc.nullable.some_nulls.validity)
            if vflat is None or vflat.bits_per_value != 1:
                return None
            validity = vflat.buffer
            values = enc.nullable.some_nulls.values
        else:
            return None
    else:
        values = enc
    dims: list[int] = []
    values = strip_no_nulls(values)
    while encoding_kind(values) == "fixed_size_list":
        dims.append(int(values.fixed_size_list.dimension))
        values = strip_no_nulls(values.fixed_size_list.items)
    flat = _plain_flat(values)
    if flat is None:
        return None
    bits = int(flat.bits_per_value)
    if bits == 0:
        return None
    per_row = bits
    for d in dims:
        per_row *= d
    if dims and (bits % 8 or per_row == 0):
        return None
    if per_row % 8 and per_row != 1:
        return None
    return FixedPlan(flat.buffer, validity, per_row, bits, tuple(dims))


def binary_plan(enc: pb.ArrayEncoding) -> Optional[BinaryPlan]:
    """The offsets+bytes layout of a plain Binary page, or None."""
    if encoding_kind(enc) != "binary":
        return None
    b = enc.binary
    off = _plain_flat(strip_no_nulls(b.indices))
    data = _plain_flat(strip_no_nulls(b.bytes))
    if off is None or data is None or off.bits_per_value != 64 or data.bits_per_value != 8:
        return None
    return BinaryPlan(off.buffer, data.buffer, int(b.null_adjustment))


def assemble_fixed(plan: FixedPlan, dtype: pa.DataType, starts: np.ndarray, ends: np.ndarray,
                   value_chunks: Sequence[bytes | memoryview], validity_chunks: Optional[Sequence[bytes | memoryview]],
                   ctx: DecodeContext) -> pa.Array:
    """Build the array of rows ``[starts[k], ends[k])`` from the byte chunks a FixedPlan fetched.

    ``value_chunks[k]`` holds the bytes of range ``k`` (whole bytes around the bits when
    ``bits_per_row == 1``); ``validity_chunks[k]`` the validity bytes covering the range.
    """
    lengths = ends - starts
    n = int(lengths.sum())
    if plan.bits_per_row == 1:
        joined = np.frombuffer(b"".join(value_chunks), dtype=np.uint8)
        chunk_starts = np.cumsum([0] + [len(c) for c in value_chunks[:-1]])
        data = gather_bits(joined, chunk_starts, starts % 8, lengths)
    else:
        data = pa.py_buffer(b"".join(value_chunks))
    if plan.dims:
        arr = _nest_fsl(dtype, n, data, plan, ctx)
    else:
        arr = make_fixed(dtype, n, data, plan.bits_per_row, ctx)
    if validity_chunks is not None:
        joined = np.frombuffer(b"".join(validity_chunks), dtype=np.uint8)
        chunk_starts = np.cumsum([0] + [len(c) for c in validity_chunks[:-1]])
        arr = with_validity(arr, gather_bits(joined, chunk_starts, starts % 8, lengths))
    return arr


def _nest_fsl(dtype: pa.DataType, n: int, data: pa.Buffer, plan: FixedPlan, ctx: DecodeContext) -> pa.Array:
    types = [dtype]
    for d in plan.dims:
        t = types[-1]
        if not pa.types.is_fixed_size_list(t) or t.list_size != d:
            raise ctx.corrupt(f"fixed_size_list dimension {d} does not match Arrow type {t}")
        types.append(t.value_type)
    total = n
    for d in plan.dims:
        total *= d
    arr = make_fixed(types[-1], total, data, plan.item_bits, ctx)
    for t in reversed(types[:-1]):
        total //= t.list_size
        arr = pa.Array.from_buffers(t, total, [None], children=[arr])
    return arr


def resolve_range_ends(starts: np.ndarray, ends: np.ndarray, has_prev: np.ndarray,
                       offsets: np.ndarray, adjustment: int, limit: int, ctx: DecodeContext,
                       what: str = "binary",
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Resolve stored end offsets (binary bytes or list items) for non-empty row ranges.

    ``offsets`` are the stored u64 ends fetched for the ranges ``[starts[k], ends[k])`` of one
    page, each range preceded by the end of the row before it when ``has_prev[k]``. Returns per
    range the span of data it covers (``span_start``, ``span_end``) and per row the real end
    offset and the null mask (None if no row is null).
    """
    row_counts = ends - starts
    counts = row_counts + has_prev.astype(np.int64)
    real, nulls = _resolve_unordered(offsets, adjustment, limit, ctx, what)
    if len(real) != int(counts.sum()):
        raise ctx.corrupt(f"{what} offsets buffer is shorter than its row count")
    first = np.cumsum(counts) - counts
    span_start = np.where(has_prev, real[first], 0)
    is_prev = np.zeros(len(real), dtype=bool)
    is_prev[first[has_prev]] = True
    row_real = real[~is_prev]
    row_nulls = None if nulls is None else nulls[~is_prev]
    span_end = real[np.cumsum(counts) - 1]
    prev_row = np.empty_like(row_real)
    prev_row[1:] = row_real[:-1]
    prev_row[np.cumsum(row_counts) - row_counts] = span_start
    if np.any(row_real < prev_row):
        raise ctx.corrupt(f"{what} offsets are not non-decreasing")
    if row_nulls is not None and not row_nulls.any():
        row_nulls = None
    return span_start, span_end, row_real, row_nulls


def _resolve_unordered(ends: np.ndarray, adjustment: int, limit: int, ctx: DecodeContext,
                       what: str) -> tuple[np.ndarray, Optional[np.ndarray]]:
    ends = ends.astype(np.uint64, copy=False)
    nulls = None
    real = ends
    if adjustment:
        nulls = ends >= np.uint64(adjustment)
        real = np.where(nulls, ends - np.uint64(adjustment), ends)
    if len(real) and int(real.max()) > limit:
        raise ctx.corrupt(f"{what} offset {int(real.max())} is past the end of its data ({limit})")
    return real.astype(np.int64), nulls


def finish_binary(dtype: pa.DataType, row_counts: np.ndarray, span_start: np.ndarray,
                  span_end: np.ndarray, row_real: np.ndarray, row_nulls: Optional[np.ndarray],
                  data_chunks: Sequence[bytes | memoryview], ctx: DecodeContext) -> pa.Array:
    """Second step of a partial Binary read: rebase the ends onto the fetched byte spans."""
    span_len = span_end - span_start
    out_base = np.cumsum(span_len) - span_len
    shift = np.repeat(out_base - span_start, row_counts)
    out_ends = row_real + shift
    data = pa.py_buffer(b"".join(data_chunks))
    return var_binary(dtype, out_ends, row_nulls, data, ctx)
