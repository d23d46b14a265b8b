"""What the 2.0 files of one dataset share, parsed once per dataset object (ADR 0044).

Files written into one dataset repeat the same FileDescriptor (schema and row count), the same
page and column encodings and, for columns whose pages sit at the same places, the same column
metadata bytes. A :class:`ReadMemo` remembers what the reader derives from such bytes, keyed by
the bytes themselves (never by path, size or anything else that names a file): a file whose bytes
differ finds nothing and is parsed and checked in full, so a changed or replaced file can never
be served stale. Checks that depend on the file and not only on the key (buffer ends against the
file's size, global buffers) run per file on every hit.

A memo is owned by one dataset object (``LanceFragment`` hands the dataset's cache dict to the
readers it opens, see :func:`memo_of`); a reader opened on its own gets a fresh one. Nothing is
process-wide: every ``lance_ops.dataset()`` call parses its files' metadata afresh, as a new
task would. Entries are bounded (oldest dropped first); dict reads and writes are atomic, so the
scan threads of one dataset share a memo without locks.
"""
from __future__ import annotations

from typing import Any, MutableMapping, Optional, TypeVar

from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.format.v2_0.layout import ColumnState, EncodingInfo, SchemaLayout

K = TypeVar("K")
V = TypeVar("V")

#: the key under which a dataset's shared dict holds its 2.0 memo
MEMO_KEY = "lance_ops.format.v2_0.memo"
#: bounds: distinct schemas / descriptors, page encodings, column metadata messages and columns
SCHEMA_LIMIT = 256
ENCODING_LIMIT = 100_000
COLUMN_LIMIT = 1024
#: only small columns are remembered (the many-small-files case this serves): metadata of at most
#: this many bytes, columns of at most this many pages; a large column's set-up is paid per file,
#: as its rows are, and the memo stays a few MB per dataset object
SMALL_COLUMN_BYTES = 1024
SMALL_COLUMN_PAGES = 8


def remember(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    """Put ``key`` in a bounded cache, dropping the oldest entry when full."""
    if len(cache) >= limit:
        try:
            del cache[next(iter(cache))]  # oldest entry
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread
            pass
    cache[key] = value


class ReadMemo:
    """Parsed metadata shared by the 2.0 readers of one dataset object, keyed by its bytes."""

    def __init__(self) -> None:
        #: FileDescriptor bytes (global buffer 0) -> (parsed descriptor, schema layout)
        self.descriptors: dict[bytes, tuple[file_pb2.FileDescriptor, SchemaLayout]] = {}
        #: schema message bytes -> schema layout (files of one schema and different row counts)
        self.layouts: dict[bytes, SchemaLayout] = {}
        #: page encoding bytes (``Any``-wrapped) -> parsed encoding and its reading plans
        self.encodings: dict[bytes, EncodingInfo] = {}
        #: (column encoding bytes, column role) accepted by the column-encoding checks
        self.column_encodings: dict[tuple[bytes, str], bool] = {}
        #: ColumnMetadata bytes -> the parsed message (read-only)
        self.column_metas: dict[bytes, file2_pb2.ColumnMetadata] = {}
        #: (column index, field path, role, ColumnMetadata bytes) -> the column's pages, checked
        #: except for the file-specific bound (``ColumnState.data_end`` against the file's size)
        self.columns: dict[tuple[int, str, str, bytes], ColumnState] = {}


def memo_of(shared: Optional[MutableMapping[str, Any]]) -> ReadMemo:
    """The 2.0 memo kept in ``shared`` (a dataset object's cache dict), made on first use; a new
    private memo when ``shared`` is None (a reader opened on its own)."""
    if shared is None:
        return ReadMemo()
    memo = shared.get(MEMO_KEY)
    if not isinstance(memo, ReadMemo):
        memo = shared.setdefault(MEMO_KEY, ReadMemo())  # atomic: concurrent first uses share one
    return memo
