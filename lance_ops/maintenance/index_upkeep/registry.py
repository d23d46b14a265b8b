"""Which index kinds ``optimize_indices`` can bring up to date, and the updater for each.

Kinds missing here are refused with ``UnsupportedError`` before anything is written.
"""
from __future__ import annotations

from typing import Callable

from lance_ops.maintenance.index_upkeep.base import Encoder, UpkeepRequest, Updater
from lance_ops.maintenance.index_upkeep.scalar import encode_scalar, scalar_reads, update_bitmap, update_btree
from lance_ops.maintenance.index_upkeep.vector import (UPDATABLE_KINDS, encode_vector, plan_refusal, update_vector,
                                                       vector_reads)

#: kind (``lance_ops.table.indices.index_kind``) -> updater; each kind module adds its entry here
UPDATERS: dict[str, Updater] = {
    "BTREE": update_btree,
    "BITMAP": update_bitmap,
    "LABEL_LIST": update_bitmap,
}
# IVF_FLAT / IVF_PQ / IVF_SQ (IVF_HNSW_* are not here: new rows would need HNSW graph insertion)
UPDATERS.update({kind: update_vector for kind in UPDATABLE_KINDS})

#: kind -> a check that says why its updater would refuse a request (None: it can write it); asked
#: for every index before any updater runs, so a refusal leaves nothing written
REFUSALS: dict[str, Callable[[UpkeepRequest], str | None]] = {kind: plan_refusal for kind in UPDATABLE_KINDS}

#: kind -> the encoder executors run on slices of the new rows (distributed upkeep, ADR 0031);
#: every kind in ``UPDATERS`` has one
ENCODERS: dict[str, Encoder] = {kind: Encoder(scalar_reads, encode_scalar) for kind in ("BTREE", "BITMAP", "LABEL_LIST")}
ENCODERS.update({kind: Encoder(vector_reads, encode_vector) for kind in UPDATABLE_KINDS})
