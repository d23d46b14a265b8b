"""What a per-kind index updater is given and returns (the interface of issue 22's index upkeep).

``optimize_indices`` brings an index up to date with fragments it does not cover yet. For each
index it picks the existing segments to fold in (pylance's ``num_indices_to_merge`` policy) and the
live fragments no segment covers, and asks the kind's updater to write one new segment under
``_indices/<new_uuid>/`` that covers both. The caller commits every new segment in one CreateIndex
transaction that also removes the folded-in segments.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.io.base import ObjectStore


@dataclass(frozen=True)
class UpkeepRequest:
    """One new segment to write: existing segments folded together with unindexed fragments."""

    store: ObjectStore  # the dataset's store
    base: str  # dataset root path in that store
    dataset: Any  # LanceDataset at the read version (read the new rows through it)
    index_name: str
    kind: str  # lance_ops.table.indices.index_kind(...) e.g. "BTREE", "IVF_PQ"
    merged: Sequence[table_pb2.IndexMetadata]  # segments whose rows go into the new one (may be empty)
    template: table_pb2.IndexMetadata  # newest segment of the index: fields, details, parameters
    new_fragments: Sequence[table_pb2.DataFragment]  # live fragments no segment covers yet
    new_uuid: str  # write every file under f"{base}/_indices/{new_uuid}/"
    retrain: bool = False
    #: the new rows already encoded (distributed upkeep: one table per executor task, in the order
    #: of :func:`lance_ops.maintenance.index_upkeep.registry.ENCODERS`' fragment list); None: the
    #: updater reads and encodes the new fragments itself
    encoded: Sequence[pa.Table] | None = None

    @property
    def new_dir(self) -> str:
        """Store path of the directory every new file goes to."""
        return f"{self.base}/_indices/{self.new_uuid}"


@dataclass(frozen=True)
class UpkeepOutcome:
    """The segment an updater wrote."""

    files: list[tuple[str, int]] = field(default_factory=list)  # (name under _indices/<new_uuid>/, size)
    fragment_ids: list[int] = field(default_factory=list)  # the new segment's fragment bitmap
    index_details: Any | None = None  # google.protobuf.Any; None keeps the template's
    index_version: int | None = None  # None keeps the template's
    dataset_version: int | None = None  # None: the read version (pylance's delta rule)


Updater = Callable[[UpkeepRequest], UpkeepOutcome]


@dataclass(frozen=True)
class Encoder:
    """The parallel half of an updater (distributed upkeep, ADR 0031): ``reads(request)`` lists
    the fragment ids whose rows the updater encodes, in order; ``encode(request, ids)`` encodes the
    rows of a contiguous slice of that list. Concatenating the encodings of consecutive slices
    equals encoding the whole list, so executors may encode slices and the updater joins them
    (``UpkeepRequest.encoded``)."""

    reads: Callable[[UpkeepRequest], list[int]]
    encode: Callable[[UpkeepRequest, Sequence[int]], pa.Table]
