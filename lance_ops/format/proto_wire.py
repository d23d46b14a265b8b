"""Protobuf bytes as upstream Lance (prost) writes them: :func:`serialize_like_upstream`.

Manifests, transaction files and legacy data files all serialise through it, so it lives on the
file floor, below every user. (It used to sit in ``table.manifest.codec``, which made the legacy file
writer import upward; ``table.manifest.codec`` still re-exports it.)
"""
from __future__ import annotations

from typing import Iterator

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

# Python protobuf always writes both the key and the value of a map entry; upstream (prost) leaves
# out a key or value that equals its default (an empty string, 0, an empty message). A second
# pass over the wire bytes drops those, recursing only into message types that contain maps, so
# map-free parts (fragments, data files) are copied as they are.
_HAS_MAP: dict[str, bool] = {}


def _has_map(desc: Descriptor) -> bool:
    name = desc.full_name
    cached = _HAS_MAP.get(name)
    if cached is not None:
        return cached
    _HAS_MAP[name] = False  # cycle guard
    found = False
    for field in desc.fields:
        sub = field.message_type
        if sub is None:
            continue
        if sub.GetOptions().map_entry or _has_map(sub):
            found = True
            break
    _HAS_MAP[name] = found
    return found


def has_map(desc: Descriptor) -> bool:
    """Whether messages of type ``desc`` contain a map field at any depth (their upstream form
    then differs from Python's encoding)."""
    return _has_map(desc)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The protobuf varint at ``pos`` of ``data`` and the position after it (ValueError when cut short)."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def encode_varint(value: int) -> bytes:
    """``value`` (non-negative) as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def wire_records(data: bytes) -> Iterator[tuple[int, int, int, int, int, int]]:
    """``(field_number, wire_type, record_start, key_end, value_start, value_end)`` of each top-level
    record of a serialized message (ValueError on an unknown wire type or a record cut short)."""
    pos, n = 0, len(data)
    while pos < n:
        key, key_end = read_varint(data, pos)
        wire = key & 7
        if wire == 0:
            _, end = read_varint(data, key_end)
            start = key_end
        elif wire == 1:
            start, end = key_end, key_end + 8
        elif wire == 5:
            start, end = key_end, key_end + 4
        elif wire == 2:
            length, start = read_varint(data, key_end)
            end = start + length
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if end > n:
            raise ValueError("truncated record")
        yield key >> 3, wire, pos, key_end, start, end
        pos = end


def _fix_map_entry(body: bytes, entry_desc: Descriptor) -> bytes:
    out = bytearray()
    for number, wire, rec_start, key_end, start, end in wire_records(body):
        field = entry_desc.fields_by_number.get(number)
        value = body[start:end]
        if field is not None and field.message_type is not None and _has_map(field.message_type):
            value = _fix_message(value, field.message_type)
        if wire == 0 and value == b"\x00":
            continue
        if wire == 2 and not value:
            continue
        if wire in (1, 5) and not any(value):
            continue
        out += body[rec_start:key_end]
        if wire == 2:
            out += encode_varint(len(value))
        out += value
    return bytes(out)


def _fix_message(data: bytes, desc: Descriptor) -> bytes:
    if not _has_map(desc):
        return data
    out = bytearray()
    for number, wire, rec_start, key_end, start, end in wire_records(data):
        field = desc.fields_by_number.get(number) if wire == 2 else None
        sub = field.message_type if field is not None else None
        if sub is not None and (sub.GetOptions().map_entry or _has_map(sub)):
            body = data[start:end]
            fixed = _fix_map_entry(body, sub) if sub.GetOptions().map_entry else _fix_message(body, sub)
            if fixed != body:
                out += data[rec_start:key_end]
                out += encode_varint(len(fixed))
                out += fixed
                continue
        out += data[rec_start:end]
    return bytes(out)


def serialize_like_upstream(message: Message) -> bytes:
    """Protobuf bytes as upstream Lance writes them (default map keys/values left out).

    Only the order of map entries can still differ from an upstream file: upstream writes them
    in hash order.
    """
    return _fix_message(message.SerializeToString(deterministic=True), message.DESCRIPTOR)
