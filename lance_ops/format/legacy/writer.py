"""Writer of legacy Lance data files (file format v0.1, footer version 0.2).

The layout :class:`lance_ops.format.legacy.reader.LegacyFileReader` reads (see its docstring),
written the way pylance 14.0.2 writes it with ``data_storage_version="legacy"``:

1. data pages, batch ("group") after batch: rows are buffered and written ``max_rows_per_group``
   at a time (the last group may be shorter); within a group the fields in pre-order (struct
   fields have no page, a list writes its offsets page then its items; see
   :mod:`lance_ops.format.legacy.encode` for the page encodings). Nothing is padded.
2. the page table: ``int64 (position, length)`` for field ids ``min_id..=max id with a page`` x
   groups (``(0, 0)`` where there is no page);
3. the page statistics (unless disabled): a one-group "file" with one struct column per field
   that supports statistics (named after the field id: ``null_count``, ``min_value``,
   ``max_value``; one row per group), its pages, then its page table (ids from 0);
4. the dictionary values of dictionary fields (plain / var-binary), in field id order;
5. an embedded ``lance.table.Manifest`` (``u32 length | protobuf``): the file's fields (with the
   dictionary offsets of step 4), ``version = 1``, the schema metadata, the writer version and
   ``data_format = lance/0.1`` -- this makes the file self-describing;
6. ``u32 length | lance.file.Metadata``, then ``u64 metadata position | u16 0 | u16 2 | "LANC"``.

Same surface as :class:`lance_ops.format.writer.LanceFileWriter` (``write_batch``, ``close() ->
rows``, ``tell``, ``abort``, ``num_columns``...), which dispatches ``version="0.1"`` here.

v0.1 has no validity: nulls in fixed-width columns keep the slot's value, null booleans become
false, null lists empty, null structs valid, and nullable strings/binaries read back as null only
when empty (so ``""`` reads as null too). This is what pylance writes as well.

Dictionaries: the values of each dictionary field are fixed per file: ``dictionaries=`` (field id
-> values) or the first batch's. Later batches with another dictionary are re-keyed onto those
values (a value not among them is refused; pylance would write the keys unchanged and so
mis-read them). In a dataset the values are the dataset's, which also live in its *manifest
file* (see :mod:`lance_ops.table.manifest.codec`); so when the file belongs to a dataset
(``lance_fields`` given) dictionary fields are refused unless ``dictionaries`` is passed.
"""
from __future__ import annotations

import os
import struct
from types import TracebackType
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import Message

from lance_ops._proto import file_pb2, table_pb2
from lance_ops.errors import SchemaMismatchError, UnsupportedError, UnsupportedTypeError
from lance_ops.format.container import MAGIC
from lance_ops.format.legacy import encode as enc
from lance_ops.format.legacy.decode import is_binary_like, is_list_like
from lance_ops.format.proto_wire import serialize_like_upstream as _serialize
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore, ObjectWriter
from lance_ops.schema import FieldNode, conform_batch, field_tree, to_lance_fields
from lance_ops.format.batch_argument import batch_argument

__all__ = ["LegacyFileWriter", "DEFAULT_MAX_ROWS_PER_GROUP", "LEGACY_DATA_FILE_VERSION"]

DEFAULT_MAX_ROWS_PER_GROUP = 1024
#: (major, minor) pylance records in a legacy DataFile (the footer's numbers)
LEGACY_DATA_FILE_VERSION = FileVersion.LEGACY.manifest_numbers
_U32 = struct.Struct("<I")
_FOOTER = struct.Struct("<QHH4s")


def _default_writer_version() -> tuple[str, str]:
    from lance_ops._version import __version__

    return "lance-ops", __version__


def _check_type(dt: pa.DataType, name: str) -> None:
    """Refuse, before anything is written, types the legacy format cannot hold."""
    if pa.types.is_struct(dt):
        for i in range(dt.num_fields):
            _check_type(dt.field(i).type, f"{name}.{dt.field(i).name}")
        return
    if is_list_like(dt):
        _check_type(dt.value_type, f"{name}.{dt.value_field.name}")
        return
    if pa.types.is_dictionary(dt):
        vt = dt.value_type
        if not (is_binary_like(vt) or pa.types.is_integer(vt)):  # (pylance cannot read float values back)
            raise UnsupportedTypeError(f"field {name!r}: legacy files cannot store dictionary values of type {vt}")
        return
    if pa.types.is_null(dt) or is_binary_like(dt):
        return
    if pa.types.is_fixed_size_list(dt):
        inner = dt.value_type
        if not (pa.types.is_fixed_size_list(inner) or pa.types.is_boolean(inner) or pa.types.is_fixed_size_binary(inner)
                or pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_temporal(inner)
                or pa.types.is_decimal(inner)):
            raise UnsupportedTypeError(f"field {name!r}: legacy fixed-size lists must hold fixed-width values, not {inner}")
        _check_type(inner, name)
        return
    if (pa.types.is_boolean(dt) or pa.types.is_fixed_size_binary(dt) or pa.types.is_integer(dt)
            or pa.types.is_floating(dt) or pa.types.is_temporal(dt) or pa.types.is_decimal(dt)):
        return
    raise UnsupportedTypeError(f"field {name!r}: Arrow type {dt} cannot be stored in a legacy (v0.1) Lance file")


class _Sink:
    """Counts bytes while writing to the store's output (or to memory before it is opened)."""

    def __init__(self, writer: "LegacyFileWriter") -> None:
        self._owner = writer
        self.pos = 0

    def write(self, data: bytes) -> int:
        at = self.pos
        if data:
            self._owner._open_sink().write(data)
            self.pos += len(data)
        return at


class LegacyFileWriter:
    """Write one legacy (v0.1) Lance data file; see the module docstring.

    ``lance_fields``: the Lance fields to store (pre-assigned ids, e.g. a dataset manifest's);
    default ``to_lance_fields(schema)``. ``max_rows_per_group``: rows per batch on disk.
    ``dictionaries``: field id -> dictionary values. ``statistics``: write the page statistics
    (pylance always does). ``writer_version``: ``(library, version)`` recorded in the embedded
    manifest (default lance-ops').
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        version: str | FileVersion = FileVersion.LEGACY,
        storage_options: Mapping[str, Any] | None = None,
        lance_fields: Sequence[file_pb2.Field] | None = None,
        max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
        dictionaries: Mapping[int, pa.Array] | None = None,
        statistics: bool = True,
        writer_version: tuple[str, str] | None = None,
        data_cache_bytes: int | None = None,  # accepted for LanceFileWriter parity; unused
        max_page_bytes: int | None = None,  # idem
    ) -> None:
        if FileVersion.file_writer_spelling(version) is not FileVersion.LEGACY:
            raise UnsupportedError(f"LegacyFileWriter writes version 0.1 only, not {version!r}")
        if int(max_rows_per_group) <= 0:
            raise ValueError("max_rows_per_group must be positive")
        self.version = FileVersion.LEGACY
        self.path = os.fspath(path) if isinstance(path, os.PathLike) else path
        self._storage_options = storage_options
        self._given_lance_fields = list(lance_fields) if lance_fields is not None else None
        self._group = int(max_rows_per_group)
        self._dict_given = {int(k): v for k, v in (dictionaries or {}).items()}
        self._collect_stats = bool(statistics)
        self._writer_version = writer_version or _default_writer_version()
        self._schema: pa.Schema | None = None
        self._lance_fields: list[file_pb2.Field] = []
        self._tree: list[FieldNode] = []
        self._schema_metadata: dict[str, bytes] = {}
        self._dicts: dict[int, pa.Array] = {}
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._batch_offsets: list[int] = [0]
        self._pages: dict[int, dict[int, tuple[int, int]]] = {}
        self._stat_nodes: list[FieldNode] = []
        self._stats: dict[int, list[tuple[int, pa.Array, pa.Array]]] = {}
        self._rows = 0
        self._store: ObjectStore | None = None
        self._out: ObjectWriter | None = None
        self._sink = _Sink(self)
        self._closed = False
        if schema is not None:
            self._initialize(schema)

    # --- set-up ----------------------------------------------------------------------------
    def _initialize(self, schema: pa.Schema) -> None:
        if len(schema) == 0:
            raise SchemaMismatchError("cannot write a Lance file with no columns")
        for f in schema:
            _check_type(f.type, f.name)
        fields = to_lance_fields(schema)
        if self._given_lance_fields is not None:
            if len(self._given_lance_fields) != len(fields):
                raise SchemaMismatchError(
                    f"lance_fields has {len(self._given_lance_fields)} fields but the schema flattens to {len(fields)}")
            fields = [_copy(f) for f in self._given_lance_fields]
        tree = field_tree(fields)
        dict_nodes = [n for top in tree for n in top.walk() if pa.types.is_dictionary(n.arrow.type)]
        if self._given_lance_fields is not None:
            missing = [n.proto.name for n in dict_nodes if n.id not in self._dict_given]
            if missing:
                raise UnsupportedError(
                    f"{self.path}: the values of dictionary fields {missing} are unknown: a legacy (v0.1) "
                    "dataset's dictionary values are fixed by its schema (its manifest file); pass "
                    "dictionaries= (field id -> values); nothing was written")
        for n in dict_nodes:
            given = self._dict_given.get(n.id)
            if given is not None:
                vt = n.arrow.type.value_type
                values = given if isinstance(given, pa.Array) else pa.array(given, type=vt)
                self._dicts[n.id] = values.cast(vt) if values.type != vt else values
        self._has_dicts = bool(dict_nodes)
        self._schema = schema
        self._lance_fields = fields
        self._tree = tree
        for key, value in (schema.metadata or {}).items():
            self._schema_metadata[key.decode() if isinstance(key, bytes) else key] = (
                value if isinstance(value, bytes) else str(value).encode())
        if self._collect_stats:
            self._stat_nodes = sorted((n for n in _struct_walk(tree) if enc.supports_statistics(n.arrow.type)),
                                      key=lambda n: n.id)
            self._stats = {n.id: [] for n in self._stat_nodes}

    def _open_sink(self) -> ObjectWriter:
        if self._out is None:
            from lance_ops.io import open_store

            self._store, inner = open_store(self.path, self._storage_options)
            self._out = self._store.open_output(inner)
        return self._out

    # --- public API ------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema | None:
        """The Arrow schema being written (None until given or taken from the first batch)."""
        return self._schema

    @property
    def num_columns(self) -> int:
        """Legacy files have no columns in the v2 sense (pylance records ``column_indices=[]``)."""
        return 0

    @property
    def lance_fields(self) -> list[file_pb2.Field]:
        """Copies of the Lance fields stored in the file (pre-order, with their field ids)."""
        return [_copy(f) for f in self._lance_fields]

    @property
    def pages(self) -> list[list]:
        """No v2 column pages (keeps lance_ops' statistics hook inert; the file has its own)."""
        return []

    @property
    def rows_written(self) -> int:
        """Rows accepted so far (buffered rows included)."""
        return self._rows

    @property
    def max_rows_per_group(self) -> int:
        """Rows per batch ("group"); every field has one page per group."""
        return self._group

    def tell(self) -> int:
        """Bytes written to the output so far (buffered rows not yet counted)."""
        return self._sink.pos

    def add_schema_metadata(self, key: str, value: str | bytes) -> None:
        """Add (or replace) a schema metadata entry; stored in the embedded manifest at close."""
        self._check_open()
        self._schema_metadata[key] = value if isinstance(value, bytes) else str(value).encode()

    def write_batch(self, batch: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch] | None = None, *,
                    data: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch] | None = None) -> None:
        """Append ``batch`` (pylance's keyword): a RecordBatch, a Table or an iterable of batches; full
        groups are written at once."""
        batch = batch_argument(batch, data)
        self._check_open()
        if isinstance(batch, pa.Table):
            if self._schema is None:
                self._initialize(batch.schema)
            batches: Iterable[pa.RecordBatch] = batch.to_batches()
        elif isinstance(batch, pa.RecordBatch):
            batches = [batch]
        else:
            batches = batch
        for one in batches:
            self._write_one(one)

    def close(self) -> int:
        """Write the last group, the page table, statistics, dictionaries, manifest and footer; returns rows."""
        if self._closed:
            return self._rows
        if self._schema is None:
            raise SchemaMismatchError(
                f"{self.path}: no schema was provided when the writer was opened and no data was written, so "
                "the schema is unknown and the file cannot be created (pass schema= or write a batch); "
                "nothing was written")
        try:
            if self._buffered:
                self._flush_group(self._buffered)
            self._write_tail()
            self._open_sink().close()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self._rows

    def abort(self) -> None:
        """Discard everything written; nothing appears at ``path``."""
        self._closed = True
        self._buffer = []
        if self._out is not None:
            self._out.abort()

    def __enter__(self) -> "LegacyFileWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"LegacyFileWriter({self.path!r}, rows={self._rows}, groups={len(self._batch_offsets) - 1})"

    # --- batches ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the LegacyFileWriter is closed")

    def _write_one(self, batch: pa.RecordBatch) -> None:
        if self._schema is None:
            self._initialize(batch.schema)
        batch = conform_batch(batch, self._schema)
        for node, arr in zip(self._tree, batch.columns):
            _check_nulls(node, arr)
        if batch.num_rows == 0:
            return
        if self._has_dicts:
            batch = pa.RecordBatch.from_arrays(
                [self._rekey(node, arr) for node, arr in zip(self._tree, batch.columns)], schema=self._schema)
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        self._rows += batch.num_rows
        while self._buffered >= self._group:
            self._flush_group(self._group)

    def _flush_group(self, rows: int) -> None:
        """Write the first ``rows`` buffered rows as one group."""
        taken: list[pa.RecordBatch] = []
        need = rows
        while need:
            b = self._buffer[0]
            if b.num_rows <= need:
                taken.append(b)
                self._buffer.pop(0)
                need -= b.num_rows
            else:
                taken.append(b.slice(0, need))
                self._buffer[0] = b.slice(need)
                need = 0
        self._buffered -= rows
        group = len(self._batch_offsets) - 1
        if len(taken) == 1:
            columns = list(taken[0].columns)
        else:
            table = pa.Table.from_batches(taken, schema=self._schema)
            columns = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0) for c in table.columns]
        if self._stat_nodes:
            for node, arr in _struct_leaves(self._tree, columns):
                if node.id in self._stats:
                    self._stats[node.id].append(enc.page_statistics(arr))
        for node, arr in zip(self._tree, columns):
            self._write_array(node, arr, group, self._pages)
        self._batch_offsets.append(self._batch_offsets[-1] + rows)

    def _rekey(self, node: FieldNode, arr: pa.Array) -> pa.Array:
        """``arr`` with every dictionary below ``node`` expressed over the file's dictionary values."""
        dt = node.arrow.type
        if pa.types.is_dictionary(dt):
            values = self._dicts.get(node.id)
            if values is None:
                self._dicts[node.id] = arr.dictionary
                return arr
            if arr.dictionary.equals(values):
                return arr
            mapping = pc.index_in(arr.dictionary, value_set=values)
            keys = mapping.take(arr.indices)
            if keys.null_count > arr.indices.null_count:
                extra = pc.filter(arr.dictionary, pc.is_null(mapping)).to_pylist()[:10]
                raise SchemaMismatchError(
                    f"{self.path}: field {node.proto.name!r} holds dictionary values {extra} that the file's "
                    f"(the dataset's) dictionary does not have; a legacy dictionary is fixed by the first batch "
                    "written")
            return pa.DictionaryArray.from_arrays(keys.cast(dt.index_type), values, ordered=dt.ordered)
        if pa.types.is_struct(dt):
            if not any(pa.types.is_dictionary(n.arrow.type) for n in node.walk()):
                return arr
            children = [self._rekey(c, arr.field(i)) for i, c in enumerate(node.children)]
            return pa.StructArray.from_arrays(children, fields=list(dt), mask=_null_mask(arr))
        if is_list_like(dt):
            if not any(pa.types.is_dictionary(n.arrow.type) for n in node.walk()):
                return arr
            cls = pa.LargeListArray if pa.types.is_large_list(dt) else pa.ListArray
            child = self._rekey(node.children[0], arr.values)
            return cls.from_arrays(arr.offsets, child, type=dt, mask=_null_mask(arr))
        return arr

    # --- pages -----------------------------------------------------------------------------
    def _write_array(self, node: FieldNode, arr: pa.Array, group: int, pages: dict) -> None:
        dt = node.arrow.type
        rows = len(arr)
        sink = self._sink
        if pa.types.is_struct(dt):
            for i, child in enumerate(node.children):
                self._write_array(child, arr.field(i), group, pages)
            return
        if pa.types.is_null(dt):
            pages.setdefault(node.id, {})[group] = (sink.pos, rows)
            return
        if is_list_like(dt):
            offsets, items = enc.list_page(arr)
            pages.setdefault(node.id, {})[group] = (sink.write(offsets), rows + 1)
            self._write_array(node.children[0], items, group, pages)
            return
        if is_binary_like(dt):
            data, positions = enc.binary_page(arr, sink.pos)
            sink.write(data)
            pages.setdefault(node.id, {})[group] = (sink.write(positions), rows)
            return
        if pa.types.is_dictionary(dt):
            pages.setdefault(node.id, {})[group] = (sink.write(enc.plain_bytes(arr.indices)), rows)
            return
        pages.setdefault(node.id, {})[group] = (sink.write(enc.plain_bytes(arr)), rows)

    def _write_page_table(self, pages: dict, min_id: int, num_groups: int) -> int:
        max_id = max(pages)
        table = np.zeros((max_id - min_id + 1, num_groups, 2), dtype="<i8")
        for fid, per_group in pages.items():
            for g, (pos, length) in per_group.items():
                table[fid - min_id, g] = (pos, length)
        return self._sink.write(table.tobytes())

    def _write_struct(self, message: Message) -> int:
        blob = _serialize(message)
        return self._sink.write(_U32.pack(len(blob)) + blob)

    def _write_statistics(self, meta: file_pb2.Metadata) -> None:
        nodes = [n for n in self._stat_nodes if self._stats.get(n.id)]
        if not nodes or len(self._batch_offsets) < 2:
            return
        stats_fields: list[file_pb2.Field] = []
        arrays: list[pa.Array] = []
        next_id = 0
        for node in nodes:
            rows = self._stats[node.id]
            proto = node.proto
            sid = next_id
            stats_fields.append(file_pb2.Field(name=str(node.id), id=sid, parent_id=-1, logical_type="struct",
                                               nullable=False, encoding=file_pb2.NONE))
            stats_fields.append(file_pb2.Field(name="null_count", id=sid + 1, parent_id=sid, logical_type="int64",
                                               nullable=False, encoding=file_pb2.PLAIN))
            for k, name in ((2, "min_value"), (3, "max_value")):
                stats_fields.append(file_pb2.Field(name=name, id=sid + k, parent_id=sid, logical_type=proto.logical_type,
                                                   nullable=True, encoding=proto.encoding))
            next_id += 4
            dt = node.arrow.type
            struct = pa.StructArray.from_arrays(
                [pa.array([r[0] for r in rows], pa.int64()),
                 pa.concat_arrays([r[1] for r in rows]).cast(dt),
                 pa.concat_arrays([r[2] for r in rows]).cast(dt)],
                names=["null_count", "min_value", "max_value"])
            arrays.append(struct)
        stats_tree = field_tree(stats_fields)
        pages: dict = {}
        for node, arr in zip(stats_tree, arrays):
            self._write_array(node, arr, 0, pages)
        position = self._write_page_table(pages, 0, 1)
        st = meta.statistics
        st.schema.extend(stats_fields)
        st.fields.extend(f.id for f in stats_fields)
        st.page_table_position = position

    def _write_dictionaries(self) -> None:
        by_id = {f.id: f for f in self._lance_fields}
        for fid in sorted(by_id):
            f = by_id[fid]
            if f.encoding != file_pb2.DICTIONARY and not f.logical_type.startswith("dict:"):
                continue
            values = self._dicts.get(fid)
            if values is None:  # never saw a batch: nothing refers to it
                node = next(n for t in self._tree for n in t.walk() if n.id == fid)
                values = pa.array([], type=node.arrow.type.value_type)
            if len(values) and is_binary_like(values.type):
                data, positions = enc.binary_page(values, self._sink.pos)
                self._sink.write(data)
                pos = self._sink.write(positions)
            elif len(values):
                pos = self._sink.write(enc.plain_bytes(values))
            else:
                pos = self._sink.pos
                if is_binary_like(values.type):
                    pos = self._sink.write(struct.pack("<q", pos))
            f.dictionary.offset = pos
            f.dictionary.length = len(values)

    def _write_tail(self) -> None:
        groups = len(self._batch_offsets) - 1
        meta = file_pb2.Metadata()
        meta.batch_offsets.extend(self._batch_offsets if groups else [])
        if self._pages:
            meta.page_table_position = self._write_page_table(self._pages, min(f.id for f in self._lance_fields), groups)
        if self._collect_stats:
            self._write_statistics(meta)
        self._write_dictionaries()
        manifest = table_pb2.Manifest()
        manifest.fields.extend(self._lance_fields)
        manifest.version = 1
        for key, value in self._schema_metadata.items():
            manifest.schema_metadata[key] = value
        manifest.writer_version.library, manifest.writer_version.version = self._writer_version
        manifest.data_format.file_format = "lance"
        manifest.data_format.version = FileVersion.LEGACY.value
        meta.manifest_position = self._write_struct(manifest)
        meta_pos = self._write_struct(meta)
        major, minor = FileVersion.LEGACY.footer
        self._sink.write(_FOOTER.pack(meta_pos, major, minor, MAGIC))


# ------------------------------------------------------------------------------------------------
def _copy(f: file_pb2.Field) -> file_pb2.Field:
    out = file_pb2.Field()
    out.CopyFrom(f)
    return out


def _null_mask(arr: pa.Array) -> Optional[pa.Array]:
    return arr.is_null() if arr.null_count else None


def _struct_walk(tree: Sequence[FieldNode]) -> Iterable[FieldNode]:
    """Fields reachable through structs only (pre-order), as the statistics visit them."""
    for node in tree:
        yield node
        if pa.types.is_struct(node.arrow.type):
            yield from _struct_walk(node.children)


def _struct_leaves(tree: Sequence[FieldNode], arrays: Sequence[pa.Array]) -> Iterable[tuple[FieldNode, pa.Array]]:
    for node, arr in zip(tree, arrays):
        if pa.types.is_struct(node.arrow.type):
            yield from _struct_leaves(node.children, [arr.field(i) for i in range(len(node.children))])
        else:
            yield node, arr


def _check_nulls(node: FieldNode, arr: pa.Array) -> None:
    if not node.proto.nullable and arr.null_count:
        raise SchemaMismatchError(
            f"The field `{node.proto.name}` contained null values even though the field is marked non-null in the schema")
    if pa.types.is_struct(node.arrow.type):
        for i, c in enumerate(node.children):
            _check_nulls(c, arr.field(i))
