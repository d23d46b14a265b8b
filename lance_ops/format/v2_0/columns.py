"""Columns, pages and byte ranges of an open Lance 2.0 file.

The lowest layer of :class:`~lance_ops.format.v2_0.reader.LanceFileReader`: it turns a column's
metadata into its pages (each page encoding parsed and checked once, shared by equal pages),
locates the buffers an encoding references, and fetches byte ranges (from the file's bytes when
the tail read held the whole file, else by coalesced ranged reads). :mod:`node_reads` plans the
reads of column nodes on top of it; :mod:`reader` opens files and assembles tables.
"""
from __future__ import annotations

from typing import Optional, Sequence, TypeVar

import numpy as np
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops._proto import file2_pb2
from lance_ops.errors import UnsupportedError
from lance_ops.format.container import ARRAY_ENCODING_URL, COLUMN_ENCODING_URL, FOOTER_SIZE, PAGE_LAYOUT_URL
from lance_ops.format.io_plan import Fetched
from lance_ops.format.reader_base import V2ReaderBase
from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0.layout import ColumnState, cut_blobs, EncodingInfo, Node, PageInfo, WholePage
from lance_ops.format.v2_0.memo import (
    COLUMN_LIMIT, ENCODING_LIMIT, ReadMemo, remember, SMALL_COLUMN_BYTES, SMALL_COLUMN_PAGES,
)
from lance_ops.io.ranges import SMALL_RANGE_COUNT, coalesce, coalesce_list

#: a protobuf message type (parsed by ``ColumnAccess._parsed``)
_M = TypeVar("_M", bound=Message)


class ColumnAccess(V2ReaderBase):
    """Pages of columns and reads of byte ranges (the reader's first layer; see the module doc)."""

    # set when the file is opened (``LanceFileReader._open``)
    _file_size: int
    _whole: Optional[bytes]
    _gbo: list[tuple[int, int]]
    _column_meta: list[file2_pb2.ColumnMetadata]
    _column_raw: list[bytes]  # each column's ColumnMetadata bytes (the memo's key)
    _columns: dict[int, ColumnState]
    _checked: set[int]  # columns whose row count was checked
    _memo: ReadMemo
    _nodes: dict[str, Node]
    _roles: dict[int, tuple[str, str]]
    _top_names: list[str]

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
        path, role = self._roles[index]
        key = (index, path, role, self._column_raw[index])
        body_end = self._file_size - FOOTER_SIZE
        col = self._memo.columns.get(key)
        if col is None or col.data_end > body_end:  # new bytes, or past this file's end: in full
            col = self._new_column(index, path, role, body_end)
            if len(key[3]) <= SMALL_COLUMN_BYTES and len(col.pages) <= SMALL_COLUMN_PAGES:
                remember(self._memo.columns, key, col, COLUMN_LIMIT)
        self._columns[index] = col
        return col

    def _new_column(self, index: int, path: str, role: str, body_end: int) -> ColumnState:
        """Column ``index`` set up from its metadata: encodings parsed and checked, every page
        buffer within the data of the file."""
        meta = self._column_meta[index]
        where = f"column {index} ({path!r})"
        self._check_column_encoding(meta, where, role)
        pages: list[PageInfo] = []
        infos: list[EncodingInfo] = []
        row = 0
        data_end = 0
        encodings = self._memo.encodings
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
                data_end = max(data_end, o + s)
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
                          tuple(int(x) for x in meta.buffer_offsets), tuple(int(x) for x in meta.buffer_sizes), infos,
                          data_end, row)
        if len(col.buffer_offsets) != len(col.buffer_sizes):
            raise self._corrupt(f"{where}: column buffer offsets and sizes differ in number")
        return col

    def _whole_plan(self, col: ColumnState) -> list[WholePage]:
        """Per non-empty page of ``col``: its index, encoding info, rows and the (position, size)
        of each buffer its encoding references (``info.buffers`` order). Kept on the column when
        no buffer is a global one (then it depends on the column's bytes alone)."""
        if col.whole_plan is not None:
            return col.whole_plan
        plan: list[WholePage] = []
        shareable = True
        for page in col.pages:
            if page.length > 0:
                info = col.infos[page.index]
                ctx = dec.DecodeContext(self._uri, f"column {col.index} ({col.path!r}) page {page.index}")
                plan.append((page.index, info, page.length,
                             [self._buffer_location(col, page, key, ctx) for key in info.buffers]))
                shareable = shareable and all(kind != 2 for kind, _ in info.buffers)
        if shareable:
            col.whole_plan = plan
        return plan

    def _check_column_encoding(self, meta: file2_pb2.ColumnMetadata, where: str, role: str) -> None:
        if not meta.HasField("encoding"):
            return
        loc = meta.encoding.WhichOneof("location")
        if loc != "direct":
            if loc == "indirect":
                raise UnsupportedError(f"{self._uri}: {where}: deferred (indirect) column encodings are not supported")
            return
        raw = meta.encoding.direct.encoding
        if (raw, role) in self._memo.column_encodings:
            return
        wrapped = self._parsed(any_pb2.Any(), raw, where, "column encoding")
        if wrapped.type_url != COLUMN_ENCODING_URL:
            raise UnsupportedError(f"{self._uri}: {where}: unknown column encoding type {wrapped.type_url!r}")
        ce = self._parsed(pb.ColumnEncoding(), wrapped.value, where, "column encoding")
        case = ce.WhichOneof("column_encoding")
        if case == "blob" and role != "blob":
            raise self._corrupt(f"{where}: blob column encoding on a field without the lance-encoding:blob metadata")
        if case == "blob" and ce.blob.inner.WhichOneof("column_encoding") not in (None, "values"):
            raise UnsupportedError(f"{self._uri}: {where}: blob column with inner encoding "
                                   f"{ce.blob.inner.WhichOneof('column_encoding')!r} is not supported")
        remember(self._memo.column_encodings, (raw, role), True, ENCODING_LIMIT)

    def _parsed(self, message: _M, data: bytes, where: str, what: str) -> _M:
        """``message`` parsed from ``data``; bytes that do not decode are a corrupt file."""
        try:
            message.ParseFromString(data)
        except DecodeError as exc:
            raise self._corrupt(f"{where}: {what} does not decode: {exc}") from None
        return message

    def _page_encoding(self, page: file2_pb2.ColumnMetadata.Page, where: str) -> EncodingInfo:
        loc = page.encoding.WhichOneof("location")
        if loc == "indirect":
            raise UnsupportedError(f"{self._uri}: {where}: deferred (indirect) page encodings are not supported")
        if loc != "direct":
            raise self._corrupt(f"{where}: page has no encoding")
        raw = page.encoding.direct.encoding
        info = self._memo.encodings.get(raw)
        if info is not None:
            return info
        wrapped = self._parsed(any_pb2.Any(), raw, where, "page encoding")
        if wrapped.type_url != ARRAY_ENCODING_URL:
            if wrapped.type_url == PAGE_LAYOUT_URL:
                raise UnsupportedError(f"{self._uri}: {where}: 2.1+ page layout found in a 2.0 file")
            raise UnsupportedError(f"{self._uri}: {where}: unknown page encoding type {wrapped.type_url!r}")
        enc = self._parsed(pb.ArrayEncoding(), wrapped.value, where, "page encoding")
        info = EncodingInfo.of(enc)
        remember(self._memo.encodings, raw, info, ENCODING_LIMIT)
        return info

    def _check_length(self, col: ColumnState, expected: int) -> None:
        if col.index not in self._checked:
            if col.num_rows != expected:
                raise self._corrupt(
                    f"column {col.index} ({col.path!r}) pages hold {col.num_rows} rows, expected {expected}"
                )
            self._checked.add(col.index)

    # --- I/O -----------------------------------------------------------------------------
    def _fetch(self, requests: np.ndarray | Sequence[tuple[int, int]]) -> Fetched:
        """The bytes of ``(start, length)`` ranges, as zero-copy views into coalesced reads.

        Ranges are merged here (same gap rule as the store) so that the store returns each merged
        span whole and no range is copied out of it.
        """
        whole = self._whole
        if whole is not None:
            pairs = requests.reshape(-1, 2).tolist() if isinstance(requests, np.ndarray) else requests
            size = len(whole)
            for s, n in pairs:
                if s < 0 or n < 0 or s + n > size:
                    raise self._corrupt("a read would go past the end of the file")
            return [whole[s:s + n] for s, n in pairs]
        arr = np.asarray(requests, dtype=np.int64).reshape(-1, 2)
        if not len(arr):
            return []
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
