"""Deletion files: ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``.

A deletion file lists the *physical* row offsets of a fragment that are deleted.

* ``.arrow`` (``DeletionFile.ARROW_ARRAY``): Arrow IPC file format, one non-nullable ``uint32``
  column named ``row_id``, one record batch, ZSTD body compression (up to 1024 offsets: none).
  Used for small vectors.
* ``.bin`` (``DeletionFile.BITMAP``): a 32-bit Roaring bitmap in the portable serialisation.

Kind selection follows upstream: a new vector of 5000 or more offsets is a bitmap; a vector that
was an Arrow array switches to a bitmap once it holds more than 5000; once a bitmap, always a
bitmap. Every new file holds the full (cumulative) set of deleted offsets of the fragment.
"""
from __future__ import annotations

import array
import os
import secrets
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from numpy.typing import ArrayLike
from pyroaring import BitMap

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, ObjectNotFoundError, UnsafePathError
from lance_ops.io.base import ObjectStore
from lance_ops.table.manifest import naming
from lance_ops.table.paths import resolve_inside

ARROW_ARRAY = table_pb2.DeletionFile.ARROW_ARRAY
BITMAP = table_pb2.DeletionFile.BITMAP
#: vectors of at least this many offsets are written as bitmaps
BITMAP_THRESHOLD = 5000

DELETION_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])

Offsets = Union[np.ndarray, BitMap]
#: what the conversions accept as a set of offsets: an array-like, an Arrow array, a BitMap or None
OffsetsLike = Union[ArrayLike, pa.Array, pa.ChunkedArray, BitMap, None]


# --- conversions -----------------------------------------------------------------------------
def to_offsets(values: OffsetsLike) -> np.ndarray:
    """Sorted, unique ``uint32`` offsets from an array-like, a BitMap or None."""
    if values is None:
        return np.empty(0, dtype=np.uint32)
    if isinstance(values, BitMap):
        return np.frombuffer(values.to_array(), dtype=np.uint32).copy()
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_numpy(zero_copy_only=False)
    arr = np.asarray(values)
    if arr.size == 0:
        return np.empty(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"deletion offsets must be integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint32 and arr.ndim == 1 and bool((arr[1:] > arr[:-1]).all()):
        return arr  # already sorted and unique
    if arr.dtype.kind == "i" and arr.min() < 0:
        raise ValueError("deletion offsets must be >= 0")
    if arr.max() > 0xFFFFFFFF:
        raise ValueError("deletion offsets must fit in 32 bits (they are row offsets)")
    return np.unique(arr.astype(np.uint32, copy=False).ravel())


def _bitmap_of(offsets: np.ndarray) -> BitMap:
    # optimize=False: no run containers, so the portable form uses the plain cookie (0x303A)
    return BitMap(array.array("I", offsets.astype(np.uint32, copy=False).tobytes()), optimize=False)


def to_bitmap(values: OffsetsLike) -> BitMap:
    """A pyroaring BitMap of the offsets."""
    if isinstance(values, BitMap):
        return values
    return _bitmap_of(to_offsets(values))


def merge_deletions(existing: OffsetsLike, new: OffsetsLike) -> np.ndarray:
    """Union of two offset collections (arrays, BitMaps or None) as sorted unique ``uint32``."""
    a = to_offsets(existing)
    b = to_offsets(new)
    if a.size == 0:
        return b
    if b.size == 0:
        return a
    return np.union1d(a, b).astype(np.uint32, copy=False)


def choose_kind(count: int, previous_kind: int | None = None) -> table_pb2.DeletionFile.DeletionFileType:
    """``ARROW_ARRAY`` or ``BITMAP`` for a vector of ``count`` offsets (see module doc)."""
    if previous_kind == BITMAP:
        return BITMAP
    if previous_kind is None:
        return BITMAP if count >= BITMAP_THRESHOLD else ARROW_ARRAY
    return BITMAP if count > BITMAP_THRESHOLD else ARROW_ARRAY


# --- encoding --------------------------------------------------------------------------------
#: vectors of at most this many offsets are written uncompressed from a per-length template
#: (compression gains nothing on a few bytes, and pyarrow's writer costs ~0.25 ms per file)
SMALL_ARROW_VECTOR = 1024
_TEMPLATES: dict[int, tuple[bytes, bytes] | None] = {}


def _ipc_file(values: np.ndarray, compression: str | None) -> bytes:
    batch = pa.record_batch([pa.array(values, type=pa.uint32())], schema=DELETION_SCHEMA)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, DELETION_SCHEMA, options=ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _template(n: int) -> tuple[bytes, bytes] | None:
    """(bytes before, bytes after) the ``4 * n`` data bytes of an uncompressed one-batch file of
    ``n`` offsets, found by encoding all-zero and all-ones vectors (None if they differ elsewhere)."""
    if n not in _TEMPLATES:
        zeros = _ipc_file(np.zeros(n, np.uint32), None)
        ones = _ipc_file(np.full(n, 0xFFFFFFFF, np.uint32), None)
        differ = np.flatnonzero(np.frombuffer(zeros, np.uint8) != np.frombuffer(ones, np.uint8)) \
            if len(zeros) == len(ones) else np.zeros(0, np.int64)
        found = None
        if differ.size == 4 * n and (n == 0 or int(differ[-1]) - int(differ[0]) == 4 * n - 1):
            start = int(differ[0]) if n else 0
            found = (zeros[:start], zeros[start + 4 * n:]) if n else None
        _TEMPLATES[n] = found
    return _TEMPLATES[n]


def encode_arrow_deletions(offsets: OffsetsLike) -> bytes:
    """Arrow IPC file bytes of the offsets (one batch; ZSTD compressed body above
    :data:`SMALL_ARROW_VECTOR` offsets)."""
    values = np.ascontiguousarray(to_offsets(offsets), dtype="<u4")
    if 0 < values.size <= SMALL_ARROW_VECTOR:
        template = _template(int(values.size))
        if template is not None:
            return template[0] + values.tobytes() + template[1]
    return _ipc_file(values, "zstd")


def encode_bitmap_deletions(offsets: OffsetsLike) -> bytes:
    """Portable 32-bit Roaring serialisation of the offsets (no run containers)."""
    return _bitmap_of(to_offsets(offsets)).serialize()


_IPC_READ = ipc.IpcReadOptions(use_threads=False)


#: layouts of small uncompressed one-batch ``.arrow`` deletion files already decoded by the IPC
#: reader: file length -> [(values offset, count, dtype, bytes before, bytes after the values)]
_LAYOUTS: dict[int, list[tuple[int, int, str, bytes, bytes]]] = {}
_LAYOUT_LENGTHS_LIMIT = 1024
_LAYOUTS_PER_LENGTH = 64


def _by_layout(data: bytes) -> np.ndarray | None:
    """The raw values of ``data`` when every byte but its values equals a file the IPC reader
    already decoded (:func:`_learn_layout`), else None. Sound because an Arrow IPC file's
    structure (footer, schema, batch length, buffer offsets, null counts) lies entirely in
    those other bytes: the values bytes are read as they are."""
    for start, count, dtype, head, tail in _LAYOUTS.get(len(data), ()):
        if data.startswith(head) and data.endswith(tail):
            return np.frombuffer(data, dtype, count, start)
    return None


def _learn_layout(data: bytes, buffer: pa.Buffer, batch: pa.RecordBatch, values: np.ndarray) -> None:
    """Remember where the values of a deletion file the IPC reader decoded lie in its bytes
    (only for one uncompressed batch, no validity buffer: the values are a slice of ``data``)."""
    col = batch.column(0)
    bufs = col.buffers()
    n = int(values.size)
    if n == 0 or col.offset != 0 or len(bufs) != 2 or bufs[0] is not None or bufs[1] is None:
        return
    start = bufs[1].address - buffer.address
    end = start + 4 * n
    if start < 0 or end > len(data) or values.dtype.itemsize != 4:
        return
    dtype = values.dtype.str
    if not np.array_equal(np.frombuffer(data, dtype, n, start), values):
        return
    known = _LAYOUTS.get(len(data))
    if known is None:
        if len(_LAYOUTS) >= _LAYOUT_LENGTHS_LIMIT:
            return
        known = _LAYOUTS.setdefault(len(data), [])
    if len(known) < _LAYOUTS_PER_LENGTH:
        known.append((start, n, dtype, data[:start], data[end:]))


def decode_arrow_deletions(data: bytes, path: str = "<deletion file>") -> np.ndarray:
    """The offsets of an ``.arrow`` deletion file as sorted unique ``uint32``; CorruptFileError
    (naming ``path``) unless it is one non-null integer column of an Arrow IPC file.

    Files laid out byte for byte like one already decoded (same length, same bytes around the
    values: what one writer leaves for vectors of one length) skip the IPC reader (ADR 0037)."""
    raw = _by_layout(data) if isinstance(data, bytes) else None
    if raw is not None:
        return _sorted_offsets(raw, path)
    try:
        buffer = pa.py_buffer(data)
        # the file reader over a buffer, batch by batch: a third of ``open_file(...).read_all()``'s
        # fixed cost, which dominated scans of thousands of fragments with deletions
        reader = ipc.RecordBatchFileReader(buffer, options=_IPC_READ)
        schema = reader.schema
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise CorruptFileError(path, f"not a readable Arrow IPC file: {e}") from e
    if len(schema) != 1:
        raise CorruptFileError(
            path, f"deletion file must have exactly one column, found {schema}"
        )
    typ = schema.field(0).type
    if typ != pa.uint32() and typ != pa.int32():
        raise CorruptFileError(path, f"deletion offsets must be uint32, found {typ}")
    if any(b.column(0).null_count for b in batches):
        raise CorruptFileError(path, "deletion offsets contain nulls")
    if len(batches) == 1:
        values = batches[0].column(0).to_numpy()
        if isinstance(data, bytes):
            _learn_layout(data, buffer, batches[0], values)
    else:
        values = np.concatenate([b.column(0).to_numpy() for b in batches] or [np.zeros(0, typ.to_pandas_dtype())])
    return _sorted_offsets(values, path)


def _sorted_offsets(values: np.ndarray, path: str) -> np.ndarray:
    """Decoded deletion offsets as sorted unique ``uint32`` (CorruptFileError if negative)."""
    if values.dtype.kind == "i" and values.size and values.min() < 0:
        raise CorruptFileError(path, "deletion offsets contain negative values")
    # sorted unique uint32 (upstream writes them in hash-set order)
    values = np.sort(values.astype(np.uint32, copy=False))
    if values.size > 1 and bool((values[1:] == values[:-1]).any()):
        return np.unique(values)
    return values


def decode_bitmap_deletions(data: bytes, path: str = "<deletion file>") -> BitMap:
    """The offsets of a ``.bin`` deletion file (portable Roaring); CorruptFileError (naming
    ``path``) if the bytes do not deserialize."""
    try:
        return BitMap.deserialize(bytes(data))
    except Exception as e:  # pyroaring raises ValueError / MemoryError on garbage
        raise CorruptFileError(path, f"not a portable Roaring bitmap: {e}") from e


# --- files -----------------------------------------------------------------------------------
def live_rows(fragment: table_pb2.DataFragment) -> int:
    """Rows of the fragment the manifest counts as not deleted (``physical_rows`` minus the deletion
    file's ``num_deleted_rows``). An upper bound when :func:`deletion_count_known` is False: very
    old writers left that count at 0 beside a deletion file, which only the file itself can
    answer (``LanceFragment.num_deletions`` reads it)."""
    deleted = fragment.deletion_file.num_deleted_rows if fragment.HasField("deletion_file") else 0
    return int(fragment.physical_rows) - int(deleted)


def deletion_count_known(fragment: table_pb2.DataFragment) -> bool:
    """Whether the manifest alone tells the fragment's deleted rows: no deletion file, or one with
    a recorded count (pylance reads a count of 0 beside a deletion file as unknown)."""
    return not fragment.HasField("deletion_file") or fragment.deletion_file.num_deleted_rows > 0


def deletion_file_path(store: ObjectStore, base: str, fragment_id: int,
                       deletion_file: table_pb2.DeletionFile) -> str:
    """The store path of a fragment's deletion file, checked to stay inside the dataset (its name
    comes from the manifest, so it is untrusted)."""
    return resolve_inside(store, base, naming.deletion_file_path(fragment_id, deletion_file),  # symlinks
                          what=f"deletion file of fragment {fragment_id}", where=store.uri(base))


def deletion_directory(store: ObjectStore, base: str) -> str:
    """The store path of the dataset's ``_deletions`` directory, checked once (symlinks) for
    writers of many deletion files (:func:`write_deletion_file`'s ``directory``)."""
    return resolve_inside(store, base, naming.DELETIONS_DIR, what="deletion directory", where=store.uri(base))


def read_deletion_file(store: ObjectStore, base: str, fragment_id: int,
                       deletion_file: table_pb2.DeletionFile | None) -> Offsets:
    """The deleted offsets of a fragment: sorted ``uint32`` numpy array (``.arrow``) or BitMap.

    ``deletion_file`` None gives an empty array.
    """
    if deletion_file is None:
        return np.empty(0, dtype=np.uint32)
    return _read_at(store, deletion_file_path(store, base, fragment_id, deletion_file), deletion_file)


def _read_at(store: ObjectStore, path: str, deletion_file: table_pb2.DeletionFile) -> Offsets:
    """The offsets of the deletion file at the (checked) store ``path``."""
    data = store.read(path)
    if deletion_file.file_type == BITMAP:
        return decode_bitmap_deletions(data, path)
    if deletion_file.file_type == ARROW_ARRAY:
        return decode_arrow_deletions(data, path)
    raise CorruptFileError(path, f"unknown deletion file type {deletion_file.file_type}")


def read_deletion_offsets(store: ObjectStore, base: str, fragment_id: int, deletion_file: table_pb2.DeletionFile | None,
                          physical_rows: int | None = None, manifest_path: str | None = None,
                          *, check: bool = True) -> np.ndarray:
    """Like :func:`read_deletion_file` but always a sorted ``uint32`` numpy array.

    The offsets are checked against the manifest: their number must equal the deletion file's
    ``num_deleted_rows`` (0 means unknown: very old writers) and, given ``physical_rows``, every
    offset must address a row of the fragment; CorruptFileError naming the file (and the
    manifest, ``manifest_path``, which holds the other side) otherwise. ``check=False`` skips
    that (for ``verify``, which reports each disagreement itself).
    """
    if deletion_file is not None and deletion_file.file_type not in (ARROW_ARRAY, BITMAP):
        raise CorruptFileError(manifest_path or "<manifest>",
                               f"fragment {fragment_id} has a deletion file of unknown type {deletion_file.file_type}")
    # the path is resolved (and checked for symlinks) once, for the read and the error messages
    path = None if deletion_file is None else deletion_file_path(store, base, fragment_id, deletion_file)
    try:
        got = np.empty(0, dtype=np.uint32) if path is None or deletion_file is None else _read_at(store, path, deletion_file)
    except ObjectNotFoundError as exc:
        if manifest_path is None:
            raise
        # a missing file is a damaged manifest as often as a removed file: name both
        raise ObjectNotFoundError(f"{exc} (deletion file of fragment {fragment_id} in manifest {manifest_path})") from exc
    # decode_arrow_deletions already returns sorted unique uint32 offsets
    offsets = got if isinstance(got, np.ndarray) else to_offsets(got)
    if deletion_file is not None and check:
        assert path is not None
        check_deletion_offsets(offsets, deletion_file, fragment_id, physical_rows, store.uri(path), manifest_path)
    return offsets


def check_deletion_offsets(offsets: np.ndarray, deletion_file: table_pb2.DeletionFile, fragment_id: int, physical_rows: int | None,
                           path: str, manifest_path: str | None = None) -> None:
    """CorruptFileError(path) unless the sorted ``offsets`` agree with the manifest's record of them."""
    manifest = f"the manifest {manifest_path}" if manifest_path else "the manifest"
    expected = int(deletion_file.num_deleted_rows)
    if expected and offsets.size != expected:
        raise CorruptFileError(
            path, f"deletion file of fragment {fragment_id} holds {offsets.size} offsets but {manifest} "
                  f"records {expected} deleted rows")
    if physical_rows is not None and offsets.size and int(offsets[-1]) >= physical_rows:
        raise CorruptFileError(
            path, f"deletion file of fragment {fragment_id} deletes offset {int(offsets[-1])}, past the "
                  f"{physical_rows} rows {manifest} records for the fragment")


def _previous_kind(previous: table_pb2.DeletionFile | int | None) -> int | None:
    if previous is None:
        return None
    if isinstance(previous, table_pb2.DeletionFile):
        return previous.file_type
    return int(previous)


def write_deletion_file(
    store: ObjectStore,
    base: str,
    fragment_id: int,
    read_version: int,
    offsets: OffsetsLike,
    previous: table_pb2.DeletionFile | int | None = None,
    *,
    file_id: int | None = None,
    directory: str | None = None,
) -> table_pb2.DeletionFile | None:
    """Write a deletion file holding ``offsets`` and return its ``DeletionFile`` proto.

    ``offsets`` is the complete set of deleted offsets of the fragment (merge with the old set
    first, see :func:`merge_deletions`). ``previous`` is the fragment's current
    ``DeletionFile`` (or its ``file_type``), None for a fragment without deletions; it only
    steers the arrow/bitmap choice. Returns None (and writes nothing) if ``offsets`` is empty.
    ``directory`` is :func:`deletion_directory` of ``base`` when the caller checked it already (the
    file's own name is made here, from numbers: nothing in it needs checking).
    """
    values = to_offsets(offsets)
    if values.size == 0:
        return None
    proto, data = _encoded(values, read_version, secrets.randbits(64) if file_id is None else file_id, previous)
    if directory is None:
        path = deletion_file_path(store, base, fragment_id, proto)
    else:
        path = store.join(directory, naming.deletion_file_name(fragment_id, proto.read_version, proto.id,
                                                               proto.file_type))
    store.put(path, data)
    return proto


def _encoded(values: np.ndarray, read_version: int, file_id: int,
             previous: table_pb2.DeletionFile | int | None) -> tuple[table_pb2.DeletionFile, bytes]:
    """The record and bytes of a deletion file holding the non-empty ``values`` (arrow or bitmap,
    :func:`choose_kind`)."""
    kind = choose_kind(int(values.size), _previous_kind(previous))
    proto = table_pb2.DeletionFile(file_type=kind, read_version=int(read_version), id=int(file_id),
                                   num_deleted_rows=int(values.size))
    return proto, encode_bitmap_deletions(values) if kind == BITMAP else encode_arrow_deletions(values)


def write_deletion_files(store: ObjectStore, directory: str, read_version: int,
                         items: Sequence[tuple[int, np.ndarray, table_pb2.DeletionFile | None]]
                         ) -> list[table_pb2.DeletionFile]:
    """:func:`write_deletion_file` of many fragments at once, into ``directory``
    (:func:`deletion_directory`, checked by the caller): ``items`` are (fragment id, its complete
    sorted unique ``uint32`` offsets, never empty; its current deletion file or None). The
    files are created in place at new random names (``store.put_new_many``: a taken name is
    refused, never overwritten; ADR 0054), all their ids drawn at once. Returns the protos, in
    order. On failure no file of the call is left behind."""
    if not items:
        return []
    ids = np.frombuffer(os.urandom(8 * len(items)), dtype=np.uint64).tolist()
    protos: list[table_pb2.DeletionFile] = []
    puts: list[tuple[str, bytes]] = []
    for (fragment_id, values, previous), file_id in zip(items, ids):
        proto, data = _encoded(values, read_version, file_id, previous)
        protos.append(proto)
        puts.append((store.join(directory, naming.deletion_file_name(fragment_id, read_version, file_id,
                                                                     proto.file_type)), data))
    store.put_new_many(puts)
    return protos


# --- many files at once ------------------------------------------------------------------------
#: deletion files of one scan batch read from a remote store side by side (requests overlap)
REMOTE_READ_WORKERS = 8


def read_deletion_vectors(store: ObjectStore, base: str, fragments: Sequence[table_pb2.DataFragment],
                          manifest_path: str | None = None) -> list[np.ndarray]:
    """:func:`read_deletion_offsets` (checked against the manifest) of each fragment, in order,
    for many fragments at once (ADR 0045): the same offsets and the same errors, at a fraction
    of the cost per file.

    On local disk the ``_deletions`` directory is checked once; each file, whose name is made of
    the manifest's numbers only, is opened with ``O_NOFOLLOW`` so that a symlink (or anything
    else unusual: a missing file, a directory) fails the fast open and takes the one-file path,
    which checks and reports it exactly as before. ``.arrow`` vectors of one length laid out
    like a file already decoded are then decoded together (one numpy pass per length). Remote
    stores read the files on a small thread pool.
    """
    out: list[np.ndarray | None] = [None] * len(fragments)
    fast: list[int] = []
    datas: list[bytes] = []
    directory = _plain_local_directory(store, base) if fragments else None
    if directory is not None:
        wanted: list[int] = []
        paths: list[str] = []
        for i, frag in enumerate(fragments):
            df = frag.deletion_file if frag.HasField("deletion_file") else None
            if df is None or df.file_type != ARROW_ARRAY:
                continue
            wanted.append(i)
            paths.append(f"{directory}{os.sep}{frag.id}-{df.read_version}-{df.id}.arrow")
        for i, data in zip(wanted, store.read_many_plain(paths)):  # (a symlink or anything unusual: None)
            if data is not None:
                fast.append(i)
                datas.append(data)
        _decode_checked(store, directory, fragments, fast, datas, out, manifest_path)
    rest = [i for i, got in enumerate(out) if got is None]

    def one(i: int) -> np.ndarray:
        frag = fragments[i]
        return read_deletion_offsets(store, base, int(frag.id), frag.deletion_file if frag.HasField("deletion_file")
                                     else None, int(frag.physical_rows), manifest_path)

    if len(rest) > 1 and getattr(store, "scheme", "") != "file":
        with ThreadPoolExecutor(max_workers=min(REMOTE_READ_WORKERS, len(rest)),
                                thread_name_prefix="lance-ops-deletions") as pool:
            for i, got in zip(rest, pool.map(one, rest)):
                out[i] = got
    else:
        for i in rest:
            out[i] = one(i)
    return out  # type: ignore[return-value]


def _plain_local_directory(store: ObjectStore, base: str) -> str | None:
    """The local ``_deletions`` directory of ``base`` when it is a plain directory (not a
    symlink: then every file takes the one-file path and its checks), else None."""
    if getattr(store, "scheme", "") != "file":
        return None
    try:
        directory = deletion_directory(store, base)  # the usual containment check, once
        st = os.lstat(directory)
    except (OSError, UnsafePathError):  # (the one-file path reports it, naming the file)
        return None
    return directory if stat.S_ISDIR(st.st_mode) else None


def _decode_checked(store: ObjectStore, directory: str, fragments: Sequence[table_pb2.DataFragment],
                    which: list[int], datas: list[bytes], out: list[np.ndarray | None],
                    manifest_path: str | None) -> None:
    """Decode and check the ``.arrow`` files ``datas`` of ``fragments[which]`` into ``out``;
    vectors that fail any check are left None (the one-file path then raises its error)."""
    by_length: dict[int, list[int]] = {}
    for k, data in enumerate(datas):
        by_length.setdefault(len(data), []).append(k)
    for length, pending in by_length.items():
        for attempt in range(_LEARN_ATTEMPTS + 1):  # a layout is learnt from one file, the rest match it
            pending = _decode_same_length(fragments, which, datas, pending, length, out)
            if not pending or attempt == _LEARN_ATTEMPTS:
                break
            out[which[pending[0]]] = _decode_one(store, directory, fragments[which[pending[0]]], datas[pending[0]],
                                                 manifest_path)
            pending = pending[1:]
        for k in pending:  # layouts that do not repeat: one by one
            out[which[k]] = _decode_one(store, directory, fragments[which[k]], datas[k], manifest_path)


#: files decoded one by one per file length before the rest of that length are decoded one by one
_LEARN_ATTEMPTS = 4


def _decode_one(store: ObjectStore, directory: str, frag: table_pb2.DataFragment, data: bytes,
                manifest_path: str | None) -> np.ndarray | None:
    """The checked offsets of one fragment's ``.arrow`` file ``data`` (None if damaged: the one-file
    path reads it again and raises its error)."""
    df = frag.deletion_file
    path = store.uri(f"{directory}{os.sep}{naming.deletion_file_name(frag.id, df.read_version, df.id, ARROW_ARRAY)}")
    try:
        got = decode_arrow_deletions(data, path)
        check_deletion_offsets(got, df, int(frag.id), int(frag.physical_rows), path, manifest_path)
    except CorruptFileError:
        return None
    got.flags.writeable = False
    return got


def _decode_same_length(fragments: Sequence[table_pb2.DataFragment], which: list[int], datas: list[bytes],
                        ks: list[int], length: int, out: list[np.ndarray | None]) -> list[int]:
    """Decode the files ``datas[ks]`` (all ``length`` bytes) that match a known layout, as one
    matrix: the bytes around the values compared, the values sorted row by row and checked
    (no negatives, no repeats, the manifest's count, below the fragment's rows). Returns the
    ``ks`` left undecoded (no layout, or a check failed: the one-file path reports it)."""
    layouts = _LAYOUTS.get(length, ())
    if not layouts or length == 0:
        return ks
    matrix = np.frombuffer(b"".join(datas[k] for k in ks), dtype=np.uint8).reshape(len(ks), length)
    left = np.ones(len(ks), dtype=bool)
    for start, count, dtype, head, tail in layouts:
        end = start + 4 * count
        hit = left.copy()
        if head:
            hit &= (matrix[:, :start] == np.frombuffer(head, np.uint8)).all(axis=1)
        if tail:
            hit &= (matrix[:, end:] == np.frombuffer(tail, np.uint8)).all(axis=1)
        rows = np.flatnonzero(hit)
        if rows.size == 0:
            continue
        values = np.ascontiguousarray(matrix[rows, start:end]).view(dtype).reshape(rows.size, count)
        ok = np.ones(rows.size, dtype=bool)
        if values.dtype.kind == "i":
            ok &= ~(values < 0).any(axis=1)
        values = np.sort(values.astype(np.uint32, copy=False), axis=1)
        if count > 1:
            ok &= ~(values[:, 1:] == values[:, :-1]).any(axis=1)
        expected = np.array([fragments[which[ks[r]]].deletion_file.num_deleted_rows for r in rows.tolist()],
                            dtype=np.int64)
        physical = np.array([fragments[which[ks[r]]].physical_rows for r in rows.tolist()], dtype=np.int64)
        ok &= (expected == 0) | (expected == count)
        ok &= values[:, -1].astype(np.int64) < physical
        values.flags.writeable = False
        for r, good, row in zip(rows.tolist(), ok.tolist(), values):
            if good:
                out[which[ks[r]]] = row
                left[r] = False
    return [k for k, still in zip(ks, left.tolist()) if still]
