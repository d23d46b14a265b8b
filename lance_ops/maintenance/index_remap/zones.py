"""What ZONEMAP and BLOOMFILTER rebuilds share: zones of untouched fragments, the new fragments a
segment will cover, zone boundaries over fresh fragments, and the remapped null bitmap.

Both kinds keep one row per zone (``fragment_id``, ``zone_start``, ``zone_length`` u64) and a
``null_bitmap`` global buffer (a RowAddrTreeMap of the rows whose value is NULL; the schema-metadata
key holds the buffer's index). pylance 14.0.2 cannot remap them (``can_remap() == false``) and
leaves the segment stale; lance-ops rebuilds the zones of the rewritten fragments instead
(ADR 0016): a fresh fragment has no deletions, so its zones are ``[k * size, min((k + 1) * size,
rows))`` as pylance's trainer cuts them (``size`` live rows per zone, start = first offset,
length = span).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.maintenance.index_remap import codecs
from lance_ops.maintenance.index_remap.address_map import AddressMap
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.table.indices import fragment_ids

#: schema-metadata key naming the global buffer of the rows whose value is NULL
NULL_BITMAP_KEY = "null_bitmap"
_SHIFT = np.uint64(32)


@dataclass(frozen=True)
class NewZones:
    """Zones over the fresh fragments a segment will cover, in fragment and offset order."""

    fragment_id: np.ndarray    # uint64
    zone_start: np.ndarray     # uint64
    zone_length: np.ndarray    # uint64


def covered_new_fragments(index: table_pb2.IndexMetadata, amap: AddressMap,
                          new_fragments: Sequence[table_pb2.DataFragment]) -> list[table_pb2.DataFragment]:
    """The new fragments whose rows all come from fragments the segment covers (the groups the
    commit's bitmap rule moves into this segment), in id order."""
    covered = set(fragment_ids(index))
    new_frag = (amap.new >> _SHIFT).astype(np.int64)
    old_frag = (amap.old >> _SHIFT).astype(np.int64)
    out = []
    for frag in sorted(new_fragments, key=lambda f: f.id):
        sources = set(np.unique(old_frag[new_frag == frag.id]).tolist())
        if sources and sources <= covered:
            out.append(frag)
    return out


def zone_bounds(fragments: Sequence[table_pb2.DataFragment], size: int) -> NewZones:
    """Zones of ``size`` rows over each fresh fragment (the last one shorter)."""
    ids, starts, lengths = [], [], []
    for frag in fragments:
        rows = int(frag.physical_rows)
        start = np.arange(0, rows, size, dtype=np.uint64)
        ids.append(np.full(len(start), frag.id, dtype=np.uint64))
        starts.append(start)
        lengths.append(np.minimum(np.uint64(size), np.uint64(rows) - start))
    if not ids:
        empty = np.zeros(0, np.uint64)
        return NewZones(empty, empty, empty)
    return NewZones(np.concatenate(ids), np.concatenate(starts), np.concatenate(lengths))


def untouched_rows(table: pa.Table, amap: AddressMap) -> pa.Table:
    """The zone rows of fragments this compaction does not rewrite."""
    frags = table.column("fragment_id").to_numpy().astype(np.int64)
    rewritten = np.fromiter(amap.rewritten, dtype=np.int64, count=len(amap.rewritten))
    return table.filter(pa.array(~np.isin(frags, rewritten)))


def remapped_null_bitmap(old: codecs.IndexFile, amap: AddressMap) -> codecs.RowAddrSet | None:
    """The old ``null_bitmap`` buffer mapped through the AddressMap (None when the file has none)."""
    data = old.buffer_for(NULL_BITMAP_KEY)
    if data is None:
        return None
    return codecs.remap_address_sets([codecs.decode_row_addr_treemap(data)], amap)[0]


def zone_has_nulls(nulls: codecs.RowAddrSet | None, zones: NewZones) -> np.ndarray | None:
    """Per zone, whether a NULL row lies in it (None without a null bitmap)."""
    if nulls is None:
        return None
    first = (zones.fragment_id << _SHIFT) | zones.zone_start
    before = np.searchsorted(nulls.addresses, first)
    after = np.searchsorted(nulls.addresses, first + zones.zone_length)
    whole = np.isin(zones.fragment_id, nulls.whole_fragments.astype(np.uint64))
    return (after > before) | whole


def sort_zones(table: pa.Table) -> pa.Table:
    """Zone rows in (fragment_id, zone_start) order, as pylance's trainer emits them."""
    return table.sort_by([("fragment_id", "ascending"), ("zone_start", "ascending")])


def column_field(dataset: Any, index: table_pb2.IndexMetadata) -> tuple[pa.Field, int] | None:
    """The indexed top-level column's Arrow field and field id (None for a nested or missing one)."""
    if len(index.fields) != 1:
        return None
    fid = int(index.fields[0])
    names = [name for name, i in dataset.top_field_ids.items() if i == fid]
    if not names:
        return None
    return dataset.storage_schema.field(names[0]), fid


def write_rebuilt(request: RemapRequest, name: str, old: codecs.IndexFile, table: pa.Table,
                  nulls: codecs.RowAddrSet | None) -> RemapOutcome:
    """Write a rebuilt zone file ``name`` under the new uuid (the old file's metadata, with the null
    bitmap as its global buffer when there is one) in pylance's index file version: "rebuild"."""
    buffers = {} if nulls is None else {
        NULL_BITMAP_KEY: codecs.encode_row_addr_treemap(nulls.addresses, nulls.whole_fragments)}
    metadata = {k: v for k, v in old.metadata.items() if k != NULL_BITMAP_KEY}
    version = codecs.index_file_version(request.dataset, old.version)
    written = codecs.write_index_file(request.store, request.base, request.new_uuid, name, table,
                                      version=version, metadata=metadata, buffers=buffers,
                                      storage_options=codecs.storage_options_of(request.dataset))
    return RemapOutcome("rebuild", [written])
