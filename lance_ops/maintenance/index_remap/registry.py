"""Index kind -> remapper. A kind without an entry is held back by the compaction planner.

One import and one entry per kind module; each module's owner adds its own lines.
"""
from __future__ import annotations

from lance_ops.maintenance.index_remap.base import Remapper
from lance_ops.maintenance.index_remap.bitmap import remap_bitmap
from lance_ops.maintenance.index_remap.bloomfilter import rebuild_bloomfilter
from lance_ops.maintenance.index_remap.btree import remap_btree
from lance_ops.maintenance.index_remap.inverted import remap_inverted
from lance_ops.maintenance.index_remap.ngram import remap_ngram
from lance_ops.maintenance.index_remap.vector import remap_vector
from lance_ops.maintenance.index_remap.zonemap import rebuild_zonemap

REMAPPERS: dict[str, Remapper] = {
    "BTREE": remap_btree,
    "BITMAP": remap_bitmap,
    "LABEL_LIST": remap_bitmap,
    "NGRAM": remap_ngram,
    "ZONEMAP": rebuild_zonemap,
    "BLOOMFILTER": rebuild_bloomfilter,
    "INVERTED": remap_inverted,
    "IVF_FLAT": remap_vector,
    "IVF_PQ": remap_vector,
    "IVF_SQ": remap_vector,
    "IVF_HNSW_FLAT": remap_vector,
    "IVF_HNSW_PQ": remap_vector,
    "IVF_HNSW_SQ": remap_vector,
}
