"""Reader for Lance v2 data files of file format version 2.1 and later (2.1, 2.2, 2.3).

2.1+ files store one column per *leaf* field (struct and list fields have no column of their
own: their validity and offsets live in the repetition/definition levels of every leaf below
them). Every page is an ``Any(/lance.encodings21.PageLayout)`` whose ``priority`` is its first row.

Reads go in at most two coalesced I/O rounds per call: first the per-page metadata that has not
been loaded yet (mini-block chunk tables, dictionaries, repetition indexes), then the data --
for ``read_range`` / ``take_rows`` only the mini-block chunks or full-zip rows that hold the
requested rows. Page layouts and compressive encodings are decoded in
:mod:`lance_ops.format.v2_1.decode`. The chunks of consecutive mini-block pages with the same
encodings are decoded as one batch, back-to-back plain full-zip pages are read as one range, and
the decoding of large reads is spread over a small thread pool (``LANCE_OPS_DECODE_THREADS``).
"""
from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from lance_ops.io.per_process import kept_pool
from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.errors import CorruptFileError, LanceOpsError, OutOfRangeError, UnsupportedError
from lance_ops.format import blob_v2
from lance_ops.format.container import FOOTER_SIZE, PAGE_LAYOUT_URL, Footer
from lance_ops.format.reader_base import DECODE_ERRORS, V2ReaderBase, take_indices
from lance_ops.format.v2_1 import assemble
from lance_ops.format.v2_1 import decode as dec
from lance_ops.format.v2_1.compression.decode import EncodingCorrupt, EncodingUnsupported
from lance_ops.format.v2_1 import memo as mm
from lance_ops.format.v2_1 import schema_layout as sl
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore
from lance_ops.schema import FieldNode

__all__ = ["LanceFileReaderV21", "SUPPORTED_VERSIONS"]

SUPPORTED_VERSIONS = (FileVersion.V2_1, FileVersion.V2_2, FileVersion.V2_3)
TAIL_READ_BYTES = 64 * 1024
#: decode threads (``LANCE_OPS_DECODE_THREADS``; 0 or 1 decodes in the calling thread)
DECODE_THREADS = int(os.environ.get("LANCE_OPS_DECODE_THREADS", min(4, os.cpu_count() or 1)))
PARALLEL_MIN_BYTES = 1 << 20  # smaller reads decode in the calling thread
GROUP_MAX_PART_BYTES = 1 << 20  # pages reading at most this much may be decoded as one batch
_POOL = kept_pool(max(DECODE_THREADS, 1), "lance-ops-decode")
_T = TypeVar("_T")
_P = TypeVar("_P")
#: what a failed decode may raise, turned into CorruptFileError by ``_guard``
_CORRUPT_ERRORS: tuple[type[BaseException], ...] = (EncodingCorrupt, AssertionError, *DECODE_ERRORS)


def _decode_pool() -> Optional[ThreadPoolExecutor]:
    """The shared decode pool (re-created in a forked child), or None when threads are off."""
    return _POOL.get() if DECODE_THREADS > 1 else None


def _ranges(pairs: Iterable[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) arrays of the non-empty row ranges."""
    pairs = [(a, b) for a, b in pairs if b > a]
    return (np.array([a for a, _ in pairs], dtype=np.int64), np.array([b for _, b in pairs], dtype=np.int64))


def _group_decoder(page: dec.MiniBlockPage, items: list) -> dec.DecodeFn:
    """Decode function of a batch of mini-block page parts (``items`` may still grow)."""
    return lambda datas: dec.decode_group(items, datas) if items else dec.empty_decoded(page.ctx)


def _fresh(page: _P) -> _P:
    """A copy of an uninitialised page (what its constructor derived is shared, read-only)."""
    copy = object.__new__(type(page))
    copy.__dict__ = page.__dict__.copy()
    return copy


def _meta_key(tail: bytes, size: int, footer: Footer) -> Optional[tuple[int, bytes]]:
    """(file size, the bytes from global buffer 0 or the column metadata, whichever comes first,
    to the end of the file): what the file's metadata is a function of, when the tail holds it."""
    rs = size - len(tail)
    g = footer.gbo_table_start - rs
    if g < 0 or g + 16 > len(tail):
        return None
    gb0_pos = struct.unpack_from("<Q", tail, g)[0]
    start = min(gb0_pos, footer.column_meta_start)
    if start < rs:
        return None
    return size, bytes(tail[start - rs:])


@dataclass
class _FileMeta:
    """What a file's metadata bytes give, shared by the readers of files whose metadata bytes
    (and size) are identical (see ``_meta_key``); read-only but for ``templates``."""

    footer: Footer
    version: FileVersion
    gbo: list[tuple[int, int]]
    gb0_bytes: bytes
    descriptor: file_pb2.FileDescriptor
    num_rows: int
    layout: sl.SchemaLayout
    column_meta: list[file2_pb2.ColumnMetadata]
    #: column -> its pages as built, never initialised (what later readers copy)
    templates: dict[int, list] = field(default_factory=dict)
    #: the file's Lance fields (``lance_fields``), listed on first use
    fields: Optional[tuple[file_pb2.Field, ...]] = None


def _plain_full_zip(page: dec.AnyPage) -> bool:
    return isinstance(page, dec.FullZipPage) and page.cw == 0 and not page.has_index and page.fixed_bytes > 0 \
        and page.max_rep == 0 and len(page.offsets) == 1


class LanceFileReaderV21(V2ReaderBase):
    """Read a Lance 2.1 / 2.2 / 2.3 data file from a local path or an object store URI.

    Same surface as the 2.0 :class:`~lance_ops.format.v2_0.reader.LanceFileReader`.
    """

    def __init__(self, path: str, storage_options: Optional[Mapping[str, Any]] = None, *,
                 store: Optional[ObjectStore] = None, _tail: Optional[tuple[bytes, int]] = None,
                 memo: Optional[mm.Memo] = None) -> None:
        """``memo``: what the readers of one dataset object share (see :mod:`.memo`); a fresh one
        by default."""
        self._bind(path, storage_options, store)
        self._memo = memo if memo is not None else mm.new_memo()
        self._given_tail = _tail  # (last bytes, file size) already read by the version dispatch
        self._whole: Optional[memoryview] = None  # the whole file, when the tail read held all of it
        self._pages: dict = {}
        self._described: Optional[list] = None  # the schema tree with blob descriptions
        self._guard(self._open)

    # --- public properties ---------------------------------------------------------------
    def read_global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0: the schema, kept from opening; others read now)."""
        if not 0 <= index < len(self._gbo):
            raise IndexError(f"{self._uri}: global buffer {index} out of range (file has {len(self._gbo)})")
        if index == 0:
            return self._gb0_bytes
        pos, size = self._gbo[index]
        return self._guard(lambda: bytes(self._store.read_range(self._path, pos, size)))

    @property
    def lance_fields(self) -> list[file_pb2.Field]:
        """The Lance field protos stored in the file (pre-order, with their field ids); listed once
        per shared metadata state."""
        meta = self._meta
        if meta.fields is None:
            meta.fields = tuple(self._descriptor.schema.fields)
        return list(meta.fields)

    def column_layouts(self, column_index: int) -> list[str]:
        """A short description of each page of a column (layout and encodings)."""
        pages = self._guard(lambda: self._column_pages(column_index))
        return [dec.layout_name(p.page_layout) for p in pages]

    # --- reads ---------------------------------------------------------------------------
    def read_all(self, columns: Optional[Sequence[str]] = None, *, blob_descriptions: bool = False) -> pa.Table:
        """Every row of the chosen top-level columns (all by default).

        Blob columns return their bytes; with ``blob_descriptions`` their (position, size)
        descriptions instead (what pylance's datasets return), without reading the bytes."""
        return self._read(columns, _ranges([(0, self._num_rows)]), None, blob_descriptions)

    def read_range(self, start: int, num_rows: int, columns: Optional[Sequence[str]] = None, *,
                   blob_descriptions: bool = False) -> pa.Table:
        """Rows ``start .. start + num_rows`` of the chosen columns (all by default); blob columns as in
        :meth:`read_all`."""
        start, num_rows = int(start), int(num_rows)
        if start < 0 or num_rows < 0 or start + num_rows > self._num_rows:
            raise OutOfRangeError(
                f"{self._uri}: cannot read rows {start}..{start + num_rows} of a file with {self._num_rows} rows")
        return self._read(columns, _ranges([(start, start + num_rows)]), None, blob_descriptions)

    def take_rows(self, indices: Iterable[int] | np.ndarray | pa.Array, columns: Optional[Sequence[str]] = None, *,
                  blob_descriptions: bool = False) -> pa.Table:
        """The rows at ``indices`` (any order, repeats allowed), in that order; consecutive rows are read as ranges."""
        uniq, inverse = take_indices(indices, self._num_rows, self._uri)
        return self._read(columns, _row_ranges(uniq), inverse, blob_descriptions)

    def __repr__(self) -> str:
        return f"LanceFileReaderV21({self._uri!r}, version={self._version}, rows={self._num_rows})"

    # --- errors --------------------------------------------------------------------------
    def _guard(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except LanceOpsError:
            raise
        except EncodingUnsupported as exc:
            raise UnsupportedError(f"{self._uri}: {exc}") from exc
        except _CORRUPT_ERRORS as exc:
            raise CorruptFileError(self._uri, f"cannot decode file: {type(exc).__name__}: {exc}") from exc

    # --- opening -------------------------------------------------------------------------
    def _open(self) -> None:
        given, self._given_tail = self._given_tail, None
        tail, size = given if given is not None else self._store.read_tail(self._path, TAIL_READ_BYTES)
        self._file_size = size
        footer = Footer.unpack(tail, size, self._uri)
        key = _meta_key(tail, size, footer)
        meta = mm.recall(self._memo, "files", key) if key is not None else None
        if meta is None:
            meta, lowest = self._parse_meta(bytes(tail), size, footer)
            # shared only when every byte it came from lies inside the key
            if key is not None and lowest >= size - len(key[1]):
                mm.remember(self._memo, "files", key, meta)
        if len(tail) == size:
            # a small file came whole with its tail: later reads are served from it (no I/O)
            self._whole = memoryview(bytes(tail))
        self._meta = meta
        self._footer, self._version, self._gbo, self._gb0_bytes = meta.footer, meta.version, meta.gbo, meta.gb0_bytes
        self._descriptor, self._num_rows, self._column_meta = meta.descriptor, meta.num_rows, meta.column_meta
        layout = self._layout = meta.layout
        self._schema, self._tree = layout.schema, layout.tree
        self._leaves, self._leaf_ids, self._by_column = layout.leaves, layout.leaf_ids, layout.by_column

    def _parse_meta(self, tail: bytes, size: int, footer: Footer) -> tuple["_FileMeta", int]:
        """Parse and check the file's metadata (GBO table, FileDescriptor, column metadata) from
        ``tail`` (the file's last bytes) and whatever else must be read; also returns the lowest
        file position any of it came from."""
        version = FileVersion.from_footer(footer.major, footer.minor, self._uri)
        if version not in SUPPORTED_VERSIONS:
            raise UnsupportedError(f"{self._uri}: Lance file version {version} is not read by the 2.1+ reader")
        region_start = size - len(tail)
        gbo_end = footer.gbo_table_start + 16 * footer.num_global_buffers
        need_start = footer.column_meta_start
        if footer.gbo_table_start < region_start:
            extra = self._store.read_range(self._path, footer.gbo_table_start, gbo_end - footer.gbo_table_start)
            gbo_raw = bytes(extra)
        else:
            gbo_raw = tail[footer.gbo_table_start - region_start: gbo_end - region_start]
        gbo = np.frombuffer(gbo_raw, dtype="<u8").reshape(-1, 2).astype(np.int64)
        body_end = size - FOOTER_SIZE
        if np.any(gbo[:, 0] + gbo[:, 1] > body_end):
            raise self._corrupt("a global buffer lies beyond the end of the file")
        gbo_list = [(int(p), int(s)) for p, s in gbo]
        gb0_pos, gb0_size = gbo_list[0]
        lowest = min(footer.cmo_table_start, footer.gbo_table_start, gb0_pos)
        need_start = min(need_start, gb0_pos) if footer.column_meta_start - gb0_pos <= (1 << 20) else need_start
        if need_start < region_start:
            head = bytes(self._store.read_range(self._path, need_start, region_start - need_start))
            tail = head + tail
            region_start = need_start

        def take(pos: int, length: int) -> bytes:
            off = pos - region_start
            if off < 0 or off + length > len(tail):
                raise self._corrupt(f"metadata range {pos}..{pos + length} is outside the file")
            return tail[off:off + length]

        if gb0_pos >= region_start:
            gb0_bytes = take(gb0_pos, gb0_size)
        else:
            gb0_bytes = bytes(self._store.read_range(self._path, gb0_pos, gb0_size))
        descriptor = file_pb2.FileDescriptor()
        try:
            descriptor.ParseFromString(gb0_bytes)
        except DecodeError as exc:
            raise self._corrupt(f"global buffer 0 (FileDescriptor) does not decode: {exc}") from None
        layout = sl.schema_layout(descriptor.schema, self._uri, self._memo)
        if layout.num_columns != footer.num_columns:
            raise self._corrupt(f"schema has {layout.num_columns} leaf fields but the file has {footer.num_columns} columns")
        cmo = np.frombuffer(take(footer.cmo_table_start, 16 * footer.num_columns), dtype="<u8").reshape(-1, 2).astype(np.int64)
        column_meta: list[file2_pb2.ColumnMetadata] = []
        for i, (pos, length) in enumerate(cmo.tolist()):
            meta = file2_pb2.ColumnMetadata()
            try:
                meta.ParseFromString(take(pos, length))
                if meta.encoding.WhichOneof("location") == "direct":
                    # not needed to read the column, but its envelope must decode (as upstream checks)
                    any_pb2.Any().ParseFromString(meta.encoding.direct.encoding)
            except DecodeError as exc:
                raise self._corrupt(f"column {i} metadata does not decode: {exc}") from None
            column_meta.append(meta)
            lowest = min(lowest, pos)
        return _FileMeta(footer, version, gbo_list, gb0_bytes, descriptor, int(descriptor.length), layout,
                         column_meta), lowest

    ctx_for = staticmethod(sl.ctx_for)

    def _column_pages(self, column: int) -> list:
        """The pages of a column, not yet initialised (copies of the pages of an earlier file with
        byte-identical metadata when there is one)."""
        got = self._pages.get(column)
        if got is not None:
            return got
        templates = self._meta.templates.get(column)
        if templates is not None:
            pages = [_fresh(t) for t in templates]
        else:
            pages = self._build_pages(column)
            if not any(isinstance(p, dec.BlobPage) for p in pages):  # (blob pages hold this reader's fetch)
                self._meta.templates[column] = [_fresh(p) for p in pages]
        self._pages[column] = pages
        return pages

    def _build_pages(self, column: int) -> list:
        leaf = self._by_column[column]
        meta = self._column_meta[column]
        protos = self._layout.page_protos.setdefault(self._version, {})
        pages: list[dec.AnyPage] = []
        first = 0
        for i, p in enumerate(meta.pages):
            enc = p.encoding
            if enc.WhichOneof("location") != "direct":
                raise UnsupportedError(f"{self._uri}: column {column} ({leaf.path}) page {i}: "
                                       f"{enc.WhichOneof('location')} page encodings are not supported")
            raw = enc.direct.encoding
            proto = protos.get((column, raw))
            if proto is not None:
                # a mini-block page of an encoding already seen (files of one dataset share them):
                # what its constructor derives from the encoding is copied, not recomputed
                copied = dec.MiniBlockPage.__new__(dec.MiniBlockPage)
                copied.__dict__.update(proto.__dict__)
                copied.offsets, copied.sizes = list(p.buffer_offsets), list(p.buffer_sizes)
                copied.num_rows, copied.first_row = int(p.length), first
                pages.append(copied)
                first += int(p.length)
                continue
            anym = any_pb2.Any()
            anym.ParseFromString(raw)
            if anym.type_url != PAGE_LAYOUT_URL:
                raise UnsupportedError(f"{self._uri}: column {column} ({leaf.path}) page {i}: "
                                       f"encoding {anym.type_url!r} is not a 2.1+ page layout")
            layout = pb.PageLayout()
            layout.ParseFromString(anym.value)
            page = self._make_page(layout, p, first, leaf, column, i)
            page.page_layout = layout
            page.leaf = leaf
            if isinstance(page, dec.MiniBlockPage) and type(page) is dec.MiniBlockPage \
                    and len(protos) < sl.PAGE_PROTOS_LIMIT:
                protos[(column, bytes(raw))] = page.prototype()
            pages.append(page)
            first += int(p.length)
        if first != self._num_rows and meta.pages:
            raise self._corrupt(f"column {column} ({leaf.path}) pages hold {first} rows, file has {self._num_rows}")
        return pages

    def _read_pages(self, column: int) -> list:
        """The pages of a column as the read path uses them: runs of back-to-back full-zip pages of
        plain fixed-width rows (no levels, no index, same layout) merged into one, so that they are
        read and decoded as one range."""
        key = ("read", column)
        if key in self._pages:
            return self._pages[key]
        out: list = []
        for page in self._column_pages(column):
            prev = out[-1] if out else None
            if (prev is not None and _plain_full_zip(page) and _plain_full_zip(prev)
                    and prev.offsets[0] + prev.sizes[0] == page.offsets[0]
                    and prev.first_row + prev.num_rows == page.first_row
                    and prev.layout.SerializeToString() == page.layout.SerializeToString()):
                merged = dec.FullZipPage(prev.layout, [prev.offsets[0]], [prev.sizes[0] + page.sizes[0]],
                                         prev.num_rows + page.num_rows, prev.first_row, prev.ctx, prev.version)
                merged.page_layout = prev.page_layout
                merged.leaf = prev.leaf
                out[-1] = merged
            else:
                out.append(page)
        self._pages[key] = out
        return out

    def _make_page(self, layout: pb.PageLayout, p: file2_pb2.ColumnMetadata.Page, first: int, leaf: sl.Leaf, column: int,
                   index: int) -> dec.AnyPage:
        which = layout.WhichOneof("layout")
        args = (list(p.buffer_offsets), list(p.buffer_sizes), int(p.length), first, leaf.ctx, self._version)
        try:
            if which == "mini_block_layout":
                return dec.MiniBlockPage(layout.mini_block_layout, *args)
            if which == "full_zip_layout":
                return dec.FullZipPage(layout.full_zip_layout, *args)
            if which == "all_null_layout":
                return dec.ConstantPage(layout.all_null_layout, *args)
            if which == "blob_layout":
                return dec.BlobPage(layout.blob_layout, *args, fetch=self._fetch)
            raise EncodingUnsupported(f"page layout {dec.layout_name(layout)}")
        except EncodingUnsupported as exc:
            raise UnsupportedError(f"{self._uri}: column {column} ({leaf.path}) page {index}: "
                                   f"unsupported encoding: {exc}") from None
        except (EncodingCorrupt, ValueError) as exc:
            raise self._corrupt(f"column {column} ({leaf.path}) page {index}: {exc}") from None

    # --- the read path -------------------------------------------------------------------
    def _select(self, columns: Optional[Sequence[str]], describe: bool = False) -> list[FieldNode]:
        tree = self._tree
        if describe:
            if self._described is None:
                self._described = blob_v2.described_tree(self._tree)
            tree = self._described
        if columns is None:
            return list(tree)
        by_name = {n.proto.name: n for n in tree}
        out = []
        for c in columns:
            if c not in by_name:
                raise KeyError(f"{self._uri}: no column named {c!r} (file has {sorted(by_name)})")
            out.append(by_name[c])
        return out

    def _read(self, columns: Optional[Sequence[str]], ranges: tuple[np.ndarray, np.ndarray],
              inverse: Optional[np.ndarray], describe: bool = False) -> pa.Table:
        nodes = self._select(columns, describe)
        try:
            return self._guard(lambda: self._read_inner(nodes, ranges, inverse, describe))
        except KeyError:
            raise

    def _read_inner(self, nodes: list[FieldNode], ranges: tuple[np.ndarray, np.ndarray], inverse: Optional[np.ndarray],
                    describe: bool = False) -> pa.Table:
        table = self._read_segments([(self, ranges)], nodes, describe)
        if inverse is not None:
            table = table.take(pa.array(inverse))
        return table

    @staticmethod
    def read_all_of(readers: Sequence["LanceFileReaderV21"], columns: Sequence[str]) -> pa.Table:
        """Every row of ``columns`` of each of ``readers``, back to back in reader order: what
        ``concat_tables([r.read_all(columns) for r in readers])`` returns, as one chunk.

        Files written with one schema share one schema layout; their pages are then planned and
        decoded together (the chunks of equal-encoding mini-block pages of many small files decode
        as one batch, and the Arrow arrays are assembled once), which is what makes scans of many
        small files cheap. Readers of other layouts are read one by one."""
        if not readers:
            raise ValueError("read_all_of needs at least one reader")
        first = readers[0]
        if any(r._layout is not first._layout and r._layout.key != first._layout.key for r in readers):
            return pa.concat_tables([r.read_all(columns) for r in readers]).combine_chunks()
        nodes = first._select(columns)
        segments = [(r, _ranges([(0, r._num_rows)])) for r in readers]
        try:
            return first._guard(lambda: first._read_segments(segments, nodes, False))
        except (CorruptFileError, UnsupportedError):
            if len(readers) == 1:
                raise
            # pages of several files were parsed and decoded together, so the failure cannot
            # always tell whose page it was: read the files one by one, which raises the error
            # naming the damaged file (failures are rare: the happy path pays nothing for this)
            return pa.concat_tables([r.read_all(columns) for r in readers]).combine_chunks()

    @staticmethod
    def take_all_of(readers: Sequence["LanceFileReaderV21"], indices: Sequence[Iterable[int] | np.ndarray],
                    columns: Sequence[str]) -> pa.Table:
        """``take_rows(indices[i], columns)`` of each of ``readers``, back to back in reader order,
        as one table: the rows of files of one schema layout are planned and decoded together (one
        decode per column and encoding for all the files, as :meth:`read_all_of`)."""
        if not readers or len(readers) != len(indices):
            raise ValueError("take_all_of needs one list of indices per reader, and at least one reader")
        first = readers[0]

        def one_by_one() -> pa.Table:
            return pa.concat_tables([r.take_rows(i, columns) for r, i in zip(readers, indices)]).combine_chunks()

        if len(readers) == 1 or any(r._layout is not first._layout and r._layout.key != first._layout.key
                                    for r in readers):
            return one_by_one()
        nodes = first._select(columns)
        segments, orders, done, reorder = [], [], 0, False
        for r, idx in zip(readers, indices):
            uniq, inverse = take_indices(idx, r.num_rows, r.path)
            segments.append((r, _row_ranges(uniq)))
            reorder = reorder or inverse is not None
            orders.append((np.arange(len(uniq)) if inverse is None else inverse) + done)
            done += len(uniq)
        try:
            table = first._guard(lambda: first._read_segments(segments, nodes, False))
        except (CorruptFileError, UnsupportedError):
            return one_by_one()  # names the damaged file (as read_all_of)
        return table.take(pa.array(np.concatenate(orders))) if reorder else table

    def _read_segments(self, segments: Sequence[tuple["LanceFileReaderV21", tuple[np.ndarray, np.ndarray]]],
                       nodes: list[FieldNode], describe: bool = False) -> pa.Table:
        """The rows of every (reader, row ranges) segment, back to back, of ``nodes`` (fields of
        this reader's tree; every reader shares this reader's schema layout)."""
        leaf_ids = [i for n in nodes for i in self._leaf_ids[n.id]]
        # which pages, which page-relative row ranges
        work = []  # (leaf id, reader, page, (page starts, page ends))
        for lid in leaf_ids:
            column = self._leaves[lid].column
            for rdr, (starts, ends) in segments:
                whole = len(starts) == 1 and int(starts[0]) == 0 and int(ends[0]) == rdr._num_rows
                for page in rdr._read_pages(column):
                    if whole:  # every row of the file: each page whole (shared read-only ranges)
                        if page.num_rows:
                            work.append((lid, rdr, page, _whole_page(page.num_rows)))
                        continue
                    a0, b0 = page.first_row, page.first_row + page.num_rows
                    lo = int(np.searchsorted(ends, a0, side="right"))
                    hi = int(np.searchsorted(starts, b0, side="left"))
                    if hi > lo:
                        rr = (np.maximum(starts[lo:hi], a0) - a0, np.minimum(ends[lo:hi], b0) - a0)
                        work.append((lid, rdr, page, rr))
        # round 1: page metadata
        seen: dict[int, tuple] = {}
        for _, rdr, p, _ in work:
            if not p.ready and id(p) not in seen:  # each page once, in first-seen order
                seen[id(p)] = (rdr, p)
        # (failures of a page's metadata or planning name its file, column and row: ``cur``)
        cur: tuple = (self, None)
        try:
            later = []  # (reader, page, ranges): metadata still to read, in one round
            for cur in seen.values():
                rdr, p = cur
                rr = p.init_ranges()
                if rdr._whole is not None:  # the file's bytes are in memory: no round to wait for
                    p.init(rdr._fetch(rr))
                else:
                    later.append((rdr, p, rr))
            if later:
                cur = (self, None)  # a failed fetch is not a page's failure
                datas = _fetch_from([(rdr, r) for rdr, _, rr in later for r in rr])
                pos = 0
                for rdr, p, rr in later:
                    cur = (rdr, p)
                    p.init(datas[pos:pos + len(rr)])
                    pos += len(rr)
            # round 2: data; small parts of consecutive mini-block pages with the same encodings
            # (of one file or of several files with this layout) decode as one batch
            got: list = []  # the bytes of each planned range (None: read below, in one round)
            fetch_later: list = []  # (index in got, (reader, range))
            plans: list = []
            group = None
            for lid, rdr, page, rr in work:
                cur = (rdr, page)
                key = getattr(page, "batch_key", None)
                if key is None:
                    kw = {"describe": True} if describe and isinstance(page, dec.BlobPage) else {}
                    r, fn = page.plan(*rr, **kw)
                    plans.append((lid, rdr, page, fn, len(r)))
                    group = None
                else:
                    r, part = page.plan_part(*rr)
                    small = sum([n for _, n in r]) <= GROUP_MAX_PART_BYTES
                    if part is not None and small and group is not None and group[:2] == (lid, key):
                        group[2].append((page, part))  # the group's decoder sees the appended page
                        first_lid, first_rdr, first_page, fn, k = plans[-1]
                        plans[-1] = (first_lid, first_rdr, first_page, fn, k + len(r))
                    else:
                        items = [(page, part)] if part is not None else []
                        plans.append((lid, rdr, page, _group_decoder(page, items), len(r)))
                        group = (lid, key, items) if part is not None and small else None
                if rdr._whole is not None:
                    got.extend(rdr._fetch(r))
                else:
                    for q in r:
                        fetch_later.append((len(got), (rdr, q)))
                        got.append(None)
        except Exception as exc:
            rdr, page = cur
            err = rdr._page_failure(page, exc) if page is not None else None
            if err is None:
                raise
            raise err from None
        if fetch_later:
            for (i, _), data in zip(fetch_later, _fetch_from([q for _, q in fetch_later])):
                got[i] = data
        datas = got
        jobs, pos = [], 0
        for _, rdr, page, fn, k in plans:
            jobs.append((rdr, page, fn, datas[pos:pos + k]))
            pos += k
        per_leaf: dict[int, list] = {lid: [] for lid in leaf_ids}
        for (lid, _, _, _, _), got in zip(plans, _decode_all(jobs)):
            per_leaf[lid].append(got)
        nsel = sum(int((ends - starts).sum()) for _, (starts, ends) in segments)
        states = {}
        for lid in leaf_ids:
            leaf = self._leaves[lid]
            parts = per_leaf[lid]
            d = dec.Decoded.concat(parts) if parts else dec.empty_decoded(leaf.ctx)
            if d.num_rows != nsel:
                raise self._corrupt(f"column {leaf.column} ({leaf.path}) produced {d.num_rows} rows, expected {nsel}"
                                    + _others(segments))
            states[lid] = assemble.LeafState(d.levels, d.values, leaf.canon, None,
                                        leaf.canon.max_rep, len(leaf.canon.kinds) - 1)
        arrays = []
        for n in nodes:
            try:
                arr = assemble.build_array(n, states, lambda node: self._leaf_ids[node.id])
            except EncodingUnsupported as exc:
                raise UnsupportedError(f"{self._uri}: field {n.proto.name!r}: {exc}{_others(segments)}") from None
            except EncodingCorrupt as exc:
                raise self._corrupt(f"field {n.proto.name!r}: {exc}{_others(segments)}") from None
            if len(arr) != nsel:
                raise self._corrupt(f"field {n.proto.name!r} assembled {len(arr)} rows, expected {nsel}"
                                    + _others(segments))
            arrays.append(arr)
        fields = [self._schema.field(n.proto.name) for n in nodes]
        if describe:
            fields = [blob_v2.described_field(f) for f in fields]
        schema = pa.schema(fields, metadata=self._schema.metadata)
        return pa.Table.from_arrays(arrays, schema=schema)

    def _wrap(self, page: dec.AnyPage, fn: Callable[[], _T]) -> _T:
        """``fn()`` with decoding failures turned into errors naming this file, the page's column and row."""
        try:
            return fn()
        except Exception as exc:
            err = self._page_failure(page, exc)
            if err is None:
                raise
            raise err from None

    def _page_failure(self, page: dec.AnyPage, exc: Exception) -> Optional[Exception]:
        """The error to raise for ``exc``, raised by work on ``page`` of this file (None: ``exc`` itself)."""
        leaf = self._by_column_of_page(page)
        if isinstance(exc, EncodingUnsupported):
            return UnsupportedError(f"{self._uri}: column {leaf.column} ({leaf.path}): unsupported encoding: {exc}")
        if isinstance(exc, LanceOpsError):
            return None
        if isinstance(exc, (EncodingCorrupt, struct.error, IndexError, ValueError, TypeError, OverflowError,
                            pa.ArrowException, DecodeError, AssertionError)):
            return self._corrupt(f"column {leaf.column} ({leaf.path}) page at row {page.first_row}: "
                                 f"{type(exc).__name__}: {exc}")
        return None

    @staticmethod
    def _by_column_of_page(page: dec.AnyPage) -> sl.Leaf:
        leaf = page.leaf
        assert isinstance(leaf, sl.Leaf), "page not made by this reader"
        return leaf

    def _fetch(self, reqs: dec.Ranges) -> Sequence[bytes | memoryview]:
        if not reqs:
            return []
        body_end = self._file_size - FOOTER_SIZE
        for pos, size in reqs:
            if pos < 0 or size < 0 or pos + size > body_end:
                raise self._corrupt(f"data range {pos}..{pos + size} lies outside the file")
        whole = self._whole
        if whole is not None:  # views of the bytes in memory (no copy per range)
            return [whole[pos:pos + size] for pos, size in reqs]
        return self._store.read_ranges(self._path, reqs)


_WHOLE_PAGES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _row_ranges(uniq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the runs of consecutive rows in ``uniq`` (sorted, unique)."""
    if not len(uniq):
        return uniq, uniq
    brk = np.flatnonzero(np.diff(uniq) != 1) + 1
    return uniq[np.concatenate([[0], brk])], uniq[np.concatenate([brk, [len(uniq)]]) - 1] + 1


def _whole_page(num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The page-relative row ranges of a whole page of ``num_rows`` rows (read-only, memoised)."""
    got = _WHOLE_PAGES.get(num_rows)
    if got is None:
        got = (np.zeros(1, np.int64), np.full(1, num_rows, np.int64))
        for a in got:
            a.flags.writeable = False
        if len(_WHOLE_PAGES) < 4096:
            _WHOLE_PAGES[num_rows] = got
    return got


def _decode_all(jobs: list) -> list:
    """Run the decode step of every (reader, page, decode function, data) job; big batches go to a
    small thread pool (numpy and Arrow release the GIL in the heavy loops). Pages whose decoding
    reads more data (blobs) run here, in order."""
    def one(job: tuple[LanceFileReaderV21, dec.AnyPage, dec.DecodeFn, Sequence[bytes]]) -> dec.Decoded:
        rdr, page, fn, blobs = job
        return rdr._wrap(page, lambda: fn(blobs))

    sizes = [sum(map(len, job[3])) for job in jobs]
    pool = _decode_pool() if len(jobs) > 1 and sum(sizes) >= PARALLEL_MIN_BYTES else None
    if pool is None:
        return [one(j) for j in jobs]
    futures = {}
    for i in sorted(range(len(jobs)), key=lambda i: -sizes[i]):  # largest first
        if not getattr(jobs[i][1], "decode_reads", False):
            futures[i] = pool.submit(one, jobs[i])
    return [futures[i].result() if i in futures else one(j) for i, j in enumerate(jobs)]


def _fetch_from(reqs: Sequence[tuple["LanceFileReaderV21", tuple[int, int]]]) -> list:
    """The bytes of (reader, (position, size)) requests, in order: one fetch per reader."""
    if not reqs:
        return []
    first = reqs[0][0]
    if all(r is first for r, _ in reqs):
        return list(first._fetch([q for _, q in reqs]))
    by_reader: dict[int, tuple[LanceFileReaderV21, list[int]]] = {}
    for i, (r, _) in enumerate(reqs):
        by_reader.setdefault(id(r), (r, []))[1].append(i)
    out: list = [None] * len(reqs)
    for r, idx in by_reader.values():
        for i, got in zip(idx, r._fetch([reqs[i][1] for i in idx])):
            out[i] = got
    return out


def _others(segments: Sequence[tuple["LanceFileReaderV21", Any]]) -> str:
    """For errors of a read of several files: which files were read together."""
    if len(segments) <= 1:
        return ""
    names = [r.path for r, _ in segments]
    return f" (read together with {len(names) - 1} other file(s) of the same layout: {names[1:4]}...)"
