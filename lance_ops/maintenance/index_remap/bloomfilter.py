"""BLOOMFILTER rebuild: zones of the rewritten fragments re-cut, their filters merged from the old ones.

pylance 14.0.2 creates BLOOMFILTER indices (``bloomfilter.lance``: ``fragment_id``, ``zone_start``,
``zone_length`` u64, ``has_null`` bool, ``bloom_filter_data`` binary split-block bloom filters of
one size, ``number_of_items`` rows per zone; meta ``bloomfilter_item``, ``bloomfilter_probability``,
``null_bitmap``) but cannot remap them: its compaction leaves the segment stale (index-facts.md
§2a step 4). lance-ops rebuilds the segment (outcome "rebuild"):

* zone rows of fragments this compaction does not rewrite are kept;
* each new fragment of the segment's groups is cut into zones of ``bloomfilter_item`` rows, as
  pylance's trainer cuts a fresh fragment; a new zone's filter is the bitwise OR of the old zones'
  filters its rows came from. Bloom filters of one size merge by OR into a filter of the union
  of their values, so the new filter holds every live value of the zone (no false negative) and
  may also answer "maybe" for values of deleted or neighbouring rows (false positives, which
  bloom-filter queries recheck anyway). No value hashing is reimplemented;
* ``has_null`` comes from the remapped ``null_bitmap`` (exact), the buffer itself is remapped.

If the old zones do not account for every surviving row, or the filters differ in size, the
outcome is "drop" (the segment is left as pylance leaves it) rather than a filter that could miss.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_ops.maintenance.index_remap import codecs, zones
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.table.indices import segment_uuid

#: the one file of a BLOOMFILTER index
BLOOMFILTER_FILE = "bloomfilter.lance"
#: schema-metadata key of the rows per zone (pylance: ``number_of_items``)
ITEMS_KEY = "bloomfilter_item"
#: pylance's default rows per zone
DEFAULT_ITEMS = 8192
_SHIFT = np.uint64(32)


def _zone_of(keys: np.ndarray, lengths: np.ndarray, addresses: np.ndarray) -> np.ndarray:
    """Index of the zone (sorted start addresses ``keys``) holding each address; -1 when none does."""
    idx = np.searchsorted(keys, addresses, side="right") - 1
    safe = np.maximum(idx, 0)
    inside = (idx >= 0) & (addresses < keys[safe] + lengths[safe]) & \
        ((addresses >> _SHIFT) == (keys[safe] >> _SHIFT))
    return np.where(inside, idx, -1)


def rebuild_bloomfilter(request: RemapRequest) -> RemapOutcome:
    """Rebuild a BLOOMFILTER segment over the rewritten fragments into ``_indices/<new_uuid>/``."""
    amap = request.addresses
    old = codecs.read_index_file(request.store, request.base, segment_uuid(request.index), BLOOMFILTER_FILE)
    table = zones.sort_zones(old.table)
    size = int(old.metadata.get(ITEMS_KEY, DEFAULT_ITEMS))
    fragments = zones.covered_new_fragments(request.index, amap, request.new_fragments)
    new = zones.zone_bounds(fragments, size)
    filters = table.column("bloom_filter_data").to_pylist()
    if len({len(f) for f in filters}) > 1:
        return RemapOutcome("drop", [])
    old_keys = (table.column("fragment_id").to_numpy().astype(np.uint64) << _SHIFT) | \
        table.column("zone_start").to_numpy().astype(np.uint64)
    old_lengths = table.column("zone_length").to_numpy().astype(np.uint64)
    new_keys = (new.fragment_id << _SHIFT) | new.zone_start
    ids = np.array([f.id for f in fragments], dtype=np.uint64)
    moving = np.isin(amap.new >> _SHIFT, ids)
    source = _zone_of(old_keys, old_lengths, amap.old[moving])
    target = _zone_of(new_keys, new.zone_length, amap.new[moving])
    if (source < 0).any() or (target < 0).any():
        return RemapOutcome("drop", [])
    pairs = np.unique(target.astype(np.int64) * max(len(filters), 1) + source)
    by_target = np.split(pairs % max(len(filters), 1), np.searchsorted(pairs // max(len(filters), 1),
                                                                       np.arange(1, len(new_keys))))
    width = len(filters[0]) if filters else 0
    matrix = np.frombuffer(b"".join(filters), dtype=np.uint8).reshape(len(filters), width)
    merged = [np.bitwise_or.reduce(matrix[src], axis=0).tobytes() if len(src) else bytes(width)
              for src in by_target]
    nulls = zones.remapped_null_bitmap(old, amap)
    has_null = zones.zone_has_nulls(nulls, new)
    if has_null is None:
        old_nulls = table.column("has_null").to_numpy(zero_copy_only=False)
        has_null = np.array([bool(old_nulls[src].any()) for src in by_target], dtype=bool)
    schema = old.table.schema
    columns = {"fragment_id": pa.array(new.fragment_id), "zone_start": pa.array(new.zone_start),
               "zone_length": pa.array(new.zone_length), "has_null": pa.array(has_null),
               "bloom_filter_data": pa.array(merged, type=schema.field("bloom_filter_data").type)}
    fresh = pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)
    out = zones.sort_zones(pa.concat_tables([zones.untouched_rows(table, amap), fresh]))
    return zones.write_rebuilt(request, BLOOMFILTER_FILE, old, out, nulls)


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`rebuild_bloomfilter` does, for dry runs (it may still fall back to "drop")."""
    return "rebuild"


setattr(rebuild_bloomfilter, "plan_action", plan_action)
