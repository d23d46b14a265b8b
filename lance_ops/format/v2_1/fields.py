"""Which fields the Lance 2.1+ writer can store (checked before anything is written), the values
it refuses, and the field ids a 2.1+ DataFile lists (the leaves that own a column).

The 2.0 counterpart is :mod:`lance_ops.format.v2_0.fields`; the encoders are in :mod:`lance_ops.format.v2_1.encode`.
"""
from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from lance_ops._proto import file_pb2
from lance_ops.errors import SchemaMismatchError, UnsupportedError
from lance_ops.format.blob_v2 import is_blob_v2
from lance_ops.format.v2_1 import blob
from lance_ops.format.v2_1.encode import STRUCTURAL_META_KEY, field_meta, params_of
from lance_ops.format.v2_1.layout import shred as sh
from lance_ops.format.version import FileVersion
from lance_ops.schema import FieldNode, field_tree


def _check_blob_fields(field: pa.Field, version: str, path: str = "", below_list: bool = False) -> None:
    """Blob metadata anywhere in ``field``: a large_binary leaf outside lists, else refused."""
    name = f"{path}.{field.name}" if path else field.name
    if blob.is_blob(field):
        blob.check_blob_field(field, name, below_list, version)
        return
    t = field.type
    if pa.types.is_struct(t) and not sh.is_packed(field):
        for i in range(t.num_fields):
            _check_blob_fields(t.field(i), version, name, below_list)
    elif sh.is_list(t):
        _check_blob_fields(t.value_field, version, name, True)


def check_writable(field: pa.Field, version: str = FileVersion.V2_1) -> None:
    """Refuse (before writing) fields the 2.1+ writer cannot store; validates field metadata."""
    _check_blob_fields(field, version)
    sh.check_shreddable(field)
    for _, leaf in sh.leaf_fields(field):
        if blob.is_blob(leaf):
            continue
        params_of(leaf)
        t = leaf.type
        if pa.types.is_struct(t) and sh.is_packed(leaf) and field_meta(leaf, STRUCTURAL_META_KEY) == "fullzip":
            raise UnsupportedError(f"field {leaf.name!r}: full-zip packed structs are not supported")


def check_values(array: pa.Array, field: pa.Field, path: str = "") -> None:
    """Refuse nulls in non-nullable fields (struct nulls are fine in 2.1+)."""
    name = f"{path}.{field.name}" if path else field.name
    dt = field.type
    if not field.nullable and array.null_count:
        raise SchemaMismatchError(
            f"The field `{name}` contained null values even though the field is marked non-null in the schema")
    if pa.types.is_struct(dt) and sh.is_packed(field):
        valid = sh.validity_of(array)
        for i in range(dt.num_fields):
            child = array.field(i)
            cv = sh.validity_of(child)
            if cv is not None and (valid is None or bool((valid & ~cv).any())):
                raise UnsupportedError(
                    f"packed struct field `{name}`: child `{dt.field(i).name}` has null values, which a packed "
                    "struct cannot store (only the struct itself may be null)")
    elif pa.types.is_struct(dt):
        for i in range(dt.num_fields):
            check_values(array.field(i), dt.field(i), name)
    elif sh.is_list(dt):
        offsets = array.offsets
        if len(offsets):
            start, end = offsets[0].as_py(), offsets[-1].as_py()
            check_values(array.values.slice(start, end - start), dt.value_field, name)


def leaf_field_ids(lance_fields: Iterable[file_pb2.Field]) -> list[int]:
    """Ids of the fields that own a column in a 2.1+ file (leaves in pre-order): what a 2.1+
    ``DataFile.fields`` lists, with ``column_indices`` ``0..n-1``."""
    out: list[int] = []

    def walk(node: FieldNode) -> None:
        if sh.is_leaf(node.arrow) or is_blob_v2(node.arrow):  # a blob v2 field is one descriptor column
            out.append(node.id)
            return
        for c in node.children:
            walk(c)

    for top in field_tree(list(lance_fields)):
        walk(top)
    return out
