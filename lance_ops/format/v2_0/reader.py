"""Reader for Lance v2 data files (``.lance``), file format version 2.0.

Opening a file costs one tail read (the last 64 KiB) plus at most one more read covering global
buffer 0 (the ``FileDescriptor``: schema and row count) and the column metadata, mirroring how
upstream reads ``[gb0 start, EOF)``.

Columns map to schema fields in pre-order (struct header columns and list offsets columns
included). Reads are planned per column *node* (leaf, struct, list) as generators that yield
batches of byte ranges: all columns of one request are advanced together, so every "round" of
I/O (pages; then list items once the offsets are known; then binary bytes once their offsets are
known) is a single coalesced ``store.read_ranges`` call. Projection touches only the chosen
columns, ``read_range`` only the overlapping pages, and ``take_rows`` only the pages holding the
rows -- and, for fixed-width and plain variable-width pages, only the bytes of those rows.
"""
from __future__ import annotations

import struct
from typing import Any, Iterable, Mapping, MutableMapping, Optional, Sequence, TypeGuard

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.errors import CorruptFileError, OutOfRangeError, UnsupportedError, UnsupportedTypeError
from lance_ops.format import blob_v2
from lance_ops.format.container import FOOTER_SIZE, Footer
from lance_ops.format.io_plan import drive, gather_requests
from lance_ops.format.reader_base import take_indices
from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0.layout import (
    build_schema_layout, ColumnInfo, empty_array, EncodingInfo, FileMetadata, has_binary, LeafNode, Node,
    normalize_ranges, PageInfo, SchemaLayout, StructNode, WholePage, ZERO,
)
from lance_ops.format.v2_0.memo import COLUMN_LIMIT, memo_of, remember, SCHEMA_LIMIT, SMALL_COLUMN_BYTES
from lance_ops.format.v2_0.node_reads import NodeReads
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore
from lance_ops.schema import field_tree, from_lance_fields

__all__ = ["LanceFileReader", "PageInfo", "ColumnInfo", "FileMetadata"]

TAIL_READ_BYTES = 64 * 1024
#: a plain leaf column read whole: its type and, per non-empty page, (encoding info, rows, buffer key -> bytes)
WholeColumn = tuple[pa.DataType, list[tuple[EncodingInfo, int, dict]]]
# Global buffer 0 is fetched together with the column metadata when it is at most this far away.
_GB0_GAP = 1 << 20


def _all_plain_leaves(nodes: Sequence[Node]) -> TypeGuard[Sequence[LeafNode]]:
    """Whether every node is a plain :class:`LeafNode` (no blob, struct or list): whole reads take a fast path."""
    return all(type(node) is LeafNode for node in nodes)


# --------------------------------------------------------------------------------------------
# the reader
# --------------------------------------------------------------------------------------------
class LanceFileReader(NodeReads):
    """Read a Lance 2.0 data file from a local path or an object store URI.

    ``path`` is a local path or URI (``s3://bucket/key``); when ``store`` is given, ``path`` is
    the location inside that store (as returned by :func:`lance_ops.io.open_store`).
    """

    _gb0_extra: Optional[bytes]
    _gb0_bytes: bytes
    _described: Optional[dict[str, Node]]

    def __init__(self, path: str, storage_options: Optional[Mapping[str, Any]] = None, *,
                 store: Optional[ObjectStore] = None, _tail: Optional[tuple[bytes, int]] = None,
                 memo: Optional[MutableMapping[str, Any]] = None) -> None:
        self._given_tail = _tail  # (last bytes, file size) already read by the version dispatch
        self._whole = None  # the whole file, when the tail read held all of it
        self._bind(path, storage_options, store)
        self._columns = {}
        self._checked = set()
        # what files of one dataset share (``memo``: the dataset object's cache dict; ADR 0044)
        self._memo = memo_of(memo)
        self._guard(self._open)

    # --- public properties ---------------------------------------------------------------
    @property
    def metadata(self) -> FileMetadata:
        """Footer, global buffers and every column's pages (parses all column metadata)."""

        def build() -> FileMetadata:
            cols = []
            for i in range(self._footer.num_columns):
                c = self._column(i)
                cols.append(ColumnInfo(c.index, c.path, c.role, list(c.pages), c.buffer_offsets, c.buffer_sizes))
            return FileMetadata(
                self._uri, self._version, self._footer.major, self._footer.minor, self._num_rows,
                self._file_size, self._schema, self._footer, list(self._gbo), cols,
            )

        return self._guard(build)

    def column_pages(self, column_index: int) -> list[PageInfo]:
        """The pages of one column (row start, length, buffers, encoding)."""
        if not 0 <= column_index < self._footer.num_columns:
            raise IndexError(f"{self._uri}: column {column_index} out of range (file has {self._footer.num_columns})")
        return list(self._guard(lambda: self._column(column_index).pages))

    def column_indices(self, name: str) -> list[int]:
        """The column indices (pre-order) that store top-level field ``name``."""
        node = self._top_node(name)
        out: list[int] = []

        def walk(n: Node) -> None:
            if isinstance(n, LeafNode):
                out.append(n.column)
            elif isinstance(n, StructNode):
                out.append(n.header)
                for c in n.children:
                    walk(c)
            else:
                out.append(n.column)
                walk(n.child)

        walk(node)
        return out

    def read_global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0 = the FileDescriptor)."""
        if not 0 <= index < len(self._gbo):
            raise IndexError(f"{self._uri}: global buffer {index} out of range (file has {len(self._gbo)})")
        if index == 0:
            return self._gb0_bytes
        pos, size = self._gbo[index]
        return self._guard(lambda: bytes(self._fetch([(pos, size)])[0]))

    # --- reads ---------------------------------------------------------------------------
    def read_all(self, columns: Optional[Sequence[str]] = None, *, blob_descriptions: bool = False) -> pa.Table:
        """Every row of the chosen top-level columns (all by default), in the requested order.

        Blob columns return their bytes; with ``blob_descriptions`` their (position, size)
        descriptions instead (what pylance's datasets return), without reading the bytes."""
        n = self._num_rows
        sel = (np.array([0], dtype=np.int64), np.array([n], dtype=np.int64)) if n else \
            (np.zeros(0, np.int64), np.zeros(0, np.int64))
        return self._read_table(columns, sel, None, blob_descriptions)

    def read_range(self, start: int, num_rows: int, columns: Optional[Sequence[str]] = None, *,
                   blob_descriptions: bool = False) -> pa.Table:
        """Rows ``[start, start + num_rows)``."""
        start, num_rows = int(start), int(num_rows)
        if start < 0 or num_rows < 0 or start + num_rows > self._num_rows:
            raise OutOfRangeError(
                f"{self._uri}: cannot read rows {start}..{start + num_rows} of a file with {self._num_rows} rows"
            )
        sel = normalize_ranges(np.array([start], dtype=np.int64), np.array([start + num_rows], dtype=np.int64))
        return self._read_table(columns, sel, None, blob_descriptions)

    def take_rows(self, indices: Iterable[int] | np.ndarray | pa.Array, columns: Optional[Sequence[str]] = None, *,
                  blob_descriptions: bool = False) -> pa.Table:
        """Rows at ``indices`` (any order, duplicates allowed), in the given order."""
        uniq, inverse = take_indices(indices, self._num_rows, self._uri)
        sel = normalize_ranges(uniq, uniq + 1)
        return self._read_table(columns, sel, inverse, blob_descriptions)

    def __repr__(self) -> str:
        return f"LanceFileReader({self._uri!r}, version={self._version}, rows={self._num_rows})"

    # --- opening -------------------------------------------------------------------------
    def _open(self) -> None:
        given, self._given_tail = self._given_tail, None
        tail, size = given if given is not None else self._store.read_tail(self._path, TAIL_READ_BYTES)
        self._file_size = size
        footer = Footer.unpack(tail, size, self._uri)
        self._footer = footer
        self._version = FileVersion.from_footer(footer.major, footer.minor, self._uri)
        if self._version is not FileVersion.V2_0:
            raise UnsupportedError(
                f"{self._uri}: Lance file version {self._version} (footer {footer.major}.{footer.minor}) "
                "is not supported yet; this reader decodes 2.0 files"
            )
        tail_start = size - len(tail)
        region_start = tail_start
        region = bytes(tail)
        if tail_start == 0:
            # a small file came whole with its tail: later reads are served from it (no I/O)
            self._whole = region

        def ensure(start: int, extra: Optional[tuple[int, int]] = None) -> None:
            nonlocal region, region_start
            wanted = []
            if start < region_start:
                wanted.append((start, region_start - start))
            if extra is not None:
                wanted.append(extra)
            if not wanted:
                return
            got = self._fetch(wanted)
            if start < region_start:
                region = bytes(got[0]) + region
                region_start = start
            if extra is not None:
                self._gb0_extra = bytes(got[-1])

        def take(pos: int, length: int) -> bytes:
            off = pos - region_start
            if off < 0 or off + length > len(region):
                raise self._corrupt(f"metadata range {pos}..{pos + length} is outside the file")
            return region[off : off + length]

        # the global buffer table (normally already in the tail)
        if footer.gbo_table_start < region_start:
            ensure(min(footer.gbo_table_start, footer.column_meta_start))
        n_gb = footer.num_global_buffers
        gbo = struct.unpack(f"<{2 * n_gb}Q", take(footer.gbo_table_start, 16 * n_gb))
        body_end = size - FOOTER_SIZE
        self._gbo = list(zip(gbo[0::2], gbo[1::2]))
        for p, s in self._gbo:
            if p + s > body_end:
                raise self._corrupt("a global buffer lies beyond the end of the file")
        gb0_pos, gb0_size = self._gbo[0]
        self._gb0_extra = None
        near = footer.column_meta_start - _GB0_GAP <= gb0_pos
        if near:
            ensure(min(gb0_pos, footer.column_meta_start))
            gb0 = take(gb0_pos, gb0_size)
        else:
            ensure(footer.column_meta_start, (gb0_pos, gb0_size))
            gb0 = self._gb0_extra if self._gb0_extra is not None else take(gb0_pos, gb0_size)
        self._gb0_bytes = gb0 = bytes(gb0)
        memo = self._memo
        known = memo.descriptors.get(gb0)
        schema = tree = None
        layout: Optional[SchemaLayout]
        if known is not None:  # a file of this dataset with the same descriptor bytes was opened
            descriptor, layout = known
        else:
            descriptor = file_pb2.FileDescriptor()
            try:
                descriptor.ParseFromString(gb0)
            except DecodeError as exc:
                raise self._corrupt(f"global buffer 0 (FileDescriptor) does not decode: {exc}") from None
            # the schema and its column layout are shared by every file with the same schema
            schema_key = descriptor.schema.SerializeToString()
            got = memo.layouts.get(schema_key)
            if got is None:
                try:
                    schema = from_lance_fields(descriptor.schema.fields, dict(descriptor.schema.metadata))
                    tree = field_tree(descriptor.schema.fields)
                except CorruptFileError as exc:
                    raise self._corrupt(f"schema: {exc.problem}") from None
                except UnsupportedTypeError as exc:
                    raise UnsupportedTypeError(f"{self._uri}: {exc}") from None
            layout = got
        self._descriptor = descriptor
        self._num_rows = int(descriptor.length)
        # column metadata positions and the messages themselves (equal bytes parsed once)
        n_col = footer.num_columns
        cmo = struct.unpack(f"<{2 * n_col}Q", take(footer.cmo_table_start, 16 * n_col))
        positions = list(zip(cmo[0::2], cmo[1::2]))
        for pos, length in positions:
            if pos + length > body_end:
                raise self._corrupt("a column metadata block lies beyond the end of the file")
        metas = memo.column_metas
        self._column_raw = raws = [take(pos, length) for pos, length in positions]
        self._column_meta = []
        for i, raw in enumerate(raws):
            meta = metas.get(raw)
            if meta is None:
                meta = file2_pb2.ColumnMetadata()
                try:
                    meta.ParseFromString(raw)
                except DecodeError as exc:
                    raise self._corrupt(f"column {i} metadata does not decode: {exc}") from None
                if len(raw) <= SMALL_COLUMN_BYTES:
                    remember(metas, raw, meta, COLUMN_LIMIT)
            self._column_meta.append(meta)
        if layout is None:
            assert schema is not None and tree is not None
            layout = build_schema_layout(schema, tree, self._uri, self._corrupt)
            remember(memo.layouts, schema_key, layout, SCHEMA_LIMIT)
        if known is None:
            remember(memo.descriptors, gb0, (descriptor, layout), SCHEMA_LIMIT)
        self._schema, self._nodes, self._roles, self._top_names, self._described = (
            layout.schema, layout.nodes, layout.roles, layout.top_names, layout.described)
        if layout.num_columns != footer.num_columns and has_binary(layout.schema):
            # a file of Lance <= 0.14: its string/binary fields may be list-encoded (two columns)
            old = build_schema_layout(layout.schema, field_tree(descriptor.schema.fields), self._uri, self._corrupt,
                                      first_page_is_list=self._first_page_is_list)
            if old.num_columns == footer.num_columns:
                self._schema, self._nodes, self._roles, self._top_names, self._described = (
                    old.schema, old.nodes, old.roles, old.top_names, old.described)
                layout = old
        if layout.num_columns != footer.num_columns:
            raise self._corrupt(
                f"schema needs {layout.num_columns} columns but the footer lists {footer.num_columns}"
            )

    # --- table assembly ------------------------------------------------------------------
    def _read_table(self, columns: Optional[Sequence[str]], sel: tuple[np.ndarray, np.ndarray],
                    inverse: Optional[np.ndarray], describe: bool = False) -> pa.Table:
        if columns is None:
            names = list(self._top_names)
        else:
            if isinstance(columns, str):
                columns = [columns]
            names = list(columns)
            for name in names:
                self._top_node(name)
            if len(set(names)) != len(names):
                raise ValueError(f"{self._uri}: duplicate column names in {names}")

        by_name = self._described if describe and self._described is not None else self._nodes

        def work() -> pa.Table:
            nodes = [by_name[n] for n in names]
            for node in nodes:
                self._check_top(node)
            starts, ends = sel
            if (inverse is None and len(starts) == 1 and int(starts[0]) == 0 and int(ends[0]) == self._num_rows
                    and _all_plain_leaves(nodes)):
                results = self._read_whole_leaves(nodes)
            else:
                results = drive(gather_requests([self._read_node(node, *sel) for node in nodes]), self._fetch)
            arrays = [pa.chunked_array(chunks, type=node.dtype) for chunks, node in zip(results, nodes)]
            fields = [self._schema.field(n) for n in names]
            if by_name is not self._nodes:
                fields = [blob_v2.described_field(f) for f in fields]
            schema = pa.schema(fields, metadata=self._schema.metadata)
            table = pa.Table.from_arrays(arrays, schema=schema)
            if inverse is not None:
                table = table.take(pa.array(inverse))
            table.validate()
            return table

        return self._guard(work)

    def whole_pages(self, name: str) -> Optional[WholeColumn]:
        """Top-level column ``name`` as stored when it is a plain leaf (None otherwise): its type and,
        per non-empty page, (encoding info, rows, buffer key -> bytes), every buffer fetched in one
        round (what :mod:`lance_ops.format.v2_0.batch` decodes for many files at once)."""
        return self.whole_columns([name])[0]

    def whole_columns(self, names: Sequence[str]) -> list[Optional[WholeColumn]]:
        """:meth:`whole_pages` of each of ``names``, the buffers of all of them fetched in one round."""
        nodes = [self._top_node(name) for name in names]

        def work() -> list[Optional[WholeColumn]]:
            planned: list[Optional[tuple[pa.DataType, list[WholePage]]]] = []
            requests: list[tuple[int, int]] = []
            for node in nodes:
                if type(node) is not LeafNode:
                    planned.append(None)
                    continue
                self._check_top(node)
                plan = self._whole_plan(self._column(node.column))
                planned.append((node.dtype, plan))
                for _, _, _, locations in plan:
                    requests.extend(locations)
            data = self._fetch(requests)
            out: list[Optional[WholeColumn]] = []
            k = 0
            for got in planned:
                if got is None:
                    out.append(None)
                    continue
                pages = []
                for _, info, n, locations in got[1]:
                    m = len(locations)
                    pages.append((info, n, dict(zip(info.buffers, data[k:k + m]))))
                    k += m
                out.append((got[0], pages))
            return out

        return self._guard(work)

    def _read_whole_leaves(self, nodes: Sequence[LeafNode]) -> list[list[pa.Array]]:
        """Every page of single-column fields, in one I/O round.

        The same reads and decoding as :meth:`_read_leaf` over all rows, without its per-page
        generator plumbing (which dominates the cost of reading small files).
        """
        requests: list[tuple[int, int]] = []
        work = []
        for node in nodes:
            col = self._column(node.column)
            for p_index, info, n, locations in self._whole_plan(col):
                if info.fixed is not None and info.fixed.all_null:
                    work.append((node, p_index, n, info, -1))
                    continue
                work.append((node, p_index, n, info, len(requests)))
                requests.extend(locations)
        data = self._fetch(requests)
        chunks: dict[int, list[pa.Array]] = {id(node): [] for node in nodes}
        for node, p_index, n, info, first in work:
            if first < 0:
                arr = pa.nulls(n, node.dtype)
            else:
                keys = info.buffers
                bufs = dec.PageBuffers({key: pa.py_buffer(d) for key, d in zip(keys, data[first : first + len(keys)])})
                ctx = dec.DecodeContext(self._uri, f"column {node.column} ({node.path!r}) page {p_index}")
                arr = dec.decode_rows(info.encoding, n, node.dtype, bufs, ctx, ZERO, np.array([n], dtype=np.int64))
            chunks[id(node)].append(arr)
        return [chunks[id(node)] or [empty_array(node.dtype)] for node in nodes]
