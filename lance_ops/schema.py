"""Arrow schema <-> Lance field list.

Lance stores a schema as a flat list of ``lance.file.Field`` messages in pre-order (a parent before
its children), each with an ``id``, a ``parent_id`` (-1 at the top) and a ``logical_type`` string.
Data files and manifests both use this form; this module converts in both directions and assigns
field ids the way upstream does (depth first, from ``start_id``).
"""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from lance_ops._proto import file_pb2
from lance_ops.errors import CorruptFileError, InvalidArgumentError, SchemaMismatchError, UnsupportedTypeError

_SIMPLE_TO_LOGICAL: dict[pa.DataType, str] = {
    pa.null(): "null",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.uint8(): "uint8",
    pa.int16(): "int16",
    pa.uint16(): "uint16",
    pa.int32(): "int32",
    pa.uint32(): "uint32",
    pa.int64(): "int64",
    pa.uint64(): "uint64",
    pa.float16(): "halffloat",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.large_string(): "large_string",
    pa.large_binary(): "large_binary",
    pa.date32(): "date32:day",
    pa.date64(): "date64:ms",
}
_LOGICAL_TO_SIMPLE = {v: k for k, v in _SIMPLE_TO_LOGICAL.items()}
_LOGICAL_TO_SIMPLE["json"] = pa.large_binary()

_VAR_BINARY = (pa.types.is_string, pa.types.is_binary, pa.types.is_large_string, pa.types.is_large_binary)


def logical_type(dt: pa.DataType) -> str:
    """Lance's name for an Arrow type (e.g. ``timestamp:us:UTC``, ``list.struct``)."""
    simple = _SIMPLE_TO_LOGICAL.get(dt)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(dt):
        return f"timestamp:{dt.unit}:{dt.tz or '-'}"
    if pa.types.is_time32(dt) or pa.types.is_time64(dt):
        return f"time{dt.bit_width}:{dt.unit}"
    if pa.types.is_duration(dt):
        return f"duration:{dt.unit}"
    if pa.types.is_decimal128(dt):
        return f"decimal:128:{dt.precision}:{dt.scale}"
    if pa.types.is_decimal256(dt):
        return f"decimal:256:{dt.precision}:{dt.scale}"
    if pa.types.is_fixed_size_binary(dt):
        return f"fixed_size_binary:{dt.byte_width}"
    if pa.types.is_fixed_size_list(dt):
        return f"fixed_size_list:{logical_type(dt.value_type)}:{dt.list_size}"
    if pa.types.is_struct(dt):
        return "struct"
    if pa.types.is_list(dt):
        return "list.struct" if pa.types.is_struct(dt.value_type) else "list"
    if pa.types.is_large_list(dt):
        return "large_list.struct" if pa.types.is_struct(dt.value_type) else "large_list"
    if pa.types.is_dictionary(dt):
        return f"dict:{logical_type(dt.value_type)}:{logical_type(dt.index_type)}:false"
    raise UnsupportedTypeError(f"Arrow type {dt} cannot be stored in a Lance file")


def _split_top(text: str) -> list[str]:
    return text.split(":")


def parse_logical_type(text: str, children: Sequence[pa.Field] = ()) -> pa.DataType:
    """Arrow type for a Lance logical type string; ``children`` are the already-built child fields."""
    simple = _LOGICAL_TO_SIMPLE.get(text)
    if simple is not None:
        return simple
    parts = _split_top(text)
    head = parts[0]
    try:
        if head == "timestamp":
            tz = ":".join(parts[2:])
            return pa.timestamp(parts[1], None if tz in ("-", "") else tz)
        if head in ("time32", "time64"):
            return pa.time32(parts[1]) if head == "time32" else pa.time64(parts[1])
        if head == "duration":
            return pa.duration(parts[1])
        if head == "decimal":
            width, precision, scale = int(parts[1]), int(parts[2]), int(parts[3])
            return pa.decimal128(precision, scale) if width == 128 else pa.decimal256(precision, scale)
        if head == "fixed_size_binary":
            return pa.binary(int(parts[1]))
        if head == "fixed_size_list":
            size = int(parts[-1])
            elem_text = ":".join(parts[1:-1])
            if elem_text == "lance.bfloat16":
                raise UnsupportedTypeError("bfloat16 fixed_size_list columns are not supported")
            return pa.list_(parse_logical_type(elem_text), size)
        if head == "dict":
            # dict:{value}:{key}:{ordered}; the value type may itself contain colons (rare).
            key_text = parts[-2]
            value_text = ":".join(parts[1:-2])
            return pa.dictionary(parse_logical_type(key_text), parse_logical_type(value_text))
        if head == "struct":
            return pa.struct(list(children))
        if head in ("list", "list.struct", "large_list", "large_list.struct"):
            if len(children) != 1:
                raise CorruptFileError("<schema>", f"list field has {len(children)} children, expected 1")
            make = pa.list_ if head.startswith("list") else pa.large_list
            return make(children[0])
    except (ValueError, IndexError, TypeError, pa.ArrowInvalid) as exc:
        raise CorruptFileError("<schema>", f"malformed logical type {text!r}: {exc}") from exc
    raise UnsupportedTypeError(f"Lance logical type {text!r} is not supported")


def _encoding_for(dt: pa.DataType) -> file_pb2.Encoding:
    if pa.types.is_struct(dt) or pa.types.is_null(dt):  # upstream leaves both without an encoding
        return file_pb2.NONE
    if pa.types.is_dictionary(dt):
        return file_pb2.DICTIONARY
    if any(check(dt) for check in _VAR_BINARY):
        return file_pb2.VAR_BINARY
    return file_pb2.PLAIN


def _check_storable(dt: pa.DataType, name: str) -> None:
    """Refuse types that have no Lance representation before anything is written."""
    if pa.types.is_map(dt) or pa.types.is_union(dt) or pa.types.is_list_view(dt) or pa.types.is_large_list_view(dt):
        raise UnsupportedTypeError(f"field {name!r}: Arrow type {dt} cannot be stored in a Lance file")
    if pa.types.is_string_view(dt) or pa.types.is_binary_view(dt) or pa.types.is_run_end_encoded(dt):
        raise UnsupportedTypeError(f"field {name!r}: Arrow type {dt} cannot be stored (cast it to string/binary first)")
    if pa.types.is_dictionary(dt) and not pa.types.is_integer(dt.index_type):
        raise UnsupportedTypeError(f"field {name!r}: dictionary index type {dt.index_type} is not an integer")


def check_metadata_utf8(schema: pa.Schema | Sequence[pa.Field], where: str = "") -> None:
    """Refuse schema or field metadata whose keys or values are not UTF-8, as pylance does
    (Lance stores metadata as strings; binary values must be base64-encoded by the caller)."""
    def check(metadata: Mapping[bytes | str, bytes | str] | None, owner: str) -> None:
        for key, value in (metadata or {}).items():
            for part in (key, value):
                if isinstance(part, bytes):
                    try:
                        part.decode("utf-8")
                    except UnicodeDecodeError:
                        raise InvalidArgumentError(
                            f"{where + ': ' if where else ''}Metadata key {key!r} of {owner} is not valid utf8 "
                            f"(its {'key' if part is key else 'value'} is binary). Consider base64 encode for "
                            "generic binary metadata.") from None

    def walk(f: pa.Field, path: str) -> None:
        check(f.metadata, f"field {path!r}")
        t = f.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), f"{path}.{t.field(i).name}")
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            walk(t.value_field, f"{path}.{t.value_field.name}")

    if isinstance(schema, pa.Schema):
        check(schema.metadata, "the schema")
    for f in schema:
        walk(f, f.name)


def to_lance_fields(schema: pa.Schema | Sequence[pa.Field], *, start_id: int = 0) -> list[file_pb2.Field]:
    """Flatten an Arrow schema into Lance fields in pre-order, assigning ids from ``start_id``.

    Non-UTF-8 metadata is refused (:func:`check_metadata_utf8`)."""
    check_metadata_utf8(schema)
    out: list[file_pb2.Field] = []
    next_id = start_id

    def visit(f: pa.Field, parent_id: int) -> None:
        nonlocal next_id
        _check_storable(f.type, f.name)
        lf = file_pb2.Field(
            name=f.name,
            id=next_id,
            parent_id=parent_id,
            logical_type=logical_type(f.type),
            nullable=f.nullable,
            encoding=_encoding_for(f.type),
        )
        if f.metadata:
            for k, v in f.metadata.items():
                lf.metadata[k.decode() if isinstance(k, bytes) else k] = v if isinstance(v, bytes) else v.encode()
            ext = lf.metadata.get("ARROW:extension:name")
            if ext:  # an extension type kept as its storage plus metadata (as pylance records it)
                lf.extension_name = ext.decode()
                if ext == b"lance.json" and pa.types.is_large_binary(f.type):
                    lf.logical_type = "json"  # pylance's logical type of a JSONB column
        my_id = next_id
        next_id += 1
        out.append(lf)
        dt = f.type
        if pa.types.is_struct(dt):
            for i in range(dt.num_fields):
                visit(dt.field(i), my_id)
        elif pa.types.is_list(dt) or pa.types.is_large_list(dt):
            visit(dt.value_field, my_id)

    for f in schema:
        visit(f, -1)
    return out


def from_lance_fields(
    fields: Sequence[file_pb2.Field], metadata: Mapping[str, bytes] | None = None
) -> pa.Schema:
    """Rebuild the Arrow schema from Lance fields (any order; parents are found by id)."""
    children: dict[int, list[file_pb2.Field]] = {}
    top: list[file_pb2.Field] = []
    for f in fields:
        (top if f.parent_id < 0 else children.setdefault(f.parent_id, [])).append(f)

    def build(f: file_pb2.Field, depth: int = 0) -> pa.Field:
        if depth > 64:
            raise CorruptFileError("<schema>", "field nesting deeper than 64 levels (cyclic parent ids?)")
        kids = [build(c, depth + 1) for c in children.get(f.id, [])]
        dt = parse_logical_type(f.logical_type, kids)
        md = dict(f.metadata) if f.metadata else None
        return pa.field(f.name, dt, nullable=f.nullable, metadata=md)

    arrow_fields = [build(f) for f in top]
    md = {k: v for k, v in (metadata or {}).items()} or None
    return pa.schema(arrow_fields, metadata=md)


@dataclass
class FieldNode:
    """One Lance field with its Arrow type and children; a convenient tree over the flat list."""

    proto: file_pb2.Field
    arrow: pa.Field
    children: list["FieldNode"] = dc_field(default_factory=list)

    @property
    def id(self) -> int:
        """The Lance field id (``proto.id``), the key data files and manifests use for columns."""
        return self.proto.id

    def walk(self) -> Iterable["FieldNode"]:
        """This node and all below it, in pre-order."""
        yield self
        for c in self.children:
            yield from c.walk()


def field_tree(fields: Sequence[file_pb2.Field]) -> list[FieldNode]:
    """Top-level FieldNodes for a flat Lance field list."""
    schema = from_lance_fields(fields)
    by_parent: dict[int, list[file_pb2.Field]] = {}
    for f in fields:
        by_parent.setdefault(f.parent_id if f.parent_id >= 0 else -1, []).append(f)

    def build(proto: file_pb2.Field, arrow: pa.Field) -> FieldNode:
        node = FieldNode(proto, arrow)
        kids = by_parent.get(proto.id, [])
        dt = arrow.type
        if pa.types.is_struct(dt):
            arrow_kids = [dt.field(i) for i in range(dt.num_fields)]
        elif pa.types.is_list(dt) or pa.types.is_large_list(dt):
            arrow_kids = [dt.value_field]
        else:
            arrow_kids = []
        node.children = [build(k, a) for k, a in zip(kids, arrow_kids)]
        return node

    return [build(p, a) for p, a in zip(by_parent.get(-1, []), schema)]


def max_field_id(fields: Iterable[file_pb2.Field]) -> int:
    """Largest field id in use, or -1 for an empty list."""
    return max((f.id for f in fields), default=-1)


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema``'s column order; SchemaMismatchError naming every field that does not fit.

    Same names and types in another order, or differing only in top-level nullability/metadata, are
    accepted (the file writers store the schema they were opened with).
    """
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    names, expected = batch.schema.names, schema.names
    problems = []
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    if missing:
        problems.append(f"missing fields {missing}")
    if extra:
        problems.append(f"unexpected fields {extra}")
    if len(set(names)) != len(names):
        problems.append("duplicate field names")
    if not problems:
        for f in schema:
            got = batch.schema.field(f.name).type
            if not got.equals(f.type):
                problems.append(f"field {f.name!r} has type {got}, expected {f.type}")
    if problems:
        raise SchemaMismatchError("batch does not match the file schema: " + "; ".join(problems))
    return pa.RecordBatch.from_arrays([batch.column(n) for n in expected], schema=schema)
