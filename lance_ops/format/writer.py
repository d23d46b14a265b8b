"""Streaming writer of Lance v2 data files (file format 2.0), byte-compatible with upstream Lance.

    with LanceFileWriter("s3://bucket/data/x.lance", storage_options=opts) as w:
        for batch in batches:
            w.write_batch(batch)
    # the file appears when the ``with`` block ends (aborted if it raised)

Layout written (see ``lance_ops.format.container``): page buffers, each padded with 0x48 to a 64-byte
boundary, in the order pages are produced (per batch, column order) -- with blob fields
(``lance-encoding:blob``) every batch first writes its blob values, each padded the same way, and
then the pages it completes; global buffers added with
:meth:`LanceFileWriter.add_global_buffer` (padded, in-stream); then global buffer 0 = the
``lance.file.FileDescriptor`` (schema + row count, unpadded); one ``ColumnMetadata`` per column;
the column metadata offset table; the global buffer offset table; the 40-byte footer.

Memory is bounded by the per-column page accumulation: page buffers go to the output sink as
soon as a page is encoded.
"""
from __future__ import annotations

import functools
import os
import struct
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence

import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import Message

from lance_ops.io.per_process import kept_pool
from lance_ops._proto import encodings_v2_0_pb2 as enc_pb
from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.errors import SchemaMismatchError, UnsupportedError
from lance_ops.format import blob_v2
from lance_ops.format.buffers import chunk_size
from lance_ops.format.container import (
    ARRAY_ENCODING_URL,
    COLUMN_ENCODING_URL,
    PAD_BYTE,
    PAGE_ALIGNMENT,
    Footer,
    padding_for,
)
from lance_ops.format.v2_0 import encode as enc20
from lance_ops.format.v2_0.blob import column_encoding_bytes as blob_column_encoding_bytes
from lance_ops.format.v2_0.fields import EncodedPage, build_encoder, check_values, check_writable
from lance_ops.format.v2_0.leaf_encoder import PageEncoding
from lance_ops.format.v2_1 import encode as enc21
from lance_ops.format.v2_1.encode import FieldEncoderV21
from lance_ops.format.v2_1 import fields as fields21
from lance_ops.format.v2_1.blob import OutOfLineBuffers
from lance_ops.format.v2_1.blob_v2 import BlobV2FieldEncoder, SideFiles
from lance_ops.format.v2_1.page_line import PageLine
from lance_ops.format.version import V2_WRITABLE, FileVersion
from lance_ops.io.base import ObjectStore, ObjectWriter
from lance_ops.schema import conform_batch, to_lance_fields
from lance_ops.format.batch_argument import batch_argument

DEFAULT_CACHE_BYTES_PER_COLUMN = 8 * 1024 * 1024
DEFAULT_MAX_PAGE_BYTES = 32 * 1024 * 1024
MAX_PAGE_BYTES_ENV = "LANCE_FILE_WRITER_MAX_PAGE_BYTES"
_PADDING = PAD_BYTE * PAGE_ALIGNMENT
SUPPORTED_VERSIONS = V2_WRITABLE  # 2.1/2.2 via lance_ops.format.v2_1.encode
#: columns of a 2.1+ batch encoded at once (``LANCE_OPS_ENCODE_THREADS``; 0 or 1: one at a time)
ENCODE_THREADS = int(os.environ.get("LANCE_OPS_ENCODE_THREADS", min(4, os.cpu_count() or 1)))
_POOL = kept_pool(max(ENCODE_THREADS, 1), "lance-ops-encode")
#: input bytes of a whole file below which its columns are encoded without the pool
PARALLEL_MIN_BYTES = 256 * 1024


def _encode_pool() -> Optional[ThreadPoolExecutor]:
    """The shared column-encoding pool (re-created in a forked child), or None when threads are off."""
    return _POOL.get() if ENCODE_THREADS > 1 else None


@dataclass(frozen=True)
class WrittenPage:
    """Where one page of one column landed in the file."""

    column_index: int
    row_start: int  # first row (first item for columns below a list) of the page in its column
    num_rows: int
    buffers: tuple[tuple[int, int], ...]  # (offset, size) of each page buffer
    encoding: PageEncoding = field(compare=False, repr=False)  # a PageLayout for 2.1+ pages


class _Encoder(Protocol):
    """What the writer asks of a field encoder, whichever version made it (2.0 ``v2_0.fields``,
    2.1+ ``v2_1.encode``, blob v2 ``v2_1.blob_v2``)."""

    def maybe_encode(self, array: pa.Array, external: Optional[OutOfLineBuffers] = None) -> Sequence[EncodedPage]:
        """Queue one batch's values of the field; the pages that completes."""

    def flush(self) -> Sequence[EncodedPage]:
        """Pages of everything still queued."""

    def finish(self) -> Sequence[EncodedPage]:
        """Pages written once, after the last flush."""


def _any_bytes(type_url: str, message: Message) -> bytes:
    return any_pb2.Any(type_url=type_url, value=message.SerializeToString()).SerializeToString()


def _direct_encoding(type_url: str, message: Message) -> file2_pb2.Encoding:
    encoding = file2_pb2.Encoding()
    encoding.direct.encoding = _any_bytes(type_url, message)
    return encoding


def _column_encoding_bytes() -> bytes:
    column_encoding = enc_pb.ColumnEncoding()
    column_encoding.values.SetInParent()
    return _any_bytes(COLUMN_ENCODING_URL, column_encoding)


_COLUMN_ENCODING = _column_encoding_bytes()
_BLOB_COLUMN_ENCODING = blob_column_encoding_bytes()


def _max_page_bytes(value: int | None) -> int:
    if value is not None:
        return int(value)
    env = os.environ.get(MAX_PAGE_BYTES_ENV)
    if env:
        try:
            return int(env)
        except ValueError:
            pass
    return DEFAULT_MAX_PAGE_BYTES


class V2FileWriter:
    """Write one Lance data file; mirrors ``lance.file.LanceFileWriter``.

    ``schema`` may be omitted: it is then taken from the first batch. ``data_cache_bytes`` is the
    accumulation budget shared by the top-level fields (upstream semantics: when given it is
    divided by the number of top-level fields; when None each column gets 8 MiB).
    ``max_page_bytes`` (default 32 MiB, or ``LANCE_FILE_WRITER_MAX_PAGE_BYTES``) caps the size of
    a page cut from one oversized array. ``lance_fields`` (internal, for datasets) are the Lance
    field protos to store instead of ``to_lance_fields(schema)`` (pre-assigned field ids).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        version: str | FileVersion = FileVersion.V2_0,
        storage_options: Mapping[str, Any] | None = None,
        data_cache_bytes: int | None = None,
        max_page_bytes: int | None = None,
        lance_fields: Sequence[file_pb2.Field] | None = None,
    ) -> None:
        parsed = FileVersion.parse_file_writer(version)
        if parsed not in SUPPORTED_VERSIONS:  # legacy files come from the registry's legacy writer
            raise UnsupportedError(
                f"Lance file version {str(version)!r} cannot be written yet (supported: {', '.join(SUPPORTED_VERSIONS)})")
        self.version = parsed
        self.path = os.fspath(path) if isinstance(path, os.PathLike) else path
        self._storage_options = storage_options
        self._data_cache_bytes = data_cache_bytes
        self._max_page_bytes = _max_page_bytes(max_page_bytes)
        self._given_lance_fields = list(lance_fields) if lance_fields is not None else None
        self._schema: pa.Schema | None = None
        self._lance_fields: list[file_pb2.Field] = []
        self._encoders: list[_Encoder] = []
        self._columns: list[file2_pb2.ColumnMetadata] = []
        self._pages: list[list[WrittenPage]] = []
        self._column_rows: list[int] = []
        self._schema_metadata: dict[str, bytes] = {}
        self._global_buffers: list[tuple[int, int]] = []
        self._blob_columns: set[int] = set()  # 2.0 columns whose column encoding is ``blob``
        self._has_blobs = False
        self._rows = 0
        self._input_bytes = 0  # input bytes given so far (see _encode_in_order)
        self._blob_v2_names: set[str] = set()
        self._blob_side_files: SideFiles | None = None
        self._inner_path = ""
        self._store: ObjectStore | None = None
        self._sink: ObjectWriter | None = None
        self._line: PageLine | None = None  # 2.1+ pages encoded in the background (ADR 0055)
        self._closed = False
        if schema is not None:
            self._initialize(schema)

    # --- set-up --------------------------------------------------------------------------------
    def _initialize(self, schema: pa.Schema) -> pa.Schema:
        """Validate the schema and build one encoder per top-level field (no bytes written).

        Returns the schema the file stores (blob v2 fields in their logical form), now ``self._schema``."""
        if len(schema) == 0:
            raise SchemaMismatchError("cannot write a Lance file with no columns")
        schema = self._blob_v2_schema(schema)
        lance_fields = to_lance_fields(schema)  # raises UnsupportedTypeError for map, union, views...
        for f in schema:
            if f.name in self._blob_v2_names:
                continue
            if self.version is FileVersion.V2_0:
                check_writable(f)
            else:  # [v2.1 dispatch] leaf-only columns, see lance_ops.format.v2_1.encode
                fields21.check_writable(f, self.version)
        if self._given_lance_fields is not None:
            if len(self._given_lance_fields) != len(lance_fields):
                raise SchemaMismatchError(
                    f"lance_fields has {len(self._given_lance_fields)} fields but the schema flattens to "
                    f"{len(lance_fields)}")
            lance_fields = self._given_lance_fields
        if self._data_cache_bytes is not None:
            cache = max(1, int(self._data_cache_bytes) // len(schema))
        else:
            cache = DEFAULT_CACHE_BYTES_PER_COLUMN
        counter = [0]
        blob_columns: set[int] = set()
        if self.version is FileVersion.V2_0:
            encoders20 = [build_encoder(f, counter, cache, self._max_page_bytes) for f in schema]
            for encoder in encoders20:
                blob_columns.update(encoder.blob_columns())
            self._encoders = list(encoders20)
            has_blobs = bool(blob_columns)
        else:  # [v2.1 dispatch]
            encoders21: list[FieldEncoderV21 | BlobV2FieldEncoder] = []
            for f in schema:
                if f.name in self._blob_v2_names:  # [blob v2] one descriptor column per blob field
                    encoders21.append(BlobV2FieldEncoder(f, counter[0], cache, self._max_page_bytes,
                                                         self._side_files))
                    counter[0] += 1
                else:
                    encoders21.append(enc21.build_encoder(f, counter, cache, self._max_page_bytes, self.version))
            self._encoders = list(encoders21)
            has_blobs = any(encoder.blob_leaves for encoder in encoders21)
        num_columns = counter[0]
        self._blob_columns = blob_columns
        self._has_blobs = has_blobs
        self._schema = schema
        self._lance_fields = blob_v2.data_file_fields(lance_fields) if self._blob_v2_names else lance_fields
        self._columns = [file2_pb2.ColumnMetadata() for _ in range(num_columns)]
        self._pages = [[] for _ in range(num_columns)]
        self._column_rows = [0] * num_columns
        for key, value in (schema.metadata or {}).items():
            self._schema_metadata[key.decode() if isinstance(key, bytes) else key] = (
                value if isinstance(value, bytes) else str(value).encode())
        return schema

    def _blob_v2_schema(self, schema: pa.Schema) -> pa.Schema:
        """``schema`` with blob v2 fields (``lance.blob.v2``; datasets at 2.2 turn legacy blob
        fields into them, see ``table.write.blob_v2_schema``) in their logical struct form;
        remembers their names. Blob v2 below the top level or before 2.2 is refused. Side files
        go to ``<file stem>/`` next to the file."""
        names = []
        fields = []
        at_2_2 = self.version >= FileVersion.V2_2
        for f in schema:
            if blob_v2.is_blob_v2(f):
                if not at_2_2:
                    raise UnsupportedError(
                        f"field {f.name!r}: lance.blob.v2 columns need file version 2.2 or later (this file is "
                        f"{self.version}); use large_binary with lance-encoding:blob for the older blob layout")
                f = blob_v2.logical_field(f)
                names.append(f.name)
            else:
                t = f.type
                nested = (pa.types.is_struct(t) and any(blob_v2.has_blob_v2(t.field(i)) for i in range(t.num_fields))) or (
                    hasattr(t, "value_field") and blob_v2.has_blob_v2(t.value_field))
                if nested:
                    raise UnsupportedError(f"field {f.name!r}: lance.blob.v2 columns are only written at the top level")
            fields.append(f)
        self._blob_v2_names = set(names)
        return pa.schema(fields, metadata=schema.metadata) if names else schema

    def _side_files(self) -> SideFiles:
        """The blob v2 side files of this data file (opened on first use)."""
        if self._blob_side_files is None:
            self._open_sink()
            assert self._store is not None  # opened with the sink
            self._blob_side_files = SideFiles(self._store, self._inner_path)
        return self._blob_side_files

    def _open_sink(self) -> ObjectWriter:
        if self._sink is None:
            from lance_ops.io import open_store

            self._store, inner = open_store(self.path, self._storage_options)
            self._inner_path = inner
            self._sink = self._store.open_output(inner)
        return self._sink

    # --- public API ----------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema | None:
        """The Arrow schema being written (None until given or taken from the first batch)."""
        return self._schema

    @property
    def num_columns(self) -> int:
        """Columns of the file (struct headers, list offsets and every leaf: one per ColumnMetadata)."""
        return len(self._columns)

    @property
    def lance_fields(self) -> list[file_pb2.Field]:
        """The Lance fields stored in the file (pre-order, one column each in 2.0)."""
        return list(self._lance_fields)

    @property
    def pages(self) -> list[list[WrittenPage]]:
        """Per column, the pages written so far (complete after :meth:`close`)."""
        return [list(p) for p in self._pages]

    @property
    def rows_written(self) -> int:
        """Rows written so far (some may still sit in page queues until :meth:`close`)."""
        return self._rows

    def tell(self) -> int:
        """Bytes written to the output so far (pages being encoded are written first)."""
        if self._line is not None:
            self._line.drain()
        return self._sink.tell() if self._sink is not None else 0

    def reached(self, size: int) -> bool:
        """``tell() >= size``, without waiting for the pages being encoded when they cannot bring
        the file to ``size`` bytes (a file size limit far away costs no wait)."""
        if self._line is not None and len(self._line):
            if (self._sink.tell() if self._sink is not None else 0) + self._line.bound() < size:
                return False
        return self.tell() >= size

    def write_batch(self, batch: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch] | None = None, *,
                    data: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch] | None = None) -> None:
        """Append ``batch`` (pylance's keyword): a RecordBatch, a Table or an iterable of batches."""
        batch = batch_argument(batch, data)
        self._check_open()
        if isinstance(batch, pa.Table):
            batches: Iterable[pa.RecordBatch] = batch.to_batches()
            if self._schema is None:
                self._initialize(batch.schema)
        elif isinstance(batch, pa.RecordBatch):
            batches = [batch]
        elif isinstance(batch, pa.RecordBatchReader):
            batches = batch
        else:
            batches = batch
        for one in batches:
            self._write_one(one)

    def add_schema_metadata(self, key: str, value: str | bytes) -> None:
        """Add (or replace) a schema metadata entry; applied when the file is closed."""
        self._check_open()
        self._schema_metadata[key] = value if isinstance(value, bytes) else str(value).encode()

    def add_global_buffer(self, data: bytes) -> int:
        """Write an extra global buffer now; returns its index (the first one is 1)."""
        self._check_open()
        sink = self._open_sink()
        position = sink.tell()
        view = memoryview(data).cast("B")
        sink.write(view)
        pad = padding_for(len(view))
        if pad:
            sink.write(_PADDING[:pad])
        self._global_buffers.append((position, len(view)))
        return len(self._global_buffers)

    def close(self) -> int:
        """Flush the remaining pages, write metadata and footer, publish the file; returns rows."""
        if self._closed:
            return self._rows
        if self._schema is None:
            raise SchemaMismatchError(
                f"{self.path}: no schema was provided when the writer was opened and no data was written, so "
                "the schema is unknown and the file cannot be created (pass schema= or write a batch); "
                "nothing was written")
        try:
            if self._line is not None:
                for encoder in self._encoders:
                    self._line.submit(self._field_encoder(encoder).page_jobs(None)[0])
                self._line.drain()
            else:
                self._encode_in_order([encoder.flush for encoder in self._encoders], self._input_bytes)
            for encoder in self._encoders:
                self._write_pages(encoder.finish())
            self._write_tail()
            if self._blob_side_files is not None:
                self._blob_side_files.close()  # side files are published before their data file
            self._open_sink().close()  # opened by _write_tail
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self._rows

    def abort(self) -> None:
        """Discard everything written; nothing appears at ``path``."""
        self._closed = True
        if self._line is not None:
            self._line.cancel()  # (returns once no job of this file still runs)
        if self._blob_side_files is not None:
            self._blob_side_files.abort()
        if self._sink is not None:
            self._sink.abort()

    def __enter__(self) -> "V2FileWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # --- internals -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the LanceFileWriter is closed")

    def _write_one(self, batch: pa.RecordBatch) -> None:
        schema = self._schema if self._schema is not None else self._initialize(batch.schema)
        if self._blob_v2_names:  # bytes / extension arrays -> the logical struct the schema names
            batch = pa.RecordBatch.from_arrays(
                [blob_v2.to_logical(c, schema.field(n)) if n in self._blob_v2_names else c
                 for n, c in zip(batch.schema.names, batch.columns)],
                schema=pa.schema([schema.field(n) if n in self._blob_v2_names else f
                                  for n, f in zip(batch.schema.names, batch.schema)]))
        batch = conform_batch(batch, schema)
        if self.version is FileVersion.V2_0:
            for array, f in zip(batch.columns, schema):
                check_values(array, f)  # before anything of this batch is encoded
        else:  # [v2.1 dispatch] struct nulls are allowed in 2.1+
            for array, f in zip(batch.columns, schema):
                fields21.check_values(array, f)
        n = batch.num_rows
        if n == 0:
            return
        if n > 2**32:
            raise ValueError("cannot write Lance files with more than 2^32 rows in one batch")
        if not self._has_blobs:
            self._input_bytes += batch.nbytes
        line = self._page_line()
        if line is not None:
            may_cut = False
            for encoder, array in zip(self._encoders, batch.columns):
                jobs, cut = self._field_encoder(encoder).page_jobs(array)
                line.submit(jobs)
                may_cut = may_cut or cut
            if may_cut:  # a page cut inside a batch is written before the next batch (statistics read it)
                line.drain()
        elif not self._has_blobs:
            self._encode_in_order([functools.partial(encoder.maybe_encode, array)
                                   for encoder, array in zip(self._encoders, batch.columns)], self._input_bytes)
        else:
            # blob values go out of line, at the current end of the file, before every page this
            # batch completes (pylance's order); positions are absolute file offsets
            sink = self._open_sink()
            external = OutOfLineBuffers(sink.tell())
            pages: list[EncodedPage] = []
            for encoder, array in zip(self._encoders, batch.columns):
                pages.extend(encoder.maybe_encode(array, external))
            for chunk in external.chunks:
                sink.write(chunk)  # type: ignore[arg-type]  # any buffer is fine; numpy's stubs give ndarray none before 3.12
            self._write_pages(pages)
        self._rows += n

    def _page_line(self) -> PageLine | None:
        """The background page encoding of a 2.1+ file without blob columns, once the file has been
        given :data:`PARALLEL_MIN_BYTES` of input (None: every batch waits for its pages: 2.0,
        blobs, no encode threads, or a small file so far, see :meth:`_encode_in_order`)."""
        if self._line is None and self.version is not FileVersion.V2_0 and not self._has_blobs \
                and not self._blob_v2_names and self._input_bytes >= PARALLEL_MIN_BYTES:
            pool = _encode_pool()
            if pool is not None:
                self._line = PageLine(pool, self._write_pages, 2 * ENCODE_THREADS + 2)
        return self._line

    @staticmethod
    def _field_encoder(encoder: _Encoder) -> FieldEncoderV21:
        assert isinstance(encoder, FieldEncoderV21)  # (the page line serves 2.1+ fields without blobs)
        return encoder

    def _encode_in_order(self, jobs: Sequence[Callable[[], Sequence[EncodedPage]]], size: int) -> None:
        """Run each field's encode job and write its pages, in field order (the bytes do not depend
        on the threads). 2.1+ fields without blobs (blob v2 side files are written in order) encode on the pool, a few ahead of the writing
        (numpy and pyarrow release the GIL); the window bounds the pages held in memory. While the
        file has been given fewer than :data:`PARALLEL_MIN_BYTES` input bytes in all (``size``), the
        jobs run here: no page can hold more, and handing a few small columns to threads costs more
        than it saves (a small append's file, ADR 0053)."""
        parallel = self.version is not FileVersion.V2_0 and not self._has_blobs and not self._blob_v2_names \
            and size >= PARALLEL_MIN_BYTES
        pool = _encode_pool() if parallel else None
        if pool is None or len(jobs) < 2:
            for job in jobs:
                self._write_pages(job())
            return
        window = ENCODE_THREADS + 1
        pending: deque[Future] = deque()
        todo = iter(jobs)
        try:
            for job in todo:
                pending.append(pool.submit(job))
                if len(pending) >= window:
                    break
            while pending:
                pages = pending.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(nxt))
                self._write_pages(pages)
                del pages
        finally:
            for fut in pending:
                fut.cancel()
            for fut in pending:  # a field's encoder must not still run when the writer is aborted
                if not fut.cancelled():
                    fut.exception()

    def _write_pages(self, pages: Sequence[EncodedPage]) -> None:
        if not pages:
            return
        sink = self._open_sink()
        for page in pages:
            column = page.column_index
            locations = _place_page(sink, self._columns[column], page)
            self._pages[column].append(
                WrittenPage(column, self._column_rows[column], page.num_rows, locations, page.encoding))
            self._column_rows[column] += page.num_rows

    def _write_tail(self) -> None:
        sink = self._open_sink()
        sink.write(_tail_bytes(sink.tell(), self._rows, self._lance_fields, self._schema_metadata, self._columns,
                               self._blob_columns, self._global_buffers, self.version))


class _Sink(Protocol):
    """Where pages go: the writer's ObjectWriter, or the buffer of :func:`small_file_bytes`."""

    def write(self, data: Any) -> int:
        """Append ``data`` (any buffer)."""

    def tell(self) -> int:
        """Bytes written so far."""


def _place_page(sink: _Sink, column: file2_pb2.ColumnMetadata, page: EncodedPage) -> tuple[tuple[int, int], ...]:
    """Write the buffers of ``page`` (each padded to the page alignment) and record the page in
    ``column``; returns ``(offset, size)`` of each buffer."""
    locations = []
    for chunks in page.buffers:
        position = sink.tell()
        size = 0
        for chunk in chunks:
            size += chunk_size(chunk)
            sink.write(chunk)
        pad = padding_for(size)
        if pad:
            sink.write(_PADDING[:pad])
        locations.append((position, size))
    proto = column.pages.add()
    proto.buffer_offsets.extend(p for p, _ in locations)
    proto.buffer_sizes.extend(s for _, s in locations)
    proto.length = page.num_rows
    # [v2.1 dispatch] 2.1+ pages are PageLayouts with priority = first row
    proto.encoding.CopyFrom(_direct_encoding(getattr(page, "type_url", ARRAY_ENCODING_URL), page.encoding))
    priority = getattr(page, "priority", 0)
    if priority:
        proto.priority = priority
    return tuple(locations)


def _tail_bytes(start: int, rows: int, lance_fields: Sequence[file_pb2.Field], schema_metadata: Mapping[str, bytes],
                columns: Sequence[file2_pb2.ColumnMetadata], blob_columns: set[int],
                global_buffers: Sequence[tuple[int, int]], version: FileVersion) -> bytes:
    """Everything after the pages of a file whose pages end at ``start``: global buffer 0 (the
    FileDescriptor), the column metadata, the two offset tables and the footer. Sets each
    column's encoding."""
    descriptor = file_pb2.FileDescriptor(length=rows)
    descriptor.schema.fields.extend(lance_fields)
    for key, value in schema_metadata.items():
        descriptor.schema.metadata[key] = value
    parts = [descriptor.SerializeToString()]
    gbo = [(start, len(parts[0]))] + list(global_buffers)
    column_meta_start = position = start + len(parts[0])
    cmo = []
    for index, column in enumerate(columns):
        column.encoding.direct.encoding = _BLOB_COLUMN_ENCODING if index in blob_columns else _COLUMN_ENCODING
        data = column.SerializeToString()
        cmo.append((position, len(data)))
        parts.append(data)
        position += len(data)
    cmo_table_start = position
    parts.append(b"".join(struct.pack("<QQ", p, s) for p, s in cmo))
    gbo_table_start = cmo_table_start + 16 * len(cmo)
    parts.append(b"".join(struct.pack("<QQ", p, s) for p, s in gbo))
    major, minor = version.footer
    parts.append(Footer(column_meta_start, cmo_table_start, gbo_table_start, len(gbo), len(cmo), major, minor).pack())
    return b"".join(parts)


# --- a whole small table at once ---------------------------------------------------------------------
#: tables up to this many bytes may take :func:`small_file_bytes`
SMALL_FILE_BYTES = 1 << 20


class _Buffer:
    """An in-memory sink."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.data += view
        return len(view)

    def tell(self) -> int:
        return len(self.data)


def _one_leaf_column(field: pa.Field, column: pa.ChunkedArray) -> bool:
    """Whether the 2.0 writer stores ``field`` as one leaf column of plain values that the
    writer's queue would hand to the page encoder whole (one chunk; nulls only where allowed)."""
    dt = field.type
    if field.metadata or isinstance(dt, pa.ExtensionType) or column.num_chunks != 1:
        return False
    if pa.types.is_dictionary(dt) or pa.types.is_fixed_size_list(dt) or pa.types.is_null(dt) or \
            pa.types.is_nested(dt) or not enc20.leaf_page_encoder_supported(dt):
        return False
    return field.nullable or column.null_count == 0


def small_file_bytes(table: pa.Table) -> bytes | None:
    """The bytes of the Lance 2.0 file ``LanceFileWriter(path, table.schema)`` writes for
    ``write_batch(table)``, made in memory without the streaming writer (its encoders, queues and
    output stream cost more than the encoding of a few rows: the statistics file of every data
    file is such a table, ADR 0053); None when that is not known to be the same file (any column
    other than one flat leaf in one chunk, no rows, over :data:`SMALL_FILE_BYTES` or the page size
    limit), for the caller to use the writer. Same page encoder, page placement and tail as the
    writer, so the same bytes (tests/file/test_small_file.py compares them)."""
    schema = table.schema
    rows = table.num_rows
    if rows == 0 or rows > 2**32 or len(schema) == 0 or table.nbytes > min(SMALL_FILE_BYTES, _max_page_bytes(None)):
        return None
    columns = [table.column(i) for i in range(len(schema))]
    if not all(_one_leaf_column(f, c) for f, c in zip(schema, columns)):
        return None
    lance_fields = to_lance_fields(schema)
    if len(lance_fields) != len(schema):
        return None
    out = _Buffer()
    metas = []
    for index, (f, column) in enumerate(zip(schema, columns)):
        encoded = enc20.encode_leaf_page(column.chunk(0), enc20.compression_from_metadata(f.metadata))
        meta = file2_pb2.ColumnMetadata()
        _place_page(out, meta, EncodedPage(index, encoded.num_rows, encoded.buffers, encoded.encoding))
        metas.append(meta)
    metadata = {(k.decode() if isinstance(k, bytes) else k): (v if isinstance(v, bytes) else str(v).encode())
                for k, v in (schema.metadata or {}).items()}
    out.write(_tail_bytes(out.tell(), rows, lance_fields, metadata, metas, set(), [], FileVersion.V2_0))
    return bytes(out.data)
