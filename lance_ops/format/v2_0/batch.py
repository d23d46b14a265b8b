"""Many small Lance 2.0 files of one schema, read back to back as one table (ADR 0037).

Compaction reads thousands of small files written by one writer. Decoding each file's pages on
their own costs a few Python calls per page; here the pages of one column of every file are
walked in order, and runs of consecutive pages with one plain layout (the same parsed encoding:
fixed-width values with or without a validity bitmap, fixed-size lists of them, or plain
offsets+bytes binary) are assembled as one Arrow array from their buffers. Other pages (all-null,
compressed, dictionary, ...) are decoded one by one exactly as a single-file read does. Buffers are
checked against the bytes each page needs, so a short buffer is still a CorruptFileError.

On any failure the files are read again one by one, so that the error names the damaged file.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from lance_ops.errors import LanceOpsError
from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0 import plans

_ZERO = np.zeros(1, dtype=np.int64)


def read_whole_files(readers: Sequence[Any], columns: Sequence[str]) -> pa.Table:
    """Every row of ``columns`` of the 2.0 ``readers`` (files of one schema), in order, as one table."""
    names = list(columns)
    if not readers:
        raise ValueError("read_all_of needs at least one reader")
    first = readers[0].plain_leaves(names)
    same = first is not None and all(_same_leaves(r.plain_leaves(names), first) for r in readers[1:])
    if first is None or not same:  # not plain leaves everywhere, or files of other schemas
        return _one_by_one(readers, names)
    nodes, schema = first
    try:
        per_file = [r.whole_leaf_pages(r.plain_leaves(names)[0]) for r in readers]
        arrays = []
        for i, node in enumerate(nodes):
            pages = [page for file_pages in per_file for page in file_pages[i]]
            arrays.append(pa.chunked_array(_assemble(pages, node.dtype) or [pa.array([], type=node.dtype)],
                                           type=node.dtype))
        table = pa.Table.from_arrays(arrays, schema=schema)
        table.validate()
    except (LanceOpsError, ValueError, pa.ArrowException):
        _one_by_one(readers, names)  # names the file at fault
        raise
    return table


def _same_leaves(got: Optional[tuple[list, pa.Schema]], want: tuple[list, pa.Schema]) -> bool:
    return got is not None and got[1].equals(want[1]) and [n.dtype for n in got[0]] == [n.dtype for n in want[0]]


def _one_by_one(readers: Sequence[Any], names: list[str]) -> pa.Table:
    return pa.concat_tables([r.read_all(columns=names) for r in readers])


def _kind(info: Any) -> str:
    if info.fixed is not None and not info.fixed.all_null:
        return "fixed"
    if info.binary is not None:
        return "binary"
    return ""


def _joins(other: Any, info: Any, kind: str) -> bool:
    """Whether a page of encoding ``other`` can join a run of pages of encoding ``info``."""
    if other is info:
        return True
    if kind == "fixed":
        return other.fixed is not None and other.fixed == info.fixed
    # binary pages differ in their null adjustment (it depends on the page's bytes): applied per page
    a, b = other.binary, info.binary
    return a is not None and a.offsets == b.offsets and a.data == b.data


def _assemble(pages: list[tuple[Any, Any, dec.DecodeContext, Any]], dtype: pa.DataType) -> list[pa.Array]:
    """The pages of one column (across files) as arrays: runs of one plain layout joined."""
    out: list[pa.Array] = []
    i = 0
    while i < len(pages):
        page, info, ctx, bufs = pages[i]
        kind = _kind(info)
        j = i + 1
        if kind:
            while j < len(pages) and _joins(pages[j][1], info, kind):
                j += 1
        if not kind:
            out.append(pa.nulls(page.length, dtype) if bufs is None else
                       dec.decode_rows(info.encoding, page.length, dtype, dec.PageBuffers(bufs), ctx,
                                       _ZERO, np.array([page.length], dtype=np.int64)))
        elif kind == "fixed":
            out.append(_fixed_run(pages[i:j], info.fixed, dtype))
        else:
            out.append(_binary_run(pages[i:j], info.binary, dtype))
        i = j
    return out


def _key(buf: Any) -> tuple[int, int]:
    return int(buf.buffer_type), int(buf.buffer_index)


def _fixed_run(run: list, plan: plans.FixedPlan, dtype: pa.DataType) -> pa.Array:
    lengths = np.array([page.length for page, _, _, _ in run], dtype=np.int64)
    values: list[memoryview] = []
    validity: Optional[list[memoryview]] = [] if plan.validity is not None else None
    for (page, _, ctx, bufs), n in zip(run, lengths.tolist()):
        values.append(_cut(bufs, plan.values, -(-n * plan.bits_per_row // 8), ctx, "values"))
        if validity is not None:
            validity.append(_cut(bufs, plan.validity, -(-n // 8), ctx, "validity"))
    starts = np.zeros(len(run), dtype=np.int64)
    return plans.assemble_fixed(plan, dtype, starts, lengths, values, validity, run[0][2])


def _binary_run(run: list, plan: plans.BinaryPlan, dtype: pa.DataType) -> pa.Array:
    lengths = np.array([page.length for page, _, _, _ in run], dtype=np.int64)
    ends_parts, data_bufs, limits, adjust = [], [], [], []
    for (page, info, ctx, bufs), n in zip(run, lengths.tolist()):
        ends_parts.append(np.frombuffer(_cut(bufs, plan.offsets, 8 * n, ctx, "offsets"), dtype="<u8", count=n))
        data = _buffer(bufs, plan.data, ctx)
        data_bufs.append(data)
        limits.append(data.size)
        adjust.append(info.binary.null_adjustment)
    ctx = run[0][2]
    ends = np.concatenate(ends_parts)
    nulls = None
    if any(adjust):  # a null row stores the previous end plus its page's adjustment
        adj = np.repeat(np.array(adjust, dtype=np.uint64), lengths)
        nulls = (adj > 0) & (ends >= adj)
        ends = np.where(nulls, ends - adj, ends)
        if not nulls.any():
            nulls = None
    starts = np.zeros(len(run), dtype=np.int64)
    has_prev = np.zeros(len(run), dtype=bool)
    span_start, span_end, real, _ = plans.resolve_range_ends(starts, lengths, has_prev, ends, 0, 1 << 62, ctx)
    over = np.flatnonzero(span_end > np.array(limits, dtype=np.int64))
    if over.size:
        k = int(over[0])
        raise run[k][2].corrupt(f"binary offset {int(span_end[k])} is past the end of its data ({limits[k]})")
    chunks = [memoryview(d)[: int(e)] for d, e in zip(data_bufs, span_end.tolist())]
    return plans.finish_binary(dtype, lengths, span_start, span_end, real, nulls, chunks, ctx)


def _buffer(bufs: Any, buf: Any, ctx: dec.DecodeContext) -> pa.Buffer:
    try:
        return bufs[_key(buf)]
    except KeyError:
        raise ctx.corrupt(f"encoding references buffer {_key(buf)}, which does not exist") from None


def _cut(bufs: Any, buf: Any, need: int, ctx: dec.DecodeContext, what: str) -> memoryview:
    data = _buffer(bufs, buf, ctx)
    if data.size < need:
        raise ctx.corrupt(f"{what} buffer of {data.size} bytes is shorter than the {need} bytes its rows need")
    return memoryview(data)[:need]
