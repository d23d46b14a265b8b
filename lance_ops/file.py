"""The public ``.lance`` data file API, shaped as pylance's ``lance.file`` (ADR 0002, ADR 0015).

``LanceFileReader(path, storage_options=None, columns=None)`` opens files of every version (2.0,
2.1/2.2, legacy v0.1) and, as pylance's, returns :class:`ReaderResults` from ``read_all``,
``read_range`` and ``take_rows`` (``to_table()`` / ``to_batches()``); ``num_rows()``,
``metadata()`` and ``file_statistics()`` are methods. ``LanceFileWriter`` takes pylance's options.

A face module: it wraps :mod:`lance_ops.format` (whose readers return tables, for lance_ops' own
layers) and nothing inside lance_ops imports it. Callers written for the earlier face keep working:
the result object hands table attributes through with a ``DeprecationWarning``, and ``num_rows`` /
``metadata`` still read as values (see :class:`RowCount` and :class:`LanceFileMetadata`).
"""
from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
from google.protobuf import text_format

from lance_ops.errors import ColumnNotFoundError, UnsupportedError
from lance_ops.format import registry
from lance_ops.format.batch_argument import batch_argument
from lance_ops.format.version import FileVersion
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.format.reader_base import V2ReaderBase
from lance_ops.format.writer import WrittenPage
from lance_ops.io.base import ObjectStore
from lance_ops.table import extension_types

#: pylance's default rows per batch of ``ReaderResults.to_batches()``
DEFAULT_BATCH_SIZE = 1024


def _deprecated(what: str) -> None:
    warnings.warn(f"lance_ops.file: {what} (as pylance's lance.file)", DeprecationWarning, stacklevel=3)


class ReaderResults:
    """What a read returns, as pylance's ``lance.file.ReaderResults``: ``to_table()`` or ``to_batches()``.

    Earlier lance_ops returned the ``pa.Table`` itself; any other attribute (``num_rows``,
    ``column``, ``equals``...) is still answered from the table, with a ``DeprecationWarning``.
    """

    def __init__(self, table: pa.Table, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._table = table
        self._batch_size = int(batch_size)

    def to_table(self) -> pa.Table:
        """The rows read, as one table."""
        return self._table

    def to_batches(self) -> pa.RecordBatchReader:
        """The rows read as a stream of batches of ``batch_size`` rows (the last one shorter)."""
        table, size = self._table, self._batch_size

        def batches() -> Iterator[pa.RecordBatch]:
            for start in range(0, table.num_rows, size):  # one slice per batch, not per row
                yield table.slice(start, size).combine_chunks().to_batches()[0]

        return pa.RecordBatchReader.from_batches(table.schema, batches())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_table", "_batch_size"):
            raise AttributeError(name)
        _deprecated(f"reads return ReaderResults; call .to_table() before .{name}")
        return getattr(self._table, name)

    def __len__(self) -> int:
        _deprecated("reads return ReaderResults; call .to_table() before len()")
        return len(self._table)

    def __getitem__(self, key: Any) -> Any:
        _deprecated("reads return ReaderResults; call .to_table() before indexing")
        return self._table[key]


class RowCount(int):
    """``num_rows()``'s value that still reads as the earlier ``num_rows`` property.

    ``reader.num_rows()`` (pylance's call) returns a plain ``int`` with no warning; using
    ``reader.num_rows`` itself as a number (compare, add, index, ``int()``) works and warns.
    """

    def __call__(self) -> int:
        """The row count as a plain ``int`` (pylance's ``num_rows()``)."""
        return int.__int__(self)

    __hash__ = int.__hash__


def _warning_dunder(name: str) -> Callable[..., Any]:
    plain = getattr(int, name)

    def method(self: RowCount, *args: Any) -> Any:
        _deprecated("num_rows is a method; call reader.num_rows()")
        return plain(int.__int__(self), *args)

    method.__name__ = name
    return method


for _name in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__radd__", "__sub__",
              "__rsub__", "__mul__", "__rmul__", "__floordiv__", "__rfloordiv__", "__truediv__", "__mod__",
              "__index__", "__int__", "__float__", "__bool__"):
    setattr(RowCount, _name, _warning_dunder(_name))


@dataclass(frozen=True)
class LanceBufferDescriptor:
    """Where one buffer lies in the file (pylance's ``LanceBufferDescriptor``)."""

    position: int
    size: int


@dataclass(frozen=True)
class LancePageMetadata:
    """One page: its buffers and its encoding (text of the encoding proto; pylance prints Rust debug text)."""

    buffers: list[LanceBufferDescriptor]
    encoding: str


@dataclass(frozen=True)
class LanceColumnMetadata:
    """One column: its column-level buffers and its pages."""

    column_buffers: list[LanceBufferDescriptor]
    pages: list[LancePageMetadata]


@dataclass(frozen=True)
class LanceFileMetadata:
    """The file's footer-level facts, with pylance's ``LanceFileMetadata`` attribute names.

    Callable (returns itself) so the earlier ``reader.metadata`` property access keeps working
    beside pylance's ``reader.metadata()``.
    """

    schema: pa.Schema
    num_rows: int
    num_data_bytes: int
    num_column_metadata_bytes: int
    num_global_buffer_bytes: int
    global_buffers: list[LanceBufferDescriptor]
    columns: list[LanceColumnMetadata]
    major_version: int
    minor_version: int

    def __call__(self) -> "LanceFileMetadata":
        """Itself: ``reader.metadata()`` and ``reader.metadata`` both give the metadata."""
        return self


@dataclass(frozen=True)
class LanceColumnStatistics:
    """Pages and bytes of one column (pylance's ``ColumnStatistics``)."""

    num_pages: int
    size_bytes: int


@dataclass(frozen=True)
class LanceFileStatistics:
    """Per-column page counts and sizes (pylance's ``LanceFileStatistics``)."""

    columns: list[LanceColumnStatistics] = field(default_factory=list)


def _buffers(positions: Sequence[int], sizes: Sequence[int]) -> list[LanceBufferDescriptor]:
    return [LanceBufferDescriptor(int(p), int(s)) for p, s in zip(positions, sizes)]


def _blob_kw(blob_descriptions: bool) -> dict[str, bool]:
    """``blob_descriptions=True`` only when asked: the legacy reader has no blob columns to describe."""
    return {"blob_descriptions": True} if blob_descriptions else {}


#: struct fields kept under a struct, in the order asked (None: the whole field)
_Paths = dict[str, Optional["_Paths"]]


def _plan_paths(columns: Sequence[str], schema: pa.Schema, path: str) -> dict[str, Optional[_Paths]]:
    """Top columns to read (in the order first named) and, under each, the nested fields kept:
    ``["s.y", "a", "s.x"]`` reads ``s`` as ``struct<y, x>`` then ``a``, as pylance's projection."""
    plan: dict[str, Optional[_Paths]] = {}
    for name in columns:
        parts = [name] if name in schema.names else name.split(".")
        t: pa.DataType | None = schema.field(parts[0]).type if parts[0] in schema.names else None
        for part in parts[1:]:
            t = t.field(part).type if t is not None and pa.types.is_struct(t) and t.get_field_index(part) >= 0 \
                else None
        if t is None:
            raise ColumnNotFoundError(f"{path}: Error creating projection: Field {name!r} not found; "
                                      f"the file has {schema.names}")
        node: dict[str, Optional[_Paths]] = plan
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part in node and node[part] is None:
                break  # already read whole
            if last:
                node[part] = None
            else:
                child = node.setdefault(part, {})
                assert child is not None
                node = child
    return plan


def _prune(column: pa.ChunkedArray, keep: Optional[_Paths]) -> pa.ChunkedArray:
    """``column`` (a struct) with only the fields in ``keep``, in that order, its validity kept."""
    if keep is None:
        return column

    def cut(arr: pa.StructArray, keep: _Paths) -> pa.Array:
        children = [cut(arr.field(n), sub) if sub is not None else arr.field(n) for n, sub in keep.items()]
        fields = [arr.type.field(n).with_type(c.type) for n, c in zip(keep, children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null() if arr.null_count else None)

    chunks = [cut(c, keep) for c in column.chunks]
    return pa.chunked_array(chunks, type=chunks[0].type if chunks else cut(pa.array([], column.type), keep).type)


class LanceFileReader:
    """Read one Lance data file; mirrors ``lance.file.LanceFileReader(path, storage_options=None, columns=None)``.

    ``columns`` restricts every read to those columns (pylance's constructor argument). The reader
    of the file's version does the work (:func:`lance_ops.format.registry.open_file_reader`; a
    2.0 file costs one tail read); :attr:`format_reader` exposes it. lance_ops extras beside
    pylance's surface: ``schema``, ``version``, ``path``, ``store`` and ``blob_descriptions=`` on reads.
    """

    def __init__(self, path: str | os.PathLike[str], storage_options: Optional[Mapping[str, Any]] = None,
                 columns: Optional[Sequence[str]] = None, *, store: Optional[ObjectStore] = None) -> None:
        self._reader = registry.open_file_reader(os.fspath(path), storage_options, store=store)
        self._columns = list(columns) if columns is not None else None
        #: nested paths (``"s.x"``) asked for: top column -> the struct fields kept (None: all)
        self._paths: Optional[dict[str, Optional[_Paths]]] = None
        if self._columns is not None:  # fail on a missing column at open time, as pylance
            names = set(self._reader.schema.names)
            if any(c not in names for c in self._columns):
                self._paths = _plan_paths(self._columns, self._reader.schema, self.path)
                self._columns = list(self._paths)

    @property
    def format_reader(self) -> Any:
        """The version's reader (``lance_ops.format``), whose reads return tables."""
        return self._reader

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the file (all columns), extension types shown as pylance's file
        reader shows them (tensors, uuids... as their types; JSON as the stored ``lance.json`` bytes)."""
        return _view(self._reader.schema)

    @property
    def version(self) -> str:
        """The file format version (``"2.0"``, ``"2.1"``, ``"2.2"`` or ``"0.1"``)."""
        return str(self._reader.version)

    @property
    def path(self) -> str:
        """The file's URI, as error messages name it."""
        return self._reader.path

    @property
    def store(self) -> ObjectStore:
        """The object store the file is read from."""
        return self._reader.store

    @property
    def num_rows(self) -> RowCount:
        """Rows in the file: call it (``num_rows()``, pylance's form); the bare value still works, with a warning."""
        return RowCount(self._reader.num_rows)

    @property
    def metadata(self) -> LanceFileMetadata:
        """Call it: ``metadata()`` is the footer, global buffers and every column's pages (v2 files)."""
        reader = self._v2("metadata()")
        footer = reader.footer
        gbs = reader.global_buffer_locations()
        columns = []
        for meta in reader.column_metadata():
            pages = [LancePageMetadata(_buffers(p.buffer_offsets, p.buffer_sizes),
                                       text_format.MessageToString(p.encoding, as_one_line=True))
                     for p in meta.pages]
            columns.append(LanceColumnMetadata(_buffers(meta.buffer_offsets, meta.buffer_sizes), pages))
        gb_bytes = sum(s for _, s in gbs)
        return LanceFileMetadata(
            schema=_view(reader.schema), num_rows=reader.num_rows, num_data_bytes=footer.column_meta_start - gb_bytes,
            num_column_metadata_bytes=footer.gbo_table_start - footer.column_meta_start,
            num_global_buffer_bytes=gb_bytes, global_buffers=[LanceBufferDescriptor(p, s) for p, s in gbs],
            columns=columns, major_version=footer.major, minor_version=footer.minor)

    def file_statistics(self) -> LanceFileStatistics:
        """Pages and page bytes of each column, as pylance's ``file_statistics()``."""
        cols = []
        for meta in self._v2("file_statistics()").column_metadata():
            size = int(sum(int(np.sum(np.asarray(p.buffer_sizes, dtype=np.int64))) for p in meta.pages))
            cols.append(LanceColumnStatistics(len(meta.pages), size))
        return LanceFileStatistics(cols)

    def read_global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0 is the file descriptor)."""
        reader: Any = self._v2("read_global_buffer()")  # the 2.0 and 2.1+ readers both have it
        return bytes(reader.read_global_buffer(index))

    def read_all(self, *, batch_size: int = DEFAULT_BATCH_SIZE, batch_readahead: int = 16,
                 columns: Optional[Sequence[str]] = None, blob_descriptions: bool = False) -> ReaderResults:
        """Every row (of the constructor's ``columns``). ``batch_readahead`` is accepted for pylance's
        signature; reads are planned whole, so it changes nothing."""
        cols = self._cols(columns)
        return ReaderResults(self._shape(self._reader.read_all(cols, **_blob_kw(blob_descriptions)), columns),
                             batch_size)

    def read_range(self, start: int, num_rows: int, *, batch_size: int = DEFAULT_BATCH_SIZE,
                   batch_readahead: int = 16, columns: Optional[Sequence[str]] = None,
                   blob_descriptions: bool = False) -> ReaderResults:
        """Rows ``[start, start + num_rows)``; past the end is an ``OutOfRangeError`` (a ``ValueError``)."""
        table = self._reader.read_range(start, num_rows, self._cols(columns), **_blob_kw(blob_descriptions))
        return ReaderResults(self._shape(table, columns), batch_size)

    def take_rows(self, indices: Iterable[int] | np.ndarray | pa.Array, *, batch_size: int = DEFAULT_BATCH_SIZE,
                  batch_readahead: int = 16, columns: Optional[Sequence[str]] = None,
                  blob_descriptions: bool = False) -> ReaderResults:
        """The rows at ``indices``, in the order given (pylance accepts ascending indices only)."""
        table = self._reader.take_rows(indices, self._cols(columns), **_blob_kw(blob_descriptions))
        return ReaderResults(self._shape(table, columns), batch_size)

    def __enter__(self) -> "LanceFileReader":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"LanceFileReader({self.path!r}, version={self.version})"

    def _shape(self, table: pa.Table, columns: Optional[Sequence[str]]) -> pa.Table:
        """``table`` with the struct columns cut to the nested paths the constructor named."""
        table = extension_types.to_view(table, _view(table.schema))
        if self._paths is None or columns is not None:
            return table
        return pa.table([_prune(table.column(name), self._paths[name]) for name in table.column_names],
                        names=table.column_names)

    def _cols(self, columns: Optional[Sequence[str]]) -> Optional[list[str]]:
        if columns is not None:
            _deprecated("columns= on a read is a lance_ops extra; pass columns to LanceFileReader(...)")
            return list(columns)
        return self._columns

    def _v2(self, what: str) -> V2ReaderBase:
        if isinstance(self._reader, LegacyFileReader) or not isinstance(self._reader, V2ReaderBase):
            raise UnsupportedError(f"{self.path}: {what} describes v2 files; this is a legacy 0.1 file")
        return self._reader


#: pylance's default file version for ``LanceFileWriter`` (pylance 14.0.2 writes 2.2)
DEFAULT_WRITER_VERSION = "2.2"


def LanceFileWriter(path: str | os.PathLike[str], schema: Optional[pa.Schema] = None, *,  # noqa: N802
                    data_cache_bytes: Optional[int] = None, version: Optional[str] = None,
                    storage_options: Optional[Mapping[str, Any]] = None, max_page_bytes: Optional[int] = None,
                    **kwargs: Any) -> Any:
    """Write one Lance data file with pylance's options (``lance.file.LanceFileWriter``).

    ``version`` defaults to pylance's (``"2.2"``); ``"2.0"``, ``"2.1"`` and ``"0.1"``/``"legacy"``
    are accepted. ``write_batch``, ``add_schema_metadata``, ``add_global_buffer`` and ``close()``
    (which returns the rows written) behave as pylance's. pylance's namespace arguments
    (``namespace_client``, ``table_id``) are refused: lance_ops has no namespace catalog.
    """
    for name in ("namespace_client", "table_id"):
        if kwargs.pop(name, None) is not None:
            raise UnsupportedError(f"LanceFileWriter({name}=...) needs a Lance namespace, which lance_ops does not have")
    options: dict[str, Any] = dict(kwargs)
    if storage_options is not None:
        options["storage_options"] = storage_options
    if data_cache_bytes is not None:
        options["data_cache_bytes"] = data_cache_bytes
    if max_page_bytes is not None:
        options["max_page_bytes"] = max_page_bytes
    parsed = FileVersion.file_writer_spelling(version or DEFAULT_WRITER_VERSION)
    try:
        cls = registry.writer_class(parsed) if parsed is not None else None
    except KeyError:
        cls = None
    if cls is None:  # the registry refuses the version with its message
        return registry.LanceFileWriter(path, schema, version=version or DEFAULT_WRITER_VERSION, **options)
    return _storing_class(cls)(path, schema, version=parsed, **options)


def _view(schema: pa.Schema) -> pa.Schema:
    """A file's stored schema as pylance's file reader shows it (JSON stays ``lance.json`` bytes)."""
    return extension_types.view_schema(schema, json_text=False)


def _stored(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch | pa.Table:
    """``batch`` with extension columns as pylance's file writer stores them (ADR 0030)."""
    schema = extension_types.storage_schema(batch.schema)
    if schema is batch.schema:
        return batch
    columns = [extension_types.to_storage(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col,
                                          g.type, g.name) if f.type != g.type else col
               for col, f, g in zip(batch.columns, batch.schema, schema)]
    return type(batch).from_arrays(columns, schema=schema)


class _StoresExtensionTypes:
    """Mixed into the registry's file writers by :func:`LanceFileWriter`: extension columns are
    stored as pylance's ``LanceFileWriter`` stores them, ``arrow.json`` as JSONB ``lance.json``
    (at any depth), tensors, uuids and bfloat16 as their storage type named in the field metadata."""

    def __init__(self, path: Any, schema: Optional[pa.Schema] = None, **kwargs: Any) -> None:
        super().__init__(path, None if schema is None else extension_types.storage_schema(schema),  # type: ignore[call-arg]
                         **kwargs)

    def write_batch(self, batch: Any = None, *, data: Any = None) -> None:
        """Append ``batch`` (a RecordBatch, a Table, a reader or an iterable of batches)."""
        batch = batch_argument(batch, data)
        write = super().write_batch  # type: ignore[misc]
        if isinstance(batch, (pa.RecordBatch, pa.Table)):
            write(_stored(batch))
        else:
            write(_stored(b) for b in batch)


@functools.lru_cache(maxsize=None)
def _storing_class(cls: type) -> type:
    """``cls`` (a registry writer class) with :class:`_StoresExtensionTypes` mixed in, same name."""
    return type(cls.__name__, (_StoresExtensionTypes, cls), {"__module__": cls.__module__,
                                                             "__doc__": cls.__doc__})


def open_file_reader(path: str, storage_options: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Any:
    """The version's table-returning reader (:func:`lance_ops.format.registry.open_file_reader`)."""
    return registry.open_file_reader(path, storage_options, **kwargs)


__all__ = ["LanceFileReader", "LanceFileWriter", "ReaderResults", "LanceFileMetadata", "LanceFileStatistics",
           "LanceColumnStatistics", "LanceColumnMetadata", "LancePageMetadata", "LanceBufferDescriptor",
           "RowCount", "WrittenPage", "open_file_reader"]
