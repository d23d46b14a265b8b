"""Filter predicates: SQL text (pylance syntax) or pyarrow expressions -> :class:`Filter`.

SQL is parsed with sqlglot and translated node by node into a ``pyarrow.compute.Expression``
following pylance (DataFusion) semantics:

- three-valued logic (Kleene AND / OR / NOT); ``x = NULL`` is never true;
- floats order NaN above every number and NaN = NaN, while -0.0 = 0.0, whatever the sign bit
  (as lance does for literals; pylance 14 still orders -0.0 < 0.0 between two float columns);
- literals take the type of what they are compared with (int8 vs 300, date vs DATE '...',
  timestamp[tz] vs TIMESTAMP '...', decimal vs 1.5 all work, float literals narrow to float32
  like lance's); a literal the column cannot hold exactly is compared exactly (``i8 < 300`` is
  ``i8 <= 127``, ``i32 > 2.5`` is ``i32 > 2``) or in a wider type; naive timestamps mean UTC;
- arithmetic promotes like DataFusion (``i8 + 100`` is int64) but wraps on overflow;
- identifiers: an unquoted name matches case-insensitively when nothing matches exactly,
  backticks match exactly; a double-quoted word names a column when a column has exactly that
  name and is otherwise a string literal (pylance reads "..." as a string);
- integer ``/`` truncates, ``%`` is the truncated remainder;
- AND/OR chains beyond 4096 operands are refused (pyarrow overflows its stack on them).

Each predicate is also lowered to the conservative tree of :mod:`lance_ops.table.filters.pruning`
(``Filter.tree``) so that chunks can be skipped by their statistics.
"""
from __future__ import annotations

import decimal
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from lance_ops.errors import FilterError
from lance_ops.table.filters import pruning as sp
from lance_ops.table.filters.functions import SqlFunctions
from lance_ops.table.filters.parse import LanceSQL, located_error, parse
from lance_ops.table.filters.values import (
    ARITHMETIC, ARROW_ERRORS, COMPARISONS, FLIPPED, MAX_TERMS, PATTERN_FUNCTIONS, PROMOTING, SQL_TYPES,
    TIMESTAMP_UNITS, UNARY_FUNCTIONS, SqlType, Value, escape_with_backslash, exact_decimal, int_bounds,
    is_floating, is_null_literal, is_numeric, is_stringy, literal, with_timezone,
)

__all__ = ["Filter", "SqlCompiler", "compile_filter", "SPECIAL_COLUMNS", "with_specials"]

#: Arrow's truncated remainder kernel (newer pyarrow); older ones compute ``a - trunc(a / b) * b``
_HAS_REMAINDER = "remainder" in pc.list_functions()

#: Columns a filter may reference although they are not in the dataset schema.
SPECIAL_COLUMNS: dict[str, pa.DataType] = {"_rowid": pa.uint64(), "_rowaddr": pa.uint64()}


@dataclass(frozen=True, eq=False)
class Filter:
    """A compiled filter.

    ``expression`` evaluates the predicate (pa.Table.filter / dataset scans); ``columns`` are the
    top-level columns it reads (``_rowid``/``_rowaddr`` included when referenced); ``constant``
    is True/False when the predicate does not depend on any row, else None; ``sql`` is the
    normalised text (``str(expression)`` for expression input); ``tree`` is the pruning form.
    """

    expression: pc.Expression
    columns: frozenset[str]
    constant: bool | None
    sql: str
    tree: sp.Node = sp.UNKNOWN

    def __repr__(self) -> str:
        return f"Filter({self.sql!r}, columns={sorted(self.columns)})"


def compile_filter(predicate: str | pc.Expression | None, schema: pa.Schema) -> Filter | None:
    """Compile a SQL predicate string or a pyarrow expression against ``schema``.

    Raises :class:`~lance_ops.errors.FilterError` for syntax errors (with a caret under the
    position), unknown columns (listing the available ones), type errors and unsupported SQL.
    """
    if predicate is None:
        return None
    if isinstance(predicate, pc.Expression):
        return _from_expression(predicate, schema)
    if not isinstance(predicate, str):
        raise FilterError("a filter must be a SQL string or a pyarrow.compute.Expression, "
                          f"not {type(predicate).__name__}")
    return SqlCompiler(predicate, schema).compile()



# --- pyarrow expressions -----------------------------------------------------------------------
def with_specials(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus the special columns (``_rowid``, ``_rowaddr``) it does not already have."""
    extra = [pa.field(n, t) for n, t in SPECIAL_COLUMNS.items() if n not in schema.names]
    return pa.schema(list(schema) + extra)


def _binds(expr: pc.Expression, schema: pa.Schema) -> None:
    schema.empty_table().filter(expr)


def _from_expression(expr: pc.Expression, schema: pa.Schema) -> Filter:
    full = with_specials(schema)
    try:
        _binds(expr, full)
    except ARROW_ERRORS as e:
        msg = str(e).splitlines()[0]
        if "No match for FieldRef" in msg:
            msg += f"; available columns: {', '.join(full.names)}"
        raise FilterError(f"Invalid filter expression {expr}: {msg}") from None

    def referenced(names: list[str]) -> list[str]:  # halving search: which columns are needed
        if not names:
            return []
        try:
            _binds(expr, pa.schema([f for f in full if f.name not in set(names)]))
            return []
        except ARROW_ERRORS:
            if len(names) == 1:
                return names
            mid = len(names) // 2
            return referenced(names[:mid]) + referenced(names[mid:])

    columns = frozenset(referenced(full.names))
    constant = None
    if not columns:
        constant = pa.table({"_": [0]}).filter(expr).num_rows == 1
    return Filter(expr, columns, constant, str(expr), sp.UNKNOWN)


class SqlCompiler(SqlFunctions):
    """Translates one SQL text, node by node, into a pyarrow expression (and a pruning tree).

    ``what`` ("filter" or "expression") words its error messages; ``columns`` collects the
    top-level columns the text reads.
    """

    def __init__(self, sql: str, schema: pa.Schema, what: str = "filter") -> None:
        self.what = what
        self.sql = sql
        self.fields = {f.name: f for f in with_specials(schema)}
        self.columns: set[str] = set()
        self.as_string: list[exp.Expression] = []  # double-quoted words read as strings
        self.terms = 0  # AND/OR operands so far

    # -- driver ---------------------------------------------------------------------------------
    def compile(self) -> Filter:
        """The text as a filter predicate (FilterError when it is not a valid boolean expression)."""
        try:
            return self._compile()
        except RecursionError:
            raise FilterError(f"Invalid filter: the predicate is nested too deeply "
                              f"({len(self.sql)} characters)") from None

    def _compile(self) -> Filter:
        node = self.parse()
        v = self.visit(node)
        if v.as_predicate is not None:
            v = v.as_predicate
        if v.type != pa.bool_():
            raise self._fail(node, f"the filter does not return a boolean (it is {v.type})")
        v = self._predicate(v, node)
        constant = None
        expression = v.expr
        if v.lit is not None:
            constant = v.lit.as_py() is True
            expression = pc.scalar(constant)
        return Filter(expression, frozenset(self.columns), constant, self.finish_sql(node),
                      v.tree or sp.UNKNOWN)

    def finish_sql(self, node: exp.Expression) -> str:
        """The normalised SQL text of ``node`` (double-quoted words read as strings become literals)."""
        for n in self.as_string:
            n.replace(exp.Literal.string(n.name))
        return node.sql(dialect=LanceSQL, copy=False)

    def parse(self) -> exp.Expression:
        """The syntax tree of the SQL text (FilterError with a caret when it is not SQL)."""
        return parse(self.sql, self.what)

    def _fail(self, node: exp.Expression, message: str) -> FilterError:
        return located_error(self.sql, node, message)

    def _unsupported(self, node: exp.Expression, what: str | None = None) -> FilterError:
        text = node.sql(dialect=LanceSQL)
        if what is None:  # name the user's SQL, never the parser's class for it
            return self._fail(node, f"unsupported SQL construct: {text}")
        return self._fail(node, f"unsupported SQL construct {what}: {text}")

    def visit(self, node: exp.Expression) -> Value:
        """Translate one syntax node (and its children) into a :class:`Value`."""
        kind = type(node)
        if kind in COMPARISONS:
            return self._compare(node, COMPARISONS[kind], self.visit(node.this),
                                 self.visit(node.expression))
        if kind in ARITHMETIC:
            return self._call(node, ARITHMETIC[kind], [self.visit(node.this),
                                                   self.visit(node.expression)])
        if type(node) in UNARY_FUNCTIONS and not any(v for k, v in node.args.items() if k != "this"):
            return self._call(node, UNARY_FUNCTIONS[type(node)], [self.visit(node.this)])
        if type(node) in PATTERN_FUNCTIONS:
            return self._pattern_func(node, PATTERN_FUNCTIONS[type(node)])
        method = getattr(self, f"_v_{type(node).__name__}", None)
        if method is None:
            raise self._unsupported(node)
        return method(node)

    # -- helpers --------------------------------------------------------------------------------
    def _call(self, node: exp.Expression, fn: str, args: list[Value], **opts: Any) -> Value:
        """Apply pyarrow function ``fn``: folded when all args are constant, type-checked else."""
        func = getattr(pc, fn)
        try:
            if all(a.lit is not None for a in args):
                return literal(func(*[a.lit for a in args], **opts))
            if fn in PROMOTING and any(pa.types.is_decimal(a.type) for a in args):
                args = [literal(pa.scalar(exact_decimal(a))) if a.lit is not None and a.lit.is_valid
                        and is_numeric(a.type) and not pa.types.is_decimal(a.type) else a
                        for a in args]
            probe = func(*[pa.array([], a.type) for a in args], **opts)
            if fn in PROMOTING and (is_floating(probe.type) or pa.types.is_integer(probe.type)):
                # Expression binding would narrow an integer literal to the other operand's type
                # (int8 + 100 -> int8); compute in the promoted type as DataFusion does.
                args = [a if a.type == probe.type else
                        literal(a.lit.cast(probe.type)) if a.lit is not None else
                        Value(a.expr.cast(probe.type), probe.type) for a in args]
            return Value(func(*[a.expr for a in args], **opts), probe.type)
        except ARROW_ERRORS as e:
            types = ", ".join(str(a.type) for a in args)
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise self._fail(node, f"cannot evaluate {node.sql(dialect=LanceSQL)} "
                                   f"({fn} on {types}): {detail}") from None

    def _predicate(self, v: Value, node: exp.Expression) -> Value:
        """``v`` as a boolean operand, with its pruning tree filled in."""
        if is_null_literal(v):
            v = literal(pa.scalar(None, pa.bool_()))
        if v.as_predicate is not None:
            v = v.as_predicate
        if v.type != pa.bool_():
            raise self._fail(node, f"{node.sql(dialect=LanceSQL)} is not a boolean "
                                   f"(it is {v.type})")
        if v.tree is None:
            if v.lit is not None:
                v.tree = sp.Const(v.lit.as_py())
            elif v.path is not None:
                v.tree = sp.Cmp(".".join(v.path), "equal", True)
            else:
                v.tree = sp.UNKNOWN
        return v

    def _with_tree(self, v: Value, tree: sp.Node) -> Value:
        v.tree = sp.Const(v.lit.as_py()) if v.lit is not None else tree
        return v

    def _cast_literal(self, node: exp.Expression, s: pa.Scalar, target: pa.DataType) -> pa.Scalar:
        """CAST semantics for a constant (float -> int truncates; naive timestamps are UTC)."""
        try:
            if not s.is_valid:
                return pa.scalar(None, target)
            if pa.types.is_timestamp(target) and is_stringy(s.type):
                try:
                    return with_timezone(s.cast(pa.timestamp(target.unit)), target.tz)
                except ARROW_ERRORS:
                    return with_timezone(s.cast(pa.timestamp(target.unit, "UTC")), target.tz)
            if pa.types.is_timestamp(target) and pa.types.is_timestamp(s.type):
                s = with_timezone(s, target.tz)
            if is_floating(s.type) and pa.types.is_integer(target):
                s = pc.trunc(s)
            return s.cast(target, safe=True)
        except ARROW_ERRORS as e:
            raise self._fail(node, f"cannot convert {s.as_py()!r} to {target}: "
                                   f"{str(e).splitlines()[0]}") from None

    def _coerce(self, node: exp.Expression, v: Value, target: pa.DataType) -> tuple[Value, bool]:
        """Literal ``v`` converted for comparison with a ``target`` value; True if exact."""
        s, src = v.scalar, v.scalar.type
        if pa.types.is_dictionary(target):
            target = target.value_type
        if src == target:
            return v, True
        if not s.is_valid:
            return literal(pa.scalar(None, target)), True
        binary_like = (is_stringy(target) or pa.types.is_binary(target)
                       or pa.types.is_large_binary(target))
        if is_stringy(src) and not binary_like:
            return literal(self._cast_literal(node, s, target)), True
        if binary_like and not (is_stringy(src) or pa.types.is_binary(src)):
            return v, False  # 5 is not a string: let the comparison fail with a type error
        try:
            if is_floating(target) and is_numeric(src):  # lance narrows literals to float32 too
                return literal(s.cast(target, safe=False)), True
            if pa.types.is_decimal(target) and is_numeric(src):
                d = exact_decimal(v)
                exact = pa.scalar(d)
                try:
                    c = exact.cast(target, safe=True)
                    if c.as_py() == d:
                        return literal(c), True
                except ARROW_ERRORS:
                    pass
                return literal(exact), False
            if pa.types.is_timestamp(target):
                if pa.types.is_timestamp(src):
                    s = with_timezone(s, target.tz)
                elif pa.types.is_date(src):
                    s = with_timezone(s.cast(pa.timestamp(target.unit)), target.tz)
            c = s.cast(target, safe=True)
            if c.cast(s.type).equals(s):
                return literal(c), True
        except ARROW_ERRORS:
            pass
        return literal(s), False

    # -- comparisons ----------------------------------------------------------------------------
    def _compare(self, node: exp.Expression, op: str, a: Value, b: Value) -> Value:
        def rank(v: Value) -> int:  # the literal side, and the side to convert, goes right
            if v.lit is None:
                return 0
            return 3 if is_null_literal(v) else 2 if is_stringy(v.type) else 1

        exact = False
        if rank(a) > rank(b):
            a, b, op = b, a, FLIPPED[op]
        if rank(a) == 0 and rank(b) == 1 and pa.types.is_integer(a.type) and (
                pa.types.is_integer(b.type) or is_floating(b.type)):
            op, b = int_bounds(op, b.scalar.as_py(), a.type)
        if b.lit is not None and rank(a) < 3:
            b, exact = self._coerce(node, b, a.type)
        res = self._call(node, op, [a, b])
        if is_floating(a.type) or is_floating(b.type):
            res = self._total_order(node, op, a, b, res)
        tree: sp.Node = sp.UNKNOWN
        if a.path is not None and b.lit is not None and (
                exact or not (is_floating(a.type) or is_floating(b.type))):
            try:
                tree = sp.Cmp(".".join(a.path), op, b.lit.as_py(), is_floating(a.type))
            except ARROW_ERRORS:
                pass
        return self._with_tree(res, tree)

    def _total_order(self, node: exp.Expression, op: str, a: Value, b: Value, res: Value) -> Value:
        """Adjust an IEEE comparison to lance's order: NaN = NaN and NaN > every number."""

        def nan(v: Value) -> Any:
            if not is_floating(v.type):
                return False
            if v.lit is not None:
                return v.lit.is_valid and math.isnan(v.lit.as_py())
            return self._call(node, "is_nan", [v])

        def valid(v: Value) -> Any:
            return v.lit.is_valid if v.lit is not None else self._call(node, "is_valid", [v])

        def and_(x: Any, y: Any) -> Any:
            if x is False or y is False:
                return False
            if x is True or y is True:
                return y if x is True else x
            return self._call(node, "and_kleene", [x, y])

        def not_(x: Any) -> Any:
            return (not x) if isinstance(x, bool) else self._call(node, "invert", [x])

        def or_(r: Value, term: Any) -> Value:
            if term is False:
                return r
            if term is True:
                return literal(pa.scalar(True))
            return self._call(node, "or_kleene", [r, term])

        na, nb = nan(a), nan(b)
        if op in ("equal", "not_equal"):
            eq = self._call(node, "equal", [a, b]) if op == "not_equal" else res
            eq = or_(eq, and_(na, nb))
            return eq if op == "equal" else self._call(node, "invert", [eq])
        if op == "less":
            return or_(res, and_(nb, not_(na) if is_floating(a.type) else valid(a)))
        if op == "less_equal":
            return or_(res, and_(nb, valid(a)))
        if op == "greater":
            return or_(res, and_(na, not_(nb) if is_floating(b.type) else valid(b)))
        return or_(res, and_(na, valid(b)))  # greater_equal

    # -- node visitors --------------------------------------------------------------------------
    def _v_Paren(self, node: exp.Paren) -> Value:
        return self.visit(node.this)

    def _v_Boolean(self, node: exp.Boolean) -> Value:
        return literal(pa.scalar(bool(node.this), pa.bool_()))

    def _v_Null(self, node: exp.Null) -> Value:
        return literal(pa.scalar(None))

    def _v_Literal(self, node: exp.Literal) -> Value:
        if node.is_string:
            return literal(pa.scalar(node.this, pa.string()))
        return self._number(node, node.this)

    def _number(self, node: exp.Expression, text: str) -> Value:
        if re.fullmatch(r"-?[0-9]+", text):
            n = int(text)
            if -(2 ** 63) <= n < 2 ** 63:
                return literal(pa.scalar(n, pa.int64()), text)
            if 0 <= n < 2 ** 64:
                return literal(pa.scalar(n, pa.uint64()), text)
            raise self._fail(node, f"integer literal {text} is out of range")
        try:
            return literal(pa.scalar(float(text), pa.float64()), text)
        except ValueError:
            raise self._fail(node, f"invalid number {text!r}") from None

    def _v_Neg(self, node: exp.Neg) -> Value:
        inner = node.this
        if isinstance(inner, exp.Literal) and not inner.is_string:
            return self._number(node, "-" + inner.this)
        return self._call(node, "negate", [self.visit(inner)])

    def _v_Mod(self, node: exp.Mod) -> Value:
        a, b = self.visit(node.this), self.visit(node.expression)
        if _HAS_REMAINDER and all(pa.types.is_integer(v.type) or pa.types.is_floating(v.type) for v in (a, b)):
            # one kernel, truncated as SQL's % (the sign of the dividend), exact for floats (decimals:
            # Arrow's remainder refuses many precisions, so they keep the expansion below)
            return self._call(node, "remainder", [a, b])
        q = self._call(node, "divide", [a, b])
        if not pa.types.is_integer(q.type):
            q = self._call(node, "trunc", [q])
        return self._call(node, "subtract", [a, self._call(node, "multiply", [q, b])])

    # columns ------------------------------------------------------------------------------------
    def _v_Column(self, node: exp.Expression) -> Value:
        parts = self._path_parts(node)
        if parts is None:
            raise self._unsupported(node)
        first, kind, ident = parts[0]
        name = self._match(first, kind, list(self.fields))
        if name is None:
            if kind == '"' and len(parts) == 1:  # pylance reads "..." as a string literal
                self.as_string.append(node)
                return literal(pa.scalar(first, pa.string()))
            raise self._fail(ident, f"unknown column {first!r}; available columns: "
                                    f"{', '.join(self.fields)}")
        self.columns.add(name)
        path, typ = [name], self.fields[name].type
        for part, kind, ident in parts[1:]:
            if not pa.types.is_struct(typ):
                raise self._fail(ident, f"{'.'.join(path)} is a {typ} column, not a struct; "
                                        f"cannot read field {part!r}")
            names = [typ.field(i).name for i in range(typ.num_fields)]
            child = self._match(part, kind, names)
            if child is None:
                raise self._fail(ident, f"struct column {'.'.join(path)} has no field {part!r}; "
                                        f"its fields: {', '.join(names)}")
            path.append(child)
            typ = typ.field(child).type
        return Value(pc.field(*path), typ, path=tuple(path))

    _v_Dot = _v_Column
    _v_Bracket = _v_Column

    def _path_parts(self, node: exp.Expression) -> list[tuple[str, str, exp.Expression]] | None:
        if isinstance(node, exp.Column):
            if not all(isinstance(p, exp.Identifier) for p in node.parts):
                return None
            return [(p.this, self._quote(p), p) for p in node.parts if isinstance(p, exp.Identifier)]
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
            head = self._path_parts(node.this)
            ident = node.expression
            return None if head is None else head + [(ident.this, self._quote(ident), ident)]
        if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
            key = node.expressions[0]
            head = self._path_parts(node.this)
            if head is None or not (isinstance(key, exp.Literal) and key.is_string):
                return None
            return head + [(key.this, "`", head[-1][2])]
        return None

    def _quote(self, ident: exp.Identifier) -> str:
        if not ident.quoted:
            return ""
        start = ident.meta.get("start")
        return self.sql[start] if start is not None and start < len(self.sql) else "`"

    def _match(self, name: str, kind: str, candidates: list[str]) -> str | None:
        if name in candidates:
            return name
        if kind:  # quoted: exact only
            return None
        folded = [c for c in candidates if c.lower() == name.lower()]
        if len(folded) > 1:
            raise FilterError(f"Invalid filter {self.sql!r}: column name {name!r} is ambiguous "
                              f"({', '.join(folded)}); quote it with backticks")
        return folded[0] if folded else None

    # casts, predicates ---------------------------------------------------------------------------
    def _sql_type(self, node: exp.DataType) -> pa.DataType:
        params = [p.this.name if isinstance(p, exp.DataTypeParam) else p.name
                  for p in node.expressions]
        t = node.this
        try:
            if t == SqlType.DECIMAL:  # DataFusion's DECIMAL is DECIMAL(38, 10)
                p = int(params[0]) if params else 38
                s = int(params[1]) if len(params) > 1 else (0 if params else 10)
                return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
            if t in (SqlType.TIMESTAMP, SqlType.DATETIME):  # datetime(6): pylance's spelling
                return pa.timestamp(TIMESTAMP_UNITS[int(params[0])] if params else "ns")
        except (ValueError, KeyError, IndexError):
            pass
        if t in SQL_TYPES and not params:
            return SQL_TYPES[t]
        if t in (SqlType.VARCHAR, SqlType.CHAR, SqlType.NVARCHAR, SqlType.NCHAR, SqlType.VARBINARY, SqlType.BINARY):
            return SQL_TYPES[t]
        raise self._unsupported(node, f"type {node.sql(dialect=LanceSQL)}")

    def _v_Cast(self, node: exp.Cast) -> Value:
        target = self._sql_type(node.args["to"])
        v = self.visit(node.this)
        if v.lit is not None:
            return literal(self._cast_literal(node, v.lit, target))
        if is_floating(v.type) and pa.types.is_integer(target):
            v = self._call(node, "trunc", [v])
        try:
            pa.array([], v.type).cast(target)
        except ARROW_ERRORS:
            raise self._fail(node, f"cannot cast {v.type} to {target}") from None
        return Value(v.expr.cast(target, safe=True), target)

    def _v_Is(self, node: exp.Is) -> Value:
        rhs = node.expression
        if isinstance(rhs, exp.Null):
            v = self.visit(node.this)
            out = self._call(node, "is_null", [v])
            return self._with_tree(out, sp.IsNull(".".join(v.path)) if v.path else sp.UNKNOWN)
        if isinstance(rhs, exp.Boolean):
            v = self.visit(node.this)
            if v.as_predicate is not None:  # pylance: a list is not a boolean here
                raise self._fail(node.this, f"{node.this.sql(dialect=LanceSQL)} is not a boolean (it is {v.type})")
            b = self._predicate(v, node.this)
            if not rhs.this:
                b = self._with_tree(self._call(node, "invert", [b]), sp.Not(b.pruning))
            out = self._call(node, "coalesce", [b, literal(pa.scalar(False))])
            return self._with_tree(out, sp.IsBool(b.pruning, True))
        raise self._unsupported(node, f"IS {rhs.sql(dialect=LanceSQL)}")

    def _v_Not(self, node: exp.Not) -> Value:
        b = self._predicate(self.visit(node.this), node.this)
        return self._with_tree(self._call(node, "invert", [b]), sp.Not(b.pruning))

    def _logical(self, node: exp.Expression, fn: str) -> Value:
        """A chain of ANDs (or ORs), flattened and combined as a balanced tree."""
        operands, stack = [], [node]
        while stack:  # iterative: long chains must not exhaust the Python stack
            n = stack.pop()
            if type(n) is type(node):
                stack += [n.expression, n.this]
            else:
                operands.append(self._predicate(self.visit(n), n))
        absorbing = fn == "or_kleene"  # TRUE OR x = TRUE; FALSE AND x = FALSE
        kept = []
        for v in operands:
            if v.lit is not None and v.lit.is_valid:
                if v.lit.as_py() is absorbing:
                    return v
                continue  # the neutral element
            kept.append(v)
        if not kept:
            return literal(pa.scalar(not absorbing))
        self.terms += len(kept)
        if self.terms > MAX_TERMS:  # pyarrow flattens AND/OR chains and overflows its stack
            raise self._fail(node, f"more than {MAX_TERMS} AND/OR operands; "
                                   "use IN (...) for long lists of values")
        cls = sp.Or if absorbing else sp.And
        tree = cls(tuple(c for v in kept
                         for c in (v.tree.children if isinstance(v.tree, cls) else (v.pruning,))))
        while len(kept) > 1:
            pairs = [kept[i:i + 2] for i in range(0, len(kept), 2)]
            kept = [self._call(node, fn, p) if len(p) == 2 else p[0] for p in pairs]
        return self._with_tree(kept[0], tree if len(tree.children) > 1 else tree.children[0])

    def _v_And(self, node: exp.And) -> Value:
        return self._logical(node, "and_kleene")

    def _v_Or(self, node: exp.Or) -> Value:
        return self._logical(node, "or_kleene")

    def _v_NullSafeEQ(self, node: exp.Expression, negate: bool = False) -> Value:
        a, b = self.visit(node.this), self.visit(node.expression)
        eq = self._compare(node, "equal", a, b)
        na, nb = self._call(node, "is_null", [a]), self._call(node, "is_null", [b])
        out = self._call(node, "if_else", [self._call(node, "or_kleene", [na, nb]),
                                           self._call(node, "and_kleene", [na, nb]), eq])
        return self._call(node, "invert", [out]) if negate else out

    def _v_NullSafeNEQ(self, node: exp.Expression) -> Value:
        return self._v_NullSafeEQ(node, negate=True)

    def _v_Between(self, node: exp.Between) -> Value:
        if node.args.get("symmetric"):
            raise self._unsupported(node, "BETWEEN SYMMETRIC")
        x = self.visit(node.this)
        lo = self._compare(node, "greater_equal", x, self.visit(node.args["low"]))
        hi = self._compare(node, "less_equal", x, self.visit(node.args["high"]))
        out = self._call(node, "and_kleene", [lo, hi])
        return self._with_tree(out, sp.And((lo.pruning, hi.pruning)))

    def _v_In(self, node: exp.In) -> Value:
        if any(node.args.get(k) for k in ("query", "unnest", "field")):
            raise self._unsupported(node, "IN (subquery)")
        x = self.visit(node.this)
        items = [self.visit(e) for e in node.expressions]
        if not items:
            raise self._fail(node, "IN needs at least one value")
        if x.lit is not None or any(i.lit is None for i in items):
            eqs = [self._predicate(self._compare(node, "equal", x, i), node) for i in items]
            out = eqs[0]
            for eq in eqs[1:]:
                out = self._call(node, "or_kleene", [out, eq])
            return self._with_tree(out, sp.Or(tuple(eq.tree or sp.UNKNOWN for eq in eqs)))
        has_null = any(is_null_literal(i) for i in items)
        vtype = x.type.value_type if pa.types.is_dictionary(x.type) else x.type
        value_set = self._value_set(node, x, [i for i in items if not is_null_literal(i)], vtype)
        tree: sp.Node = sp.UNKNOWN
        if x.path is not None:
            try:
                tree = sp.In.of(".".join(x.path), value_set.to_pylist(), has_null,
                                is_floating(vtype))
            except ARROW_ERRORS:  # values without a Python form or order: no pruning
                pass
        probe = x
        if is_floating(vtype):  # + 0.0 turns -0.0 into 0.0; is_in already matches NaN with NaN
            zero = literal(pa.scalar(0.0, vtype))
            probe = self._call(node, "add", [x, zero])
            value_set = pc.add(value_set, pa.scalar(0.0, vtype))
        found = self._call(node, "is_in", [probe], value_set=value_set)
        out = self._call(node, "if_else", [self._call(node, "is_valid", [x]), found,
                                           literal(pa.scalar(None, pa.bool_()))])
        if has_null:
            out = self._call(node, "or_kleene", [out, literal(pa.scalar(None, pa.bool_()))])
        return self._with_tree(out, tree)

    def _value_set(self, node: exp.Expression, x: Value, items: list[Value],
                   vtype: pa.DataType) -> pa.Array:
        """The IN-list literals that ``x`` can equal, as an array of ``x``'s type."""
        src = {i.type for i in items}
        if len(src) == 1:  # fast path for long lists of one type
            (t,) = src
            if t == vtype or (pa.types.is_integer(t) and pa.types.is_integer(vtype)) or (
                    is_stringy(t) and is_stringy(vtype)):
                arr = pa.array([i.scalar.as_py() for i in items], t)
                try:
                    return arr.cast(vtype, safe=True)
                except ARROW_ERRORS:
                    pass  # some value does not fit: sort them out one by one
        values = []
        for item in items:
            c, exact = self._coerce(node, item, vtype)
            if exact:
                values.append(c.lit)
            else:  # not representable in x's type: can never be equal (but must be comparable)
                self._call(node, "equal", [x, c])
        return pa.array(values, vtype) if values else pa.array([], vtype)

    # strings -------------------------------------------------------------------------------------
    def _v_Like(self, node: exp.Expression, escape: str = "\\") -> Value:
        x, pat = self.visit(node.this), self.visit(node.expression)
        if pat.lit is None or not (is_stringy(pat.type) or is_null_literal(pat)):
            raise self._unsupported(node, "LIKE with a non-literal pattern")
        if not is_stringy(x.type) and not is_null_literal(x):
            raise self._fail(node, f"LIKE needs a string operand, not {x.type}")
        ignore_case = isinstance(node, exp.ILike)
        if is_null_literal(pat) or is_null_literal(x):
            out = literal(pa.scalar(None, pa.bool_()))
        else:
            pattern = pat.lit.as_py()
            if escape != "\\":
                pattern = escape_with_backslash(pattern, escape)
            out = self._call(node, "match_like", [x], pattern=pattern, ignore_case=ignore_case)
            tree: sp.Node = sp.UNKNOWN
            if x.path is not None and not ignore_case:
                tree = sp.like_tree(".".join(x.path), pattern)
            out = self._with_tree(out, tree)
        if node.args.get("negate"):
            out = self._with_tree(self._call(node, "invert", [out]), sp.Not(out.tree or sp.UNKNOWN))
        return out

    _v_ILike = _v_Like

    def _v_Escape(self, node: exp.Escape) -> Value:
        """``x LIKE p ESCAPE '\\'``: as pylance 14, the escape must be one character in quotes, and
        the backslash (LIKE's own escape) is the one pylance takes. Another single character was
        accepted by earlier lance-ops releases: it still works, with a DeprecationWarning, so
        existing callers keep working while they move to the backslash (ADR 0030)."""
        esc = node.expression
        if not isinstance(node.this, (exp.Like, exp.ILike)):
            raise self._unsupported(node, "ESCAPE")
        if not (isinstance(esc, exp.Literal) and esc.is_string):
            raise self._fail(esc, "invalid escape character in LIKE: expected a single character in single "
                                  f"quotes, got {esc.sql(dialect=LanceSQL)}")
        if len(esc.this) != 1:
            raise self._fail(esc, f"invalid escape character in LIKE: expected a single character, got '{esc.this}'")
        if esc.this != "\\":
            warnings.warn(f"LIKE ... ESCAPE '{esc.this}': pylance takes only the backslash (\\) as LIKE's "
                          "escape and refuses other characters; lance-ops will too in a future release "
                          "(escape with a backslash: 'a\\_b')", DeprecationWarning, stacklevel=2)
        return self._v_Like(node.this, escape=esc.this)

    def _pattern_func(self, node: exp.Expression, fn: str) -> Value:
        x, pat = self.visit(node.this), self.visit(node.expression)
        extra = any(v for k, v in node.args.items() if k not in ("this", "expression"))
        if extra or pat.lit is None or not is_stringy(pat.type):
            raise self._unsupported(node, f"{node.key.upper()} with a non-literal pattern")
        return self._call(node, fn, [x], pattern=pat.lit.as_py())

    def _v_Length(self, node: exp.Length) -> Value:
        v = self.visit(node.this)
        fn = "utf8_length" if is_stringy(v.type) or is_null_literal(v) else "binary_length"
        return self._call(node, fn, [v])

    def _v_Trim(self, node: exp.Trim) -> Value:
        if any(v for k, v in node.args.items() if k != "this"):
            raise self._unsupported(node, "TRIM with options")
        return self._call(node, "utf8_trim_whitespace", [self.visit(node.this)])

    def _v_Round(self, node: exp.Round) -> Value:
        nd = self.visit(node.args["decimals"]) if node.args.get("decimals") else None
        if nd is not None and (nd.lit is None or not pa.types.is_integer(nd.type)):
            raise self._unsupported(node, "ROUND with non-constant digits")
        return self._call(node, "round", [self.visit(node.this)],
                          ndigits=nd.scalar.as_py() if nd else 0, round_mode="half_towards_infinity")

    def _v_Coalesce(self, node: exp.Coalesce) -> Value:
        args = [self.visit(e) for e in [node.this, *node.expressions]]
        typed = next((a for a in args if a.lit is None), None)
        if typed is not None:
            args = [self._coerce(node, a, typed.type)[0] if a.lit is not None else a
                    for a in args]
        return self._call(node, "coalesce", args)

    def _v_DPipe(self, node: exp.DPipe) -> Value:
        args = [self.visit(node.this), self.visit(node.expression), literal(pa.scalar(""))]
        return self._call(node, "binary_join_element_wise", args, null_handling="emit_null")

    def _v_Concat(self, node: exp.Concat) -> Value:
        args = [self.visit(e) for e in node.expressions] + [literal(pa.scalar(""))]
        return self._call(node, "binary_join_element_wise", args, null_handling="replace")

