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

from typing import Any, Iterable, Mapping, Optional, Sequence, TypeGuard

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.errors import (
    CorruptFileError,
    OutOfRangeError,
    UnsupportedError,
    UnsupportedTypeError,
)
from lance_ops.format import blob_v2
from lance_ops.format.container import (
    ARRAY_ENCODING_URL,
    COLUMN_ENCODING_URL,
    FOOTER_SIZE,
    PAGE_LAYOUT_URL,
    Footer,
)
from lance_ops.format.reader_base import V2ReaderBase, take_indices
from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0 import plans
from lance_ops.format.v2_0.layout import (
    BlobNode, build_schema_layout, ColumnInfo, ColumnState, concat_chunks, cut_blobs, empty_array,
    ENCODING_CACHE_LIMIT, EncodingInfo, ENCODINGS_CACHE, FileMetadata,
    GOOD_COLUMN_ENCODINGS, has_binary, LeafNode, list_to_binary, ListBinaryNode, ListNode, Node, normalize_ranges,
    PageInfo, remember, row_lengths, SCHEMA_CACHE_LIMIT, SCHEMA_LAYOUTS, StructNode, ZERO,
)
from lance_ops.format.io_plan import Fetched, Gen, drive, gather_requests
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore
from lance_ops.io.ranges import SMALL_RANGE_COUNT, coalesce, coalesce_list
from lance_ops.schema import field_tree, from_lance_fields

__all__ = ["LanceFileReader", "PageInfo", "ColumnInfo", "FileMetadata"]

TAIL_READ_BYTES = 64 * 1024
# Below this fraction of a page's rows, fixed-width and plain binary pages are read by ranges.
PARTIAL_READ_FRACTION = 0.5
# Global buffer 0 is fetched together with the column metadata when it is at most this far away.
_GB0_GAP = 1 << 20


def _all_plain_leaves(nodes: Sequence[Node]) -> TypeGuard[Sequence[LeafNode]]:
    """Whether every node is a plain :class:`LeafNode` (no blob, struct or list): whole reads take a fast path."""
    return all(type(node) is LeafNode for node in nodes)


# --------------------------------------------------------------------------------------------
# the reader
# --------------------------------------------------------------------------------------------
class LanceFileReader(V2ReaderBase):
    """Read a Lance 2.0 data file from a local path or an object store URI.

    ``path`` is a local path or URI (``s3://bucket/key``); when ``store`` is given, ``path`` is
    the location inside that store (as returned by :func:`lance_ops.io.open_store`).
    """

    _file_size: int
    _gbo: list[tuple[int, int]]
    _gb0_extra: Optional[bytes]
    _gb0_bytes: bytes
    _column_meta: list[file2_pb2.ColumnMetadata]
    _nodes: dict[str, Node]
    _roles: dict[int, tuple[str, str]]
    _top_names: list[str]
    _described: Optional[dict[str, Node]]

    def __init__(self, path: str, storage_options: Optional[Mapping[str, Any]] = None, *,
                 store: Optional[ObjectStore] = None, _tail: Optional[tuple[bytes, int]] = None) -> None:
        self._given_tail = _tail  # (last bytes, file size) already read by the version dispatch
        self._whole: Optional[bytes] = None  # the whole file, when the tail read held all of it
        self._bind(path, storage_options, store)
        self._columns: dict[int, ColumnState] = {}
        self._encodings = ENCODINGS_CACHE
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
        gbo_raw = take(footer.gbo_table_start, 16 * footer.num_global_buffers)
        gbo = np.frombuffer(gbo_raw, dtype="<u8").reshape(-1, 2).astype(np.int64)
        body_end = size - FOOTER_SIZE
        self._gbo = [(p, s) for p, s in gbo.tolist()]
        if any(p < 0 or s < 0 or p + s > body_end for p, s in self._gbo):
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
        self._gb0_bytes = bytes(gb0)
        descriptor = file_pb2.FileDescriptor()
        try:
            descriptor.ParseFromString(self._gb0_bytes)
        except DecodeError as exc:
            raise self._corrupt(f"global buffer 0 (FileDescriptor) does not decode: {exc}") from None
        self._descriptor = descriptor
        self._num_rows = int(descriptor.length)
        # the schema and its column layout are shared by every file with the same schema
        schema_key = descriptor.schema.SerializeToString()
        layout = SCHEMA_LAYOUTS.get(schema_key)
        if layout is None:
            try:
                schema = from_lance_fields(descriptor.schema.fields, dict(descriptor.schema.metadata))
                tree = field_tree(descriptor.schema.fields)
            except CorruptFileError as exc:
                raise self._corrupt(f"schema: {exc.problem}") from None
            except UnsupportedTypeError as exc:
                raise UnsupportedTypeError(f"{self._uri}: {exc}") from None
        # column metadata positions and the messages themselves
        cmo_raw = take(footer.cmo_table_start, 16 * footer.num_columns)
        cmo = np.frombuffer(cmo_raw, dtype="<u8").reshape(-1, 2).astype(np.int64)
        if len(cmo) and (int(cmo.min()) < 0 or int((cmo[:, 0] + cmo[:, 1]).max()) > body_end):
            raise self._corrupt("a column metadata block lies beyond the end of the file")
        self._column_meta = []
        for i, (pos, length) in enumerate(cmo.tolist()):
            meta = file2_pb2.ColumnMetadata()
            try:
                meta.ParseFromString(take(pos, length))
            except DecodeError as exc:
                raise self._corrupt(f"column {i} metadata does not decode: {exc}") from None
            self._column_meta.append(meta)
        if layout is None:
            layout = build_schema_layout(schema, tree, self._uri, self._corrupt)
            remember(SCHEMA_LAYOUTS, schema_key, layout, SCHEMA_CACHE_LIMIT)
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

    def _first_page_is_list(self, col: int) -> bool:
        """True if column ``col`` exists and its first page is list-encoded (as pylance decides)."""
        if col >= len(self._column_meta) or not self._column_meta[col].pages:
            return False
        info = self._page_encoding(self._column_meta[col].pages[0], f"column {col} page 0")
        return dec.encoding_kind(info.encoding) == "list"

    def _top_node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise ValueError(
                f"{self._uri}: no column named {name!r}; the file has {self._top_names}"
            ) from None

    # --- columns and pages ---------------------------------------------------------------
    def _column(self, index: int) -> ColumnState:
        col = self._columns.get(index)
        if col is not None:
            return col
        meta = self._column_meta[index]
        path, role = self._roles[index]
        where = f"column {index} ({path!r})"
        self._check_column_encoding(meta, where, role)
        body_end = self._file_size - FOOTER_SIZE
        pages: list[PageInfo] = []
        infos: list[EncodingInfo] = []
        row = 0
        encodings = self._encodings
        for p_index, page in enumerate(meta.pages):
            offs = tuple(page.buffer_offsets)
            sizes = tuple(page.buffer_sizes)
            if len(offs) != len(sizes):
                raise self._corrupt(f"{where} page {p_index}: {len(offs)} buffer offsets but {len(sizes)} sizes")
            for o, s in zip(offs, sizes):
                if o + s > body_end:
                    raise self._corrupt(
                        f"{where} page {p_index}: buffer {o}..{o + s} lies beyond the end of the data ({body_end})"
                    )
            length = int(page.length)
            info = None
            if page.encoding.WhichOneof("location") == "direct":
                info = encodings.get(page.encoding.direct.encoding)
            if info is None:
                info = self._page_encoding(page, f"{where} page {p_index}")
            infos.append(info)
            pages.append(PageInfo(p_index, row, length, offs, sizes, int(page.priority), info.encoding))
            row += length
        starts = np.array([p.row_start for p in pages], dtype=np.int64)
        ends = starts + np.array([p.length for p in pages], dtype=np.int64)
        col = ColumnState(index, path, role, pages, starts, ends,
                      tuple(int(x) for x in meta.buffer_offsets), tuple(int(x) for x in meta.buffer_sizes), infos)
        if len(col.buffer_offsets) != len(col.buffer_sizes):
            raise self._corrupt(f"{where}: column buffer offsets and sizes differ in number")
        self._columns[index] = col
        return col

    def _check_column_encoding(self, meta: file2_pb2.ColumnMetadata, where: str, role: str) -> None:
        if not meta.HasField("encoding"):
            return
        loc = meta.encoding.WhichOneof("location")
        if loc != "direct":
            if loc == "indirect":
                raise UnsupportedError(f"{self._uri}: {where}: deferred (indirect) column encodings are not supported")
            return
        raw = meta.encoding.direct.encoding
        if (raw, role) in GOOD_COLUMN_ENCODINGS:
            return
        wrapped = any_pb2.Any()
        try:
            wrapped.ParseFromString(raw)
        except DecodeError as exc:
            raise self._corrupt(f"{where}: column encoding does not decode: {exc}") from None
        if wrapped.type_url != COLUMN_ENCODING_URL:
            raise UnsupportedError(f"{self._uri}: {where}: unknown column encoding type {wrapped.type_url!r}")
        ce = pb.ColumnEncoding()
        try:
            ce.ParseFromString(wrapped.value)
        except DecodeError as exc:
            raise self._corrupt(f"{where}: column encoding does not decode: {exc}") from None
        case = ce.WhichOneof("column_encoding")
        if case == "blob" and role != "blob":
            raise self._corrupt(f"{where}: blob column encoding on a field without the lance-encoding:blob metadata")
        if case == "blob" and ce.blob.inner.WhichOneof("column_encoding") not in (None, "values"):
            raise UnsupportedError(f"{self._uri}: {where}: blob column with inner encoding "
                                   f"{ce.blob.inner.WhichOneof('column_encoding')!r} is not supported")
        remember(GOOD_COLUMN_ENCODINGS, (raw, role), True, ENCODING_CACHE_LIMIT)

    def _page_encoding(self, page: file2_pb2.ColumnMetadata.Page, where: str) -> EncodingInfo:
        loc = page.encoding.WhichOneof("location")
        if loc == "indirect":
            raise UnsupportedError(f"{self._uri}: {where}: deferred (indirect) page encodings are not supported")
        if loc != "direct":
            raise self._corrupt(f"{where}: page has no encoding")
        raw = page.encoding.direct.encoding
        info = self._encodings.get(raw)
        if info is not None:
            return info
        wrapped = any_pb2.Any()
        try:
            wrapped.ParseFromString(page.encoding.direct.encoding)
        except DecodeError as exc:
            raise self._corrupt(f"{where}: page encoding does not decode: {exc}") from None
        if wrapped.type_url != ARRAY_ENCODING_URL:
            if wrapped.type_url == PAGE_LAYOUT_URL:
                raise UnsupportedError(f"{self._uri}: {where}: 2.1+ page layout found in a 2.0 file")
            raise UnsupportedError(f"{self._uri}: {where}: unknown page encoding type {wrapped.type_url!r}")
        enc = pb.ArrayEncoding()
        try:
            enc.ParseFromString(wrapped.value)
        except DecodeError as exc:
            raise self._corrupt(f"{where}: page encoding does not decode: {exc}") from None
        info = EncodingInfo.of(enc)
        remember(self._encodings, raw, info, ENCODING_CACHE_LIMIT)
        return info

    def _check_length(self, col: ColumnState, expected: int) -> None:
        if not col.checked_length:
            if col.num_rows != expected:
                raise self._corrupt(
                    f"column {col.index} ({col.path!r}) pages hold {col.num_rows} rows, expected {expected}"
                )
            col.checked_length = True

    # --- I/O -----------------------------------------------------------------------------
    def _fetch(self, requests: np.ndarray | Sequence[tuple[int, int]]) -> Fetched:
        """The bytes of ``(start, length)`` ranges, as zero-copy views into coalesced reads.

        Ranges are merged here (same gap rule as the store) so that the store returns each merged
        span whole and no range is copied out of it.
        """
        arr = np.asarray(requests, dtype=np.int64).reshape(-1, 2)
        if not len(arr):
            return []
        whole = self._whole
        if whole is not None:
            pairs = arr.tolist()
            if any(s < 0 or n < 0 or s + n > len(whole) for s, n in pairs):
                raise self._corrupt("a read would go past the end of the file")
            return [whole[s:s + n] for s, n in pairs]
        gap = int(getattr(self._store, "coalesce_gap", 4096))
        if len(arr) <= SMALL_RANGE_COUNT:  # the usual case: a few pages' buffers
            pairs = arr.tolist()
            size = self._file_size
            if any(s < 0 or n < 0 or s + n > size for s, n in pairs):
                raise self._corrupt("a read would go past the end of the file")
            groups, placement = coalesce_list(pairs, gap)
            blobs = [memoryview(b) for b in self._store.read_ranges(self._path, [(s, e - s) for s, e in groups])]
            return [blobs[g][o : o + n] for g, o, n in placement]
        if np.any(arr < 0) or np.any(arr[:, 0] + arr[:, 1] > self._file_size):
            raise self._corrupt("a read would go past the end of the file")
        plan = coalesce(arr[:, 0], arr[:, 1], gap)
        spans = np.stack([plan.group_starts, plan.group_ends - plan.group_starts], axis=1)
        return cut_blobs(self._store.read_ranges(self._path, spans), plan.range_group.tolist(),
                    plan.range_offset.tolist(), plan.range_lengths.tolist())

    def _buffer_location(self, col: ColumnState, page: PageInfo, key: tuple[int, int],
                         ctx: dec.DecodeContext) -> tuple[int, int]:
        kind, index = key
        if kind == 0:  # page buffer
            offsets, sizes = page.buffer_offsets, page.buffer_sizes
        elif kind == 1:  # column buffer
            offsets, sizes = col.buffer_offsets, col.buffer_sizes
        elif kind == 2:  # file (global) buffer
            if not 0 <= index < len(self._gbo):
                raise ctx.corrupt(f"encoding references global buffer {index}, the file has {len(self._gbo)}")
            return self._gbo[index]
        else:
            raise ctx.corrupt(f"unknown buffer type {kind}")
        if not 0 <= index < len(offsets):
            raise ctx.corrupt(f"encoding references buffer {index}, the page has {len(offsets)}")
        return offsets[index], sizes[index]

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

    def whole_pages(self, name: str) -> Optional[tuple[pa.DataType, list[tuple[EncodingInfo, int, dict]]]]:
        """Top-level column ``name`` as stored when it is a plain leaf (None otherwise): its type and,
        per non-empty page, (encoding info, rows, buffer key -> bytes), every buffer fetched in one
        round (what :mod:`lance_ops.format.v2_0.batch` decodes for many files at once)."""
        node = self._top_node(name)
        if type(node) is not LeafNode:
            return None

        def work() -> tuple[pa.DataType, list[tuple[EncodingInfo, int, dict]]]:
            self._check_top(node)
            col = self._column(node.column)
            requests: list[tuple[int, int]] = []
            pages = []
            for page in col.pages:
                if page.length > 0:
                    info = col.infos[page.index]
                    ctx = dec.DecodeContext(self._uri, f"column {col.index} ({col.path!r}) page {page.index}")
                    pages.append((info, page.length, len(requests)))
                    requests.extend(self._buffer_location(col, page, key, ctx) for key in info.buffers)
            data = self._fetch(requests)
            return node.dtype, [(info, n, dict(zip(info.buffers, data[first:first + len(info.buffers)])))
                                for info, n, first in pages]

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
            for page in col.pages:
                if page.length <= 0:
                    continue
                info = col.infos[page.index]
                ctx = dec.DecodeContext(self._uri, f"column {col.index} ({col.path!r}) page {page.index}")
                if info.fixed is not None and info.fixed.all_null:
                    work.append((node, page, info, ctx, -1))
                    continue
                work.append((node, page, info, ctx, len(requests)))
                requests.extend(self._buffer_location(col, page, key, ctx) for key in info.buffers)
        data = self._fetch(requests)
        chunks: dict[int, list[pa.Array]] = {id(node): [] for node in nodes}
        for node, page, info, ctx, first in work:
            if first < 0:
                arr = pa.nulls(page.length, node.dtype)
            else:
                keys = info.buffers
                bufs = dec.PageBuffers({key: pa.py_buffer(d) for key, d in zip(keys, data[first : first + len(keys)])})
                arr = dec.decode_rows(info.encoding, page.length, node.dtype, bufs, ctx,
                                      ZERO, np.array([page.length], dtype=np.int64))
            chunks[id(node)].append(arr)
        return [chunks[id(node)] or [empty_array(node.dtype)] for node in nodes]

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
