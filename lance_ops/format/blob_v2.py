"""Blob columns: the description types, and pylance's "blob v2" layout (types, schemas, paths).

Two blob layouts exist (facts from files and datasets written by pylance 14.0.2):

* **legacy (v1)** -- a ``large_binary`` field whose metadata has the key ``lance-encoding:blob``
  (any file version; what ``LanceFileWriter`` and ``write_dataset`` at 2.0 / 2.1 write, in
  pylance and lance_ops alike). Pages store ``(position u64, size u64)``
  *descriptions* of bytes kept out of line in the same data file. pylance's file reader returns
  the bytes; its datasets return the descriptions as ``struct<position: uint64, size: uint64>``
  (field metadata kept) unless asked for ``blob_handling="all_binary"``.
* **blob v2** -- what pylance's ``write_dataset`` makes of a blob field at 2.2: the manifest
  field becomes the ``lance.blob.v2`` extension over ``struct<data: large_binary, uri: string>``;
  the data file stores a packed struct field (metadata ``lance-encoding:blob`` and
  ``lance-encoding:packed``) whose five child fields are written with id -1 / parent -1::

      kind u8, position u64, size u64, blob_id u32, blob_uri utf8   (children non-nullable)

  ``kind`` says where the bytes are: 0 inline (absolute offset in the data file; values up to
  64 KiB, 64-byte padded like v1; an empty value is (0, position, 0)), 1 packed (in the shared
  side file ``blob_id``, values up to 4 MiB), 2 dedicated (a side file of its own), 3 external
  (``blob_uri``; ``size`` 0 means the whole object). A null row is a null struct. Side files
  live at ``data/<data file stem>/<blob_id as 32 binary digits, least significant first>.blob``
  and are named by no manifest: they belong to their data file.

This module holds what the readers, the writers and the dataset layer share: the Arrow types,
how a schema looks once blob fields are replaced by their descriptions, the repair of the
descriptor fields' ids in a data file's schema, where a v2 descriptor's bytes are, and on the
write side the logical form of blob v2 values (``struct<data, uri[, position, size]>``) and the
field list a 2.2 data file stores for them (the writer itself: ``v2_1.blob_v2``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

import pyarrow as pa

from lance_ops._proto import file_pb2

if TYPE_CHECKING:
    from lance_ops.schema import FieldNode

BLOB_KEY = "lance-encoding:blob"
PACKED_KEY = "lance-encoding:packed"
BLOB_V2_EXTENSION = "lance.blob.v2"

#: legacy blob descriptions, as pylance's datasets return them
DESCRIPTION_TYPE = pa.struct([pa.field("position", pa.uint64()), pa.field("size", pa.uint64())])
#: blob v2 descriptors, as stored in the data file and returned by pylance's datasets
DESCRIPTOR_TYPE = pa.struct([
    pa.field("kind", pa.uint8(), nullable=False),
    pa.field("position", pa.uint64(), nullable=False),
    pa.field("size", pa.uint64(), nullable=False),
    pa.field("blob_id", pa.uint32(), nullable=False),
    pa.field("blob_uri", pa.utf8(), nullable=False),
])
DESCRIPTOR_METADATA = {BLOB_KEY.encode(): b"true", PACKED_KEY.encode(): b"true"}

KIND_INLINE, KIND_PACKED, KIND_DEDICATED, KIND_EXTERNAL = 0, 1, 2, 3
SIDE_FILE_SUFFIX = ".blob"

_BLOB_KEY_B = BLOB_KEY.encode()


# --------------------------------------------------------------------------------------------
# which fields are blob fields
# --------------------------------------------------------------------------------------------
def has_blob_key(field: pa.Field) -> bool:
    """Whether ``field``'s metadata has the ``lance-encoding:blob`` key (as bytes or str), whatever its type."""
    md = field.metadata or {}
    return _BLOB_KEY_B in md or BLOB_KEY in md


def is_legacy_blob(field: pa.Field) -> bool:
    """A v1 blob field: ``large_binary`` with the ``lance-encoding:blob`` metadata key."""
    return pa.types.is_large_binary(field.type) and has_blob_key(field)


def is_blob_v2(field: pa.Field) -> bool:
    """A blob v2 field as a manifest describes it (the ``lance.blob.v2`` extension)."""
    t = field.type
    if isinstance(t, pa.ExtensionType):
        return t.extension_name == BLOB_V2_EXTENSION
    md = field.metadata or {}
    return md.get(b"ARROW:extension:name") == BLOB_V2_EXTENSION.encode() and pa.types.is_struct(t)


def is_blob_field(field: pa.Field) -> bool:
    """A blob field of either layout: legacy (v1) or blob v2."""
    return is_legacy_blob(field) or is_blob_v2(field)


def _contains(field: pa.Field, pred: Callable[[pa.Field], bool]) -> bool:
    """Whether ``field`` or a field nested in it (struct child, list item) satisfies ``pred``."""
    if pred(field):
        return True
    t = field.type
    if pa.types.is_struct(t):
        return any(_contains(t.field(i), pred) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _contains(t.value_field, pred)
    return False


def has_blobs(field: pa.Field) -> bool:
    """Whether ``field`` is or contains a blob field."""
    return _contains(field, is_blob_field)


def has_blob_v2(field: pa.Field) -> bool:
    """Whether ``field`` is or contains a blob v2 field."""
    return _contains(field, is_blob_v2)


def blob_v2_names(lance_fields: Sequence[file_pb2.Field]) -> list[str]:
    """Names of the blob v2 fields of a manifest's field list."""
    return [f.name for f in lance_fields if f.extension_name == BLOB_V2_EXTENSION]


# --------------------------------------------------------------------------------------------
# the types a read returns
# --------------------------------------------------------------------------------------------
def described_field(field: pa.Field) -> pa.Field:
    """``field`` with every blob field in it replaced by its descriptions (pylance's default
    dataset output): v1 -> ``DESCRIPTION_TYPE`` (metadata kept), v2 -> ``DESCRIPTOR_TYPE`` with
    the data file's metadata."""
    if is_blob_v2(field):
        return pa.field(field.name, DESCRIPTOR_TYPE, field.nullable, DESCRIPTOR_METADATA)
    if is_legacy_blob(field):
        return field.with_type(DESCRIPTION_TYPE)
    return _map_children(field, described_field)


def binary_field(field: pa.Field) -> pa.Field:
    """``field`` as ``blob_handling="all_binary"`` returns it: blobs as ``large_binary`` (a v1
    field keeps its metadata, a v2 field has none, as pylance)."""
    if is_blob_v2(field):
        return pa.field(field.name, pa.large_binary(), field.nullable)
    if is_legacy_blob(field):
        return field
    return _map_children(field, binary_field)


def _map_children(field: pa.Field, fn: Callable[[pa.Field], pa.Field]) -> pa.Field:
    t = field.type
    if pa.types.is_struct(t):
        kids = [fn(t.field(i)) for i in range(t.num_fields)]
        if all(k is t.field(i) or k.equals(t.field(i), check_metadata=True) for i, k in enumerate(kids)):
            return field
        return field.with_type(pa.struct(kids))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kid = fn(t.value_field)
        if kid.equals(t.value_field, check_metadata=True):
            return field
        return field.with_type(pa.large_list(kid) if pa.types.is_large_list(t) else pa.list_(kid))
    if pa.types.is_fixed_size_list(t):
        kid = fn(t.value_field)
        if kid.equals(t.value_field, check_metadata=True):
            return field
        return field.with_type(pa.list_(kid, t.list_size))
    return field


def described_tree(nodes: Sequence[FieldNode]) -> list[FieldNode]:
    """Copies of schema ``FieldNode`` trees whose legacy blob leaves (and their parents) have the
    description types: what a 2.1+ reader builds when asked for descriptions."""
    from lance_ops.schema import FieldNode

    def one(node: FieldNode) -> FieldNode:
        kids = [one(c) for c in node.children]
        arrow, t = node.arrow, node.arrow.type
        if is_legacy_blob(arrow):
            arrow = arrow.with_type(DESCRIPTION_TYPE)
        elif kids and pa.types.is_struct(t):
            arrow = arrow.with_type(pa.struct([k.arrow for k in kids]))
        elif kids and (pa.types.is_list(t) or pa.types.is_large_list(t)):
            arrow = arrow.with_type(pa.large_list(kids[0].arrow) if pa.types.is_large_list(t) else pa.list_(kids[0].arrow))
        return FieldNode(node.proto, arrow, kids)

    return [one(n) for n in nodes]


# --------------------------------------------------------------------------------------------
# data file schemas
# --------------------------------------------------------------------------------------------
def attach_descriptor_fields(fields: Sequence[file_pb2.Field]) -> Sequence[file_pb2.Field]:
    """A data file's field list with blob v2 descriptor children given real parents.

    pylance writes the five children of a blob v2 descriptor struct with id -1 and parent -1,
    right after the struct in pre-order; read as they are, they look like top-level fields
    without columns. They are renumbered here with fresh (negative, below -1) ids under their
    struct, so the schema tree is the one the columns follow. Other field lists are returned
    unchanged.
    """
    if not any(f.id == -1 and f.parent_id == -1 for f in fields):
        return fields
    out: list[file_pb2.Field] = []
    owner: Optional[int] = None  # id of the descriptor struct collecting children
    wanted = 0
    next_id = -2
    for f in fields:
        if f.id == -1 and f.parent_id == -1 and owner is not None and wanted:
            g = file_pb2.Field()
            g.CopyFrom(f)
            g.id = next_id
            g.parent_id = owner
            next_id -= 1
            wanted -= 1
            out.append(g)
            continue
        owner, wanted = None, 0
        if f.logical_type == "struct" and BLOB_KEY in f.metadata and PACKED_KEY in f.metadata:
            owner, wanted = f.id, DESCRIPTOR_TYPE.num_fields
        out.append(f)
    return out


# --------------------------------------------------------------------------------------------
# where blob v2 bytes are
# --------------------------------------------------------------------------------------------
def side_file_name(blob_id: int) -> str:
    """``<blob_id as 32 binary digits, least significant first>.blob`` (pylance's naming)."""
    return format(int(blob_id), "032b")[::-1] + SIDE_FILE_SUFFIX


def side_file_path(data_file: str, blob_id: int) -> str:
    """Path of side file ``blob_id`` of ``data_file`` (``x.lance`` -> ``x/<name>.blob``),
    relative to the data directory."""
    stem = data_file[: -len(".lance")] if data_file.endswith(".lance") else data_file
    return f"{stem}/{side_file_name(blob_id)}"


def parse_side_file(rel: str) -> Optional[str]:
    """For ``<stem>/<name>.blob`` (relative to ``data/``): the data file ``<stem>.lance`` it
    belongs to; None for anything else (pylance's cleanup rule)."""
    parts = rel.split("/")
    if len(parts) != 2 or not parts[0] or not parts[1].endswith(SIDE_FILE_SUFFIX):
        return None
    return parts[0] + ".lance"


# --------------------------------------------------------------------------------------------
# the write side: logical values and the data file's schema
# --------------------------------------------------------------------------------------------
EXTENSION_NAME_KEY = b"ARROW:extension:name"
EXTENSION_METADATA_KEY = b"ARROW:extension:metadata"
#: what a blob v2 column holds before it is written: bytes or an external URI (with a range)
LOGICAL_TYPE = pa.struct([pa.field("data", pa.large_binary()), pa.field("uri", pa.utf8())])
LOGICAL_RANGE_TYPE = pa.struct(list(LOGICAL_TYPE) + [pa.field("position", pa.uint64()), pa.field("size", pa.uint64())])
_DESCRIPTOR_LANCE_TYPES = (("kind", "uint8", file_pb2.Encoding.PLAIN), ("position", "uint64", file_pb2.Encoding.PLAIN),
                           ("size", "uint64", file_pb2.Encoding.PLAIN), ("blob_id", "uint32", file_pb2.Encoding.PLAIN),
                           ("blob_uri", "string", file_pb2.Encoding.VAR_BINARY))


def logical_field(field: pa.Field) -> pa.Field:
    """The blob v2 field pylance's 2.2 datasets make of a blob field: a struct of
    ``data``/``uri`` (plus ``position``/``size`` for the 4-field storage) tagged as the
    ``lance.blob.v2`` extension. A legacy ``large_binary`` blob field loses its
    ``lance-encoding:blob`` key; other metadata (size thresholds) is kept."""
    md = {k if isinstance(k, bytes) else k.encode(): v for k, v in (field.metadata or {}).items()}
    t = field.type
    if isinstance(t, pa.ExtensionType) and t.extension_name == BLOB_V2_EXTENSION:
        md[EXTENSION_NAME_KEY] = BLOB_V2_EXTENSION.encode()
        md[EXTENSION_METADATA_KEY] = t.__arrow_ext_serialize__()
        storage = t.storage_type
        _check_storage(field.name, storage)
        return pa.field(field.name, storage, field.nullable, md)
    if is_legacy_blob(field):
        md.pop(_BLOB_KEY_B, None)
        md[EXTENSION_NAME_KEY] = BLOB_V2_EXTENSION.encode()
        return pa.field(field.name, LOGICAL_TYPE, field.nullable, md)
    if is_blob_v2(field):
        _check_storage(field.name, t)
        return field
    raise ValueError(f"field {field.name!r} is not a blob field")


def _check_storage(name: str, storage: pa.DataType) -> None:
    if storage not in (LOGICAL_TYPE, LOGICAL_RANGE_TYPE) and not (
            pa.types.is_struct(storage) and [f.name for f in storage] in (["data", "uri"], ["data", "uri", "position", "size"])
            and all(storage.field(i).type == LOGICAL_RANGE_TYPE.field(i).type for i in range(storage.num_fields))):
        from lance_ops.errors import UnsupportedTypeError

        raise UnsupportedTypeError(
            f"field {name!r}: a lance.blob.v2 field stores struct<data: large_binary, uri: string"
            f"[, position: uint64, size: uint64]>, not {storage}")


def to_logical(array: pa.Array | pa.ChunkedArray, field: pa.Field) -> pa.StructArray:
    """``array`` (bytes, a ``lance.blob.v2`` extension array or its storage struct) as a struct
    array of ``field``'s type (see :func:`logical_field`)."""
    from lance_ops.errors import SchemaMismatchError

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    want = field.type
    t = array.type
    if t == want:  # already logical (the file writer converts before its encoders see it)
        return array
    n = len(array)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        data = array.cast(pa.large_binary())
        kids = [data, pa.nulls(n, pa.utf8())] + [pa.nulls(n, pa.uint64())] * (want.num_fields - 2)
        mask = None if array.null_count == 0 else array.is_null()
        return pa.StructArray.from_arrays(kids, fields=list(want), mask=mask)
    if not pa.types.is_struct(t) or [f.name for f in t][:2] != ["data", "uri"]:
        raise SchemaMismatchError(f"blob column {field.name!r}: expected bytes or a lance.blob.v2 struct, got {t}")
    flat = dict(zip([f.name for f in t], array.flatten()))
    if want.num_fields == 2 and "position" in flat:
        set_range = flat["position"].null_count < n or flat["size"].null_count < n
        if set_range:
            raise SchemaMismatchError(
                f"blob column {field.name!r}: the dataset's blob field has no position/size (external ranges); "
                "the data sets them")
    kids = []
    for f in want:
        got = flat.get(f.name)
        kids.append(pa.nulls(n, f.type) if got is None else got.cast(f.type))
    mask = None if array.null_count == 0 else array.is_null()
    return pa.StructArray.from_arrays(kids, fields=list(want), mask=mask)


def data_file_fields(lance_fields: Sequence[file_pb2.Field]) -> list[file_pb2.Field]:
    """The field list a 2.2 data file stores for ``lance_fields`` (a manifest's): every blob v2
    field becomes pylance's descriptor struct (``lance-encoding:blob``/``packed`` metadata, no
    extension) followed by its five children with id -1 / parent -1; its own children (data,
    uri, ...) are left out."""
    blob_ids = {f.id for f in lance_fields if is_blob_v2_proto(f)}
    if not blob_ids:
        return list(lance_fields)
    below: set[int] = set()
    out: list[file_pb2.Field] = []
    for f in lance_fields:
        if f.parent_id in blob_ids or f.parent_id in below:
            below.add(f.id)
            continue
        if f.id not in blob_ids:
            out.append(f)
            continue
        g = file_pb2.Field(name=f.name, id=f.id, parent_id=f.parent_id, logical_type="struct", nullable=f.nullable)
        g.metadata[PACKED_KEY] = b"true"
        g.metadata[BLOB_KEY] = b"true"
        out.append(g)
        for name, logical, encoding in _DESCRIPTOR_LANCE_TYPES:
            out.append(file_pb2.Field(name=name, id=-1, parent_id=-1, logical_type=logical, encoding=encoding))
    return out


def is_blob_v2_proto(field: file_pb2.Field) -> bool:
    """Whether a Lance field proto (a manifest's) is a blob v2 field."""
    return field.extension_name == BLOB_V2_EXTENSION or (
        field.logical_type == "struct" and field.metadata.get("ARROW:extension:name") == BLOB_V2_EXTENSION.encode())
