"""Index kind -> remapper. A kind without an entry is held back by the compaction planner.

One import and one entry per kind module; each module's owner adds its own lines.
"""
from __future__ import annotations

from lance_ops.maintenance.index_remap.base import Remapper
from lance_ops.maintenance.index_remap.btree import remap_btree
from lance_ops.maintenance.index_remap.inverted import remap_inverted

REMAPPERS: dict[str, Remapper] = {
    "BTREE": remap_btree,
    "INVERTED": remap_inverted,
}
