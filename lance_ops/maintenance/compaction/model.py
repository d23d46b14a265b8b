"""What compaction planning, execution and commit share: the task shape execution reads, the
result it hands to the commit, and small helpers.

``plan`` builds :class:`~lance_ops.maintenance.compaction.plan.CompactionTask` objects (whose
``execute`` runs ``execute``); ``execute`` reads them through the :class:`RewriteTask` Protocol
below, so neither module imports the other in a loop. ``execute`` returns a
:class:`RewriteResult` (JSON-serialisable, shipped from executors to the driver) that ``commit``
publishes.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from lance_ops._proto import file_pb2, table_pb2
from lance_ops.errors import LanceOpsError


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
    indices: list[dict[str, Any]]
    index_action: str


def message_to_b64(message: Any) -> str:
    """A protobuf message as base64 text (deterministic bytes), as the JSON formats carry it."""
    return base64.b64encode(message.SerializeToString(deterministic=True)).decode()


def message_from_b64(cls: Any, text: str) -> Any:
    """The ``cls`` protobuf message that :func:`message_to_b64` wrote as ``text``."""
    msg = cls()
    msg.ParseFromString(base64.b64decode(text))
    return msg


def same_fragment(a: table_pb2.DataFragment, b: table_pb2.DataFragment) -> bool:
    """True iff the two fragment protos serialise to the same bytes."""
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


RESULT_FORMAT = "lance_ops.compaction_result/1"

METRIC_KEYS = (
    "fragments_removed", "fragments_added", "files_removed", "files_added",
    "rows_read", "rows_written", "bytes_read", "bytes_written",
)


#: measured durations a result may carry besides the counters (floats; absent from old results)
TIMING_KEYS = ("rewrite_seconds",)


def zero_metrics() -> dict[str, int]:
    """Every metric counter at 0."""
    return {k: 0 for k in METRIC_KEYS}


# --- results -----------------------------------------------------------------------------------
@dataclass
class RewriteResult:
    """What one executed task wrote: to be committed by :func:`commit_compaction`."""

    read_version: int
    original_fragments: list[table_pb2.DataFragment]
    new_fragments: list[table_pb2.DataFragment]
    metrics: dict[str, Any] = field(default_factory=zero_metrics)
    kind: str = "compact"

    @property
    def original_fragment_ids(self) -> list[int]:
        """Ids of the fragments this result replaces."""
        return [f.id for f in self.original_fragments]

    @property
    def new_data_files(self) -> list[str]:
        """Paths (relative to ``data/``) of the data files this result wrote."""
        return [df.path for f in self.new_fragments for df in f.files]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (format ``RESULT_FORMAT``)."""
        return {
            "format": RESULT_FORMAT,
            "kind": self.kind,
            "read_version": self.read_version,
            "original_fragment_ids": self.original_fragment_ids,
            "original_fragments": [message_to_b64(f) for f in self.original_fragments],
            "new_fragments": [message_to_b64(f) for f in self.new_fragments],
            "metrics": dict(self.metrics),
        }

    def to_json(self) -> str:
        """The result as JSON text (sorted keys), as Spark and Airflow pass it."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "<rewrite result>") -> "RewriteResult":
        """Parse :meth:`to_dict`'s form; LanceOpsError naming ``where`` if it is not one."""
        try:
            if raw.get("format") != RESULT_FORMAT:
                raise ValueError(f"format is {raw.get('format')!r}, expected {RESULT_FORMAT!r}")
            return cls(
                read_version=int(raw["read_version"]),
                original_fragments=[message_from_b64(table_pb2.DataFragment, t) for t in raw["original_fragments"]],
                new_fragments=[message_from_b64(table_pb2.DataFragment, t) for t in raw["new_fragments"]],
                metrics={k: float(v) if k in TIMING_KEYS else int(v) for k, v in raw.get("metrics", {}).items()},
                kind=str(raw.get("kind", "compact")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LanceOpsError(f"{where}: not a valid rewrite result: {exc}") from exc

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<rewrite result>") -> "RewriteResult":
        """Parse :meth:`to_json`'s text; LanceOpsError naming ``where`` if it is not one."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise LanceOpsError(f"{where}: not a valid rewrite result: {exc}") from exc
        return cls.from_dict(raw, where)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RewriteResult.from_json, (self.to_json(),))
