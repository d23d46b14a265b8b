"""Index metadata of older datasets, completed on commit as pylance 14.0.2 completes it.

Indices created before pylance 14 carry neither ``index_version`` nor the list of their files
(``IndexMetadata`` field 10: repeated ``{path = 1, size_bytes = 2}``, which lance_ops's protos do
not name). pylance's next commit records both: ``index_version`` 0 and every file under
``_indices/<uuid>/`` with its size. lance_ops does the same, so that a dataset it commits to
carries the index section pylance would have written; field 10 is added as an unknown field,
which protobuf keeps and writes after the known ones, where pylance writes it.
"""
from __future__ import annotations

import uuid as uuid_mod

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from lance_ops._proto import table_pb2
from lance_ops.io.base import ObjectStore

#: IndexMetadata field number of the index's file list (path and size of each file)
FILES_FIELD = 10
_FILES_TAG = bytes([FILES_FIELD << 3 | 2])


def _has_files(index: table_pb2.IndexMetadata) -> bool:
    return any(f.field_number == FILES_FIELD for f in unknown_fields.UnknownFieldSet(index))


def _file_entry(path: str, size: int) -> bytes:
    """One field-10 record. ``ExternalFile`` has the same wire shape for its first two fields
    (string 1, uint64 2), so it serializes the entry."""
    body = table_pb2.ExternalFile(path=path, offset=size).SerializeToString()
    return _FILES_TAG + table_pb2.ExternalFile(offset=len(body)).SerializeToString()[1:] + body


def complete_index_metadata(store: ObjectStore, base: str,
                            section: table_pb2.IndexSection | None) -> table_pb2.IndexSection | None:
    """The index section to write: a copy of ``section`` whose indices without a file list get
    one (listed from the store, sorted by name) and an explicit ``index_version`` (0)."""
    if section is None or all(_has_files(i) and i.HasField("index_version") for i in section.indices):
        return section
    out = table_pb2.IndexSection()
    out.CopyFrom(section)
    for index in out.indices:
        if not index.HasField("index_version"):
            index.index_version = 0
        if _has_files(index) or len(index.uuid.uuid) != 16:
            continue
        folder = store.join(base, "_indices", str(uuid_mod.UUID(bytes=bytes(index.uuid.uuid))))
        entries = [(info.path.rsplit("/", 1)[-1], int(info.size)) for info in store.list_dir(folder)]
        if entries:
            index.MergeFromString(b"".join(_file_entry(name, size) for name, size in sorted(entries)))
    return out



#: ``Transaction.RewrittenIndex`` field number of the new segment's file list (same record shape)
REWRITTEN_FILES_FIELD = 5


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _records(data: bytes) -> list[tuple[int, bytes, int]]:
    """The top-level records of a serialized message, in order: (field number, raw bytes, offset
    of the payload inside the raw bytes for length-delimited records)."""
    out: list[tuple[int, bytes, int]] = []
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _varint_at(data, pos)
        wire = tag & 7
        body = 0
        if wire == 0:
            pos = _varint_at(data, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 2:
            size, pos = _varint_at(data, pos)
            body = pos - start
            pos += size
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((tag >> 3, data[start:pos], body))
    return out


def _entry_for(number: int, path: str, size: int) -> bytes:
    """One ``{path = 1, size_bytes = 2}`` record under field ``number``."""
    body = table_pb2.ExternalFile(path=path, offset=size).SerializeToString()
    length = table_pb2.ExternalFile(offset=len(body)).SerializeToString()[1:]
    return bytes([number << 3 | 2]) + length + body


def listed_files(message: Message, number: int = FILES_FIELD) -> list[tuple[str, int]]:
    """The (path, size) entries of a file-list field (default: ``IndexMetadata`` field 10)."""
    out = []
    for record_number, raw, body in _records(message.SerializeToString()):
        if record_number == number:
            entry = table_pb2.ExternalFile()
            entry.ParseFromString(raw[body:])
            out.append((entry.path, int(entry.offset)))
    return out


def set_index_files(index: table_pb2.IndexMetadata, files: list[tuple[str, int]]) -> None:
    """Replace the segment's file list (field 10) by ``files``, where pylance writes it (after
    the known fields, before any later unknown field such as 11 ``covering_fields``)."""
    records = [r for r in _records(index.SerializeToString()) if r[0] != FILES_FIELD]
    cut = next((i for i, r in enumerate(records) if r[0] > FILES_FIELD), len(records))
    data = b"".join(r[1] for r in records[:cut])
    data += b"".join(_entry_for(FILES_FIELD, path, size) for path, size in files)
    data += b"".join(r[1] for r in records[cut:])
    index.Clear()
    index.ParseFromString(data)


def add_rewritten_files(entry: Message, files: list[tuple[str, int]]) -> None:
    """Append ``new_index_files`` (field 5) to a ``Transaction.RewrittenIndex``."""
    entry.MergeFromString(b"".join(_entry_for(REWRITTEN_FILES_FIELD, p, s) for p, s in files))


def details_name(type_url: str) -> str:
    """The message name of an ``index_details`` type URL, lower case (what the kind tables are keyed by)."""
    return type_url.strip().rsplit("/", 1)[-1].lower()
