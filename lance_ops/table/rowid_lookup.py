"""Find where row ids live: ``_rowid`` -> (fragment position, physical offset) for a version.

Without stable row ids a row id *is* the row address ``fragment_id << 32 | offset``. With stable
ids the fragments' row-id sequences are searched (sorted once, then ``searchsorted``). The
maintenance layer's persisted row-id index, when it matches the version, avoids that scan.

Semantics follow pylance's ``_take_rows``: an id whose row is deleted (or, with stable row ids,
an id that does not exist) is reported as position -1 so the caller can skip it; a row address
that points at a fragment this version does not have, or past a fragment's physical rows, is
an error.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from lance_ops.table import addresses

if TYPE_CHECKING:  # pragma: no cover
    from lance_ops.table.fragment import LanceFragment
    from lance_ops.table.snapshot import DatasetSnapshot


def _raise_bad_addresses(dataset: "DatasetSnapshot", ids: np.ndarray, bad: np.ndarray) -> None:
    if bad.any():
        shown = ids[bad][:10].tolist()
        raise KeyError(f"{dataset.uri}: row address(es) {shown} point outside every fragment of version "
                       f"{dataset.version}")


def locate_row_ids(dataset: "DatasetSnapshot", fragments: Sequence["LanceFragment"],
                   row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``fragments`` and physical offsets of ``row_ids``; position -1 = not live."""
    ids = np.asarray(row_ids, dtype=np.uint64)
    if not dataset.has_stable_row_ids:
        frag_ids, offsets = addresses.split_row_addresses(ids)
        frag_id_arr = np.array([f.fragment_id for f in fragments], dtype=np.uint64)
        order = np.argsort(frag_id_arr)
        sorted_ids = frag_id_arr[order]
        if sorted_ids.size == 0:
            _raise_bad_addresses(dataset, ids, np.ones(ids.size, dtype=bool))
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        at = np.searchsorted(sorted_ids, frag_ids)
        at_clipped = np.minimum(at, sorted_ids.size - 1)
        found = (at < sorted_ids.size) & (sorted_ids[at_clipped] == frag_ids)
        pos = np.where(found, order[at_clipped], -1).astype(np.int64)
        bad = ~found
        for i in np.unique(pos[found]):
            frag = fragments[int(i)]
            sel = np.flatnonzero(pos == i)
            offs = offsets[sel].astype(np.int64)
            inside = offs < frag.physical_rows
            bad[sel[~inside]] = True
            if frag.num_deletions:
                mask = frag.live_mask()
                assert mask is not None  # (the fragment has deletions)
                deleted = inside & ~mask[np.minimum(offs, frag.physical_rows - 1)]
                pos[sel[deleted]] = -1
        _raise_bad_addresses(dataset, ids, bad)
        return pos, offsets.astype(np.uint64)

    from lance_ops.table.commit.hooks import lookup_index

    hit = lookup_index(dataset, fragments, ids)
    if hit is not None:
        return hit
    all_ids, all_pos, all_offs = [], [], []
    for i, frag in enumerate(fragments):
        seq = frag.stable_row_ids
        assert seq is not None  # open_manifest's check_fragments: every fragment has a row-id sequence
        live = frag.live_offsets()
        all_ids.append(seq[live.astype(np.int64)])
        all_pos.append(np.full(live.size, i, dtype=np.int64))
        all_offs.append(live)
    keys = np.concatenate(all_ids) if all_ids else np.empty(0, np.uint64)
    pos = np.concatenate(all_pos) if all_pos else np.empty(0, np.int64)
    offs = np.concatenate(all_offs) if all_offs else np.empty(0, np.uint64)
    if keys.size == 0:
        return np.full(ids.size, -1, np.int64), np.zeros(ids.size, np.uint64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    at = np.searchsorted(sorted_keys, ids)
    at_clipped = np.minimum(at, sorted_keys.size - 1)
    found = (at < sorted_keys.size) & (sorted_keys[at_clipped] == ids)
    rows = order[at_clipped]
    return np.where(found, pos[rows], -1).astype(np.int64), np.where(found, offs[rows], 0).astype(np.uint64)
