"""A fragment's manifest record in pylance's shape: ``FragmentMetadata``, ``DataFile``, ``DeletionFile``.

pylance's ``LanceFragment.metadata`` is a ``FragmentMetadata`` dataclass (``files``,
``deletion_file``, ``physical_rows``, ``num_deletions``, ``row_id_meta``...); lance_ops keeps the
``DataFragment`` proto as ``LanceFragment.proto`` for its own layers and builds these views from it.
Earlier callers used ``fragment.metadata`` as the proto: any proto attribute these views lack
(``HasField``, ``SerializeToString``...) is still answered from the proto, with a ``DeprecationWarning``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

from google.protobuf.message import Message

from lance_ops._proto import table_pb2
from lance_ops.table.manifest import naming

_FILE_TYPES = {table_pb2.DeletionFile.ARROW_ARRAY: "array", table_pb2.DeletionFile.BITMAP: "bitmap"}


class _ProtoFallback:
    """Answers attributes the pylance view lacks from the wrapped proto, with a DeprecationWarning."""

    _proto: Message

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_proto":
            raise AttributeError(name)
        warnings.warn(f"{type(self).__name__}.{name}: fragment metadata is pylance's {type(self).__name__} now; "
                      "the manifest proto is LanceFragment.proto", DeprecationWarning, stacklevel=2)
        return getattr(self._proto, name)


@dataclass(eq=False, repr=False)
class DataFile(_ProtoFallback):
    """One data file of a fragment (pylance's ``lance.fragment.DataFile``)."""

    path: str
    fields: list[int]
    column_indices: list[int]
    file_major_version: int
    file_minor_version: int
    file_size_bytes: Optional[int]
    base_id: Optional[int]
    _proto: table_pb2.DataFile = field(default_factory=table_pb2.DataFile)

    @classmethod
    def from_proto(cls, proto: table_pb2.DataFile) -> "DataFile":
        """The view of a manifest ``DataFile`` record."""
        return cls(proto.path, list(proto.fields), list(proto.column_indices), int(proto.file_major_version),
                   int(proto.file_minor_version), int(proto.file_size_bytes) or None,
                   int(proto.base_id) if proto.HasField("base_id") else None, proto)

    def field_ids(self) -> list[int]:
        """The field ids the file stores (pylance's ``field_ids()``)."""
        return list(self.fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DataFile):
            return self._proto == other._proto
        return NotImplemented

    def __repr__(self) -> str:
        return (f"DataFile(path={self.path!r}, fields={self.fields}, column_indices={self.column_indices}, "
                f"file_major_version={self.file_major_version}, file_minor_version={self.file_minor_version}, "
                f"file_size_bytes={self.file_size_bytes})")


@dataclass(eq=False, repr=False)
class DeletionFile(_ProtoFallback):
    """A fragment's deletion file (pylance's ``DeletionFile``): ``file_type`` is ``"array"`` or ``"bitmap"``."""

    read_version: int
    id: int
    file_type: str
    num_deleted_rows: int
    base_id: Optional[int]
    _proto: table_pb2.DeletionFile = field(default_factory=table_pb2.DeletionFile)

    @classmethod
    def from_proto(cls, proto: table_pb2.DeletionFile) -> "DeletionFile":
        """The view of a manifest ``DeletionFile`` record."""
        return cls(int(proto.read_version), int(proto.id), _FILE_TYPES.get(proto.file_type, "array"),
                   int(proto.num_deleted_rows), int(proto.base_id) if proto.HasField("base_id") else None, proto)

    def path(self, fragment_id: int) -> str:
        """``_deletions/<fragment>-<read version>-<id>.<arrow|bin>``, relative to the dataset."""
        return naming.deletion_file_path(fragment_id, self._proto)

    def asdict(self) -> dict[str, Any]:
        """The record as a dict, with pylance's keys."""
        return {"read_version": self.read_version, "id": self.id, "file_type": self.file_type,
                "num_deleted_rows": self.num_deleted_rows, "base_id": self.base_id}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeletionFile):
            return self._proto == other._proto
        return NotImplemented

    def __repr__(self) -> str:
        return f"DeletionFile(type={self.file_type!r}, num_deleted_rows={self.num_deleted_rows})"


@dataclass(frozen=True)
class RowIdMeta:
    """Where a fragment's stable row ids are (inline bytes or an external file), as the manifest says."""

    kind: str
    inline: bytes = b""
    path: str = ""

    def json(self) -> str:
        """A JSON text of the record (unstable across versions, as pylance warns of its own)."""
        import json

        return json.dumps({"kind": self.kind, "path": self.path, "inline_bytes": len(self.inline)})


@dataclass(eq=False, repr=False)
class FragmentMetadata(_ProtoFallback):
    """pylance's ``FragmentMetadata``: id, data files, physical rows, deletion file, row id record."""

    id: int
    files: list[DataFile]
    physical_rows: int
    deletion_file: Optional[DeletionFile] = None
    row_id_meta: Optional[RowIdMeta] = None
    _proto: table_pb2.DataFragment = field(default_factory=table_pb2.DataFragment)

    @classmethod
    def from_proto(cls, proto: table_pb2.DataFragment) -> "FragmentMetadata":
        """The view of a manifest ``DataFragment`` record."""
        which = proto.WhichOneof("row_id_sequence")
        row_ids = None
        if which == "inline_row_ids":
            row_ids = RowIdMeta("inline", inline=bytes(proto.inline_row_ids))
        elif which == "external_row_ids":
            row_ids = RowIdMeta("external", path=proto.external_row_ids.path)
        dfile = DeletionFile.from_proto(proto.deletion_file) if proto.HasField("deletion_file") else None
        return cls(int(proto.id), [DataFile.from_proto(f) for f in proto.files], int(proto.physical_rows),
                   dfile, row_ids, proto)

    @property
    def num_deletions(self) -> int:
        """Rows the deletion file marks deleted."""
        return self.deletion_file.num_deleted_rows if self.deletion_file is not None else 0

    @property
    def num_rows(self) -> int:
        """Live rows: physical rows minus deletions."""
        return self.physical_rows - self.num_deletions

    def data_files(self) -> list[DataFile]:
        """The fragment's data files (pylance's ``data_files()``)."""
        return list(self.files)

    def to_json(self) -> dict[str, Any]:
        """The record as pylance's ``to_json()`` dict (the row id and version records as None/[])."""
        return {"id": self.id, "files": [
            {"fields": f.fields, "column_indices": f.column_indices, "file_major_version": f.file_major_version,
             "file_minor_version": f.file_minor_version, "file_size_bytes": f.file_size_bytes,
             "base_id": f.base_id, "path": f.path} for f in self.files],
            "overlays": [], "physical_rows": self.physical_rows,
            "deletion_file": self.deletion_file.asdict() if self.deletion_file is not None else None,
            "row_id_meta": None, "created_at_version_meta": None, "last_updated_at_version_meta": None}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FragmentMetadata):
            return self._proto == other._proto
        if isinstance(other, table_pb2.DataFragment):
            return self._proto == other
        return NotImplemented

    def __repr__(self) -> str:
        return (f"FragmentMetadata(id={self.id}, files={self.files}, physical_rows={self.physical_rows}, "
                f"deletion_file={self.deletion_file!r}, row_id_meta={self.row_id_meta!r})")
