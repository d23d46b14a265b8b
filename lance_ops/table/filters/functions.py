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

#: regexp_match flags RE2 (pyarrow's engine) takes as inline flags; DataFusion's ``g`` is refused as there,
#: ``x`` (verbose) is applied here and ``u`` (Unicode) is RE2's default
_REGEXP_FLAGS = frozenset("imsU")


def regexp_groups(pattern: str, flags: str | None) -> str:
    """``pattern`` with every capture group named ``_g0``, ``_g1``, ... in order (the whole pattern
    as ``_g0`` when it has none) and ``flags`` inline, for ``pyarrow.compute.extract_regex``."""
    if flags:
        if "g" in flags:
            raise ValueError('regexp_match() does not support the "global" option')
        unknown = sorted(set(flags) - _REGEXP_FLAGS - {"x", "u"})
        if unknown:
            raise ValueError(f"regexp_match flags {unknown} are not supported by lance-ops (it takes i, m, s, U, u, x)")
    verbose = "x" in (flags or "")
    out: list[str] = []
    n, i, in_class = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if verbose and not in_class and c in " \t\n\r\f\v":
            i += 1
        elif verbose and not in_class and c == "#":
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end + 1
        elif c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            in_class = True
            j = i + 1 + (pattern[i + 1:i + 2] == "^")
            j += pattern[j:j + 1] == "]"  # a ']' first in a class is literal
            out.append(pattern[i:j])
            i = j
        elif c == "(" and pattern.startswith(("(?P<", "(?<"), i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append(f"(?P<_g{n}>")
            n += 1
            i = pattern.index(">", i) + 1
        elif c == "(" and not pattern.startswith("(?", i):
            out.append(f"(?P<_g{n}>")
            n += 1
            i += 1
        else:
            out.append(c)
            i += 1
    text = "".join(out) if n else f"(?P<_g0>{''.join(out)})"
    inline = "".join(sorted(set(flags or "") & _REGEXP_FLAGS))
    if inline:
        text = f"(?{inline}){text}"
    try:
        pc.extract_regex(pa.array([], pa.utf8()), pattern=text)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"regular expression {pattern!r} did not compile: {exc}") from None
    return text


def _match_lists(arr: pa.Array, text: str) -> pa.Array:
    """Each string's first match of ``text`` (named groups ``_g0``...) as the list of the groups
    that took part in it (as DataFusion: a group that did not is left out), NULL without a match."""
    groups = pc.extract_regex(arr, pattern=text)
    spans = pc.extract_regex_span(arr, pattern=text)  # null where a group did not take part
    n, rows = groups.type.num_fields, len(arr)
    values = pa.concat_arrays([groups.field(j) for j in range(n)]) if n > 1 else groups.field(0)
    order = (np.arange(n, dtype=np.int64)[None, :] * rows + np.arange(rows, dtype=np.int64)[:, None]).ravel()
    took_part = np.stack([np.asarray(spans.field(j).is_valid()) for j in range(n)], axis=1)
    matched = np.asarray(groups.is_valid())
    took_part &= matched[:, None]
    offsets = np.concatenate([[0], np.cumsum(took_part.sum(axis=1))]).astype(np.int32)
    kept = values.take(pa.array(order[took_part.ravel()]))
    return pa.ListArray.from_arrays(pa.array(offsets), kept, type=pa.list_(pa.utf8()),
                                    mask=pa.array(~matched) if not matched.all() else None)


def _regexp_match(ctx: Any, strings: Any, patterns: Any, flags: Any) -> pa.Array:
    """``regexp_match`` over a batch: one pattern (a scalar), or one per row (a column), each
    distinct pattern compiled once and run over its rows."""
    if isinstance(strings, pa.Scalar):  # a constant text matched against a column of patterns
        n = 1 if isinstance(patterns, pa.Scalar) else len(patterns)
        arr = pa.array([strings.as_py()] * n, pa.utf8())
    else:
        arr = _as_array(strings)
    fl = (flags.as_py() if isinstance(flags, pa.Scalar) else _as_array(flags)[0].as_py()) or None
    if isinstance(patterns, pa.Scalar):
        return _match_lists(arr, regexp_groups(patterns.as_py(), fl))
    codes = pc.dictionary_encode(_as_array(patterns))
    which = np.asarray(codes.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    pieces, rows = [], []
    for k, text in enumerate(codes.dictionary.to_pylist()):  # one pass per distinct pattern, not per row
        sel = np.flatnonzero(which == k)
        pieces.append(_match_lists(arr.take(pa.array(sel)), regexp_groups(text, fl)))
        rows.append(sel)
    nulls = np.flatnonzero(which < 0)
    pieces.append(pa.nulls(len(nulls), pa.list_(pa.utf8())))
    rows.append(nulls)
    inverse = np.empty(len(arr), dtype=np.int64)
    inverse[np.concatenate(rows)] = np.arange(len(arr))
    return pa.concat_arrays(pieces).take(pa.array(inverse))


def ensure_regexp_function() -> str:
    """The registered name of the ``regexp_match`` UDF (utf8 strings, patterns and flags)."""
    name = "lance_ops_regexp_match"
    with _LOCK:
        if name not in _REGISTERED:
            try:
                pc.register_scalar_function(
                    _regexp_match, name, {"summary": "regexp_match", "description": "DataFusion's regexp_match"},
                    {"strings": pa.utf8(), "patterns": pa.utf8(), "flags": pa.utf8()}, pa.list_(pa.utf8()))
            except pa.ArrowKeyError:  # registered already (by an earlier import of this module)
                pass
            _REGISTERED.add(name)
    return name


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
        if name == "regexp_match" and len(args) in (2, 3):
            return self._regexp_match(node, *args)
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

    def _regexp_match(self, node: exp.Expression, x_node: exp.Expression, pat_node: exp.Expression,
                      flags_node: exp.Expression | None = None) -> Value:
        """DataFusion's ``regexp_match(x, pattern[, flags])``: the list of the first match's capture
        groups (the whole match without groups), NULL without a match. Where a predicate is
        expected (a filter, NOT, AND, OR) pylance coerces it to "matched" (never null)."""
        x, pat = self.visit(x_node), self.visit(pat_node)
        flags = self.visit(flags_node) if flags_node is not None else None
        if not (is_stringy(pat.type) or is_null_literal(pat)):
            raise self._fail(node, f"regexp_match needs a string pattern, not {pat.type}")
        if flags is not None and (flags.lit is None or not (is_stringy(flags.type) or is_null_literal(flags))):
            raise self._unsupported(node, "regexp_match with non-literal flags")
        if is_null_literal(x) or pa.types.is_integer(x.type):
            x = Value(x.expr.cast(pa.utf8()), pa.utf8())
        elif not is_stringy(x.type):
            raise self._fail(node, f"regexp_match needs a string operand, not {x.type}")
        no_flags = flags is None or is_null_literal(flags)
        flag_text = "" if no_flags else str(flags.scalar.as_py())  # type: ignore[union-attr]
        view = not pa.types.is_string(x.type) or is_null_literal(pat) or (flags is not None and is_null_literal(flags))
        out_type = pa.list_(pa.string_view() if view else pa.utf8())
        if is_null_literal(pat):
            out = literal(pa.scalar(None, out_type))
        else:
            if pat.lit is not None:
                try:  # a literal pattern is checked here, so its errors point at the text
                    regexp_groups(pat.scalar.as_py(), flag_text or None)
                except ValueError as exc:
                    raise self._fail(node, str(exc)) from None
            source = x.expr if pa.types.is_string(x.type) else x.expr.cast(pa.utf8())
            patterns = pat.expr if pa.types.is_string(pat.type) else pat.expr.cast(pa.utf8())
            name = ensure_regexp_function()
            out = Value(pc.Expression._call(name, [source, patterns, pc.scalar(flag_text)]), pa.list_(pa.utf8()))
            if view:
                out = Value(out.expr.cast(out_type), out_type)
        matched = self._call(node, "is_valid", [out])
        out.as_predicate = matched
        return out

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
