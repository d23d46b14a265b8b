"""Reads of column nodes of a Lance 2.0 file, planned as generators of byte-range requests.

Each node (leaf, blob, struct, list) is read by a generator that yields batches of byte ranges
and returns its Arrow chunks; the reader advances the generators of all the columns of one
request together (:func:`lance_ops.format.io_plan.gather_requests`), so every round of I/O is
one coalesced read. ``read_range`` and ``take_rows`` touch only the overlapping pages and, for
fixed-width and plain binary pages, only the bytes of the rows wanted (:mod:`plans`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from lance_ops.errors import UnsupportedError
from lance_ops.format import blob_v2
from lance_ops.format.io_plan import Gen, gather_requests
from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0 import plans
from lance_ops.format.v2_0.columns import ColumnAccess
from lance_ops.format.v2_0.layout import (
    BlobNode, ColumnState, concat_chunks, empty_array, EncodingInfo, LeafNode, list_to_binary, ListBinaryNode,
    ListNode, Node, normalize_ranges, PageInfo, row_lengths, StructNode,
)

# Below this fraction of a page's rows, fixed-width and plain binary pages are read by ranges.
PARTIAL_READ_FRACTION = 0.5


class NodeReads(ColumnAccess):
    """Generators reading column nodes for row ranges (the reader's second layer)."""

    def _check_top(self, node: Node) -> None:
        if isinstance(node, StructNode):
            self._check_length(self._column(node.header), self._num_rows)
        else:
            self._check_length(self._column(node.column), self._num_rows)

    def _read_node(self, node: Node, starts: np.ndarray, ends: np.ndarray) -> Gen:
        """Generator returning the chunks of ``node`` for the row ranges ``[starts, ends)``."""
        if isinstance(node, ListBinaryNode):
            chunks = yield from self._read_list(ListNode(node.column, node.child, node.list_type, node.path), starts, ends)
            return [list_to_binary(c, node.dtype) for c in chunks]
        if isinstance(node, BlobNode):
            return (yield from self._read_blob(node, starts, ends))
        if isinstance(node, LeafNode):
            return (yield from self._read_leaf(node, starts, ends))
        if isinstance(node, StructNode):
            return (yield from self._read_struct(node, starts, ends))
        return (yield from self._read_list(node, starts, ends))

    def _pages_for(self, col: ColumnState, starts: np.ndarray,
                   ends: np.ndarray) -> list[tuple[PageInfo, np.ndarray, np.ndarray]]:
        """(page, local starts, local ends) for each page overlapping the ranges."""
        if not len(starts):
            return []
        out = []
        if len(starts) == 1:  # one range: pages p0..p1 overlap it
            s, e = int(starts[0]), int(ends[0])
            p0 = int(np.searchsorted(col.page_ends, s, side="right"))
            p1 = int(np.searchsorted(col.page_starts, e, side="left"))
            pstarts = col.page_starts[p0:p1].tolist()
            pends = col.page_ends[p0:p1].tolist()
            for p, ps, pe in zip(range(p0, p1), pstarts, pends):
                if pe > ps:
                    out.append((col.pages[p], np.array([max(s, ps) - ps]), np.array([min(e, pe) - ps])))
            return out
        lo = np.searchsorted(ends, col.page_starts, side="right")
        hi = np.searchsorted(starts, col.page_ends, side="left")
        for p in np.flatnonzero((hi > lo) & (col.page_ends > col.page_starts)).tolist():
            ps, pe = int(col.page_starts[p]), int(col.page_ends[p])
            ls = np.maximum(starts[lo[p] : hi[p]], ps) - ps
            le = np.minimum(ends[lo[p] : hi[p]], pe) - ps
            out.append((col.pages[p], ls, le))
        return out

    def _read_leaf(self, node: LeafNode, starts: np.ndarray, ends: np.ndarray) -> Gen:
        col = self._column(node.column)
        gens = [
            self._read_page(col, page, col.infos[page.index], ls, le, node.dtype)
            for page, ls, le in self._pages_for(col, starts, ends)
        ]
        chunks = yield from gather_requests(gens)
        if not chunks:
            return [empty_array(node.dtype)]
        return chunks

    def _read_blob(self, node: BlobNode, starts: np.ndarray, ends: np.ndarray) -> Gen:
        """A blob column: its descriptions, then (unless ``node.describe``) one more I/O round
        for the bytes they point at. A description (p, 0) is empty for p = 0, else null (2.0
        writes (1, 0))."""
        col = self._column(node.column)
        dtype = blob_v2.DESCRIPTION_TYPE
        gens = [self._read_page(col, page, col.infos[page.index], ls, le, dtype)
                for page, ls, le in self._pages_for(col, starts, ends)]
        desc = concat_chunks((yield from gather_requests(gens)), dtype)
        if node.describe:
            return [desc]
        n = len(desc)
        if desc.null_count:
            raise self._corrupt(f"blob column {col.index} ({col.path!r}) has null descriptions")
        pos = np.asarray(desc.field(0).to_numpy(zero_copy_only=False), dtype=np.uint64)
        size = np.asarray(desc.field(1).to_numpy(zero_copy_only=False), dtype=np.uint64)
        if n and int(size.max()) > self._file_size:
            raise self._corrupt(f"blob column {col.index} ({col.path!r}): a value lies beyond the end of the file")
        want = np.flatnonzero(size > 0)
        pieces = []
        if len(want):
            pieces = yield np.stack([pos[want], size[want]], axis=1).astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(size.astype(np.int64), out=offsets[1:])
        nulls = (size == 0) & (pos != 0)
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
        data = pa.py_buffer(b"".join(pieces))
        return [pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets), data],
                                      null_count=int(nulls.sum()))]

    def _read_struct(self, node: StructNode, starts: np.ndarray, ends: np.ndarray) -> Gen:
        total = int((ends - starts).sum())
        gens = [self._read_node(child, starts, ends) for child in node.children]
        for child in node.children:
            self._check_child(child, node)
        results = yield from gather_requests(gens)
        arrays = [concat_chunks(chunks, child.dtype) for chunks, child in zip(results, node.children)]
        for a in arrays:
            if len(a) != total:
                raise self._corrupt(f"struct field {node.path!r}: children have {len(a)} rows, expected {total}")
        if not arrays:
            return [pa.Array.from_buffers(node.dtype, total, [None], children=[])]
        return [pa.StructArray.from_arrays(arrays, fields=list(node.dtype))]

    def _check_child(self, child: Node, parent: StructNode) -> None:
        expected = self._column(parent.header).num_rows
        if isinstance(child, StructNode):
            self._check_length(self._column(child.header), expected)
        else:
            self._check_length(self._column(child.column), expected)

    def _read_list(self, node: ListNode, starts: np.ndarray, ends: np.ndarray) -> Gen:
        col = self._column(node.column)
        pages = self._pages_for(col, starts, ends)
        base = np.zeros(len(col.pages) + 1, dtype=np.int64)
        for i, page in enumerate(col.pages):
            if dec.encoding_kind(page.encoding) != "list":
                raise self._corrupt(
                    f"column {col.index} ({col.path!r}) page {i}: expected list offsets, found {dec.describe(page.encoding)}"
                )
            base[i + 1] = base[i] + int(page.encoding.list.num_items)
        self._check_item_column(node.child, int(base[-1]))
        gens = [self._read_list_page(col, page, ls, le, int(base[page.index])) for page, ls, le in pages]
        parts = yield from gather_requests(gens)
        if parts:
            span_s = np.concatenate([p[0] for p in parts])
            span_e = np.concatenate([p[1] for p in parts])
            lengths = np.concatenate([p[2] for p in parts])
            nulls = [p[3] if p[3] is not None else np.zeros(len(p[2]), dtype=bool) for p in parts]
            null_mask = np.concatenate(nulls) if any(p[3] is not None for p in parts) else None
        else:
            span_s = span_e = lengths = np.zeros(0, dtype=np.int64)
            null_mask = None
        item_s, item_e = normalize_ranges(span_s, span_e)
        child_chunks = yield from self._read_node(node.child, item_s, item_e)
        values = concat_chunks(child_chunks, node.child.dtype)
        n = len(lengths)
        total_items = int(lengths.sum())
        if len(values) != total_items:
            raise self._corrupt(f"list field {node.path!r}: {len(values)} items read, offsets say {total_items}")
        large = pa.types.is_large_list(node.dtype)
        if not large and total_items > 2**31 - 1:
            raise UnsupportedError(f"{self._uri}: list field {node.path!r} needs more than 2^31 items in one read")
        offsets = np.zeros(n + 1, dtype=np.int64 if large else np.int32)
        np.cumsum(lengths, out=offsets[1:])
        validity = None if null_mask is None or not null_mask.any() else pa.py_buffer(np.packbits(~null_mask, bitorder="little"))
        if values.offset:
            values = pa.concat_arrays([values])
        arr = pa.Array.from_buffers(node.dtype, n, [validity, pa.py_buffer(offsets)], children=[values])
        return [arr]

    def _check_item_column(self, child: Node, expected: int) -> None:
        if isinstance(child, StructNode):
            self._check_length(self._column(child.header), expected)
        else:
            self._check_length(self._column(child.column), expected)

    def _read_list_page(self, col: ColumnState, page: PageInfo, ls: np.ndarray, le: np.ndarray,
                        item_base: int) -> Gen:
        ctx = dec.DecodeContext(self._uri, f"column {col.index} ({col.path!r}) page {page.index}")
        lst = page.encoding.list
        has_prev = ls > 0
        first = ls - has_prev.astype(np.int64)
        arr = yield from self._read_page(col, page, col.infos[page.index].offsets, first, le, pa.uint64(), ctx=ctx)
        if arr.null_count:
            raise ctx.corrupt("list offsets contain nulls")
        stored = arr.to_numpy(zero_copy_only=False)
        span_s, span_e, row_real, row_nulls = plans.resolve_range_ends(
            ls, le, has_prev, stored, int(lst.null_offset_adjustment), int(lst.num_items), ctx, "list"
        )
        lengths = row_lengths(row_real, span_s, le - ls)
        return span_s + item_base, span_e + item_base, lengths, row_nulls

    def _read_page(self, col: ColumnState, page: PageInfo, info: EncodingInfo, ls: np.ndarray,
                   le: np.ndarray, dtype: pa.DataType, ctx: Optional[dec.DecodeContext] = None) -> Gen:
        """Generator returning the rows ``[ls[k], le[k])`` (page-local) of one page as one array."""
        if ctx is None:
            ctx = dec.DecodeContext(self._uri, f"column {col.index} ({col.path!r}) page {page.index}")
        n_sel = int((le - ls).sum())
        if n_sel == 0:
            return empty_array(dtype)
        enc = info.encoding
        plan = info.fixed
        if plan is not None and plan.all_null:
            return pa.nulls(n_sel, dtype)
        partial = n_sel < PARTIAL_READ_FRACTION * page.length
        if partial and plan is not None and not pa.types.is_dictionary(dtype):
            return (yield from self._read_fixed_partial(col, page, plan, ls, le, dtype, ctx))
        if partial:
            bplan = info.binary
            if bplan is not None and dec.is_var_binary(dtype):
                return (yield from self._read_binary_partial(col, page, bplan, ls, le, dtype, ctx))
        keys = info.buffers
        locations = [self._buffer_location(col, page, key, ctx) for key in keys]
        data = yield np.array(locations, dtype=np.int64).reshape(-1, 2)
        bufs = dec.PageBuffers({key: pa.py_buffer(d) for key, d in zip(keys, data)})
        return dec.decode_rows(enc, page.length, dtype, bufs, ctx, ls, le)

    def _read_fixed_partial(self, col: ColumnState, page: PageInfo, plan: plans.FixedPlan, ls: np.ndarray,
                            le: np.ndarray, dtype: pa.DataType, ctx: dec.DecodeContext) -> Gen:
        values = plan.values
        assert values is not None  # only all-null plans have no values buffer, and they are never read
        v_off, v_size = self._buffer_location(col, page, (int(values.buffer_type), int(values.buffer_index)), ctx)
        bits = plan.bits_per_row
        if bits == 1:
            b_start, b_end = ls // 8, (le - 1) // 8 + 1
        else:
            w = bits // 8
            b_start, b_end = ls * w, le * w
        if int(b_end.max()) > v_size:
            raise ctx.corrupt(f"values buffer of {v_size} bytes is too short for row {int(le.max()) - 1}")
        requests = np.stack([b_start + v_off, b_end - b_start], axis=1)
        k = len(requests)
        if plan.validity is not None:
            m_off, m_size = self._buffer_location(col, page, (int(plan.validity.buffer_type), int(plan.validity.buffer_index)), ctx)
            m_start, m_end = ls // 8, (le - 1) // 8 + 1
            if int(m_end.max()) > m_size:
                raise ctx.corrupt(f"validity buffer of {m_size} bytes is too short for row {int(le.max()) - 1}")
            requests = np.concatenate([requests, np.stack([m_start + m_off, m_end - m_start], axis=1)])
        data = yield requests
        return plans.assemble_fixed(plan, dtype, ls, le, data[:k], data[k:] if plan.validity is not None else None, ctx)

    def _read_binary_partial(self, col: ColumnState, page: PageInfo, plan: plans.BinaryPlan, ls: np.ndarray,
                             le: np.ndarray, dtype: pa.DataType, ctx: dec.DecodeContext) -> Gen:
        o_off, o_size = self._buffer_location(col, page, (int(plan.offsets.buffer_type), int(plan.offsets.buffer_index)), ctx)
        d_off, d_size = self._buffer_location(col, page, (int(plan.data.buffer_type), int(plan.data.buffer_index)), ctx)
        has_prev = ls > 0
        first = ls - has_prev.astype(np.int64)
        if int(le.max()) * 8 > o_size:
            raise ctx.corrupt(f"offsets buffer of {o_size} bytes is too short for row {int(le.max()) - 1}")
        chunks = yield np.stack([first * 8 + o_off, (le - first) * 8], axis=1)
        stored = np.frombuffer(b"".join(chunks), dtype="<u8")
        span_s, span_e, row_real, row_nulls = plans.resolve_range_ends(
            ls, le, has_prev, stored, plan.null_adjustment, d_size, ctx, "binary"
        )
        data = yield np.stack([span_s + d_off, span_e - span_s], axis=1)
        return plans.finish_binary(dtype, le - ls, span_s, span_e, row_real, row_nulls, data, ctx)
