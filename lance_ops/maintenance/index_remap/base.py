"""What a per-kind index remapper is given and returns (the interface of issue 19's remap work).

A remapper reads the old segment's files under ``_indices/<old uuid>/``, maps the row addresses
they hold through the :class:`AddressMap` (dropping deleted rows) and writes a complete new segment
under ``_indices/<new_uuid>/``; or says the segment keeps its files ("keep") or is left as pylance
leaves kinds it cannot remap ("drop").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from lance_ops._proto import table_pb2
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap.address_map import AddressMap
from lance_ops.table.indices import segment_uuid

#: outcome actions: new files under the new uuid (listed in the Rewrite's ``rewritten_indices``)
REWRITE_ACTIONS = frozenset({"remap", "rebuild"})
#: every action a remapper may return
ACTIONS = frozenset({"remap", "rebuild", "keep", "drop"})


@dataclass(frozen=True)
class RemapRequest:
    """One index segment to carry through a compaction's rewrite."""

    store: ObjectStore  # the dataset's store
    base: str  # dataset root path in that store
    index: table_pb2.IndexMetadata  # the old segment (uuid, fields, details, files, bitmap)
    kind: str  # lance_ops.table.indices.index_kind(...) e.g. "BTREE", "IVF_PQ"
    new_uuid: str  # write every file under f"{base}/_indices/{new_uuid}/"
    addresses: AddressMap
    stable_row_ids: bool
    dataset: Any  # LanceDataset at the compaction's read version
    new_fragments: Sequence[table_pb2.DataFragment]  # the rewritten data, final ids assigned

    @property
    def old_uuid(self) -> str:
        """The old segment's uuid in its canonical text form."""
        return segment_uuid(self.index)

    @property
    def old_dir(self) -> str:
        """Store path of the old segment's directory."""
        return f"{self.base}/_indices/{self.old_uuid}"

    @property
    def new_dir(self) -> str:
        """Store path of the directory every new file goes to."""
        return f"{self.base}/_indices/{self.new_uuid}"


@dataclass(frozen=True)
class RemapOutcome:
    """What a remapper did with one segment."""

    action: str  # "remap" | "rebuild" | "keep" | "drop"
    files: list[tuple[str, int]] = field(default_factory=list)  # (name under _indices/<new_uuid>/, size)
    new_index_details: Any | None = None  # google.protobuf.Any or None (pylance keeps the old ones)
    new_index_version: int | None = None

    def __post_init__(self) -> None:
        """Reject an action the commit path would not know."""
        if self.action not in ACTIONS:
            raise ValueError(f"unknown remap action {self.action!r}")


Remapper = Callable[[RemapRequest], RemapOutcome]
