"""Conservative evaluation of a compiled filter over per-chunk column statistics.

:func:`may_match` answers "can any row of this chunk (fragment, page, ...) satisfy the filter?"
from min/max/null counts alone. It only answers ``False`` when the statistics *prove* that no row
matches; anything it does not understand counts as "may match".

The filter compiler (:mod:`lance_ops.table.filters.sql`) lowers each SQL predicate into the small
tree defined here (``Cmp``, ``In``, ``IsNull``, ``And``, ``Or``, ``Not``, ``IsBool``, ``Const``,
``UNKNOWN``).
The evaluation is three-valued: every node yields the *set* of outcomes (TRUE / FALSE / NULL) its
rows may produce, an over-approximation of the real set, and a chunk may match iff TRUE is in the
root's set. Floating-point columns follow pylance's ordering (NaN is the largest value and equals
itself); since min/max ignore NaN, a float column may hold NaN unless ``nan_count == 0``.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Union, cast

__all__ = [
    "ColumnStats", "may_match", "outcomes", "Node", "Cmp", "In", "IsNull", "And", "Or", "Not",
    "IsBool", "Const", "Unknown", "UNKNOWN", "TRUE", "FALSE", "NULL", "ANY", "Prunable",
    "columns_of", "like_tree",
]

TRUE, FALSE, NULL = 1, 2, 4
ANY = TRUE | FALSE | NULL


@dataclass(frozen=True)
class ColumnStats:
    """Statistics of one column over a chunk of rows.

    ``min``/``max`` are Python scalars bounding every non-null, non-NaN value (``None`` when
    unknown or when there is no such value); ``null_count`` is ``None`` when unknown.
    ``nan_count`` (optional) lets float columns be pruned on the high side too.
    """

    min: Any = None
    max: Any = None
    null_count: int | None = None
    num_rows: int | None = None
    nan_count: int | None = None


# --- the predicate tree ------------------------------------------------------------------------
@dataclass(frozen=True)
class Cmp:
    """``column <op> value`` with op one of equal/not_equal/less/less_equal/greater/greater_equal.

    ``value`` is a Python scalar in the column's domain (``None`` = SQL NULL); ``floating`` says the
    column may hold NaN.
    """

    column: str
    op: str
    value: Any
    floating: bool = False


@dataclass(frozen=True)
class In:
    """``column IN (values)``: ``values`` are sorted, non-null, non-NaN Python scalars of one type;
    ``has_nan`` if the list held NaN; ``has_null`` if it held NULL (a non-match is then NULL)."""

    column: str
    values: tuple[Any, ...]
    has_null: bool = False
    has_nan: bool = False
    floating: bool = False

    @classmethod
    def of(cls, column: str, values: list[Any], has_null: bool, floating: bool) -> "In":
        """Build from unsorted values (raises TypeError if they do not sort)."""
        has_nan = any(_is_nan(v) for v in values)
        kept = sorted(v for v in values if not _is_nan(v))
        return cls(column, tuple(kept), has_null, has_nan, floating)


@dataclass(frozen=True)
class IsNull:
    """``column IS NULL``."""

    column: str


@dataclass(frozen=True)
class And:
    """Kleene AND of ``children``."""

    children: tuple["Node", ...]


@dataclass(frozen=True)
class Or:
    """Kleene OR of ``children``."""

    children: tuple["Node", ...]


@dataclass(frozen=True)
class Not:
    """Kleene NOT of ``child``."""

    child: "Node"


@dataclass(frozen=True)
class IsBool:
    """``child IS TRUE`` (value=True) or ``child IS FALSE`` (value=False); never NULL."""

    child: "Node"
    value: bool


@dataclass(frozen=True)
class Const:
    """A constant outcome: TRUE, FALSE or NULL (None)."""

    value: bool | None


@dataclass(frozen=True)
class Unknown:
    """Anything the tree cannot express: every outcome is possible."""


UNKNOWN = Unknown()
Node = Union[Cmp, In, IsNull, And, Or, Not, IsBool, Const, Unknown]


class Prunable(Protocol):
    """What :func:`may_match` reads of a compiled filter (:class:`lance_ops.table.filters.sql.Filter`).

    Declared here so this module never imports the filter compiler, which imports this one.
    """

    @property
    def tree(self) -> Node:
        """The pruning form of the filter."""
        ...

    @property
    def constant(self) -> bool | None:
        """True/False for a filter that does not depend on any row, else None."""
        ...


# --- evaluation --------------------------------------------------------------------------------
def may_match(filter: "Prunable | Node", stats: Mapping[str, ColumnStats]) -> bool:
    """False only when ``stats`` prove that no row of the chunk satisfies ``filter``.

    ``stats`` maps column names (nested fields as dotted paths, e.g. ``"st.x"``) to
    :class:`ColumnStats` (any object with the same attributes works). Missing columns are unknown.
    """
    if any(getattr(s, "num_rows", None) == 0 for s in stats.values()):
        return False
    tree = cast(Node, getattr(filter, "tree", filter))
    if getattr(filter, "constant", None) is False:
        return False
    return bool(outcomes(tree, stats) & TRUE)


def outcomes(node: Node, stats: Mapping[str, ColumnStats]) -> int:
    """Bit set (TRUE|FALSE|NULL) over-approximating what ``node`` yields on the chunk's rows."""
    if isinstance(node, Cmp):
        return _cmp(node, stats.get(node.column))
    if isinstance(node, In):
        return _in(node, stats.get(node.column))
    if isinstance(node, IsNull):
        return _is_null(stats.get(node.column))
    if isinstance(node, Not):
        o = outcomes(node.child, stats)
        return (o & NULL) | (TRUE if o & FALSE else 0) | (FALSE if o & TRUE else 0)
    if isinstance(node, And):
        return _and_or([outcomes(c, stats) for c in node.children], dominant=FALSE, neutral=TRUE)
    if isinstance(node, Or):
        return _and_or([outcomes(c, stats) for c in node.children], dominant=TRUE, neutral=FALSE)
    if isinstance(node, IsBool):
        o = outcomes(node.child, stats)
        hit = TRUE if node.value else FALSE
        return (TRUE if o & hit else 0) | (FALSE if o & (ANY & ~hit) else 0)
    if isinstance(node, Const):
        return TRUE if node.value is True else FALSE if node.value is False else NULL
    return ANY


def _and_or(children: list[int], dominant: int, neutral: int) -> int:
    """Kleene AND (dominant=FALSE) / OR (dominant=TRUE) of outcome sets."""
    out = 0
    if any(c & dominant for c in children):
        out |= dominant
    if all(c & neutral for c in children):
        out |= neutral
    if all(c & (neutral | NULL) for c in children) and any(c & NULL for c in children):
        out |= NULL
    return out


def _is_null(st: ColumnStats | None) -> int:
    if st is None or st.null_count is None:
        return TRUE | FALSE
    out = TRUE if st.null_count > 0 else 0
    if st.num_rows is None or st.null_count < st.num_rows:
        out |= FALSE
    return out


_RANGE = {  # op -> (TRUE possible, FALSE possible) given lo <= every value <= hi
    "equal": (lambda lo, hi, v: lo <= v <= hi, lambda lo, hi, v: not (lo == hi == v)),
    "not_equal": (lambda lo, hi, v: not (lo == hi == v), lambda lo, hi, v: lo <= v <= hi),
    "less": (lambda lo, hi, v: lo < v, lambda lo, hi, v: hi >= v),
    "less_equal": (lambda lo, hi, v: lo <= v, lambda lo, hi, v: hi > v),
    "greater": (lambda lo, hi, v: hi > v, lambda lo, hi, v: lo <= v),
    "greater_equal": (lambda lo, hi, v: hi >= v, lambda lo, hi, v: lo < v),
}
# outcome of ``NaN <op> v`` for a non-NaN v under NaN-is-largest ordering
_NAN_VS_VALUE = {"equal": FALSE, "not_equal": TRUE, "less": FALSE, "less_equal": FALSE,
                 "greater": TRUE, "greater_equal": TRUE}


def _is_nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _cmp(node: Cmp, st: ColumnStats | None) -> int:
    if node.value is None:
        return NULL
    if st is None:
        return ANY
    out = 0
    if st.null_count is None or st.null_count > 0:
        out |= NULL
    if st.null_count is not None and st.num_rows is not None and st.null_count >= st.num_rows:
        return NULL
    v, lo, hi = node.value, st.min, st.max
    if _is_nan(v):
        return out | TRUE | FALSE
    if node.floating and (st.nan_count is None or st.nan_count > 0):
        out |= _NAN_VS_VALUE.get(node.op, TRUE | FALSE)
    if lo is None or hi is None or _is_nan(lo) or _is_nan(hi):
        return out | TRUE | FALSE
    try:
        may_true, may_false = _RANGE[node.op]
        if may_true(lo, hi, v):
            out |= TRUE
        if may_false(lo, hi, v):
            out |= FALSE
    except (TypeError, ValueError, ArithmeticError, KeyError):  # incomparable: know nothing
        out |= TRUE | FALSE
    return out


def _in(node: In, st: ColumnStats | None) -> int:
    miss = NULL if node.has_null else FALSE  # what a row matching no value yields
    if st is None:
        return TRUE | miss | NULL
    out = 0
    if st.null_count is None or st.null_count > 0:
        out |= NULL
    if st.null_count is not None and st.num_rows is not None and st.null_count >= st.num_rows:
        return NULL
    if node.floating and (st.nan_count is None or st.nan_count > 0):
        out |= TRUE if node.has_nan else miss
    lo, hi, values = st.min, st.max, node.values
    if lo is None or hi is None or _is_nan(lo) or _is_nan(hi):
        return out | TRUE | miss
    try:
        i = bisect.bisect_left(values, lo)
        if i < len(values) and values[i] <= hi:
            out |= TRUE
        if not (lo == hi and i < len(values) and values[i] == lo):
            out |= miss
    except (TypeError, ValueError, ArithmeticError):
        out |= TRUE | miss
    return out


# --- building and reading trees ----------------------------------------------------------------
def like_tree(column: str, pattern: str) -> Node:
    """Pruning form of ``column LIKE pattern`` for exact strings and plain 'prefix%' patterns."""
    if "\\" in pattern:
        return UNKNOWN
    if "%" not in pattern and "_" not in pattern:
        return Cmp(column, "equal", pattern)
    prefix = pattern[:-1]
    if not pattern.endswith("%") or not prefix or "%" in prefix or "_" in prefix:
        return UNKNOWN
    last = ord(prefix[-1]) + 1
    if last > 0x10FFFF or 0xD800 <= last <= 0xDFFF:
        return UNKNOWN
    return And((Cmp(column, "greater_equal", prefix),
                Cmp(column, "less", prefix[:-1] + chr(last))))


def columns_of(tree: Node) -> set[str]:
    """The columns (dotted paths) whose statistics ``tree`` reads."""
    out: set[str] = set()

    def walk(node: Node) -> None:
        if isinstance(node, (Cmp, In, IsNull)):
            out.add(node.column)
        elif isinstance(node, (And, Or)):
            for c in node.children:
                walk(c)
        elif isinstance(node, (Not, IsBool)):
            walk(node.child)

    walk(tree)
    return out
