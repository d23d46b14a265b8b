"""SQL functions and literals of pylance's filter dialect beyond the core operators.

``regexp_match``, ``array_has_any`` / ``array_has_all`` / ``array_has`` / ``array_contains``,
``current_date()``, ``now()`` and binary literals ``X'..'``. The list functions run as pyarrow
scalar UDFs (registered once per list type, vectorised over each batch), so the compiled filter
stays one ``pyarrow.compute.Expression`` the scan evaluates like any other. A process that only
unpickles a filter (a Spark executor) registers them when it imports this module's users: call
:func:`ensure_list_function` again there if a plan names one (the scan planner's filters are
compiled on the executor from their SQL text, so this does not arise today).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import threading
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from lance_ops.table.filters.values import ARROW_ERRORS, Value, is_null_literal, is_stringy, literal

_LOCK = threading.Lock()
_REGISTERED: set[str] = set()


def _as_array(arg: Any) -> pa.Array:
    if isinstance(arg, pa.ChunkedArray):
        return arg.combine_chunks()
    return arg


def _needles(arg: Any) -> pa.Array:
    """The needle list (a list scalar, or the first row of a broadcast list array)."""
    if isinstance(arg, pa.Scalar):
        return arg.values if arg.is_valid else pa.array([], arg.type.value_type)
    arr = _as_array(arg)
    return arr[0].values if len(arr) and arr[0].is_valid else pa.array([], arr.type.value_type)


def _hits_per_row(lists: pa.Array, needle: pa.Array) -> np.ndarray:
    """For each row, whether any element of its list is in ``needle`` (vectorised over the batch)."""
    values = pc.list_flatten(lists)
    parents = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    if len(values) == 0 or len(needle) == 0:
        return np.zeros(len(lists), dtype=bool)
    hit = np.asarray(pc.fill_null(pc.is_in(values, value_set=needle), False).to_numpy(zero_copy_only=False))
    return np.bincount(parents[hit], minlength=len(lists)) > 0


def _has_any(ctx: Any, lists: Any, needles: Any) -> pa.Array:
    arr = _as_array(lists)
    return pa.array(_hits_per_row(arr, _needles(needles)), pa.bool_(), mask=np.asarray(arr.is_null()))


def _has_all(ctx: Any, lists: Any, needles: Any) -> pa.Array:
    arr = _as_array(lists)
    out = np.ones(len(arr), dtype=bool)
    for needle in pc.unique(_needles(needles)):  # one pass per distinct needle, not per row
        if needle.is_valid:
            out &= _hits_per_row(arr, pa.array([needle.as_py()], arr.type.value_type))
    return pa.array(out, pa.bool_(), mask=np.asarray(arr.is_null()))


_KERNELS: dict[str, Callable[..., pa.Array]] = {"array_has_any": _has_any, "array_has_all": _has_all}


def ensure_list_function(kind: str, list_type: pa.DataType) -> str:
    """The registered name of UDF ``kind`` (``array_has_any`` / ``array_has_all``) over ``list_type``."""
    digest = hashlib.sha1(str(list_type).encode()).hexdigest()[:16]
    name = f"lance_ops_{kind}_{digest}"
    with _LOCK:
        if name not in _REGISTERED:
            try:
                pc.register_scalar_function(
                    _KERNELS[kind], name, {"summary": kind, "description": f"pylance's {kind} over {list_type}"},
                    {"lists": list_type, "needles": list_type}, pa.bool_())
            except pa.ArrowKeyError:  # registered already (by an earlier import of this module)
                pass
            _REGISTERED.add(name)
    return name


class SqlFunctions:
    """The translator's methods for these functions (mixed into ``SqlCompiler``)."""

    def visit(self, node: exp.Expression) -> Value:
        """Translate a node (``SqlCompiler.visit``)."""
        raise NotImplementedError

    def _call(self, node: exp.Expression, fn: str, args: list[Value], **opts: Any) -> Value:
        raise NotImplementedError

    def _fail(self, node: exp.Expression, message: str) -> Exception:
        raise NotImplementedError

    def _unsupported(self, node: exp.Expression, what: str | None = None) -> Exception:
        raise NotImplementedError

    # -- dispatch of function calls sqlglot does not know --------------------------------------
    def _v_Anonymous(self, node: exp.Anonymous) -> Value:
        name = str(node.name).lower()
        args = list(node.expressions)
        if name == "regexp_match" and len(args) == 2:
            return self._regexp_match(node, args[0], args[1])
        if name in ("array_has_any", "array_has_all") and len(args) == 2:
            return self._list_function(node, name, args[0], args[1])
        if name in ("array_has", "array_contains", "list_has", "list_contains") and len(args) == 2:
            return self._list_function(node, "array_has_any", args[0], exp.Array(expressions=[args[1]]))
        if name == "now" and not args:
            return self._now()
        raise self._unsupported(node, f"function {name}")

    def _v_ArrayContains(self, node: exp.ArrayContains) -> Value:
        return self._list_function(node, "array_has_any", node.this, exp.Array(expressions=[node.expression]))

    def _v_ArrayContainsAll(self, node: exp.ArrayContainsAll) -> Value:
        return self._list_function(node, "array_has_all", node.this, node.expression)

    def _v_ArrayOverlaps(self, node: exp.ArrayOverlaps) -> Value:
        return self._list_function(node, "array_has_any", node.this, node.expression)

    def _v_CurrentDate(self, node: exp.CurrentDate) -> Value:
        return literal(pa.scalar(_dt.datetime.now(_dt.timezone.utc).date(), pa.date32()))

    def _v_CurrentTimestamp(self, node: exp.CurrentTimestamp) -> Value:
        return self._now()

    def _v_HexString(self, node: exp.HexString) -> Value:
        try:
            return literal(pa.scalar(bytes.fromhex(str(node.this)), pa.binary()))
        except ValueError:
            raise self._fail(node, f"invalid hexadecimal literal X'{node.this}'") from None

    # -- the functions ---------------------------------------------------------------------------
    @staticmethod
    def _now() -> Value:
        now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
        return literal(pa.scalar(now, pa.timestamp("ns")))

    def _regexp_match(self, node: exp.Expression, x_node: exp.Expression, pat_node: exp.Expression) -> Value:
        """DataFusion's ``regexp_match`` is the list of matches, NULL without one: as a predicate,
        true where the pattern matches and NULL elsewhere (what a filter and IS NULL see)."""
        x, pat = self.visit(x_node), self.visit(pat_node)
        if pat.lit is None or not is_stringy(pat.type):
            raise self._unsupported(node, "regexp_match with a non-literal pattern")
        if not is_stringy(x.type) and not is_null_literal(x):
            raise self._fail(node, f"regexp_match needs a string operand, not {x.type}")
        matched = self._call(node, "match_substring_regex", [x], pattern=pat.lit.as_py())
        return self._call(node, "if_else", [matched, literal(pa.scalar(True)), literal(pa.scalar(None, pa.bool_()))])

    def _list_function(self, node: exp.Expression, kind: str, list_node: exp.Expression,
                       needles_node: exp.Expression) -> Value:
        lists = self.visit(list_node)
        if not (pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type)):
            raise self._fail(node, f"{kind} needs a list column, not {lists.type}")
        if not isinstance(needles_node, exp.Array):
            raise self._unsupported(node, f"{kind} with a non-literal list")
        items = [self.visit(e) for e in needles_node.expressions]
        if any(i.lit is None for i in items):
            raise self._unsupported(node, f"{kind} with non-constant values")
        try:
            needles = pa.array([i.lit.as_py() for i in items if i.lit is not None], lists.type.value_type)
        except ARROW_ERRORS:
            raise self._fail(node, f"{kind}: the values do not fit the list's {lists.type.value_type}") from None
        name = ensure_list_function(kind, lists.type)
        expr = pc.Expression._call(name, [lists.expr, pc.scalar(pa.scalar(needles.to_pylist(), lists.type))])
        return Value(expr, pa.bool_())
