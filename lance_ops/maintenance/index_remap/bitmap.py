"""BITMAP and LABEL_LIST remap: re-serialise each key's row-address bitmap through the AddressMap.

Both kinds keep one file, ``bitmap_page_lookup.lance`` (``keys`` of the column's (item) type,
``bitmaps`` binary RowAddrTreeMaps; index-facts.md §3). As pylance 14.0.2's ``remap``:

* keys whose rows were all deleted are left out, the others written in key order (NULL first;
  files of older pylance versions hold them unordered), and ``lance:index_stats`` is written
  again as ``{"num_bitmaps":<keys>}``;
* deleted rows of rewritten fragments are dropped, survivors get their new addresses, rows of
  other fragments are unchanged;
* LABEL_LIST's ``lance:label_list_nulls`` names a global buffer holding the RowAddrTreeMap of
  rows whose list is NULL: it is remapped the same way and written as global buffer 1;
* a "whole fragment" entry (byte length 0) of a rewritten fragment becomes that fragment's
  survivors at their new addresses (pylance's own remap cannot expand those); one of an untouched
  fragment stays whole.

With stable row ids the bitmaps hold row ids, which compaction keeps: the outcome is "keep"
(index-facts.md §2b), no file is written.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap import codecs
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.table.indices import segment_uuid

#: the one file of a BITMAP / LABEL_LIST index
LOOKUP_FILE = "bitmap_page_lookup.lance"
#: schema-metadata key of the bitmap statistics
STATS_KEY = "lance:index_stats"
#: schema-metadata key naming the global buffer of LABEL_LIST's NULL-list rows
LIST_NULLS_KEY = "lance:label_list_nulls"


def remap_bitmap(request: RemapRequest) -> RemapOutcome:
    """Remap a BITMAP or LABEL_LIST segment into ``_indices/<new_uuid>/`` (or keep it with stable row ids)."""
    if request.stable_row_ids:
        return RemapOutcome("keep", [])
    old = codecs.read_index_file(request.store, request.base, segment_uuid(request.index), LOOKUP_FILE)
    column = old.table.column("bitmaps").combine_chunks()
    sets = [codecs.decode_row_addr_treemap(b) if b is not None else codecs.RowAddrSet(codecs.EMPTY)
            for b in column.to_pylist()]
    nulls_buffer = old.buffer_for(LIST_NULLS_KEY)
    if nulls_buffer is not None:
        sets.append(codecs.decode_row_addr_treemap(nulls_buffer))
    remapped = codecs.remap_address_sets(sets, request.addresses)
    nulls = remapped.pop() if nulls_buffer is not None else None
    version = codecs.index_file_version(request.dataset, old.version)
    written = write_bitmap_file(request.store, request.base, request.new_uuid, old.table.column("keys"),
                                remapped, old.table.schema, old.metadata, version, nulls,
                                codecs.storage_options_of(request.dataset))
    return RemapOutcome("remap", [written])


def write_bitmap_file(store: ObjectStore, base: str, uuid: str, keys: pa.Array | pa.ChunkedArray,
                      sets: Sequence[codecs.RowAddrSet], schema: pa.Schema, metadata: Mapping[str, str],
                      version: FileVersion, nulls: codecs.RowAddrSet | None = None,
                      storage_options: Mapping[str, Any] | None = None) -> tuple[str, int]:
    """Write ``_indices/<uuid>/bitmap_page_lookup.lance`` as pylance 14.0.2 writes it: one row per
    key (``keys[i]`` -> ``sets[i]``), keys whose set is empty left out, the rest in key order (NULL
    first), ``lance:index_stats`` counting them; ``nulls`` (LABEL_LIST's NULL-list rows) as global
    buffer 1 named by ``lance:label_list_nulls``. ``schema`` / ``metadata``: the old file's."""
    encoded = [codecs.encode_row_addr_treemap(s.addresses, s.whole_fragments) for s in sets]
    null_bytes = codecs.encode_row_addr_treemap(nulls.addresses, nulls.whole_fragments) if nulls is not None else None
    return write_encoded_bitmap_file(store, base, uuid, keys, encoded, schema, metadata, version, null_bytes,
                                     storage_options)


def write_encoded_bitmap_file(store: ObjectStore, base: str, uuid: str, keys: pa.Array | pa.ChunkedArray,
                              encoded: Sequence[bytes], schema: pa.Schema, metadata: Mapping[str, str],
                              version: FileVersion, nulls: bytes | None = None,
                              storage_options: Mapping[str, Any] | None = None) -> tuple[str, int]:
    """:func:`write_bitmap_file` with the bitmaps (and ``nulls``) already serialized as
    RowAddrTreeMaps (a count of 0 entries is an empty set, left out): lets an update keep the
    bytes of bitmaps it does not change."""
    buffers: dict[str, bytes] = {}
    if nulls is not None:
        buffers[LIST_NULLS_KEY] = nulls
    column = pa.array(encoded, type=schema.field("bitmaps").type)
    table = pa.table([pa.chunked_array([keys]) if isinstance(keys, pa.Array) else keys, column],
                     schema=pa.schema([schema.field("keys"), schema.field("bitmaps")]))
    table = table.filter(pa.array([raw[:4] != b"\0\0\0\0" for raw in encoded], type=pa.bool_()))
    table = table.take(pc.array_sort_indices(table.column("keys").combine_chunks(), null_placement="at_start"))
    out = {k: v for k, v in metadata.items() if k != LIST_NULLS_KEY}
    out[STATS_KEY] = json.dumps({"num_bitmaps": table.num_rows}, separators=(",", ":"))
    return codecs.write_index_file(store, base, uuid, LOOKUP_FILE, table, version=version, metadata=out,
                                   buffers=buffers, storage_options=storage_options)


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`remap_bitmap` does, for dry runs: keep with stable row ids, else remap."""
    return "keep" if stable_row_ids else "remap"


setattr(remap_bitmap, "plan_action", plan_action)
