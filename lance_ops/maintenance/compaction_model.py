"""What compaction planning and execution share: the task shape execution reads, and small helpers.

``compaction_plan`` builds :class:`~lance_ops.maintenance.compaction_plan.CompactionTask` objects
(whose ``execute`` runs ``compaction_exec``); ``compaction_exec`` reads them through the
:class:`RewriteTask` Protocol below, so neither module imports the other in a loop.
"""
from __future__ import annotations

import base64
from typing import Protocol

from lance_ops._proto import file_pb2, table_pb2
from lance_ops.errors import UnsupportedError


class RewriteTask(Protocol):
    """The parts of a compaction task that execution reads (``CompactionTask`` is one)."""

    read_version: int
    fragments: list[table_pb2.DataFragment]
    output_rows: list[int]
    fields: list[file_pb2.Field]
    data_storage_version: str
    stable_row_ids: bool
    kind: str
    live_rows: list[int]


def _b64(message) -> str:
    return base64.b64encode(message.SerializeToString(deterministic=True)).decode()


def _from_b64(cls, text: str):
    msg = cls()
    msg.ParseFromString(base64.b64decode(text))
    return msg


def check_no_indices(manifest_file, where: str) -> None:
    """Refuse datasets with indices: rewriting indexed fragments without remapping corrupts them."""
    section = getattr(manifest_file, "index_section", None)
    indices = list(section.indices) if section is not None else []
    if indices or manifest_file.manifest.HasField("index_section") and section is None:
        names = sorted({i.name or "<unnamed>" for i in indices})
        raise UnsupportedError(
            f"{where}: the dataset has indices {names}; lance_ops cannot remap indices after "
            "rewriting fragments, so it refuses to compact this dataset (compacting it would leave "
            "the indices pointing at rows that moved). Use pylance's compact_files, or drop the "
            "indices first."
        )


def same_fragment(a: table_pb2.DataFragment, b: table_pb2.DataFragment) -> bool:
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
