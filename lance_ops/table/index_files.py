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
