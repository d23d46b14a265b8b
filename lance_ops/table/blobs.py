"""Blob columns of datasets: ``take_blobs`` file handles and the bytes behind descriptions.

pylance's datasets return blob columns as descriptions (see :mod:`lance_ops.format.blob_v2`);
the bytes are reached through ``take_blobs`` (lazy file-like :class:`BlobFile` objects, one
per selected row, ``None`` for a null) or ``blob_handling="all_binary"``. Both are resolved
here from the descriptions: a v1 description points into its own data file; a v2 descriptor
into the data file (inline), a side ``.blob`` file of that data file (packed / dedicated), or
an external object (``blob_uri``). Reads of many values are grouped per file and coalesced.
"""
from __future__ import annotations

import io
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.format import blob_v2
from lance_ops.table.manifest import naming
from lance_ops.table.paths import dataset_where, resolve_inside

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import WriteableBuffer

    from lance_ops.io.base import ObjectStore
    from lance_ops.table.snapshot import BlobSelection, DatasetSnapshot

#: pylance's default read-ahead of a BlobFile
DEFAULT_BUFFER_SIZE = 512 * 1024
BLOB_HANDLING = ("all_binary", "all_descriptions", "blobs_descriptions")


def check_blob_handling(value: Optional[str]) -> str:
    """The effective ``blob_handling`` (None -> ``blobs_descriptions``); ValueError as pylance."""
    if value is None:
        return "blobs_descriptions"
    if value not in BLOB_HANDLING:
        raise ValueError(f"Invalid blob_handling: {value}. Expected one of: {', '.join(BLOB_HANDLING)}")
    return value


# --------------------------------------------------------------------------------------------
# file handles
# --------------------------------------------------------------------------------------------
class BlobFile(io.RawIOBase):
    """One blob value as a read-only, seekable file: ``size`` bytes at ``position`` of an object.

    Nothing is read until asked; sequential ``read`` calls smaller than ``buffer_size`` fetch
    ``buffer_size`` bytes ahead. ``read_range`` / ``read_ranges`` leave the cursor alone.
    """

    def __init__(self, store: "ObjectStore", path: str, position: int, size: int,
                 buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        super().__init__()
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int):
            raise TypeError(f"buffer_size must be an int, got {type(buffer_size).__name__}")
        if buffer_size < 0:
            raise ValueError("buffer_size must be non-negative")
        self._store, self._path = store, path
        self._start, self._size = int(position), int(size)
        self._pos = 0
        self._buffer_size = buffer_size
        self._buf = b""
        self._buf_at = 0  # blob offset of self._buf

    def __repr__(self) -> str:
        return f"<BlobFile size={self._size}>"

    @property
    def uri(self) -> str:
        """The URI of the object holding the blob (its data file, side file or external object)."""
        return self._store.uri(self._path)

    def size(self) -> int:
        """The size of the blob in bytes."""
        return self._size

    def readable(self) -> bool:
        """Always True: a blob can be read (io.RawIOBase protocol)."""
        return True

    def seekable(self) -> bool:
        """Always True: reads are ranged, so any position can be reached (io.RawIOBase protocol)."""
        return True

    def tell(self) -> int:
        """The cursor: the blob offset the next ``read`` starts at."""
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the cursor (``whence`` as :func:`io.IOBase.seek`; past the end is allowed, reads
        there return nothing); returns the new position."""
        self._check_open()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"Invalid whence: {whence}")
        if pos < 0:
            raise ValueError(f"negative seek value {pos}")
        self._pos = pos
        return pos

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def _fetch(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return bytes(self._store.read_range(self._path, self._start + offset, length))

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the cursor (all the rest when negative or None); small reads
        are served from a ``buffer_size`` read-ahead."""
        self._check_open()
        remaining = max(self._size - self._pos, 0)
        n = remaining if size is None or size < 0 else min(int(size), remaining)
        if n == 0:
            return b""
        lo = self._pos - self._buf_at
        if 0 <= lo and lo + n <= len(self._buf):  # served from the read-ahead
            out = self._buf[lo:lo + n]
        elif n < self._buffer_size:
            self._buf_at = self._pos
            self._buf = self._fetch(self._pos, min(self._buffer_size, remaining))
            out = self._buf[:n]
        else:
            out = self._fetch(self._pos, n)
        self._pos += n
        return out

    def readall(self) -> bytes:
        """Every byte from the cursor to the end of the blob."""
        return self.read(-1)

    def read1(self, size: int = -1) -> bytes:
        """As :meth:`read` (there is one underlying read per call anyway)."""
        return self.read(size)

    def readinto(self, b: "WriteableBuffer") -> int:
        """Read into the writable buffer ``b``; returns the number of bytes read (0 at the end)."""
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes from blob offset ``offset`` (the cursor does not move)."""
        return self.read_ranges([(offset, length)])[0]

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several ``(offset, length)`` blob-local ranges in one coalesced read, in input order."""
        self._check_open()
        arr = np.asarray(list(ranges), dtype=np.int64).reshape(-1, 2)
        if len(arr) and (np.any(arr < 0) or np.any(arr[:, 0] + arr[:, 1] > self._size)):
            raise ValueError(f"blob range out of bounds for a blob of {self._size} bytes")
        keep = arr[:, 1] > 0
        out = [b""] * len(arr)
        if keep.any():
            req = arr[keep].copy()
            req[:, 0] += self._start
            got = self._store.read_ranges(self._path, req)
            for i, data in zip(np.flatnonzero(keep).tolist(), got):
                out[i] = bytes(data)
        return out


# --------------------------------------------------------------------------------------------
# where the bytes are
# --------------------------------------------------------------------------------------------
class _Locations:
    """Per row: which object (index into ``targets``: ``(store, path)``), position, size; and
    which rows are null."""

    def __init__(self, n: int) -> None:
        self.target = np.zeros(n, dtype=np.int64)
        self.position = np.zeros(n, dtype=np.int64)
        self.size = np.zeros(n, dtype=np.int64)
        self.null = np.zeros(n, dtype=bool)
        self.targets: list[tuple[ObjectStore, str]] = []


def _data_path(ds: "DatasetSnapshot", data_file: table_pb2.DataFile) -> str:
    return resolve_inside(ds.store, ds.base, data_file.path, under=(naming.DATA_DIR,),
                          what="data file path", where=dataset_where(ds))


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def legacy_locations(ds: "DatasetSnapshot", data_file: table_pb2.DataFile,
                     desc: pa.Array | pa.ChunkedArray) -> _Locations:
    """Where the bytes of v1 descriptions ``struct<position, size>`` are (their data file).
    A null struct (2.1+) or a (p, 0) description with p > 0 (2.0 nulls) is a null value."""
    desc = _as_array(desc)
    n = len(desc)
    loc = _Locations(n)
    loc.targets.append((ds.store, _data_path(ds, data_file)))
    loc.position = np.asarray(desc.field("position").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    loc.size = np.asarray(desc.field("size").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    valid = np.ones(n, bool) if desc.null_count == 0 else np.asarray(desc.is_valid().to_numpy(zero_copy_only=False))
    loc.null = ~valid | ((loc.size == 0) & (loc.position != 0))
    return loc


def v2_locations(ds: "DatasetSnapshot", data_file: table_pb2.DataFile, desc: pa.Array | pa.ChunkedArray) -> _Locations:
    """Where the bytes of blob v2 descriptors are (see :mod:`lance_ops.format.blob_v2`)."""
    desc = _as_array(desc)
    n = len(desc)
    loc = _Locations(n)
    valid = np.ones(n, bool) if desc.null_count == 0 else np.asarray(desc.is_valid().to_numpy(zero_copy_only=False))
    kind = np.asarray(desc.field("kind").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    loc.position = np.asarray(desc.field("position").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    loc.size = np.asarray(desc.field("size").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    blob_id = np.asarray(desc.field("blob_id").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    loc.null = ~valid
    bad = valid & (kind > blob_v2.KIND_EXTERNAL)
    data_path = _data_path(ds, data_file)
    if bad.any():
        raise CorruptFileError(data_path, f"blob descriptor of unknown kind {int(kind[bad][0])}")
    loc.targets.append((ds.store, data_path))  # target 0: inline values
    side = valid & ((kind == blob_v2.KIND_PACKED) | (kind == blob_v2.KIND_DEDICATED))
    if side.any():
        ids, inverse = np.unique(blob_id[side], return_inverse=True)
        base = len(loc.targets)
        for b in ids.tolist():  # one target per side file
            loc.targets.append((ds.store, resolve_inside(
                ds.store, ds.base, blob_v2.side_file_path(data_file.path, b), under=(naming.DATA_DIR,),
                what="blob side file path", where=dataset_where(ds))))
        loc.target[side] = base + inverse.reshape(-1)
    ext = valid & (kind == blob_v2.KIND_EXTERNAL)
    if ext.any():
        from lance_ops.io import open_store

        rows = np.flatnonzero(ext)
        uris = desc.field("blob_uri").take(pa.array(rows)).to_pylist()
        uniq: dict[str, int] = {}
        for r, uri in zip(rows.tolist(), uris):  # one entry per external row
            t = uniq.get(uri)
            if t is None:
                store, path = open_store(_external_uri(ds, uri), ds.storage_options)
                t = uniq[uri] = len(loc.targets)
                loc.targets.append((store, path))
            loc.target[r] = t
            if loc.size[r] == 0:  # (0, 0): the whole object
                store, path = loc.targets[t]
                loc.size[r] = store.size(path)
    return loc


def _external_uri(ds: "DatasetSnapshot", uri: str) -> str:
    """An external blob URI: absolute as stored (what pylance writes with
    ``allow_external_blob_outside_bases``); a relative one is taken below the dataset root and
    refused if it leads outside (not checked against pylance's registered external bases)."""
    if "://" in uri or uri.startswith("/"):
        return uri
    return ds.store.uri(resolve_inside(ds.store, ds.base, uri, what="relative external blob URI",
                                        where=dataset_where(ds)))


def materialize(loc: _Locations) -> pa.Array:
    """The bytes of every row as ``large_binary`` (nulls null), read with one coalesced
    ``read_ranges`` call per object; the values are assembled in object order and put back in
    row order with one ``take``."""
    n = len(loc.size)
    size = np.where(loc.null, 0, loc.size)
    want = np.flatnonzero(size > 0)
    targets = loc.target[want]
    order = np.argsort(targets, kind="stable")
    rows = want[order]  # the rows with bytes, grouped by object
    pieces: list = []
    for group in np.split(rows, np.flatnonzero(np.diff(targets[order])) + 1) if len(rows) else []:
        store, path = loc.targets[int(loc.target[group[0]])]
        pieces.extend(store.read_ranges(path, np.stack([loc.position[group], size[group]], axis=1)))
    data = b"".join(pieces)
    if len(data) != int(size[rows].sum()):
        raise CorruptFileError(loc.targets[0][0].uri(loc.targets[0][1]), "blob values are cut short")
    # rows with bytes first (object order), then the empty and null ones
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), rows, assume_unique=True)
    perm = np.concatenate([rows, rest])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size[perm], out=offsets[1:])
    null = loc.null[perm]
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    arr = pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                null_count=int(null.sum()))
    inverse = np.empty(n, dtype=np.int64)
    inverse[perm] = np.arange(n, dtype=np.int64)
    return arr.take(pa.array(inverse))


def descriptors_from_legacy(desc: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Legacy (position, size) descriptions as blob v2 descriptors: inline values (kind 0) at
    the same absolute positions; nulls (null, or (p, 0) with p > 0) are null."""
    desc = _as_array(desc)
    n = len(desc)
    pos = np.asarray(desc.field("position").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64)
    size = np.asarray(desc.field("size").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64)
    valid = np.ones(n, bool) if desc.null_count == 0 else np.asarray(desc.is_valid().to_numpy(zero_copy_only=False))
    null = ~valid | ((size == 0) & (pos != 0))
    pos = np.where(null, 0, pos)
    no_uri = pa.Array.from_buffers(pa.utf8(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")])
    kids = [pa.array(np.zeros(n, np.uint8)), pa.array(pos), pa.array(size), pa.array(np.zeros(n, np.uint32)), no_uri]
    return pa.StructArray.from_arrays(kids, fields=list(blob_v2.DESCRIPTOR_TYPE),
                                      mask=pa.array(null) if null.any() else None)


def v2_logical(ds: "DatasetSnapshot", data_file: table_pb2.DataFile, desc: pa.Array | pa.ChunkedArray,
               field: pa.Field) -> pa.StructArray:
    """Blob v2 descriptors as the values that were written (``field``'s ``struct<data, uri[,
    position, size]>``): the bytes of inline / packed / dedicated values, the URI (and range)
    of external ones, which are not read."""
    desc = _as_array(desc)
    n = len(desc)
    valid = np.ones(n, bool) if desc.null_count == 0 else np.asarray(desc.is_valid().to_numpy(zero_copy_only=False))
    kind = np.asarray(desc.field("kind").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    ext = valid & (kind == blob_v2.KIND_EXTERNAL)
    stored = desc if not ext.any() else pa.StructArray.from_arrays(
        desc.flatten(), fields=list(desc.type), mask=pa.array(~valid | ext))
    data = materialize(v2_locations(ds, data_file, stored))
    kids = {"data": data, "uri": pc.if_else(pa.array(ext), desc.field("blob_uri"), pa.scalar(None, pa.utf8()))}
    size = np.asarray(desc.field("size").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64)
    ranged = ext & (size > 0)
    if field.type.num_fields == 2 and ranged.any():
        raise UnsupportedError(
            f"{_data_path(ds, data_file)}: external blob ranges in a column whose schema has no position/size")
    if field.type.num_fields == 4:
        pos = np.asarray(desc.field("position").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64)
        kids["position"] = pa.array(pos, mask=~ranged)
        kids["size"] = pa.array(size, mask=~ranged)
    return pa.StructArray.from_arrays([kids[f.name] for f in field.type], fields=list(field.type),
                                      mask=pa.array(~valid) if not valid.all() else None)


def v2_bytes(ds: "DatasetSnapshot", data_file: table_pb2.DataFile, desc: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The values of blob v2 descriptors ``desc`` read from ``data_file``'s fragment."""
    return materialize(v2_locations(ds, data_file, desc))


def handles(loc: _Locations, buffer_size: int) -> list[Optional[BlobFile]]:
    """One :class:`BlobFile` per row (``None`` for nulls)."""
    out: list[Optional[BlobFile]] = []
    for t, p, s, null in zip(loc.target.tolist(), loc.position.tolist(), loc.size.tolist(), loc.null.tolist()):
        if null:
            out.append(None)
        else:
            store, path = loc.targets[t]
            out.append(BlobFile(store, path, p, s, buffer_size))
    return out


# --------------------------------------------------------------------------------------------
# take_blobs
# --------------------------------------------------------------------------------------------
def resolve_selection(ids: BlobSelection | None, addresses: BlobSelection | None,
                      indices: BlobSelection | None) -> tuple[str, np.ndarray]:
    """("ids" | "addresses" | "indices", values) -- exactly one must be given (as pylance)."""
    given = [(k, v) for k, v in (("ids", ids), ("addresses", addresses), ("indices", indices)) if v is not None]
    if len(given) != 1:
        raise ValueError("Exactly one of ids, indices, or addresses must be specified")
    kind, values = given[0]
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_numpy(zero_copy_only=False)
    arr = np.asarray(values)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"take_blobs: {kind} must be a 1-d sequence of integers")
    return kind, arr


def blob_field_path(ds: "DatasetSnapshot", column: str) -> tuple[str, list[str], pa.Field]:
    """(top-level name, nested path below it, the blob field) of ``column`` (``"a.b"`` reaches
    into structs); ValueError when it is not a blob column, LanceOpsError when unknown."""
    from lance_ops.errors import LanceOpsError

    parts = column.split(".")
    field = None
    if parts[0] in ds.storage_schema.names:
        field = ds.storage_schema.field(parts[0])
        for p in parts[1:]:
            t = field.type
            if not pa.types.is_struct(t) or t.get_field_index(p) < 0:
                field = None
                break
            field = t.field(p)
    if field is None:
        raise LanceOpsError(f"{ds.uri}: field {column!r} not found; the dataset has {ds.storage_schema.names}")
    if not blob_v2.is_blob_field(field):
        raise ValueError(f"the column {column!r} is not a blob column")
    if blob_v2.is_blob_v2(field) and len(parts) > 1:
        raise UnsupportedError(f"{ds.uri}: blob v2 column {column!r} inside a struct is not supported")
    return parts[0], parts[1:], field


def take_blobs(ds: "DatasetSnapshot", blob_column: str, ids: BlobSelection | None = None,
               addresses: BlobSelection | None = None, indices: BlobSelection | None = None, *,
               buffer_size: int = DEFAULT_BUFFER_SIZE) -> list[Optional[BlobFile]]:
    """``ds.take_blobs``: one lazy :class:`BlobFile` per selected row, in the order given."""
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int):
        raise TypeError(f"buffer_size must be an int, got {type(buffer_size).__name__}")
    if buffer_size < 0:
        raise ValueError("buffer_size must be non-negative")
    kind, values = resolve_selection(ids, addresses, indices)
    top, below, field = blob_field_path(ds, blob_column)
    frags, which, offsets = ds.select_rows(kind, values)
    n = len(which)
    v2 = blob_v2.is_blob_v2(field)
    result: list[Optional[BlobFile]] = [None] * n
    fid = ds.top_field_ids[top]
    read_field = ds.storage_schema.field(top)
    for f in np.unique(which).tolist():  # one read per fragment
        rows = np.flatnonzero(which == f)
        frag = frags[f]
        located = frag.locate_fields([fid])
        if fid not in located:  # no data file stores the column: all null
            continue
        file_index, _ = located[fid]
        table = frag.read([read_field], [fid], offsets[rows].astype(np.uint64), blob_handling="blobs_descriptions")
        data_file = frag.proto.files[file_index]
        col = _with_parent_nulls(table.column(0), below)
        loc = v2_locations(ds, data_file, col) if v2 else legacy_locations(ds, data_file, col)
        for r, h in zip(rows.tolist(), handles(loc, buffer_size)):
            result[r] = h
    return result


def _with_parent_nulls(top: pa.Array | pa.ChunkedArray, below: list[str]) -> pa.Array:
    """The nested struct ``below`` of ``top`` with the nulls of its parents applied."""
    arr = _as_array(top)
    for p in below:
        valid = arr.is_valid()
        child = arr.field(p)
        if arr.null_count:
            child = pc.if_else(valid, child, pa.scalar(None, child.type))
        arr = child
    return arr
