"""JSON columns as pylance stores them: ``arrow.json`` text <-> ``lance.json`` binary JSON (JSONB).

pylance 14 stores an ``arrow.json`` column as ``large_binary`` with the field metadata
``ARROW:extension:name = lance.json`` and the manifest logical type ``json``; each value is the
binary JSON of the ``jsonb`` crate. Scans return ``arrow.json`` text again, normalised (object keys
in byte order, no whitespace, numbers in serde_json's spelling). The layout, all big-endian u32:

- a container header: tag (``0x80000000`` array, ``0x40000000`` object, ``0x20000000`` a lone
  scalar) ORed with the element count; then one entry per element (objects: the keys' entries,
  then the values'), each a type tag ORed with the element's byte length; then the elements' bytes
  (objects: all keys, then all values, keys in byte order);
- entry tags: ``0x00..`` null, ``0x10..`` string (UTF-8), ``0x20..`` number, ``0x30..`` false,
  ``0x40..`` true, ``0x50..`` a nested container (its header, entries and bytes);
- numbers: one tag byte then the smallest big-endian width that holds the value: ``0x00`` zero,
  ``0x10`` NaN, ``0x20`` +inf, ``0x30`` -inf, ``0x40`` signed (1/2/4/8 bytes, negative integers),
  ``0x50`` unsigned (1/2/4/8 bytes), ``0x60`` f64 (8 bytes).

Values are converted one by one (JSON has no columnar parser in pyarrow); JSON columns are not a
hot path of any scan.
"""
from __future__ import annotations

import json
import math
import struct
from typing import Any

import pyarrow as pa

from lance_ops.errors import CorruptFileError, InvalidJsonError

#: the extension name pylance records for a stored JSON column
LANCE_JSON = "lance.json"
#: Arrow's canonical JSON extension (what users write and scans return)
ARROW_JSON = "arrow.json"

_ARRAY, _OBJECT, _SCALAR = 0x80000000, 0x40000000, 0x20000000
_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER = (t << 28 for t in range(6))
_LENGTH = 0x0FFFFFFF
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate object attribute {json.dumps(k, ensure_ascii=False)}")
            seen.add(k)
    return out


def _number(v: int | float) -> bytes:
    if isinstance(v, int) and _I64_MIN <= v <= _U64_MAX:
        if v == 0:
            return b"\x00"
        if v > 0:
            for width, fmt in ((1, ">B"), (2, ">H"), (4, ">I"), (8, ">Q")):
                if v < 1 << (8 * width):
                    return b"\x50" + struct.pack(fmt, v)
        for width, fmt in ((1, ">b"), (2, ">h"), (4, ">i"), (8, ">q")):
            if v >= -(1 << (8 * width - 1)):
                return b"\x40" + struct.pack(fmt, v)
    f = float(v)
    if math.isnan(f):
        return b"\x10"
    if math.isinf(f):
        return b"\x20" if f > 0 else b"\x30"
    return b"\x60" + struct.pack(">d", f)


def _entry(v: Any) -> tuple[int, bytes]:
    """(entry tag, bytes) of one element inside a container."""
    if v is None:
        return _NULL, b""
    if v is True:
        return _TRUE, b""
    if v is False:
        return _FALSE, b""
    if isinstance(v, str):
        return _STRING, v.encode()
    if isinstance(v, (int, float)):
        return _NUMBER, _number(v)
    return _CONTAINER, _container(v)


def _container(v: list | dict) -> bytes:
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode())
        parts = [(_STRING, k.encode()) for k in keys] + [_entry(v[k]) for k in keys]
        head = _OBJECT | len(keys)
    else:
        parts = [_entry(x) for x in v]
        head = _ARRAY | len(parts)
    return struct.pack(f">{1 + len(parts)}I", head, *(tag | len(b) for tag, b in parts)) + b"".join(
        b for _, b in parts)


def encode_value(text: str) -> bytes:
    """The JSONB bytes of one JSON text, as pylance writes them (an empty text is JSON ``null``).

    Standard JSON only: the non-standard texts pylance's parser also takes (trailing commas,
    single quotes, ``01``, ``+1``, ``.5``) raise ValueError (docs/pylance-parity.md)."""
    if not text.strip(" \t\n\r"):
        return struct.pack(">II", _SCALAR, _NULL)
    value = json.loads(text, object_pairs_hook=_reject_duplicates)
    if isinstance(value, (list, dict)):
        return _container(value)
    tag, body = _entry(value)
    return struct.pack(">II", _SCALAR, tag | len(body)) + body


def _storage(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array of the values as stored (extension types unwrapped)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def encode(array: pa.Array | pa.ChunkedArray, column: str) -> pa.Array:
    """``array`` (JSON text: ``arrow.json`` or its string storage) as a ``large_binary`` array of
    JSONB; invalid JSON raises :class:`InvalidJsonError` naming the column and the row."""
    array = _storage(array)
    out: list[bytes | None] = []
    for i, text in enumerate(array.to_pylist()):  # one JSON parse per value (see module docstring)
        if text is None:
            out.append(None)
            continue
        try:
            out.append(encode_value(text))
        except (ValueError, UnicodeEncodeError, RecursionError) as exc:
            raise InvalidJsonError(f"column {column!r}, row {i}: failed to encode JSON: {exc}; "
                                   "nothing was written") from exc
    return pa.array(out, pa.large_binary())


def _float_text(f: float) -> str:
    """serde_json's spelling: shortest digits; plain from 1e-5 to below 1e16, else ``1e+16`` / ``1e-7``."""
    if math.isnan(f) or math.isinf(f):
        return "null"
    text = repr(f)
    if "e" not in text:
        return text
    mantissa, exp_text = text.split("e")
    exp = int(exp_text)
    if exp == -5:  # Python writes 1e-05; serde_json 0.00001
        sign = "-" if mantissa.startswith("-") else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _number_text(b: bytes) -> str:
    tag, body = b[0], b[1:]
    if tag == 0x00:
        return "0"
    if tag in (0x10, 0x20, 0x30):
        return "null"
    if tag in (0x40, 0x50) and len(body) in (1, 2, 4, 8):
        return str(int.from_bytes(body, "big", signed=tag == 0x40))
    if tag == 0x60 and len(body) == 8:
        return _float_text(struct.unpack(">d", body)[0])
    raise ValueError(f"unknown JSONB number tag {tag:#x} ({len(body)} bytes)")


def _element_text(tag: int, b: bytes) -> str:
    if tag == _NULL:
        return "null"
    if tag == _TRUE:
        return "true"
    if tag == _FALSE:
        return "false"
    if tag == _STRING:
        return json.dumps(b.decode(), ensure_ascii=False)
    if tag == _NUMBER:
        return _number_text(b)
    if tag == _CONTAINER:
        return _container_text(b)
    raise ValueError(f"unknown JSONB entry tag {tag:#x}")


def _container_text(b: bytes) -> str:
    head = struct.unpack_from(">I", b)[0]
    kind, count = head & 0xF0000000, head & _LENGTH
    n = count * 2 if kind == _OBJECT else (1 if kind == _SCALAR else count)
    entries = struct.unpack_from(f">{n}I", b, 4)
    pos = 4 + 4 * n
    items = []
    for e in entries:
        size = e & _LENGTH
        items.append(_element_text(e & 0xF0000000, b[pos:pos + size]))
        pos += size
    if pos != len(b):
        raise ValueError(f"JSONB container of {len(b)} bytes holds {pos}")
    if kind == _SCALAR:
        return items[0]
    if kind == _ARRAY:
        return "[" + ",".join(items) + "]"
    if kind == _OBJECT:
        return "{" + ",".join(f"{k}:{v}" for k, v in zip(items[:count], items[count:])) + "}"
    raise ValueError(f"unknown JSONB container header {head:#x}")


def decode_value(b: bytes) -> str:
    """The JSON text of one JSONB value, as pylance's scans return it."""
    if len(b) >= 4 and struct.unpack_from(">I", b)[0] == _SCALAR:  # header 0x20000000: one scalar
        if len(b) < 8:
            raise ValueError("JSONB scalar without its entry")
        e = struct.unpack_from(">I", b, 4)[0]
        return _element_text(e & 0xF0000000, b[8:8 + (e & _LENGTH)])
    return _container_text(b)


def decode(array: pa.Array | pa.ChunkedArray, column: str = "") -> pa.Array:
    """A ``lance.json`` (JSONB ``large_binary``) array as ``arrow.json`` text."""
    array = _storage(array)
    out: list[str | None] = []
    for i, b in enumerate(array.to_pylist()):  # one value at a time (see module docstring)
        try:
            out.append(None if b is None else decode_value(b))
        except (ValueError, struct.error, UnicodeDecodeError, IndexError) as exc:
            raise CorruptFileError(column or "<json column>", f"row {i}: damaged JSONB value: {exc}") from exc
    return pa.ExtensionArray.from_storage(pa.json_(pa.utf8()), pa.array(out, pa.utf8()))


def is_lance_json(field: pa.Field) -> bool:
    """Whether ``field`` is a stored JSON column (``lance.json`` in its metadata)."""
    return bool(field.metadata) and field.metadata.get(b"ARROW:extension:name") == LANCE_JSON.encode()


def is_arrow_json(dt: pa.DataType) -> bool:
    """Whether ``dt`` is Arrow's JSON extension type."""
    return isinstance(dt, pa.BaseExtensionType) and dt.extension_name == ARROW_JSON
