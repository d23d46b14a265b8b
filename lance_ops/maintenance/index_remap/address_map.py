"""The old -> new row-address map of one compaction (pylance's ``transpose_row_addrs`` rule).

A row address is ``fragment_id << 32 | physical_offset``. Within one rewrite group the surviving old
rows, taken in (fragment id, offset) order, land one-to-one on the new fragments' rows enumerated in
order (new fragment 0 offsets 0..physical_rows, then the next). Rows of a rewritten fragment that
did not survive (deleted) map to nothing. Everything is vectorised: :meth:`AddressMap.apply` looks
addresses up in a dense per-fragment table (offset -> new address, built once per map), so
remapping millions of addresses costs a few gathers, not a binary search each.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from lance_ops.errors import InvalidArgumentError

_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)
#: dense-table entry of an old row that did not survive
_GONE = np.uint64(np.iinfo(np.uint64).max)


def _addresses(fragment_id: int, offsets: np.ndarray) -> np.ndarray:
    """Row addresses of ``offsets`` in fragment ``fragment_id`` (uint64)."""
    return (np.uint64(fragment_id) << _SHIFT) | np.asarray(offsets, dtype=np.uint64)


@dataclass(frozen=True)
class AddressMap:
    """old row address -> new row address for the fragments one compaction rewrites."""

    rewritten: frozenset[int]  # old fragment ids whose rows move
    old: np.ndarray  # uint64, sorted: surviving (not deleted) old addresses
    new: np.ndarray  # uint64, same length: the new address of each old[i]

    @cached_property
    def _dense(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(sorted rewritten fragment ids, per-fragment table start, per-fragment table size, table
        of new addresses at (start + old offset), ``_GONE`` for rows that did not survive)."""
        fids = np.array(sorted(self.rewritten), dtype=np.int64)
        frag_of_old = (self.old >> _SHIFT).astype(np.int64)
        offset_of_old = (self.old & _LOW).astype(np.int64)
        sizes = np.zeros(len(fids), dtype=np.int64)
        if len(self.old):
            old_slot = np.searchsorted(fids, frag_of_old)
            np.maximum.at(sizes, old_slot, offset_of_old + 1)
        starts = np.zeros(len(fids), dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        table = np.full(int(sizes.sum()), _GONE, dtype=np.uint64)
        if len(self.old):
            table[starts[old_slot] + offset_of_old] = self.new
        return fids, starts, sizes, table

    def apply(self, addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mapped uint64 array, keep bool mask), same length as ``addresses``.

        Address in a rewritten fragment and surviving -> its new address, keep True.
        Address in a rewritten fragment and deleted   -> keep False (value unspecified).
        Address of any other fragment                  -> unchanged, keep True.
        """
        addrs = np.asarray(addresses, dtype=np.uint64)
        out = addrs.copy()
        keep = np.ones(len(addrs), dtype=bool)
        if not len(addrs) or not self.rewritten:
            return out, keep
        fids, starts, sizes, table = self._dense
        frags = (addrs >> _SHIFT).astype(np.int64)
        where = np.minimum(np.searchsorted(fids, frags), len(fids) - 1)  # fids: the few rewritten ids
        moved = fids[where] == frags
        if not moved.any():
            return out, keep
        sub_slot = where[moved]
        offsets = (addrs[moved] & _LOW).astype(np.int64)
        in_table = offsets < sizes[sub_slot]
        mapped = np.full(len(sub_slot), _GONE, dtype=np.uint64)
        mapped[in_table] = table[starts[sub_slot[in_table]] + offsets[in_table]]
        found = mapped != _GONE
        out[moved] = np.where(found, mapped, np.uint64(0))
        keep[moved] = found
        return out, keep

    @property
    def new_fragments(self) -> frozenset[int]:
        """Ids of the fragments the surviving rows land in."""
        return frozenset(int(f) for f in np.unique(self.new >> _SHIFT))

    @classmethod
    def from_groups(
        cls,
        groups: Sequence[tuple[Sequence[tuple[int, np.ndarray]], Sequence[tuple[int, int]]]],
    ) -> "AddressMap":
        """Build the map from the rewrite groups.

        groups: per rewrite group, (old fragments as (fragment_id, surviving physical offsets
        sorted uint64), new fragments as (new fragment_id, physical_rows)), in order. Old
        survivors in (fragment id, offset) order zip one-to-one with new addresses enumerated
        over the new fragments in order (pylance's rule). Raises :class:`InvalidArgumentError` when a
        group's survivor count differs from its new rows (the data and the map would disagree).
        """
        rewritten: set[int] = set()
        olds: list[np.ndarray] = []
        news: list[np.ndarray] = []
        for old_frags, new_frags in groups:
            group_old = [
                _addresses(fid, offs) for fid, offs in sorted(old_frags, key=lambda item: item[0])
            ]
            rewritten.update(int(fid) for fid, _ in old_frags)
            group_new = [
                _addresses(fid, np.arange(rows, dtype=np.uint64)) for fid, rows in new_frags
            ]
            old_arr = np.concatenate(group_old) if group_old else np.empty(0, np.uint64)
            new_arr = np.concatenate(group_new) if group_new else np.empty(0, np.uint64)
            if len(old_arr) != len(new_arr):
                raise InvalidArgumentError(
                    f"rewrite group of fragments {sorted(int(f) for f, _ in old_frags)}: "
                    f"{len(old_arr)} surviving rows but {len(new_arr)} new rows"
                )
            olds.append(old_arr)
            news.append(new_arr)
        old = np.concatenate(olds) if olds else np.empty(0, np.uint64)
        new = np.concatenate(news) if news else np.empty(0, np.uint64)
        order = np.argsort(old, kind="stable")
        old, new = old[order], new[order]
        if len(old) > 1 and (np.diff(old) == 0).any():
            raise InvalidArgumentError("rewrite groups name one old row address twice")
        return cls(frozenset(rewritten), old, new)
