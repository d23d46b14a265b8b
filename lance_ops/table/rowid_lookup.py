"""Find where row ids live: ``_rowid`` -> (fragment position, physical offset) for a version.

Without stable row ids a row id *is* the row address ``fragment_id << 32 | offset``. With stable
ids the fragments' row-id sequences are searched (sorted once, then ``searchsorted``). The
maintenance layer's persisted row-id index, when it matches the version, avoids that scan.
"""
from __future__ import annotations

import numpy as np

from lance_ops.table import addresses


def _raise_missing(dataset, ids: np.ndarray, found: np.ndarray) -> None:
    missing = ids[~found]
    if missing.size:
        raise KeyError(f"{dataset.uri}: row id(s) {missing[:10].tolist()} not found in version {dataset.version} "
                       "(deleted, or never existed)")


def locate_row_ids(dataset, fragments, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``fragments`` and physical offsets of ``row_ids`` (live rows only)."""
    ids = np.asarray(row_ids, dtype=np.uint64)
    if not dataset.has_stable_row_ids:
        frag_ids, offsets = addresses.split_row_addresses(ids)
        frag_id_arr = np.array([f.fragment_id for f in fragments], dtype=np.uint64)
        order = np.argsort(frag_id_arr)
        sorted_ids = frag_id_arr[order]
        if sorted_ids.size == 0:
            _raise_missing(dataset, ids, np.zeros(ids.size, dtype=bool))
        at = np.searchsorted(sorted_ids, frag_ids)
        at_clipped = np.minimum(at, sorted_ids.size - 1)
        found = (at < sorted_ids.size) & (sorted_ids[at_clipped] == frag_ids)
        pos = np.where(found, order[at_clipped], -1).astype(np.int64)
        for i in np.unique(pos[found]):
            frag = fragments[int(i)]
            sel = pos == i
            offs = offsets[sel].astype(np.int64)
            ok = offs < frag.physical_rows
            if frag.num_deletions:
                mask = frag.live_mask()
                ok &= mask[np.minimum(offs, frag.physical_rows - 1)]
            found[np.flatnonzero(sel)] = ok
        _raise_missing(dataset, ids, found)
        return pos, offsets.astype(np.uint64)

    from lance_ops.table.rowid_index_hook import lookup_index

    hit = lookup_index(dataset, fragments, ids)
    if hit is not None:
        return hit
    all_ids, all_pos, all_offs = [], [], []
    for i, frag in enumerate(fragments):
        seq = frag.stable_row_ids
        live = frag.live_offsets()
        all_ids.append(seq[live.astype(np.int64)])
        all_pos.append(np.full(live.size, i, dtype=np.int64))
        all_offs.append(live)
    keys = np.concatenate(all_ids) if all_ids else np.empty(0, np.uint64)
    pos = np.concatenate(all_pos) if all_pos else np.empty(0, np.int64)
    offs = np.concatenate(all_offs) if all_offs else np.empty(0, np.uint64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    at = np.searchsorted(sorted_keys, ids)
    at_clipped = np.minimum(at, max(sorted_keys.size - 1, 0))
    found = (at < sorted_keys.size) & (sorted_keys[at_clipped] == ids) if sorted_keys.size else np.zeros(ids.size, bool)
    _raise_missing(dataset, ids, found)
    rows = order[at_clipped]
    return pos[rows], offs[rows]
