"""Coalescing of byte ranges into fewer, larger reads.

Readers ask for many small (start, length) ranges (pages, offset tables). On object stores every
request has a high fixed cost, so ranges whose gap is at most ``gap`` bytes are merged into one
request and the wanted slices are cut out afterwards. Sorting once makes this O(n log n).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class CoalescePlan:
    """Which merged reads to issue and where each requested range lives inside them."""

    group_starts: np.ndarray  # int64, start offset of each merged read, ascending
    group_ends: np.ndarray  # int64, exclusive end offset of each merged read
    range_group: np.ndarray  # for every input range (input order): index of its merged read
    range_offset: np.ndarray  # for every input range: its start relative to its merged read
    range_lengths: np.ndarray  # for every input range: its length

    def __len__(self) -> int:
        return len(self.group_starts)


def as_ranges(ranges: Sequence[tuple[int, int]] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``(start, length)`` pairs and return them as two int64 arrays."""
    arr = np.asarray(ranges, dtype=np.int64)
    if arr.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"ranges must be (start, length) pairs, got an array of shape {arr.shape}")
    starts, lengths = arr[:, 0], arr[:, 1]
    if (starts < 0).any() or (lengths < 0).any():
        raise ValueError("range starts and lengths must be >= 0")
    return starts, lengths


def coalesce(starts: np.ndarray, lengths: np.ndarray, gap: int) -> CoalescePlan:
    """Merge ranges separated by at most ``gap`` bytes (overlapping ones always merge)."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(starts)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CoalescePlan(empty, empty, empty, empty, empty)
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    reach = np.maximum.accumulate(s + lengths[order])  # furthest end seen so far
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    new_group[1:] = (s[1:] - reach[:-1]) > gap
    group_of_sorted = np.cumsum(new_group) - 1
    first = np.flatnonzero(new_group)
    last = np.append(first[1:] - 1, n - 1)
    group_starts = s[first]
    group_ends = reach[last]
    range_group = np.empty(n, dtype=np.int64)
    range_group[order] = group_of_sorted
    range_offset = starts - group_starts[range_group]
    return CoalescePlan(group_starts, group_ends, range_group, range_offset, lengths)


def cut(plan: CoalescePlan, blobs: Sequence[bytes]) -> list[bytes]:
    """Slice every requested range (input order) out of the merged reads ``blobs``."""
    out: list[bytes] = []
    for g, off, length in zip(
        plan.range_group.tolist(), plan.range_offset.tolist(), plan.range_lengths.tolist()
    ):
        out.append(bytes(blobs[g][off : off + length]))
    return out


#: below this many ranges, :func:`coalesce_list` (plain Python) is faster than :func:`coalesce`
SMALL_RANGE_COUNT = 32


def coalesce_list(pairs: Sequence[Sequence[int]], gap: int) -> tuple[list[list[int]], list[tuple[int, int, int]]]:
    """:func:`coalesce` for a few ``(start, length)`` pairs, without numpy's per-call overhead.

    Returns the merged reads as ``[start, end]`` lists (ascending) and, for every input range
    in input order, ``(merged read index, offset inside it, length)``.
    """
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][0])  # stable, as argsort(kind="stable")
    groups: list[list[int]] = []
    group_of = [0] * len(pairs)
    for i in order:
        s, n = pairs[i]
        e = s + n
        if groups and s - groups[-1][1] <= gap:
            if e > groups[-1][1]:
                groups[-1][1] = e
        else:
            groups.append([s, e])
        group_of[i] = len(groups) - 1
    placement = []
    for i, (s, n) in enumerate(pairs):
        g = group_of[i]
        placement.append((g, s - groups[g][0], n))
    return groups, placement
