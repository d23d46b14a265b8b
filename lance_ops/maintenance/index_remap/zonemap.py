"""ZONEMAP rebuild: zone statistics recomputed over the rewritten fragments (outcome "rebuild").

pylance 14.0.2 cannot remap a zone map (``can_remap() == false``): its compaction leaves the
segment unchanged, so its fragment bitmap names removed fragments and the new ones are scanned
without it (index-facts.md §2a step 4; with stable row ids its coverage becomes empty). lance-ops
does better: it writes a new ``zonemap.lance`` under the new uuid with

* the zone rows of fragments this compaction does not rewrite, unchanged;
* for each new fragment of the segment's groups, zones of ``rows_per_zone`` rows read from the
  rewritten data: ``min``/``max`` (NULLs skipped; for floats NaN is the largest value, so a zone
  with a NaN has ``max`` NaN, as DataFusion's accumulators give), ``null_count``, ``nan_count``,
  ``fragment_id``, ``zone_start``, ``zone_length``;
* the ``null_bitmap`` global buffer remapped (deleted rows dropped, survivors at their new
  addresses), and the other schema metadata (``rows_per_zone``) kept.

The commit lists it in ``rewritten_indices``, so the bitmap rule moves the coverage to the new
fragments and pylance serves range / equality / IS NULL queries through it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.maintenance.index_remap import codecs, zones
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.indices import segment_uuid

#: the one file of a ZONEMAP index
ZONEMAP_FILE = "zonemap.lance"
#: pylance's default rows per zone (used when the file does not say)
DEFAULT_ROWS_PER_ZONE = 8192


def _float_stats(values: pa.Array) -> tuple[object, object, int]:
    """min, max and NaN count of a float slice (NULLs skipped, NaN the largest value)."""
    arr = values.drop_null().to_numpy(zero_copy_only=False)
    if len(arr) == 0:
        return None, None, 0
    nan = np.isnan(arr)
    nans = int(nan.sum())
    real = arr[~nan]
    low = real.min() if len(real) else np.nan
    high = np.nan if nans else real.max()
    return float(low), float(high), nans


def _zone_stats(values: pa.Array, starts: np.ndarray, lengths: np.ndarray,
                value_type: pa.DataType) -> dict[str, list]:
    """min, max, null and NaN counts of the zones ``values[start:start + length]`` (one per zone)."""
    out: dict[str, list] = {"min": [], "max": [], "null_count": [], "nan_count": []}
    floating = pa.types.is_floating(value_type)
    for start, length in zip(starts.tolist(), lengths.tolist()):
        chunk = values.slice(start, length)
        if floating:
            low, high, nan_count = _float_stats(chunk)
        else:
            pair = pc.min_max(chunk)
            low, high, nan_count = pair["min"].as_py(), pair["max"].as_py(), 0
        out["min"].append(low)
        out["max"].append(high)
        out["null_count"].append(chunk.null_count)
        out["nan_count"].append(nan_count)
    return out


def _fresh_zones(request: RemapRequest, field: pa.Field, field_id: int, size: int,
                 schema: pa.Schema) -> pa.Table:
    """The zone rows of the new fragments the segment will cover, read one fragment at a time."""
    value_type = schema.field("min").type
    stats: dict[str, list] = {"min": [], "max": [], "null_count": [], "nan_count": []}
    fragments = zones.covered_new_fragments(request.index, request.addresses, request.new_fragments)
    for frag in fragments:
        values = LanceFragment(request.dataset, frag).read([field], [field_id]).column(0).combine_chunks()
        if values.type != value_type:
            values = values.cast(value_type)
        bounds = zones.zone_bounds([frag], size)
        for key, items in _zone_stats(values, bounds.zone_start.astype(np.int64),
                                      bounds.zone_length.astype(np.int64), value_type).items():
            stats[key].extend(items)
    new = zones.zone_bounds(fragments, size)
    columns = {"min": pa.array(stats["min"], type=value_type), "max": pa.array(stats["max"], type=value_type),
               "null_count": pa.array(stats["null_count"], pa.uint32()),
               "nan_count": pa.array(stats["nan_count"], pa.uint32()),
               "fragment_id": pa.array(new.fragment_id), "zone_start": pa.array(new.zone_start),
               "zone_length": pa.array(new.zone_length)}
    return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)


def rebuild_zonemap(request: RemapRequest) -> RemapOutcome:
    """Rebuild a ZONEMAP segment over the rewritten fragments into ``_indices/<new_uuid>/``."""
    located = zones.column_field(request.dataset, request.index)
    if located is None:  # a nested column: leave the segment as pylance does
        return RemapOutcome("drop", [])
    field, field_id = located
    old = codecs.read_index_file(request.store, request.base, segment_uuid(request.index), ZONEMAP_FILE)
    size = int(old.metadata.get("rows_per_zone", DEFAULT_ROWS_PER_ZONE))
    fresh = _fresh_zones(request, field, field_id, size, old.table.schema)
    table = zones.sort_zones(pa.concat_tables([zones.untouched_rows(old.table, request.addresses), fresh]))
    nulls = zones.remapped_null_bitmap(old, request.addresses)
    return zones.write_rebuilt(request, ZONEMAP_FILE, old, table, nulls)


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`rebuild_zonemap` does, for dry runs (address-domain: always a rebuild)."""
    return "rebuild"


setattr(rebuild_zonemap, "plan_action", plan_action)
