"""Blob columns on the read side: the description types, and pylance's "blob v2" layout.

Two blob layouts exist (facts from files and datasets written by pylance 14.0.2):

* **legacy (v1)** -- a ``large_binary`` field whose metadata has the key ``lance-encoding:blob``
  (any file version; what ``LanceFileWriter`` and ``write_dataset`` at 2.0 / 2.1 write, and
  what lance_ops writes at every version). Pages store ``(position u64, size u64)``
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

This module holds what the file readers and the dataset layer share: the Arrow types, how a
schema looks once blob fields are replaced by their descriptions, the repair of the descriptor
fields' ids in a data file's schema, and where a v2 descriptor's bytes are.
"""
from __future__ import annotations

from typing import Optional, Sequence

import pyarrow as pa

from lance_ops._proto import file_pb2

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
    return is_legacy_blob(field) or is_blob_v2(field)


def _contains(field: pa.Field, pred) -> bool:
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


def _map_children(field: pa.Field, fn) -> pa.Field:
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


def described_tree(nodes):
    """Copies of schema ``FieldNode`` trees whose legacy blob leaves (and their parents) have the
    description types: what a 2.1+ reader builds when asked for descriptions."""
    from lance_ops.schema import FieldNode

    def one(node):
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
