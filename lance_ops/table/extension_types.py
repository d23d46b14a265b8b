"""Extension types between what users see and what Lance stores, at any depth (issue 24, ADR 0030).

pylance stores an extension-typed field as its storage type with the type named in the field
metadata (``ARROW:extension:name`` / ``ARROW:extension:metadata``), at the top level and inside
structs and lists alike; an ``arrow.json`` field is stored as ``large_binary`` JSONB named
``lance.json`` (ADR 0019). It shows users the extension types again: ``ds.schema``, scans and
takes give ``arrow.fixed_shape_tensor``, ``arrow.uuid``, ``lance.bfloat16`` (when the process
knows the type) and ``arrow.json`` text; its file reader shows the same except JSON, which it
leaves as the stored ``lance.json`` bytes.

- :func:`view_schema` / :func:`to_view`: stored schema / table -> what users see;
- :func:`storage_schema` / :func:`to_storage`: users' data -> what is written.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import pyarrow as pa

from lance_ops.errors import InvalidInputError
from lance_ops.table import jsonb

_EXTENSION_KEY = b"ARROW:extension:name"
_METADATA_KEY = b"ARROW:extension:metadata"
#: extension types written as storage + field metadata, checked readable by pylance 14
STORABLE_EXTENSIONS = frozenset({"arrow.fixed_shape_tensor", "arrow.uuid", "lance.bfloat16"})


# --- what users see ----------------------------------------------------------------------------
def _children(dt: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(dt):
        return [dt.field(i) for i in range(dt.num_fields)]
    if pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_fixed_size_list(dt):
        return [dt.value_field]
    return []


def _names_extension(f: pa.Field) -> bool:
    """Whether ``f`` or a field inside it carries an extension name in its metadata."""
    return bool(f.metadata and _EXTENSION_KEY in f.metadata) or any(_names_extension(c) for c in _children(f.type))


def _with_children(dt: pa.DataType, kids: list[pa.Field]) -> pa.DataType:
    if pa.types.is_struct(dt):
        return pa.struct(kids)
    if pa.types.is_list(dt):
        return pa.list_(kids[0])
    if pa.types.is_large_list(dt):
        return pa.large_list(kids[0])
    return pa.list_(kids[0], dt.list_size)


def _map_fields(f: pa.Field, fn: Callable[[pa.Field], pa.Field | None]) -> pa.Field:
    """``f`` with ``fn`` applied to it and every field inside it (``fn`` returns None: keep, descend)."""
    out = fn(f)
    if out is not None:
        return out
    kids = _children(f.type)
    if not kids or isinstance(f.type, pa.BaseExtensionType):
        return f
    new = [_map_fields(k, fn) for k in kids]
    if all(a is b for a, b in zip(new, kids)):
        return f
    return f.with_type(_with_children(f.type, new))


def _json_text_field(f: pa.Field) -> pa.Field | None:
    if jsonb.is_lance_json(f) and pa.types.is_large_binary(f.type):
        meta = {k: v for k, v in f.metadata.items() if k not in (_EXTENSION_KEY, _METADATA_KEY)}
        return pa.field(f.name, pa.json_(pa.utf8()), f.nullable, meta or None)
    return None


def view_schema(stored: pa.Schema, *, json_text: bool = True) -> pa.Schema:
    """``stored`` as pylance shows it: each field (at any depth) whose metadata names an extension
    type pyarrow knows as that type; JSONB (``lance.json``) fields as ``arrow.json`` unless
    ``json_text`` is False (pylance's file reader). ``stored`` itself when nothing changes."""
    if not any(_names_extension(f) for f in stored):
        return stored
    out = pa.ipc.read_schema(stored.serialize())
    if json_text:
        out = pa.schema([_map_fields(f, _json_text_field) for f in out], metadata=out.metadata)
    return out


def _needs_view(dt: pa.DataType) -> bool:
    return isinstance(dt, pa.BaseExtensionType) or any(_needs_view(c.type) for c in _children(dt))


def _rebuild(arr: pa.Array, want: pa.DataType, convert: Callable[[pa.Array, pa.DataType], pa.Array]) -> pa.Array:
    """``arr`` (a struct or list) with its children converted to ``want``'s children by ``convert``."""
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(want):
        # flatten: children sliced as ``arr`` and null where it is (no value behind a null struct is decoded)
        kids = [convert(k, want.field(i).type) for i, k in enumerate(arr.flatten())]
        return pa.StructArray.from_arrays(kids, fields=list(_children(want)), mask=mask)
    if pa.types.is_fixed_size_list(want):
        size = want.list_size
        values = convert(arr.values.slice(arr.offset * size, len(arr) * size), want.value_type)
        return pa.FixedSizeListArray.from_arrays(values, type=want, mask=mask)
    values = convert(arr.values, want.value_type)
    cls = pa.LargeListArray if pa.types.is_large_list(want) else pa.ListArray
    return cls.from_arrays(arr.offsets, values, type=want, mask=mask)


def _view_array(arr: pa.Array, want: pa.DataType) -> pa.Array:
    if arr.type == want or not _needs_view(want):
        return arr
    if jsonb.is_arrow_json(want) and pa.types.is_large_binary(arr.type):
        return jsonb.decode(arr)
    if isinstance(want, pa.BaseExtensionType):
        storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
        return pa.ExtensionArray.from_storage(want, _view_array(storage, want.storage_type))
    return _rebuild(arr, want, _view_array)


def to_view(table: pa.Table, want: pa.Schema) -> pa.Table:
    """``table``'s stored columns as ``want``'s types (same names; :func:`view_schema` of its schema)."""
    if want is table.schema or not any(_needs_view(f.type) for f in want):
        return table
    columns = []
    for f, col in zip(want, table.columns):
        if col.type != f.type:
            col = pa.chunked_array([_view_array(c, f.type) for c in col.chunks], f.type)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=want)


# --- what is written ---------------------------------------------------------------------------
def _extension_metadata(t: pa.BaseExtensionType) -> bytes:
    """The serialized parameters of an extension type (Python-defined ones say it themselves;
    of pyarrow's canonical ones, only the tensor types have parameters)."""
    if hasattr(t, "__arrow_ext_serialize__"):
        return bytes(t.__arrow_ext_serialize__())
    if t.extension_name == "arrow.fixed_shape_tensor":
        doc: dict[str, Any] = {"shape": list(t.shape)}
        if t.dim_names:
            doc["dim_names"] = list(t.dim_names)
        if t.permutation:
            doc["permutation"] = list(t.permutation)
        return json.dumps(doc, separators=(",", ":")).encode()
    return b""


def _converted(dt: pa.DataType) -> bool:
    """Whether ``dt`` is or holds a type :func:`storage_schema` converts."""
    if isinstance(dt, pa.BaseExtensionType):
        return dt.extension_name in STORABLE_EXTENSIONS or jsonb.is_arrow_json(dt)
    return any(_converted(c.type) for c in _children(dt))


def _storage_one(f: pa.Field) -> pa.Field | None:
    t = f.type
    if not isinstance(t, pa.BaseExtensionType) or not _converted(t):
        return None if _converted(t) else f
    meta = dict(f.metadata or {})
    if jsonb.is_arrow_json(t):
        meta[_EXTENSION_KEY], meta[_METADATA_KEY] = jsonb.LANCE_JSON.encode(), b""
        return pa.field(f.name, pa.large_binary(), f.nullable, meta)
    meta[_EXTENSION_KEY], meta[_METADATA_KEY] = t.extension_name.encode(), _extension_metadata(t)
    return pa.field(f.name, t.storage_type, f.nullable, meta)


def storage_field(f: pa.Field) -> pa.Field:
    """``f`` as Lance stores it: tensors, uuids, bfloat16 (at any depth) as their storage type named
    in the field metadata, ``arrow.json`` as JSONB ``lance.json``; other types unchanged."""
    return _map_fields(f, _storage_one)


def _has_json(dt: pa.DataType) -> bool:
    return jsonb.is_arrow_json(dt) or (not isinstance(dt, pa.BaseExtensionType)
                                       and any(_has_json(c.type) for c in _children(dt)))


def _refuse_json_in_fixed_size_lists(f: pa.Field, path: str) -> None:
    name = f"{path}.{f.name}" if path else f.name
    if pa.types.is_fixed_size_list(f.type) and _has_json(f.type.value_type):
        raise InvalidInputError(f"field {name!r}: arrow.json inside a fixed-size list cannot be stored "
                                "(pylance refuses it too); use a list; nothing was written")
    if not isinstance(f.type, pa.BaseExtensionType):
        for c in _children(f.type):
            _refuse_json_in_fixed_size_lists(c, name)


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """:func:`storage_field` of each field; ``schema`` itself when nothing is converted. JSON inside
    a fixed-size list raises :class:`~lance_ops.errors.InvalidInputError` (an OSError, as pylance's)."""
    if not any(_converted(f.type) for f in schema):
        return schema
    for f in schema:
        _refuse_json_in_fixed_size_lists(f, "")
    return pa.schema([storage_field(f) for f in schema], metadata=schema.metadata)


def _storage_array(arr: pa.Array, want: pa.DataType, name: str) -> pa.Array:
    if not _converted(arr.type):
        return arr
    if jsonb.is_arrow_json(arr.type):
        return jsonb.encode(arr, name)
    if isinstance(arr, pa.ExtensionArray):
        return arr.storage
    return _rebuild(arr, want, lambda a, t: _storage_array(a, t, name))


def to_storage(array: pa.Array, want: pa.DataType, name: str) -> pa.Array:
    """One column's values as :func:`storage_field` types them (``want``); invalid JSON raises
    :class:`~lance_ops.errors.InvalidJsonError` naming column ``name``."""
    return _storage_array(array, want, name)
