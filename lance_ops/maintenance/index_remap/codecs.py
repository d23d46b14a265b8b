"""Row-address set codecs and index-file helpers shared by the index remappers (issue 19).

Two serialisations of a set of 64-bit row addresses (``fragment_id << 32 | offset``) appear in
pylance 14.0.2's index files (index-facts.md §3):

* **RowAddrTreeMap** (BITMAP / LABEL_LIST bitmaps, LABEL_LIST list nulls, ZONEMAP / BLOOMFILTER
  null bitmaps): u32-LE entry count, then per fragment (ascending) u32 fragment id, u32 byte length
  and a portable 32-bit RoaringBitmap of offsets; a length of 0 means "every row of the fragment"
  and carries no bitmap.
* **RoaringTreemap** (roaring-rs; NGRAM posting lists, the frag-reuse index): u64-LE bitmap count,
  then per high key (ascending) u32 key and a portable RoaringBitmap, no length.

Both are decoded to / encoded from sorted ``uint64`` numpy arrays; the per-row work is done by
pyroaring (CRoaring), the Python loop runs once per fragment. Bitmaps are built without run
containers, as roaring-rs builds them from values, so the bytes equal pylance's.

Index files: :func:`read_index_file` returns an index file's table, schema metadata and global
buffers; :func:`write_index_file` writes one as pylance 14.0.2 does (a Lance file of the
dataset's data storage version: ``0.3`` footers for 2.0 datasets, 2.1 and 2.2 otherwise, extra
global buffers named by schema-metadata keys holding their index).
"""
from __future__ import annotations

import array
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyroaring

from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.format.registry import open_file_reader
from lance_ops.format.version import FileVersion
from lance_ops.format.writer import V2FileWriter
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap.address_map import AddressMap

_U32 = struct.Struct("<I")
#: an empty uint64 address array
EMPTY = np.zeros(0, dtype=np.uint64)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def _bitmap_of(values: np.ndarray) -> pyroaring.BitMap:
    """A 32-bit bitmap of ``values`` (uint32), built value by value (no run containers)."""
    return pyroaring.BitMap(array.array("I", np.ascontiguousarray(values, dtype=np.uint32).tobytes()), optimize=False)


def _values_of(bitmap: pyroaring.BitMap) -> np.ndarray:
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32)


def _split_by_high(addresses: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(high 32 bits, low 32 bits uint32) per distinct high key of sorted unique ``addresses``."""
    addresses = np.asarray(addresses, dtype=np.uint64)
    if len(addresses) == 0:
        return []
    high = (addresses >> _SHIFT).astype(np.uint32)
    low = (addresses & _LOW).astype(np.uint32)
    cuts = np.flatnonzero(np.diff(high)) + 1
    starts = np.concatenate(([0], cuts))
    return [(int(high[s]), low[s:e]) for s, e in zip(starts, np.append(cuts, len(addresses)))]


def _join(key: int, low: np.ndarray) -> np.ndarray:
    return (np.uint64(key) << _SHIFT) | low.astype(np.uint64)


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise CorruptFileError(what, "malformed row-address bitmap")


@dataclass(frozen=True)
class RowAddrSet:
    """A decoded RowAddrTreeMap: explicit addresses plus fragments included whole."""

    addresses: np.ndarray                      # uint64, sorted, unique
    whole_fragments: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))  # uint32, sorted


def decode_row_addr_treemap(data: bytes | memoryview) -> RowAddrSet:
    """Decode Lance's RowAddrTreeMap serialisation (a length of 0 = the whole fragment)."""
    view = memoryview(data).cast("B")
    _check(len(view) >= 4, "RowAddrTreeMap header")
    (count,) = _U32.unpack_from(view, 0)
    pos = 4
    parts: list[np.ndarray] = []
    whole: list[int] = []
    for _ in range(count):
        _check(pos + 8 <= len(view), "RowAddrTreeMap entry")
        fragment, length = struct.unpack_from("<II", view, pos)
        pos += 8
        if length == 0:
            whole.append(fragment)
            continue
        _check(pos + length <= len(view), "RowAddrTreeMap bitmap")
        try:
            bitmap = pyroaring.BitMap.deserialize(bytes(view[pos:pos + length]))
        except Exception as exc:  # noqa: BLE001 - CRoaring reports malformed input as ValueError
            raise CorruptFileError("RowAddrTreeMap", f"malformed row-address bitmap ({exc})") from exc
        pos += length
        parts.append(_join(fragment, _values_of(bitmap)))
    addresses = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    return RowAddrSet(addresses, np.asarray(whole, dtype=np.uint32))


def encode_row_addr_treemap(addresses: np.ndarray, whole_fragments: np.ndarray | None = None) -> bytes:
    """Serialise sorted unique ``addresses`` (and fragments included whole) as a RowAddrTreeMap.

    A fragment listed in ``whole_fragments`` is written as a whole-fragment entry; its explicit
    addresses, if any, are absorbed by it."""
    whole = set(int(f) for f in (whole_fragments if whole_fragments is not None else ()))
    entries: list[tuple[int, bytes]] = [(f, b"") for f in whole]
    for key, low in _split_by_high(addresses):
        if key not in whole:
            entries.append((key, _bitmap_of(low).serialize()))
    entries.sort(key=lambda e: e[0])
    out = [_U32.pack(len(entries))]
    for key, body in entries:
        out.append(struct.pack("<II", key, len(body)))
        out.append(body)
    return b"".join(out)


def split_row_addr_treemap(data: bytes | memoryview) -> list[tuple[int, bytes]]:
    """The entries of a serialized RowAddrTreeMap as (fragment id, entry bytes: its 8-byte header
    and bitmap) without decoding the bitmaps; a whole-fragment entry has no bitmap bytes."""
    view = memoryview(data).cast("B")
    _check(len(view) >= 4, "RowAddrTreeMap header")
    (count,) = _U32.unpack_from(view, 0)
    pos = 4
    entries: list[tuple[int, bytes]] = []
    for _ in range(count):
        _check(pos + 8 <= len(view), "RowAddrTreeMap entry")
        fragment, length = struct.unpack_from("<II", view, pos)
        _check(pos + 8 + length <= len(view), "RowAddrTreeMap bitmap")
        entries.append((fragment, bytes(view[pos:pos + 8 + length])))
        pos += 8 + length
    return entries


def row_addr_treemap_entries(addresses: np.ndarray) -> list[tuple[int, bytes]]:
    """(fragment id, entry bytes) of sorted unique ``addresses``, as :func:`encode_row_addr_treemap`
    writes them (one entry per fragment, ascending)."""
    out = []
    for key, low in _split_by_high(addresses):
        body = _bitmap_of(low).serialize()
        out.append((key, struct.pack("<II", key, len(body)) + body))
    return out


def join_row_addr_treemap(entries: Sequence[tuple[int, bytes]]) -> bytes:
    """A RowAddrTreeMap of entries (from :func:`split_row_addr_treemap` or
    :func:`row_addr_treemap_entries`, distinct fragments), written in fragment order."""
    ordered = sorted(entries, key=lambda e: e[0])
    return _U32.pack(len(ordered)) + b"".join(body for _, body in ordered)


def decode_roaring_treemap(data: bytes | memoryview) -> np.ndarray:
    """Decode a roaring-rs RoaringTreemap to sorted uint64 values (CRoaring's 64-bit portable
    format is the same layout)."""
    try:
        bitmap = pyroaring.BitMap64.deserialize(bytes(data))
    except Exception as exc:  # noqa: BLE001 - CRoaring reports malformed input as ValueError / MemoryError
        raise CorruptFileError("RoaringTreemap", f"malformed row-address bitmap ({exc})") from exc
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64)


def encode_roaring_treemap(values: np.ndarray) -> bytes:
    """Serialise sorted unique uint64 ``values`` as a roaring-rs RoaringTreemap (no run containers)."""
    raw = array.array("Q", np.ascontiguousarray(values, dtype=np.uint64).tobytes())
    return bytes(pyroaring.BitMap64(raw, optimize=False).serialize())


# --- index files ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexFile:
    """One index file read whole: its table, schema metadata, global buffers (index -> bytes)."""

    table: pa.Table
    metadata: dict[str, str]
    global_buffers: dict[int, bytes]
    version: FileVersion

    def buffer_for(self, key: str) -> bytes | None:
        """The global buffer whose index the schema-metadata entry ``key`` names (None if absent)."""
        value = self.metadata.get(key)
        if value is None:
            return None
        index = int(value)
        return self.global_buffers.get(index)


def index_dir(store: ObjectStore, base: str, uuid: str) -> str:
    """The store path of ``_indices/<uuid>/`` of the dataset at ``base``."""
    return store.join(base, "_indices", uuid)


def read_index_file(store: ObjectStore, base: str, uuid: str, name: str) -> IndexFile:
    """Read ``_indices/<uuid>/<name>`` whole (any Lance file version)."""
    path = store.join(index_dir(store, base, uuid), name)
    reader = open_file_reader(path, store=store)
    if isinstance(reader, LegacyFileReader):
        raise UnsupportedError(f"{store.uri(path)}: a legacy (v0.1) Lance file; index files are 2.x files")
    table = reader.read_all()
    raw = reader.schema.metadata or {}
    metadata = {k.decode(): v.decode() for k, v in raw.items()}
    buffers: dict[int, bytes] = {}
    for index in range(1, reader.num_global_buffers):
        buffers[index] = bytes(reader.read_global_buffer(index))
    return IndexFile(table.replace_schema_metadata(None), metadata, buffers, reader.version)


def index_file_version(dataset: Any, fallback: FileVersion) -> FileVersion:
    """The Lance file version pylance 14.0.2 writes index files in: the dataset's data storage
    version (2.0 datasets get ``0.3`` footers); ``fallback`` for legacy datasets."""
    try:
        version = FileVersion.parse(str(dataset.data_storage_version))
    except Exception:  # noqa: BLE001 - an unknown spelling falls back to the old file's version
        return fallback
    return fallback if version is FileVersion.LEGACY else version


def storage_options_of(dataset: Any) -> Mapping[str, Any] | None:
    """The storage options the dataset was opened with (to open a writer on the same store)."""
    options = getattr(dataset, "storage_options", None)
    return dict(options) if options else None


def write_index_file(store: ObjectStore, base: str, uuid: str, name: str, table: pa.Table, *,
                     version: FileVersion, metadata: Mapping[str, str] | None = None,
                     buffers: Mapping[str, bytes] | None = None,
                     storage_options: Mapping[str, Any] | None = None) -> tuple[str, int]:
    """Write ``_indices/<uuid>/<name>`` and return ``(name, size)``.

    ``buffers`` maps a schema-metadata key to bytes written as a global buffer before the data
    (as pylance's ``add_global_buffer``); the key's value is that buffer's index."""
    path = store.join(index_dir(store, base, uuid), name)
    writer = V2FileWriter(store.uri(path), table.schema.remove_metadata(), version=version,
                          storage_options=storage_options)
    try:
        for key, data in (buffers or {}).items():
            writer.add_schema_metadata(key, str(writer.add_global_buffer(data)))
        for key, value in (metadata or {}).items():
            writer.add_schema_metadata(key, value)
        if table.num_rows:
            writer.write_batch(table)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return name, store.size(path)


# --- remapping address sets -------------------------------------------------------------------------

def _survivors_of(amap: AddressMap, fragment: int) -> np.ndarray:
    """The surviving old addresses of a rewritten ``fragment`` (a slice of ``amap.old``)."""
    lo = np.searchsorted(amap.old, np.uint64(fragment) << _SHIFT)
    hi = np.searchsorted(amap.old, np.uint64(fragment + 1) << _SHIFT)
    return amap.old[lo:hi]


def remap_address_sets(sets: Sequence[RowAddrSet], amap: AddressMap) -> list[RowAddrSet]:
    """Map every set through ``amap`` in one vectorised pass: deleted rows of rewritten fragments
    are dropped, their survivors take their new addresses (re-sorted), other fragments' addresses
    are unchanged. A whole-fragment entry of a rewritten fragment becomes its survivors' new
    addresses; one of any other fragment stays whole."""
    parts: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    wholes: list[np.ndarray] = []
    for i, rowset in enumerate(sets):
        extra = [_survivors_of(amap, int(f)) for f in rowset.whole_fragments if int(f) in amap.rewritten]
        kept = [f for f in rowset.whole_fragments if int(f) not in amap.rewritten]
        addresses = np.concatenate([rowset.addresses, *extra]) if extra else rowset.addresses
        parts.append(addresses)
        owners.append(np.full(len(addresses), i, dtype=np.int64))
        wholes.append(np.asarray(kept, dtype=np.uint32))
    if not parts:
        return []
    flat = np.concatenate(parts).astype(np.uint64, copy=False)
    owner = np.concatenate(owners)
    mapped, keep = amap.apply(flat)
    mapped, owner = mapped[keep], owner[keep]  # still grouped by set, in set order
    bounds = np.searchsorted(owner, np.arange(len(sets) + 1))
    return [RowAddrSet(np.sort(mapped[bounds[i]:bounds[i + 1]]), wholes[i]) for i in range(len(sets))]
