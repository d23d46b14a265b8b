"""Index remap during compaction (issue 19, ADR 0011 step 2: eager remap, as pylance 14.0.2 does).

When compaction rewrites fragments an index segment covers, each such segment is rewritten under a
new uuid with its row addresses mapped old -> new (deleted rows dropped), or kept / dropped as its
kind requires. The pieces:

* :mod:`.address_map` - :class:`AddressMap`, the old -> new row-address map of one compaction;
* :mod:`.base` - :class:`RemapRequest`, :class:`RemapOutcome` and the :data:`Remapper` signature;
* :mod:`.registry` - ``REMAPPERS``: index kind -> remapper. A kind without an entry is held back by
  the compaction planner (never half-remapped);
* one module per kind (``btree.py``, ``bitmap.py``, ...), each owning its file format.
"""
from __future__ import annotations

from lance_ops.maintenance.index_remap.address_map import AddressMap
from lance_ops.maintenance.index_remap.base import RemapOutcome, Remapper, RemapRequest

__all__ = ["AddressMap", "RemapOutcome", "RemapRequest", "Remapper"]
