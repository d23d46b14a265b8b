"""Repetition / definition levels of Lance 2.1+ and their conversion back to Arrow structure.

Levels are u16. A leaf column of path ``top -> ... -> leaf`` has one *layer* per node (struct and
leaf nodes are "item" layers, list nodes are "list" layers); a page lists them innermost first.

Definition levels (0 = valid all the way down) are numbered from the innermost layer outwards,
each layer taking only the levels it needs: a nullable item takes one (null); a nullable list one
(null); an emptyable list one (empty); a list with both takes two (null, then empty). E.g. layers
``[NULLABLE_ITEM, NULL_AND_EMPTY_LIST]``: 1 = null item, 2 = null list, 3 = empty list.

Repetition levels count list layers from the innermost (1) outwards; an entry with repetition
``r`` starts a new element of every list whose level is ``<= r`` -- ``max_rep`` marks a new row.
A null or empty list is a single entry that carries no value ("invisible"); every other entry
(including null items and items under null structs) has a value slot.

Because layers can differ from page to page (one page may have nulls, the next not), each page's
definition levels are first mapped onto a *canonical* numbering in which every item layer has a
null level and every list layer has a null and an empty level.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from lance_ops._proto import encodings_v2_1_pb2 as pb

ITEM, LIST = "item", "list"

_LAYER_KIND: dict[int, tuple[str, bool, bool]] = {
    pb.REPDEF_ALL_VALID_ITEM: (ITEM, False, False),
    pb.REPDEF_NULLABLE_ITEM: (ITEM, True, False),
    pb.REPDEF_ALL_VALID_LIST: (LIST, False, False),
    pb.REPDEF_NULLABLE_LIST: (LIST, True, False),
    pb.REPDEF_EMPTYABLE_LIST: (LIST, False, True),
    pb.REPDEF_NULL_AND_EMPTY_LIST: (LIST, True, True),
}


@dataclass(frozen=True)
class Canonical:
    """Canonical level numbering for a path of layer kinds (innermost first)."""

    kinds: tuple[str, ...]

    @property
    def max_rep(self) -> int:
        """Repetition levels of the path: the number of list layers."""
        return sum(1 for k in self.kinds if k == LIST)

    def null_level(self, i: int) -> int:
        """First (null) level of layer ``i`` (innermost = 0); also its validity threshold."""
        lvl = 1
        for k in self.kinds[:i]:
            lvl += 2 if k == LIST else 1
        return lvl

    def empty_level(self, i: int) -> int:
        """The "empty list" level of layer ``i`` (just above its null level)."""
        return self.null_level(i) + 1

    @property
    def visible_threshold(self) -> Optional[int]:
        """Entries with def below this carry a value (None: every entry does)."""
        for i, k in enumerate(self.kinds):
            if k == LIST:
                return self.null_level(i)
        return None


def def_mapping(layers: Sequence[int], canon: Canonical) -> np.ndarray:
    """Lookup table: page definition level -> canonical definition level."""
    if len(layers) != len(canon.kinds):
        raise ValueError(f"page has {len(layers)} rep/def layers, the schema path needs {len(canon.kinds)}")
    table = [0]
    for i, layer in enumerate(layers):
        if layer not in _LAYER_KIND:
            raise ValueError(f"unknown rep/def layer {layer}")
        kind, nullable, emptyable = _LAYER_KIND[layer]
        if kind != canon.kinds[i]:
            raise ValueError(f"layer {i} is a {kind} layer but the schema has a {canon.kinds[i]} there")
        if nullable:
            table.append(canon.null_level(i))
        if emptyable:
            table.append(canon.empty_level(i))
    return np.array(table, dtype=np.uint16)


def page_max_visible(layers: Sequence[int]) -> Optional[int]:
    """The largest *page* def level that still carries a value (None: all entries do)."""
    lvl = 0
    for layer in layers:
        kind, nullable, emptyable = _LAYER_KIND[layer]
        if kind == LIST:
            return lvl
        lvl += int(nullable)
    return None


def page_def_count(layers: Sequence[int]) -> int:
    """Definition levels a page with rep/def ``layers`` uses (one per nullable and per emptyable layer)."""
    n = 0
    for layer in layers:
        _, nullable, emptyable = _LAYER_KIND[layer]
        n += int(nullable) + int(emptyable)
    return n


def page_max_rep(layers: Sequence[int]) -> int:
    """Repetition levels a page with rep/def ``layers`` uses (one per list layer)."""
    return sum(1 for layer in layers if _LAYER_KIND[layer][0] == LIST)


@dataclass
class Levels:
    """Decoded levels of a run of rows of one leaf column (canonical numbering)."""

    rep: Optional[np.ndarray]  # uint16 or None (no lists)
    defs: Optional[np.ndarray]  # uint16 or None (all valid)
    n: int  # number of level entries

    def def_or_zero(self) -> np.ndarray:
        """The definition levels, zeros (all valid) when there are none."""
        return self.defs if self.defs is not None else np.zeros(self.n, np.uint16)

    @staticmethod
    def concat(parts: Sequence["Levels"]) -> "Levels":
        """Levels of consecutive runs ``parts`` as one run (missing rep/def become zeros where needed)."""
        if len(parts) == 1:
            return parts[0]
        n = sum(p.n for p in parts)
        has_rep = any(p.rep is not None for p in parts)
        has_def = any(p.defs is not None for p in parts)
        rep = np.concatenate([p.rep for p in parts]) if has_rep else None
        defs = np.concatenate([p.defs if p.defs is not None else np.zeros(p.n, np.uint16) for p in parts]) if has_def else None
        return Levels(rep, defs, n)


def row_starts(levels: Levels, max_rep: int) -> np.ndarray:
    """Level index at which each row starts (rows that begin in this run)."""
    if max_rep == 0 or levels.rep is None:
        return np.arange(levels.n, dtype=np.int64)
    return np.flatnonzero(levels.rep == max_rep)


def visible_mask(levels: Levels, canon: Canonical) -> Optional[np.ndarray]:
    """Per level entry, whether it carries a value (None: every entry does)."""
    t = canon.visible_threshold
    if t is None or levels.defs is None:
        return None
    return levels.defs < t
