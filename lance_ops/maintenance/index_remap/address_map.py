"""The old -> new row-address map of one compaction (pylance's ``transpose_row_addrs`` rule).

A row address is ``fragment_id << 32 | physical_offset``. Within one rewrite group the surviving old
rows, taken in (fragment id, offset) order, land one-to-one on the new fragments' rows enumerated in
order (new fragment 0 offsets 0..physical_rows, then the next). Rows of a rewritten fragment that
did not survive (deleted) map to nothing. Everything is vectorised (``np.searchsorted``), so
remapping millions of addresses costs a few array passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lance_ops.errors import InvalidArgumentError

_SHIFT = np.uint64(32)


def _addresses(fragment_id: int, offsets: np.ndarray) -> np.ndarray:
    """Row addresses of ``offsets`` in fragment ``fragment_id`` (uint64)."""
    return (np.uint64(fragment_id) << _SHIFT) | np.asarray(offsets, dtype=np.uint64)


@dataclass(frozen=True)
class AddressMap:
    """old row address -> new row address for the fragments one compaction rewrites."""

    rewritten: frozenset[int]  # old fragment ids whose rows move
    old: np.ndarray  # uint64, sorted: surviving (not deleted) old addresses
    new: np.ndarray  # uint64, same length: the new address of each old[i]

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
        frags = (addrs >> _SHIFT).astype(np.int64)
        moved = np.isin(frags, np.fromiter(self.rewritten, dtype=np.int64, count=len(self.rewritten)))
        if not moved.any():
            return out, keep
        sub = addrs[moved]
        if len(self.old):
            pos = np.searchsorted(self.old, sub)
            clipped = np.minimum(pos, len(self.old) - 1)
            found = (pos < len(self.old)) & (self.old[clipped] == sub)
            out[moved] = np.where(found, self.new[clipped], np.uint64(0))
        else:
            found = np.zeros(len(sub), dtype=bool)
            out[moved] = 0
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
