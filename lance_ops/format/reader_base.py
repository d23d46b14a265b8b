"""What every Lance file reader shares: where the file is, its schema, and error translation.

The 2.0, 2.1+ and legacy readers decode very different layouts but present one surface; this base
holds the parts that are the same, so a fix to (say) error translation lands in all of them.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

import numpy as np

import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.errors import CorruptFileError, LanceOpsError, OutOfRangeError
from lance_ops.format.container import Footer
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore

T = TypeVar("T")
R = TypeVar("R", bound="FileReaderBase")

#: low-level failures that mean "these bytes are not a valid file", never a bug to surface raw
DECODE_ERRORS: tuple[type[BaseException], ...] = (
    DecodeError, struct.error, IndexError, KeyError, ValueError, TypeError, OverflowError,
    ZeroDivisionError, MemoryError, pa.ArrowException, OSError, RecursionError,
)


def take_indices(indices: Iterable[int] | np.ndarray | pa.Array, num_rows: int,
                 uri: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``take_rows``' argument checked and sorted: (unique rows ascending, positions to restore the order).

    The second item is None when ``indices`` were already strictly ascending. Integers only, every
    row inside ``[0, num_rows)``; errors name ``uri`` as pylance's do.
    """
    if isinstance(indices, (pa.Array, pa.ChunkedArray)):
        idx = np.asarray(indices.to_numpy(zero_copy_only=False))
    else:
        idx = np.asarray(indices)
    if idx.size == 0:
        idx = idx.astype(np.int64)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"{uri}: take_rows needs a 1-d sequence of integers, got {idx.dtype} of shape {idx.shape}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= num_rows):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise OutOfRangeError(f"{uri}: row index {bad} out of range for a file with {num_rows} rows")
    if idx.size > 1 and np.all(idx[1:] > idx[:-1]):
        return idx, None
    uniq, inverse = np.unique(idx, return_inverse=True)
    return uniq, inverse.reshape(-1)


class FileReaderBase:
    """Location, schema, context manager and error guarding shared by all file readers."""

    #: how the file is named in "cannot decode ..." messages
    _decode_label = "file"
    # set by _bind (location) and by each reader when it opens the file (schema)
    _store: ObjectStore
    _path: str
    _uri: str
    _schema: pa.Schema

    def _bind(self, path: str, storage_options: Optional[Mapping[str, Any]], store: Optional[ObjectStore]) -> None:
        """Resolve ``path`` (a URI, or a location inside ``store`` when a store is given)."""
        if store is None:
            from lance_ops.io import open_store

            store, path = open_store(path, storage_options)
        self._store = store
        self._path = path
        self._uri = store.uri(path) if hasattr(store, "uri") else str(path)

    @property
    def path(self) -> str:
        """The file's URI (or local path), as error messages name it."""
        return self._uri

    @property
    def store(self) -> ObjectStore:
        """The object store the file is read from (callers reuse it for related reads)."""
        return self._store

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the file's columns (with the schema metadata)."""
        return self._schema

    def __enter__(self: R) -> R:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _guard(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; any low-level decoding failure becomes a CorruptFileError naming the file."""
        try:
            return fn()
        except LanceOpsError:
            raise
        except DECODE_ERRORS as exc:
            raise CorruptFileError(
                self._uri, f"cannot decode {self._decode_label}: {type(exc).__name__}: {exc}") from exc

    def _corrupt(self, problem: str) -> CorruptFileError:
        return CorruptFileError(self._uri, problem)


class V2ReaderBase(FileReaderBase):
    """Properties of the v2 container (footer + FileDescriptor) shared by the 2.0 and 2.1+ readers."""

    # set by each reader when it opens the file
    _num_rows: int
    _version: FileVersion
    _descriptor: file_pb2.FileDescriptor
    _footer: Footer

    @property
    def num_rows(self) -> int:
        """Rows in the file (the FileDescriptor's length)."""
        return self._num_rows

    @property
    def version(self) -> FileVersion:
        """The file format version read from the footer (a ``str`` subclass: ``"2.0"``, ``"2.1"``...)."""
        return self._version

    @property
    def lance_fields(self) -> list[file_pb2.Field]:
        """The Lance field protos stored in the file (pre-order, with their field ids)."""
        return list(self._descriptor.schema.fields)

    @property
    def num_columns(self) -> int:
        """Columns in the file (struct headers and list offsets included), from the footer."""
        return self._footer.num_columns

    @property
    def num_global_buffers(self) -> int:
        """Global buffers in the file (buffer 0 is the FileDescriptor)."""
        return self._footer.num_global_buffers

    @property
    def footer(self) -> Footer:
        """The parsed 40-byte footer (where the metadata sections lie, the version numbers)."""
        return self._footer

    def global_buffer_locations(self) -> list[tuple[int, int]]:
        """``(position, size)`` of every global buffer, from the GBO table (one ranged read)."""
        f = self._footer
        raw = bytes(self._guard(lambda: self._store.read_range(self._path, f.gbo_table_start,
                                                                16 * f.num_global_buffers)))
        table = np.frombuffer(raw, dtype="<u8").reshape(-1, 2).astype(np.int64)
        return [(int(p), int(s)) for p, s in table]

    def column_metadata(self) -> list[file2_pb2.ColumnMetadata]:
        """Every column's ``ColumnMetadata`` proto (pages, buffers, encodings), in column order.

        One ranged read of the column metadata region and its offset table; the file-level views
        (``lance_ops.file``'s ``metadata()`` and ``file_statistics()``) are built from these.
        """
        f = self._footer

        def parse() -> list[file2_pb2.ColumnMetadata]:
            start, end = f.column_meta_start, f.cmo_table_start + 16 * f.num_columns
            region = bytes(self._store.read_range(self._path, start, end - start))
            cmo = np.frombuffer(region[f.cmo_table_start - start:], dtype="<u8").reshape(-1, 2).astype(np.int64)
            metas = []
            for pos, length in cmo.tolist():  # one proto per column, not per row
                if pos < start or pos + length > end:
                    raise self._corrupt(f"column metadata range {pos}..{pos + length} is outside its section")
                meta = file2_pb2.ColumnMetadata()
                meta.ParseFromString(region[pos - start:pos - start + length])
                metas.append(meta)
            return metas

        return self._guard(parse)
