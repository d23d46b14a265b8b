"""Reader for legacy Lance data files (file format v0.1, footer version 0.2).

These are the files pylance writes with ``data_storage_version="legacy"`` (or ``"0.1"``).

Layout (little-endian), as written by upstream's ``previous`` writer and checked against
pylance 14.0.2:

* data pages, batch after batch ("groups" of ``max_rows_per_group`` rows); within a batch the
  fields in pre-order. Struct fields have no page; a list writes its offsets page, then its items.
* the **page table**: ``int64 (position, length)`` for every field id ``min..=max`` of the file's
  schema and every batch (``[(field - min) * num_batches + batch]``); ``(0, 0)`` for no page.
  ``length`` is in rows (``rows + 1`` for list offsets pages; items for list item pages).
* optionally the **statistics**: pages of a second, one-batch "file" whose schema is one struct per
  data field id (named after the id) with ``null_count: int64``, ``min_value`` and ``max_value`` of
  the field's type, one row per data batch; then its own page table (field ids ``0..=max``).
* the **dictionary values** of dictionary fields (plain or var-binary encoded), then optionally
  an embedded ``lance.table.Manifest`` (``u32 length | protobuf``) holding the file's schema, whose
  dictionary offsets point at those values -- this makes the file self-describing.
* ``u32 length | lance.file.Metadata`` (``batch_offsets``, ``page_table_position``,
  ``manifest_position``, ``statistics``), then the 16-byte footer
  ``u64 metadata_position | u16 major (0) | u16 minor (2) | "LANC"``.

In datasets the schema lives in the dataset manifest and the dictionary values are written into
the *manifest file* (offsets there are positions inside that manifest file). Pass the manifest's
fields as ``schema_fields`` and, as ``dictionaries``, the values decoded from the manifest file
(``ManifestFile.dictionaries``, what the dataset passes: pylance reads the dataset's values) or
the manifest file's path; data files pylance and lance_ops write also embed a manifest with the
same values, so a bare path works too.

Nulls: v0.1 has no validity bitmaps. Nullable var-binary values whose start equals their end read
as null (empty strings too); every other null is lost on write (fixed-width slots keep whatever
value Arrow held, booleans become false, lists become empty, structs become valid). The reader
reproduces exactly what upstream's reader returns.
"""
from __future__ import annotations

import struct
from typing import Any, Iterable, Mapping, Optional, Sequence, TypeVar

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError, Message

from lance_ops._proto import file_pb2, table_pb2
from lance_ops.errors import CorruptFileError, OutOfRangeError, UnsupportedError, UnsupportedTypeError
from lance_ops.format.container import MAGIC
from lance_ops.format.legacy import decode as dec
from lance_ops.format.io_plan import Fetched, Gen, Requests, drive, gather_requests
from lance_ops.format.reader_base import FileReaderBase
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore
from lance_ops.schema import FieldNode, field_tree

__all__ = ["LegacyFileReader", "LEGACY_FOOTER_SIZE", "is_legacy_footer", "footer_version"]

TAIL_READ_BYTES = 64 * 1024
LEGACY_FOOTER_SIZE = 16
_FOOTER = struct.Struct("<QHH4s")
_U32 = struct.Struct("<I")

M = TypeVar("M", bound=Message)


def is_legacy_footer(major: int, minor: int) -> bool:
    """True for the footer versions of v0.1 files ((0, 1) and (0, 2))."""
    return (major, minor) in ((0, 1), FileVersion.LEGACY.footer)


def footer_version(tail: bytes) -> tuple[int, int]:
    """``(major, minor)`` from the last bytes of any Lance data file.

    Both footers (16-byte legacy, 40-byte v2) end with ``u16 major | u16 minor | "LANC"``, so this
    tells which reader to use before either footer is parsed. Raises ValueError without the magic.
    """
    if len(tail) < 8 or bytes(tail[-4:]) != MAGIC:
        raise ValueError("not a Lance file (no LANC magic at the end)")
    major, minor = struct.unpack("<HH", bytes(tail[-8:-4]))
    return major, minor


def _requests(starts: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray) -> Requests:
    return np.stack([np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)], axis=1)


# --------------------------------------------------------------------------------------------
# sources and layouts
# --------------------------------------------------------------------------------------------
class _Source:
    """One object in the store with its size and a cached tail (small files are read once)."""

    def __init__(self, store: ObjectStore, path: str, uri: str) -> None:
        self.store = store
        self.path = path
        self.uri = uri
        tail, size = store.read_tail(path, TAIL_READ_BYTES)
        self.tail = bytes(tail)
        self.size = int(size)
        self.tail_start = self.size - len(self.tail)

    def fetch(self, req: Requests) -> Fetched:
        if len(req) == 0:
            return []
        starts, lengths = req[:, 0], req[:, 1]
        ends = starts + lengths
        bad = (starts < 0) | (lengths < 0) | (ends > self.size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise CorruptFileError(
                self.uri,
                f"needs bytes {int(starts[i])}..{int(ends[i])} but the file has {self.size} bytes "
                "(truncated file or corrupt page table)",
            )
        if (starts >= self.tail_start).all():
            rel = (starts - self.tail_start).tolist()
            return [self.tail[s:s + n] for s, n in zip(rel, lengths.tolist())]
        blobs = self.store.read_ranges(self.path, req)
        for blob, n in zip(blobs, lengths.tolist()):
            if len(blob) != n:
                raise CorruptFileError(self.uri, f"short read: wanted {n} bytes, got {len(blob)} (truncated file?)")
        return [bytes(b) for b in blobs]


class _Layout:
    """A page table: pages of field ids ``min_id..`` for ``num_batches`` batches of known lengths."""

    def __init__(self, what: str, uri: str, min_id: int, pages: np.ndarray, batch_offsets: np.ndarray) -> None:
        self.what = what
        self.uri = uri
        self.min_id = min_id
        self.pages = pages  # (num_ids, num_batches, 2)
        self.batch_offsets = batch_offsets

    def page(self, node: FieldNode, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = node.id - self.min_id
        if not 0 <= k < self.pages.shape[0]:
            raise CorruptFileError(
                self.uri,
                f"{self.what} page table has no entry for field {node.proto.name!r} (id {node.id}); "
                f"it covers ids {self.min_id}..{self.min_id + self.pages.shape[0] - 1}",
            )
        entry = self.pages[k, batches]
        return entry[:, 0], entry[:, 1]

    def check_rows(self, node: FieldNode, batches: np.ndarray, lengths: np.ndarray, needed: np.ndarray,
                   extra: int = 0) -> None:
        """Every page must hold at least ``needed + extra`` entries."""
        short = lengths < needed + extra
        if short.any():
            i = int(np.flatnonzero(short)[0])
            raise CorruptFileError(
                self.uri,
                f"{self.what} page of field {node.proto.name!r} (id {node.id}) in batch {int(batches[i])} "
                f"holds {int(lengths[i])} entries, needs {int(needed[i]) + extra}",
            )


def _empty(dtype: pa.DataType) -> pa.Array:
    return pa.array([], type=dtype)


# --------------------------------------------------------------------------------------------
# the reader
# --------------------------------------------------------------------------------------------
class LegacyFileReader(FileReaderBase):
    """Read a legacy (v0.1) Lance data file.

    ``schema_fields``: the Lance fields (``lance.file.Field`` protos, e.g. a dataset manifest's
    ``fields``) describing the file; by default the fields of the manifest embedded in the file.
    ``field_ids``: the ids of the fields the file stores (a ``DataFile.fields`` list); by default
    the embedded manifest's ids, else every id in ``schema_fields``. They fix the page table's
    extent and restrict ``schema_fields``.
    ``dictionaries``: where dictionary values come from -- a mapping ``field id -> pa.Array`` of
    values, or the store path of the dataset manifest file whose positions ``schema_fields``'
    ``dictionary`` offsets refer to. Values in a mapping win; otherwise the values the file itself
    carries (embedded manifest) are used, and the manifest file only when the file has none.
    ``schema_metadata``: metadata for the Arrow schema (default: the embedded manifest's).
    """

    _decode_label = "legacy file"

    def __init__(self, path: str, storage_options: Optional[Mapping[str, Any]] = None, *,
                 store: Optional[ObjectStore] = None,
                 schema_fields: Optional[Sequence[file_pb2.Field]] = None,
                 field_ids: Optional[Iterable[int]] = None,
                 dictionaries: Optional[Mapping[int, pa.Array] | str] = None,
                 schema_metadata: Optional[Mapping[str, bytes]] = None) -> None:
        self._bind(path, storage_options, store)
        self._dict_values: dict[int, pa.Array] = {}
        self._dict_path: Optional[str] = None
        if isinstance(dictionaries, str):
            self._dict_path = dictionaries
        elif dictionaries is not None:
            self._dict_values = {int(k): v for k, v in dictionaries.items()}
        self._dict_cache: dict[int, pa.Array] = {}
        self._dict_source: Optional[_Source] = None
        self._stats_cache: Optional[pa.Table] = None
        self._guard(lambda: self._open(schema_fields, field_ids, schema_metadata))

    # --- public properties ---------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        """Rows in the file (all batches)."""
        return int(self._batch_offsets[-1])

    @property
    def version(self) -> FileVersion:
        """Always ``FileVersion.LEGACY`` ("0.1"), whichever legacy footer the file has."""
        return FileVersion.LEGACY

    @property
    def major_version(self) -> int:
        """The major version the footer stores (0)."""
        return self._major

    @property
    def minor_version(self) -> int:
        """The minor version the footer stores (1 or 2)."""
        return self._minor

    @property
    def num_batches(self) -> int:
        """Batches (row groups) in the file: each field has one page per batch."""
        return len(self._batch_offsets) - 1

    @property
    def batch_offsets(self) -> list[int]:
        """Cumulative row counts: batch ``i`` holds rows ``[offsets[i], offsets[i+1])``."""
        return self._batch_offsets.tolist()

    @property
    def lance_fields(self) -> list[file_pb2.Field]:
        """The Lance fields this reader decodes (pre-order)."""
        return list(self._fields)

    @property
    def metadata(self) -> file_pb2.Metadata:
        """The file's ``lance.file.Metadata`` block."""
        out = file_pb2.Metadata()
        out.CopyFrom(self._meta)
        return out

    @property
    def embedded_manifest(self) -> Optional[table_pb2.Manifest]:
        """The manifest embedded in the file (schema and dictionary locations), if any."""
        return self._embedded

    @property
    def has_statistics(self) -> bool:
        """Whether the file stores page statistics (per-batch null count, min and max)."""
        return self._meta.HasField("statistics")

    def page_table(self) -> dict[int, list[tuple[int, int]]]:
        """field id -> ``[(position, length)]`` per batch, as stored."""
        return {self._layout.min_id + k: [(int(p[0]), int(p[1])) for p in self._layout.pages[k]]
                for k in range(self._layout.pages.shape[0])}

    # --- reads ---------------------------------------------------------------------------
    def read_all(self, columns: Optional[Sequence[str]] = None) -> pa.Table:
        """Every row of the chosen top-level columns (all by default), in the requested order."""
        nodes = self._select(columns)
        nb = self.num_batches
        b = np.arange(nb, dtype=np.int64)
        return self._guard(lambda: self._read(nodes, b, np.zeros(nb, np.int64), np.diff(self._batch_offsets), None))

    def read_range(self, start: int, num_rows: int, columns: Optional[Sequence[str]] = None) -> pa.Table:
        """Rows ``[start, start + num_rows)``."""
        start, num_rows = int(start), int(num_rows)
        if start < 0 or num_rows < 0 or start + num_rows > self.num_rows:
            raise OutOfRangeError(
                f"{self._uri}: cannot read rows {start}..{start + num_rows} of a file with {self.num_rows} rows"
            )
        nodes = self._select(columns)
        offs = self._batch_offsets
        lo, hi = start, start + num_rows
        if num_rows == 0:
            b = np.zeros(0, dtype=np.int64)
        else:
            first = int(np.searchsorted(offs, lo, side="right")) - 1
            last = int(np.searchsorted(offs, hi, side="left")) - 1
            b = np.arange(first, last + 1, dtype=np.int64)
        s = np.maximum(lo, offs[b]) - offs[b]
        e = np.minimum(hi, offs[b + 1]) - offs[b]
        return self._guard(lambda: self._read(nodes, b, s, e, None))

    def take_rows(self, indices: Iterable[int] | np.ndarray | pa.Array,
                  columns: Optional[Sequence[str]] = None) -> pa.Table:
        """Rows at ``indices`` (any order, duplicates allowed), in the given order."""
        if isinstance(indices, (pa.Array, pa.ChunkedArray)):
            idx = np.asarray(indices.to_numpy(zero_copy_only=False))
        else:
            idx = np.asarray(indices)
        if idx.size == 0:
            idx = idx.astype(np.int64).reshape(-1)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"{self._uri}: take_rows needs a 1-d sequence of integers, got {idx.dtype} of shape {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_rows):
            bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
            raise OutOfRangeError(f"{self._uri}: row index {bad} out of range for a file with {self.num_rows} rows")
        idx = idx.astype(np.int64, copy=False)
        nodes = self._select(columns)
        if idx.size == 0:
            none = np.zeros(0, dtype=np.int64)
            return self._guard(lambda: self._read(nodes, none, none, none, None))
        offs = self._batch_offsets
        uniq = np.unique(idx)
        batch_of = np.searchsorted(offs, uniq, side="right") - 1
        b, first = np.unique(batch_of, return_index=True)
        last = np.append(first[1:], uniq.size) - 1
        s = uniq[first] - offs[b]
        e = uniq[last] + 1 - offs[b]
        span_base = np.concatenate([[0], np.cumsum(e - s)[:-1]]).astype(np.int64)
        span_of = np.searchsorted(b, batch_of)
        pos_uniq = span_base[span_of] + (uniq - offs[batch_of] - s[span_of])
        take = pos_uniq[np.searchsorted(uniq, idx)]
        return self._guard(lambda: self._read(nodes, b.astype(np.int64), s, e, take))

    def statistics(self) -> Optional[pa.Table]:
        """The page statistics, as stored: one struct column per data field id (named after the
        id) with ``null_count``, ``min_value`` and ``max_value``, one row per batch. ``None`` when
        the file has no statistics."""
        if not self.has_statistics:
            return None
        if self._stats_cache is None:
            self._stats_cache = self._guard(self._read_statistics)
        return self._stats_cache

    def field_statistics(self) -> dict[str, pa.Table]:
        """Statistics by dotted field name: a table ``batch, null_count, min_value, max_value``."""
        stats = self.statistics()
        if stats is None:
            return {}
        names = self._dotted_names()
        out: dict[str, pa.Table] = {}
        batch = pa.array(np.arange(stats.num_rows, dtype=np.int32))
        for col_name, col in zip(stats.column_names, stats.columns):
            try:
                fid = int(col_name)
            except ValueError:
                continue
            arr = col.combine_chunks()
            fields = {arr.type.field(i).name: arr.field(i) for i in range(arr.type.num_fields)}
            out[names.get(fid, col_name)] = pa.table({
                "batch": batch,
                "null_count": fields.get("null_count", pa.nulls(len(arr), pa.int64())),
                "min_value": fields.get("min_value", pa.nulls(len(arr))),
                "max_value": fields.get("max_value", pa.nulls(len(arr))),
            })
        return out

    def __repr__(self) -> str:
        return f"LegacyFileReader({self._uri!r}, version=0.1, rows={self.num_rows}, batches={self.num_batches})"

    # --- opening -------------------------------------------------------------------------
    def _read_struct(self, src: _Source, pos: int, end: int, message: M, what: str) -> M:
        """``u32 length | protobuf`` at ``pos``, which must end by ``end``."""
        if pos < 0 or pos + 4 > end:
            raise self._corrupt(f"{what} position {pos} lies outside the file body (0..{end})")
        (length,) = _U32.unpack(src.fetch(_requests([pos], [4]))[0])
        if pos + 4 + length > end:
            raise self._corrupt(f"{what} at {pos} claims {length} bytes, past its end ({end})")
        blob = src.fetch(_requests([pos + 4], [length]))[0]
        try:
            message.ParseFromString(blob)
        except DecodeError as exc:
            raise self._corrupt(f"{what} does not decode: {exc}") from None
        return message

    def _open(self, schema_fields: Optional[Sequence[file_pb2.Field]], field_ids: Optional[Iterable[int]],
              schema_metadata: Optional[Mapping[str, bytes]]) -> None:
        src = _Source(self._store, self._path, self._uri)
        self._src = src
        size = src.size
        if size < LEGACY_FOOTER_SIZE or len(src.tail) < LEGACY_FOOTER_SIZE:
            raise self._corrupt(f"file is {size} bytes, too small to hold a Lance footer")
        meta_pos, major, minor, magic = _FOOTER.unpack(src.tail[-LEGACY_FOOTER_SIZE:])
        if magic != MAGIC:
            raise self._corrupt(f"bad magic {magic!r} (expected {MAGIC!r}): not a Lance file or truncated")
        if not is_legacy_footer(major, minor):
            known = (major, minor) == (2, 0) or any(v.footer == (major, minor) for v in FileVersion if not v.is_legacy)
            raise UnsupportedError(
                f"{self._uri}: footer version {major}.{minor} is "
                + ("a Lance v2 file; read it with LanceFileReader" if known else "not a legacy v0.1 Lance file")
            )
        self._major, self._minor = major, minor
        body_end = size - LEGACY_FOOTER_SIZE
        meta = self._read_struct(src, int(meta_pos), body_end, file_pb2.Metadata(), "metadata block")
        self._meta = meta
        offs = np.asarray(list(meta.batch_offsets) or [0], dtype=np.int64)
        if offs[0] != 0 or (np.diff(offs) < 0).any():
            raise self._corrupt(f"batch offsets {offs.tolist()[:8]} do not start at 0 and increase")
        self._batch_offsets = offs

        self._embedded: Optional[table_pb2.Manifest] = None
        if meta.manifest_position:
            self._embedded = self._read_struct(src, int(meta.manifest_position), int(meta_pos),
                                               table_pb2.Manifest(), "embedded manifest")
        embedded_fields = list(self._embedded.fields) if self._embedded is not None else []
        self._embedded_by_id = {f.id: f for f in embedded_fields}

        if schema_fields is not None:
            fields = list(schema_fields)
        elif embedded_fields:
            fields = embedded_fields
        else:
            raise UnsupportedError(
                f"{self._uri}: this legacy file carries no schema of its own; pass schema_fields "
                "(the dataset manifest's fields)"
            )
        if field_ids is not None:
            ids = sorted({int(i) for i in field_ids})
        elif embedded_fields:
            ids = sorted(f.id for f in embedded_fields)
        else:
            ids = sorted(f.id for f in fields)
        wanted = set(ids)
        self._fields = [f for f in fields if f.id in wanted]
        if not ids or not self._fields:
            raise self._corrupt("the schema has no fields stored in this file")

        if schema_metadata is None and self._embedded is not None and schema_fields is None:
            schema_metadata = dict(self._embedded.schema_metadata)
        self._tree = self._field_tree(self._fields, "schema")
        self._nodes = {n.proto.name: n for n in self._tree}
        self._schema = pa.schema([n.arrow for n in self._tree], metadata=dict(schema_metadata) if schema_metadata else None)

        self._layout = self._load_layout("data", int(meta.page_table_position), ids[0], ids[-1],
                                         self.num_batches, offs, body_end)

    def _field_tree(self, fields: list[file_pb2.Field], what: str) -> list[FieldNode]:
        """Field nodes for a Lance field list; schema problems name this file."""
        try:
            return field_tree(fields)
        except CorruptFileError as exc:
            raise self._corrupt(f"{what}: {exc.problem}") from None
        except UnsupportedTypeError as exc:
            raise UnsupportedTypeError(f"{self._uri}: {what}: {exc}") from None

    def _load_layout(self, what: str, position: int, min_id: int, max_id: int, num_batches: int,
                     batch_offsets: np.ndarray, body_end: int) -> _Layout:
        num_ids = max_id - min_id + 1
        nbytes = num_ids * num_batches * 16
        if position < 0 or position + nbytes > body_end:
            raise self._corrupt(
                f"{what} page table at {position} ({num_ids} fields x {num_batches} batches = {nbytes} bytes) "
                f"runs past the file body ({body_end} bytes)"
            )
        blob = self._src.fetch(_requests([position], [nbytes]))[0]
        pages = np.frombuffer(blob, dtype="<i8").astype(np.int64).reshape(num_ids, num_batches, 2)
        if (pages < 0).any():
            raise self._corrupt(f"{what} page table holds negative positions or lengths")
        return _Layout(what, self._uri, min_id, pages, batch_offsets)

    # --- column selection ------------------------------------------------------------------
    def _select(self, columns: Optional[Sequence[str]]) -> list[FieldNode]:
        if columns is None:
            return list(self._tree)
        if isinstance(columns, str):
            columns = [columns]
        out = []
        for name in columns:
            node = self._nodes.get(name)
            if node is None:
                raise ValueError(f"{self._uri}: no column named {name!r}; the file has {list(self._nodes)}")
            out.append(node)
        return out

    def _dotted_names(self) -> dict[int, str]:
        names: dict[int, str] = {}

        def walk(node: FieldNode, prefix: str) -> None:
            name = prefix + node.proto.name
            names[node.id] = name
            for c in node.children:
                walk(c, name + ".")

        for n in self._tree:
            walk(n, "")
        return names

    # --- decoding ------------------------------------------------------------------------
    def _read(self, nodes: list[FieldNode], b: np.ndarray, s: np.ndarray, e: np.ndarray,
              take: Optional[np.ndarray]) -> pa.Table:
        gens = [self._decode(self._layout, n, b, s, e) for n in nodes]
        arrays = drive(gather_requests(gens), self._src.fetch)
        schema = pa.schema([n.arrow for n in nodes], metadata=self._schema.metadata)
        table = pa.Table.from_arrays(arrays, schema=schema)
        if take is not None:
            table = table.take(pa.array(take, pa.int64()))
        return table

    def _decode(self, layout: _Layout, node: FieldNode, b: np.ndarray, s: np.ndarray, e: np.ndarray) -> Gen:
        """Rows ``[s[i], e[i])`` of batch ``b[i]`` for every span i, concatenated."""
        dt = node.arrow.type
        keep = e > s
        if not keep.all():
            b, s, e = b[keep], s[keep], e[keep]
        n = e - s
        total = int(n.sum())
        if total == 0:
            return _empty(dt)
        if pa.types.is_struct(dt):
            children = yield from gather_requests([self._decode(layout, c, b, s, e) for c in node.children])
            if not children:
                return pa.Array.from_buffers(dt, total, [None], children=[])
            return pa.StructArray.from_arrays(children, fields=list(dt))
        pos, plen = layout.page(node, b)
        if pa.types.is_null(dt):
            layout.check_rows(node, b, plen, e)
            return pa.nulls(total, dt)
        if dec.is_list_like(dt):
            layout.check_rows(node, b, plen, e, extra=1)
            width = 8 if pa.types.is_large_list(dt) else 4
            blobs = yield _requests(pos + s * width, (n + 1) * width)
            offsets = [dec.decode_positions(blob, int(k) + 1, width) for blob, k in zip(blobs, n.tolist())]
            cs = np.array([o[0] for o in offsets], dtype=np.int64)
            ce = np.array([o[-1] for o in offsets], dtype=np.int64)
            if (cs < 0).any() or (ce < cs).any():
                raise self._corrupt(f"list offsets of field {node.proto.name!r} are negative or decrease")
            values = yield from self._decode(layout, node.children[0], b, cs, ce)
            return dec.decode_offsets(dt, offsets, values)
        layout.check_rows(node, b, plen, e)
        if pa.types.is_dictionary(dt):
            plain = dec.plain_layout(dt.index_type)
            lo, hi = dec.plain_byte_range(plain, s, e)
            blobs = yield _requests(pos + lo, hi - lo)
            indices = dec.decode_plain(plain, blobs, s, e)
            values = self._dictionary(node)
            return pa.DictionaryArray.from_arrays(indices, values, ordered=dt.ordered)
        if dec.is_binary_like(dt):
            return (yield from self._binary(dt, node.proto.nullable, pos, s, e))
        try:
            plain = dec.plain_layout(dt)
        except UnsupportedTypeError as exc:
            raise UnsupportedTypeError(f"{self._uri}: field {node.proto.name!r}: {exc}") from None
        lo, hi = dec.plain_byte_range(plain, s, e)
        blobs = yield _requests(pos + lo, hi - lo)
        return dec.decode_plain(plain, blobs, s, e)

    def _binary(self, dt: pa.DataType, nullable: bool, pos: np.ndarray, s: np.ndarray, e: np.ndarray) -> Gen:
        """Var-binary: the positions array at ``pos`` (rows + 1 absolute offsets), then the bytes."""
        n = e - s
        blobs = yield _requests(pos + s * 8, (n + 1) * 8)
        positions = [dec.decode_positions(blob, int(k) + 1) for blob, k in zip(blobs, n.tolist())]
        starts = np.array([p[0] for p in positions], dtype=np.int64)
        ends = np.array([p[-1] for p in positions], dtype=np.int64)
        if (starts < 0).any() or (ends < starts).any():
            raise self._corrupt("var-binary positions are negative or decrease")
        data = yield _requests(starts, ends - starts)
        return dec.decode_binary(dt, nullable, positions, data)

    # --- dictionaries ----------------------------------------------------------------------
    def _dictionary(self, node: FieldNode) -> pa.Array:
        fid = node.id
        cached = self._dict_cache.get(fid)
        if cached is not None:
            return cached
        value_type = node.arrow.type.value_type
        given = self._dict_values.get(fid)
        if given is not None:
            values = given if isinstance(given, pa.Array) else pa.array(given, type=value_type)
            if values.type != value_type:
                values = values.cast(value_type)
        else:
            emb = self._embedded_by_id.get(fid)
            if emb is not None and emb.HasField("dictionary"):
                src, info = self._src, emb.dictionary
            elif self._dict_path is not None and node.proto.HasField("dictionary"):
                if self._dict_source is None:
                    uri = self._store.uri(self._dict_path) if hasattr(self._store, "uri") else self._dict_path
                    self._dict_source = _Source(self._store, self._dict_path, uri)
                src, info = self._dict_source, node.proto.dictionary
            else:
                raise self._corrupt(
                    f"dictionary values of field {node.proto.name!r} (id {fid}) are not in the file; "
                    "pass dictionaries= (the dataset manifest path or the values)"
                )
            values = drive(self._dictionary_values(value_type, node.proto.nullable,
                                                   int(info.offset), int(info.length), src.uri), src.fetch)
        self._dict_cache[fid] = values
        return values

    def _dictionary_values(self, value_type: pa.DataType, nullable: bool, offset: int, length: int,
                           where: str) -> Gen:
        if offset < 0 or length < 0:
            raise CorruptFileError(where, f"dictionary location {offset}+{length} is negative")
        if length == 0:
            return _empty(value_type)
        pos = np.array([offset], dtype=np.int64)
        s = np.zeros(1, dtype=np.int64)
        e = np.array([length], dtype=np.int64)
        if dec.is_binary_like(value_type):
            return (yield from self._binary(value_type, nullable, pos, s, e))
        plain = dec.plain_layout(value_type)
        lo, hi = dec.plain_byte_range(plain, s, e)
        blobs = yield _requests(pos + lo, hi - lo)
        return dec.decode_plain(plain, blobs, s, e)

    # --- statistics ------------------------------------------------------------------------
    def _read_statistics(self) -> pa.Table:
        st = self._meta.statistics
        fields = list(st.schema)
        ids = list(st.fields) or [f.id for f in fields]
        if not fields or not ids:
            raise self._corrupt("statistics metadata has no schema")
        nb = self.num_batches
        layout = self._load_layout("statistics", int(st.page_table_position), 0, max(ids), 1,
                                   np.array([0, nb], dtype=np.int64), self._src.size - LEGACY_FOOTER_SIZE)
        tree = self._field_tree(fields, "statistics schema")
        one = np.zeros(1, dtype=np.int64)
        gens = [self._decode(layout, n, one, one, np.array([nb], dtype=np.int64)) for n in tree]
        arrays = drive(gather_requests(gens), self._src.fetch)
        return pa.Table.from_arrays(arrays, schema=pa.schema([n.arrow for n in tree]))
