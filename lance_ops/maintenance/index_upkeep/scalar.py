"""Scalar updaters of index upkeep: BTREE, BITMAP, LABEL_LIST (issue 22).

Each writes one new segment holding the rows of the folded-in segments plus the live rows of the
unindexed fragments, as pylance 14.0.2's ``optimize_indices`` does (index-facts.md §4):

* rows of the old segments are kept as stored, except those of fragments that no longer exist
  (pylance's ``OldIndexDataFilter::Fragments``); on a stable-row-id dataset the bitmap kinds, which
  store row ids, keep only the row ids still live in the old segments' fragments (``RowIds``);
  BTREE stores row addresses there too (index_version 1) and is filtered by fragment;
* the new fragments are scanned with their deletion vectors applied: deleted rows never enter;
* the new segment's fragment bitmap is the old segments' live fragments plus the new ones;
* BITMAP / LABEL_LIST folding one segment whose fragments all remain (row addresses) keep the
  old bitmaps' bytes and add the entries of the new fragments (nothing decoded or re-encoded;
  the bytes the decode / re-encode path would write);
* LABEL_LIST folding more than one segment is rebuilt from the live rows of all its fragments, its
  ``dataset_version`` the read version (what pylance 14.0.2 was seen to do).

The files are written with the shared writers of :mod:`lance_ops.maintenance.index_remap`
(``btree.write_file`` / ``btree.page_lookup``, ``bitmap.write_bitmap_file``) and take the schemas
and metadata of the index's newest segment.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.errors import UnsupportedError
from lance_ops.maintenance.index_remap import bitmap as bitmap_files
from lance_ops.maintenance.index_remap import btree as btree_files
from lance_ops.maintenance.index_remap import codecs
from lance_ops.maintenance.index_upkeep.base import UpkeepOutcome, UpkeepRequest
from lance_ops.table.indices import field_paths, fragment_ids, segment_uuid

_SHIFT = np.uint64(32)


def effective_fragments(request: UpkeepRequest) -> set[int]:
    """Fragments of the folded-in segments that still exist at the read version."""
    live = {int(f.id) for f in request.dataset.manifest.fragments}
    covered: set[int] = set()
    for seg in request.merged:
        covered.update(fragment_ids(seg))
    return covered & live


def _column(request: UpkeepRequest) -> str:
    fields = list(request.template.fields)
    if len(fields) != 1:
        raise UnsupportedError(f"{request.dataset.uri}: index {request.index_name!r} covers {len(fields)} columns; "
                               "lance_ops updates single-column scalar indices only; nothing was written")
    return field_paths(request.dataset.manifest)[fields[0]]


def _new_rows(request: UpkeepRequest, column: str, row_ids: bool,
              also: set[int] | None = None) -> tuple[pa.ChunkedArray, np.ndarray]:
    """The indexed column and the row ids (or addresses) of the live rows of the new fragments
    (and of the fragments ``also``)."""
    ids = sorted({int(f.id) for f in request.new_fragments} | (also or set()))
    if not ids:
        return pa.chunked_array([], type=request.dataset.storage_schema.field(column).type), np.zeros(0, np.uint64)
    table = request.dataset.to_table(columns=[column], with_row_id=row_ids, with_row_address=not row_ids,
                                     fragments=ids)
    key = "_rowid" if row_ids else "_rowaddr"
    return table.column(column), table.column(key).to_numpy().astype(np.uint64, copy=False)


def _in_fragments(addresses: np.ndarray, fragments: set[int]) -> np.ndarray:
    """Mask of the addresses whose fragment is in ``fragments`` (a lookup table indexed by fragment id)."""
    frags = (addresses >> _SHIFT).astype(np.int64)
    size = int(max(fragments | {0})) + 1
    table = np.zeros(max(size, int(frags.max()) + 1 if len(frags) else 0), dtype=bool)
    table[sorted(fragments)] = True
    return table[frags]


def _outcome_fragments(request: UpkeepRequest, effective: set[int]) -> list[int]:
    return sorted(effective | {int(f.id) for f in request.new_fragments})


def _segment_dir(request: UpkeepRequest, seg: object) -> str:
    return f"{request.base}/_indices/{segment_uuid(seg)}"  # type: ignore[arg-type]


# --- BTREE ------------------------------------------------------------------------------------------

def update_btree(request: UpkeepRequest) -> UpkeepOutcome:
    """Fold the merged BTREE segments and the new rows into one sorted ``page_data`` + lookup."""
    ds, store = request.dataset, request.store
    if ds.has_stable_row_ids and request.template.index_version < 1:
        raise UnsupportedError(f"{ds.uri}: BTREE index {request.index_name!r} (index_version 0) stores row ids on a "
                               "stable-row-id dataset, which lance_ops does not update; nothing was written")
    tdir = _segment_dir(request, request.template)
    _, data_schema, old_version = btree_files.read_file(store, tdir, btree_files.DATA_FILE)
    _, lookup_schema, _ = btree_files.read_file(store, tdir, btree_files.LOOKUP_FILE)
    if "ids" not in data_schema.names:
        raise UnsupportedError(f"{ds.uri}: BTREE index {request.index_name!r} has the layout of an older pylance "
                               "(no 'ids' column); compact the dataset first; nothing was written")
    meta = {k.decode(): v.decode() for k, v in (lookup_schema.metadata or {}).items()}
    if meta.get("range_partitioned", "false").lower() != "false":
        raise UnsupportedError(f"{ds.uri}: BTREE index {request.index_name!r} is range-partitioned, which lance_ops "
                               "cannot update yet; nothing was written")
    batch_size = int(meta.get("batch_size", btree_files.DEFAULT_BATCH_SIZE))
    value_type = data_schema.field("values").type
    effective = effective_fragments(request)
    values: list[pa.Array] = []
    ids: list[np.ndarray] = []
    for seg in request.merged:
        table, _, _ = btree_files.read_file(store, _segment_dir(request, seg), btree_files.DATA_FILE)
        seg_ids = table.column("ids").to_numpy().astype(np.uint64, copy=False)
        seg_values = table.column("values").combine_chunks().cast(value_type)
        if not set(fragment_ids(seg)) <= effective:  # rows of removed fragments leave
            keep = _in_fragments(seg_ids, effective)
            seg_values, seg_ids = seg_values.filter(pa.array(keep)), seg_ids[keep]
        values.append(seg_values)
        ids.append(seg_ids)
    new_values, new_ids = _new_rows(request, _column(request), row_ids=False)
    values.append(new_values.combine_chunks().cast(value_type) if len(new_values) else pa.array([], value_type))
    ids.append(new_ids)
    merged = pa.table({"values": pa.concat_arrays(values), "ids": pa.array(np.concatenate(ids), pa.uint64())})
    order = pc.sort_indices(merged, sort_keys=[("values", "ascending", "at_start"), ("ids", "ascending", "at_start")])
    merged = merged.take(order)
    lookup = btree_files.page_lookup(merged.column("values").combine_chunks(), batch_size, lookup_schema)
    version = codecs.index_file_version(ds, old_version)
    options = codecs.storage_options_of(ds)
    files = [
        btree_files.write_file(store, request.new_dir, btree_files.DATA_FILE, merged, data_schema, version,
                               options, batch_size),
        btree_files.write_file(store, request.new_dir, btree_files.LOOKUP_FILE, lookup, lookup_schema, version,
                               options),
    ]
    return UpkeepOutcome(files=sorted(files), fragment_ids=_outcome_fragments(request, effective))


# --- BITMAP / LABEL_LIST ---------------------------------------------------------------------------

def _live_row_ids(request: UpkeepRequest, fragments: set[int]) -> np.ndarray:
    """Sorted row ids of the live rows of ``fragments`` (stable-row-id datasets)."""
    if not fragments:
        return np.zeros(0, np.uint64)
    table = request.dataset.to_table(columns=[], with_row_id=True, fragments=sorted(fragments))
    return np.sort(table.column("_rowid").to_numpy().astype(np.uint64, copy=False))


def _keep_old(request: UpkeepRequest, rows: codecs.RowAddrSet, effective: set[int],
              live_ids: np.ndarray | None, segment_fragments: set[int]) -> np.ndarray:
    """The old entries of one (sorted) set that stay (see the module docstring); whole-fragment
    entries of live fragments become that fragment's addresses."""
    addresses = rows.addresses
    if live_ids is not None:
        if len(rows.whole_fragments):
            raise UnsupportedError(f"{request.dataset.uri}: index {request.index_name!r} holds whole-fragment "
                                   "entries on a stable-row-id dataset; nothing was written")
        if not len(addresses) or not len(live_ids):
            return addresses[:0]
        at = np.minimum(np.searchsorted(live_ids, addresses), len(live_ids) - 1)
        return addresses[live_ids[at] == addresses]
    if segment_fragments <= effective or not len(addresses):
        kept = addresses  # no fragment of the segment was removed: every row stays
    else:
        kept = addresses[_in_fragments(addresses, effective)]
    if not len(rows.whole_fragments):
        return kept
    physical = {int(f.id): int(f.physical_rows) for f in request.dataset.manifest.fragments}
    whole = [(np.uint64(int(f)) << _SHIFT) + np.arange(physical[int(f)], dtype=np.uint64)
             for f in rows.whole_fragments if int(f) in effective]
    return np.union1d(kept, np.concatenate(whole)) if whole else kept


def _group(keys: pa.Array, addresses: np.ndarray) -> tuple[pa.Array, list[codecs.RowAddrSet]]:
    """Distinct keys and, per key, the sorted unique addresses paired with it.

    The inputs come as runs already sorted by address (each old key's set, then the new rows in
    scan order): a stable sort by key keeps them, and the full (key, address) sort runs only when
    some key's addresses are still out of order."""
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    dictionary = encoded.dictionary
    index = encoded.indices.to_numpy(zero_copy_only=False)
    index = index.astype(np.uint16 if len(dictionary) < 1 << 16 else np.int64, copy=False)
    order = np.argsort(index, kind="stable")
    index, addresses = index[order], addresses[order]
    if len(index):
        same = index[1:] == index[:-1]
        if np.any(same & (addresses[1:] < addresses[:-1])):
            order = np.lexsort((addresses, index))
            index, addresses = index[order], addresses[order]
            same = index[1:] == index[:-1]
        fresh = np.ones(len(index), dtype=bool)
        fresh[1:] = ~same | (addresses[1:] != addresses[:-1])
        index, addresses = index[fresh], addresses[fresh]
    bounds = np.searchsorted(index, np.arange(len(dictionary) + 1))
    sets = [codecs.RowAddrSet(addresses[bounds[i]:bounds[i + 1]]) for i in range(len(dictionary))]
    return dictionary, sets


def _new_key_rows(request: UpkeepRequest, key_type: pa.DataType, label_list: bool,
                  stable: bool) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(key of each new (row, label) pair, its row id / address, ids of the rows whose list is NULL)."""
    column, new_ids = _new_rows(request, _column(request), row_ids=stable)
    column = column.combine_chunks() if len(column) else pa.array([], column.type)
    if not label_list:
        return column.cast(key_type), new_ids, codecs.EMPTY
    nulls = new_ids[np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)]
    parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False).astype(np.int64)
    return pc.list_flatten(column).cast(key_type), new_ids[parents], nulls


def _merge_entries(old_raw: bytes | None, new_addresses: np.ndarray) -> bytes:
    """One key's RowAddrTreeMap: the old entries' bytes kept, entries of the new rows' fragments
    added; a fragment in both (not expected: the new fragments are not in the segment) is decoded
    and re-encoded whole."""
    old_entries = codecs.split_row_addr_treemap(old_raw) if old_raw is not None else []
    new_entries = codecs.row_addr_treemap_entries(new_addresses)
    if {f for f, _ in old_entries} & {f for f, _ in new_entries}:
        old = codecs.decode_row_addr_treemap(old_raw) if old_raw is not None else codecs.RowAddrSet(codecs.EMPTY)
        return codecs.encode_row_addr_treemap(np.union1d(old.addresses, new_addresses), old.whole_fragments)
    return codecs.join_row_addr_treemap(old_entries + new_entries)


def _fold_bytes(request: UpkeepRequest, key_type: pa.DataType,
                label_list: bool) -> tuple[pa.Array, list[bytes], bytes | None] | None:
    """Keys, serialized bitmaps and NULL-list bitmap of one folded segment whose fragments all
    still exist plus the new rows (row addresses), without decoding the old bitmaps: every old
    entry stays as stored, as the decode / re-encode path would write it. None when an old bitmap
    holds a whole-fragment entry (that path expands it)."""
    old = codecs.read_index_file(request.store, request.base, segment_uuid(request.merged[0]),
                                 bitmap_files.LOOKUP_FILE)
    raws: list[bytes | None] = old.table.column("bitmaps").to_pylist()
    for raw in raws:
        if raw is not None and any(len(body) == 8 for _, body in codecs.split_row_addr_treemap(raw)):
            return None
    old_keys = old.table.column("keys").combine_chunks().cast(key_type)
    new_keys, new_addresses, new_nulls = _new_key_rows(request, key_type, label_list, stable=False)
    distinct, sets = _group(new_keys, new_addresses.astype(np.uint64, copy=False))
    found = pc.fill_null(pc.index_in(distinct, value_set=old_keys, skip_nulls=False), -1)
    at = found.to_numpy(zero_copy_only=False).astype(np.int64)
    by_old = {int(i): sets[j].addresses for j, i in enumerate(at.tolist()) if i >= 0}
    encoded = [_merge_entries(raw, by_old.get(i, codecs.EMPTY)) if i in by_old else
               (raw if raw is not None else codecs.join_row_addr_treemap([])) for i, raw in enumerate(raws)]
    fresh = np.flatnonzero(at < 0)
    encoded += [codecs.encode_row_addr_treemap(sets[j].addresses) for j in fresh.tolist()]
    keys_out = pa.concat_arrays([old_keys, distinct.take(pa.array(fresh, pa.int64())).cast(key_type)])
    null_bytes = None
    old_nulls = old.buffer_for(bitmap_files.LIST_NULLS_KEY)
    if label_list or old_nulls is not None:
        null_bytes = _merge_entries(old_nulls, np.unique(new_nulls))
    return keys_out, encoded, null_bytes


def update_bitmap(request: UpkeepRequest) -> UpkeepOutcome:
    """Fold the merged BITMAP / LABEL_LIST segments and the new rows into one bitmap file."""
    ds, store = request.dataset, request.store
    stable = bool(ds.has_stable_row_ids)
    template = codecs.read_index_file(store, request.base, segment_uuid(request.template), bitmap_files.LOOKUP_FILE)
    key_type = template.table.schema.field("keys").type
    label_list = request.kind == "LABEL_LIST"
    effective = effective_fragments(request)
    # LABEL_LIST folding several segments: pylance 14.0.2 rebuilds it from the live rows (and the
    # segment gets the read version as its dataset_version)
    rebuild = label_list and len(request.merged) > 1
    if not stable and not rebuild and len(request.merged) == 1 and set(fragment_ids(request.merged[0])) <= effective:
        folded = _fold_bytes(request, key_type, label_list)
        if folded is not None:  # the old bitmaps' bytes kept, the new rows' fragments added
            keys_out, encoded, null_bytes = folded
            if null_bytes is None and template.buffer_for(bitmap_files.LIST_NULLS_KEY) is not None:
                null_bytes = codecs.join_row_addr_treemap([])
            version = codecs.index_file_version(ds, template.version)
            written = bitmap_files.write_encoded_bitmap_file(
                store, request.base, request.new_uuid, keys_out, encoded, template.table.schema, template.metadata,
                version, null_bytes, codecs.storage_options_of(ds))
            return UpkeepOutcome(files=[written], fragment_ids=_outcome_fragments(request, effective))
    live_ids = _live_row_ids(request, effective) if stable and not rebuild else None
    keys: list[pa.Array] = []
    addresses: list[np.ndarray] = []
    nulls: list[np.ndarray] = []
    for seg in ([] if rebuild else request.merged):
        old = codecs.read_index_file(store, request.base, segment_uuid(seg), bitmap_files.LOOKUP_FILE)
        old_keys = old.table.column("keys").combine_chunks().cast(key_type)
        seg_frags = set(fragment_ids(seg))
        kept = [_keep_old(request, codecs.decode_row_addr_treemap(raw), effective, live_ids, seg_frags)
                if raw is not None else codecs.EMPTY for raw in old.table.column("bitmaps").to_pylist()]
        positions = np.repeat(np.arange(len(kept), dtype=np.int64), [len(k) for k in kept])
        keys.append(old_keys.take(pa.array(positions)))
        addresses.extend(kept)
        buffer = old.buffer_for(bitmap_files.LIST_NULLS_KEY)
        if buffer is not None:
            nulls.append(_keep_old(request, codecs.decode_row_addr_treemap(buffer), effective, live_ids, seg_frags))
    column, new_ids = _new_rows(request, _column(request), row_ids=stable, also=effective if rebuild else None)
    column = column.combine_chunks() if len(column) else pa.array([], column.type)
    if label_list:
        nulls.append(new_ids[np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)])
        flat = pc.list_flatten(column)
        parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False).astype(np.int64)
        keys.append(flat.cast(key_type))
        addresses.append(new_ids[parents])
    else:
        keys.append(column.cast(key_type))
        addresses.append(new_ids)
    all_keys = pa.concat_arrays([k for k in keys if len(k)] or [pa.array([], key_type)])
    distinct, sets = _group(all_keys, np.concatenate(addresses).astype(np.uint64, copy=False))
    null_set = None
    if label_list or template.buffer_for(bitmap_files.LIST_NULLS_KEY) is not None:
        null_set = codecs.RowAddrSet(np.unique(np.concatenate(nulls)) if nulls else codecs.EMPTY)
    version = codecs.index_file_version(ds, template.version)
    written = bitmap_files.write_bitmap_file(store, request.base, request.new_uuid, distinct, sets,
                                             template.table.schema, template.metadata, version, null_set,
                                             codecs.storage_options_of(ds))
    return UpkeepOutcome(files=[written], fragment_ids=_outcome_fragments(request, effective),
                         dataset_version=int(ds.version) if rebuild else None)
