"""A 2.1+ file schema's leaf columns: what the reader derives from the schema message alone.

2.1+ files store one column per *leaf* field; this module walks a file's field tree once and
records, per leaf, its column index, path, canonical repetition/definition layers and the page
decoders' context. The result is a pure function of the schema bytes, shared read-only by the
readers of one dataset object through their memo (ADR 0043).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import pyarrow as pa

from lance_ops._proto import file_pb2
from lance_ops.errors import CorruptFileError, UnsupportedTypeError
from lance_ops.format import blob_v2
from lance_ops.format.v2_1 import decode as dec
from lance_ops.format.v2_1 import memo as mm
from lance_ops.format.v2_1.layout import repdef as rd
from lance_ops.schema import FieldNode, field_tree, from_lance_fields

__all__ = ["Leaf", "SchemaLayout", "ctx_for", "schema_layout"]


def _is_packed(node: FieldNode) -> bool:
    md = node.proto.metadata
    for key in ("packed", "lance-encoding:packed"):
        if key in md and bytes(md[key]).strip().lower() in (b"true", b"1", b"yes", b"on"):
            return True
    return False


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


@dataclass
class Leaf:
    """A leaf field's column: index, field node, dotted path, canonical layers, decoder context."""

    column: int
    node: FieldNode
    path: str
    canon: rd.Canonical
    ctx: dec.PageCtx


def ctx_for(t: pa.DataType, canon: rd.Canonical) -> dec.PageCtx:
    """What the page decoders of a leaf column of Arrow type ``t`` need to know about it."""
    vt = t.value_type if pa.types.is_dictionary(t) else t
    if (pa.types.is_string(vt) or pa.types.is_binary(vt) or pa.types.is_large_string(vt)
            or pa.types.is_large_binary(vt)):
        return dec.PageCtx(canon, "var", 0)
    if pa.types.is_boolean(vt):
        return dec.PageCtx(canon, "bool", 0)
    ipv = 1
    inner = vt
    while pa.types.is_fixed_size_list(inner):
        ipv *= inner.list_size
        inner = inner.value_type
    if pa.types.is_boolean(inner):
        return dec.PageCtx(canon, "bool", 0, ipv)
    try:
        bw = inner.bit_width
    except ValueError:
        bw = 0
    if pa.types.is_struct(inner):
        try:
            bw = sum(f.type.bit_width for f in inner)
        except ValueError:  # variable packed struct (2.2): rows are variable width
            return dec.PageCtx(canon, "var", 0)
    return dec.PageCtx(canon, "fixed", (bw // 8) * ipv, ipv)


@dataclass(frozen=True)
class SchemaLayout:
    """A file schema's Arrow schema, field tree and leaf columns: a pure function of the schema
    bytes (``key``), shared (read-only) by the readers of files with that schema."""

    key: bytes
    schema: pa.Schema
    tree: list[FieldNode]
    leaves: dict[int, Leaf]
    leaf_ids: dict[int, list[int]]
    by_column: dict[int, Leaf]
    num_columns: int
    #: file version -> (column, page encoding bytes) -> an uninitialised mini-block page of that
    #: encoding (bounded by ``PAGE_PROTOS_LIMIT``): what pages copy instead of re-deriving it
    page_protos: dict = field(default_factory=dict, compare=False)


PAGE_PROTOS_LIMIT = 4096


def schema_layout(schema_proto: file_pb2.Schema, uri: str, memo: mm.Memo) -> SchemaLayout:
    """The :class:`SchemaLayout` of a file's schema message (kept in ``memo`` by its bytes: the
    result depends on nothing else, and is never mutated by readers)."""
    key = schema_proto.SerializeToString(deterministic=True)
    got = mm.recall(memo, "layouts", key)
    if got is not None:
        return cast(SchemaLayout, got)
    try:
        fields = blob_v2.attach_descriptor_fields(schema_proto.fields)
        schema = from_lance_fields(fields, dict(schema_proto.metadata))
        tree = field_tree(fields)
    except CorruptFileError as exc:
        raise CorruptFileError(uri, f"schema: {exc.problem}") from None
    except UnsupportedTypeError as exc:
        raise UnsupportedTypeError(f"{uri}: {exc}") from None
    leaves: dict[int, Leaf] = {}
    leaf_ids: dict[int, list[int]] = {}
    counter = [0]

    def walk(node: FieldNode, prefix: str, kinds: list[str]) -> list[int]:
        path = f"{prefix}{node.proto.name}"
        t = node.arrow.type
        if pa.types.is_struct(t) and not _is_packed(node) and node.children:
            ids: list[int] = []
            for c in node.children:
                ids.extend(walk(c, path + ".", kinds + [rd.ITEM]))
        elif _is_list(t) and node.children:
            ids = walk(node.children[0], path + ".", kinds + [rd.LIST])
        else:
            col = counter[0]
            counter[0] += 1
            canon = rd.Canonical(tuple(reversed(kinds + [rd.ITEM])))
            leaves[node.id] = Leaf(col, node, path, canon, ctx_for(t, canon))
            ids = [node.id]
        leaf_ids[node.id] = ids
        return ids

    for top in tree:
        walk(top, "", [])
    layout = SchemaLayout(key, schema, tree, leaves, leaf_ids, {leaf.column: leaf for leaf in leaves.values()},
                          counter[0])
    return mm.remember(memo, "layouts", key, layout)
