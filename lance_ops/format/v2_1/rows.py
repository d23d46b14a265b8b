"""Decoded runs of rows of one 2.1+ leaf column, and cutting rows out of them.

What every page decoder of :mod:`lance_ops.format.v2_1.decode` produces (levels and visible
values, :class:`Decoded`) and the helpers they share; split from that module to keep it small.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
from google.protobuf import unknown_fields
from google.protobuf.message import Message

from lance_ops.format.v2_1.compression.decode import EncodingCorrupt, Vals
from lance_ops.format.v2_1.layout import repdef as rd
from lance_ops.format.v2_1.layout.chunks import spans_index

Ranges = list[tuple[int, int]]  # absolute (position, size)


def unknown(msg: Message) -> dict[int, Any]:
    """Fields of ``msg`` that our compiled proto does not know (newer upstream additions)."""
    return {u.field_number: u.data for u in unknown_fields.UnknownFieldSet(msg)}


@dataclass
class PageCtx:
    """What a page decoder needs to know about its column."""

    canon: rd.Canonical
    value_kind: str  # "fixed" | "bool" | "var" (of the leaf's values)
    value_width: int  # bytes per value for fixed (whole FSL row)
    items_per_value: int = 1


# --------------------------------------------------------------------------------------------
# decoded run of rows
# --------------------------------------------------------------------------------------------
@dataclass
class Decoded:
    """Levels (canonical) and visible values of some rows of one leaf column."""

    levels: rd.Levels
    values: Vals
    num_rows: int

    @staticmethod
    def concat(parts: Sequence["Decoded"]) -> "Decoded":
        """The rows of ``parts`` (consecutive runs of one leaf column) as one run."""
        if len(parts) == 1:
            return parts[0]
        return Decoded(rd.Levels.concat([p.levels for p in parts]), Vals.concat([p.values for p in parts]),
                       sum(p.num_rows for p in parts))


DecodeFn = Callable[[Sequence[bytes]], Decoded]  # decodes the bytes of a page's planned ranges into rows


def select_rows(levels: rd.Levels, values: Vals, canon: rd.Canonical, ra: np.ndarray, rb: np.ndarray,
                run_ends: Optional[np.ndarray] = None) -> Decoded:
    """Cut the rows ``[ra[i], rb[i])`` (sorted, disjoint, numbered from the run's first row start)
    out of a decoded run; one slice for one range, one gather for many.

    ``run_ends`` (level positions, increasing): where runs of chunks that were decoded back to back
    end; a row never extends past the end of its run (the next run may begin with the tail of a
    row that is not wanted)."""
    starts = np.flatnonzero(levels.rep == canon.max_rep) if canon.max_rep and levels.rep is not None else None
    nrows = levels.n if starts is None else len(starts)
    if len(ra) > 1 and (run_ends is None or starts is None):  # merge touching ranges (e.g. whole pages)
        touch = rb[:-1] == ra[1:]
        if bool(touch.any()):
            ra, rb = ra[np.concatenate([[True], ~touch])], rb[np.concatenate([~touch, [True]])]
    k = len(ra)
    if k == 0:
        return Decoded(rd.Levels(None, None, 0), values.slice(0, 0), 0)
    if int(ra[0]) < 0 or int(rb[-1]) > nrows:
        raise EncodingCorrupt("requested rows are not in the decoded chunks")
    if k == 1 and int(ra[0]) == 0 and int(rb[0]) == nrows and (starts is None or nrows == 0 or starts[0] == 0) \
            and (run_ends is None or len(run_ends) <= 1 or starts is None):
        return Decoded(levels, values, nrows)
    if starts is None:
        la, lb = ra, rb
    else:
        bounds = np.append(starts, levels.n)
        la, lb = bounds[ra], bounds[rb]
        if run_ends is not None and len(run_ends) > 1:
            lb = np.minimum(lb, run_ends[np.minimum(np.searchsorted(run_ends, la, side="right"), len(run_ends) - 1)])
    vis = rd.visible_mask(levels, canon)
    if vis is None:
        va, vb = la, lb
    else:
        # visible levels before a position: the position less the hidden ones before it (hidden
        # levels are few; no prefix sum over every level)
        hidden = np.flatnonzero(~np.asarray(vis, dtype=bool))
        va, vb = la - np.searchsorted(hidden, la), lb - np.searchsorted(hidden, lb)
    nsel = int((rb - ra).sum())
    if k == 1:
        a, b = int(la[0]), int(lb[0])
        lv = rd.Levels(None if levels.rep is None else levels.rep[a:b],
                       None if levels.defs is None else levels.defs[a:b], b - a)
        return Decoded(lv, values.slice(int(va[0]), int(vb[0])), nsel)
    lidx = spans_index(la, lb)
    lv = rd.Levels(None if levels.rep is None else levels.rep[lidx],
                   None if levels.defs is None else levels.defs[lidx], len(lidx))
    vidx = lidx if vis is None else spans_index(va, vb)
    return Decoded(lv, values.take(vidx), nsel)


def join_bytes(datas: Sequence) -> np.ndarray:
    """The requested byte ranges back to back as one uint8 array (no copy for a single range; one copy else)."""
    if len(datas) == 1:
        return np.frombuffer(datas[0], dtype=np.uint8)
    return np.frombuffer(b"".join(datas), dtype=np.uint8)  # bytes and memoryviews alike: no array per range


def empty_decoded(ctx: "PageCtx") -> Decoded:
    """No rows of a leaf column."""
    return Decoded(rd.Levels(None, None, 0),
                   placeholder_vals(ctx.value_kind, ctx.value_width, 0, ctx.items_per_value), 0)


def map_defs(defs: Optional[np.ndarray], table: np.ndarray) -> Optional[np.ndarray]:
    """Page definition levels -> canonical ones (``table`` is increasing: a few compares, no gather)."""
    if defs is None:
        return None
    top = int(defs.max()) if len(defs) else 0
    if top >= len(table):
        raise EncodingCorrupt(f"definition level {top} is out of range for the page's layers")
    if bool(np.all(table[:top + 1] == np.arange(top + 1))):
        return defs.astype(np.uint16, copy=False)
    if len(table) > 8 or bool(np.any(np.diff(table.astype(np.int64)) <= 0)):
        return table[defs]
    out = np.zeros(len(defs), np.uint16)
    for i in range(1, top + 1):
        out += (defs >= i).astype(np.uint16) * np.uint16(table[i] - table[i - 1])
    return out


def placeholder_vals(kind: str, width: int, n: int, ipv: int = 1) -> Vals:
    """``n`` zero values of ``kind`` (``width`` bytes, ``ipv`` FSL items each): null or empty entries."""
    if kind == "var":
        return Vals("var", n, np.zeros(0, np.uint8), np.zeros(n + 1, np.int64))
    if kind == "bool":
        return Vals("bool", n, np.zeros(n, bool))
    v = Vals("fixed", n, np.zeros((n, width), np.uint8))
    v.items_per_value = ipv
    return v
