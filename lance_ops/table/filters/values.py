"""Typed values of the SQL translation, and the operator tables and literal rules it follows.

The translator (:mod:`lance_ops.table.filters.sql`) turns every SQL node into a :class:`Value`:
its pyarrow expression and type plus what is known statically (the literal, the column path, the
pruning tree). The helpers here decide how literals meet columns (exact integer bounds, exact
decimals, LIKE escapes) so that comparisons follow pylance's (DataFusion's) rules.
"""
from __future__ import annotations

import decimal
import math
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from lance_ops.table.filters import pruning as sp

#: errors pyarrow raises for ill-typed or out-of-range operations
ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, ArithmeticError, OverflowError,
                 decimal.InvalidOperation)



@dataclass
class Value:
    """A translated value: its expression and type, plus what we know statically."""

    e: pc.Expression | None             # None for a literal until its expression is needed
    type: pa.DataType
    lit: pa.Scalar | None = None        # the value, when constant
    path: tuple[str, ...] | None = None  # the column path, when a plain column reference
    text: str | None = None             # a numeric literal's SQL text (exact decimals)
    tree: sp.Node | None = None         # pruning form (boolean values)
    #: the boolean this value stands for where a predicate is expected (``regexp_match``'s list:
    #: pylance coerces it to "matched", never null), None when it is no predicate
    as_predicate: "Value | None" = None

    @property
    def scalar(self) -> pa.Scalar:
        """The constant's value (for a literal; AttributeError for anything else)."""
        if self.lit is None:
            raise AttributeError(f"not a constant: {self.e}")
        return self.lit

    @property
    def pruning(self) -> sp.Node:
        """The pruning tree (UNKNOWN, which prunes nothing, when none was built)."""
        return self.tree if self.tree is not None else sp.UNKNOWN

    @property
    def expr(self) -> pc.Expression:
        """The pyarrow expression (built from the literal on first use)."""
        if self.e is None:
            self.e = pc.scalar(self.lit)
        return self.e


def literal(s: pa.Scalar, text: str | None = None) -> Value:
    """A constant value (``text``: a numeric literal's SQL text, kept for exact decimals)."""
    return Value(None, s.type, lit=s, text=text)


def is_null_literal(v: Value) -> bool:
    """Whether ``v`` is the constant NULL."""
    return v.lit is not None and not v.lit.is_valid


def is_floating(t: pa.DataType) -> bool:
    """Whether ``t`` is a floating-point type."""
    return pa.types.is_floating(t)


def is_numeric(t: pa.DataType) -> bool:
    """Whether ``t`` is an integer, floating-point or decimal type."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def is_stringy(t: pa.DataType) -> bool:
    """Whether ``t`` is a string type (plain, large or view)."""
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def with_timezone(s: pa.Scalar, tz: str | None) -> pa.Scalar:
    """The same instant (naive = UTC wall time) as a timestamp scalar with zone ``tz``."""
    return pa.scalar(s.value, pa.timestamp(s.type.unit, tz))


COMPARISONS: dict[type[exp.Expression], str] = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater", exp.GTE: "greater_equal",
        exp.LT: "less", exp.LTE: "less_equal"}
FLIPPED = {"equal": "equal", "not_equal": "not_equal", "greater": "less", "less": "greater",
         "greater_equal": "less_equal", "less_equal": "greater_equal"}
PROMOTING = {"add", "subtract", "multiply", "divide"}
ARITHMETIC: dict[type[exp.Expression], str] = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply", exp.Div: "divide"}
UNARY_FUNCTIONS: dict[type[exp.Expression], str] = {exp.Lower: "utf8_lower", exp.Upper: "utf8_upper", exp.Abs: "abs", exp.Floor: "floor",
          exp.Ceil: "ceil", exp.Sqrt: "sqrt", exp.IsNan: "is_nan"}
PATTERN_FUNCTIONS: dict[type[exp.Expression], str] = {exp.StartsWith: "starts_with", exp.EndsWith: "ends_with",
                  exp.Contains: "match_substring", exp.RegexpLike: "match_substring_regex"}
SqlType = exp.DataType.Type
SQL_TYPES = {
    SqlType.BOOLEAN: pa.bool_(), SqlType.TINYINT: pa.int8(), SqlType.SMALLINT: pa.int16(), SqlType.INT: pa.int32(),
    SqlType.BIGINT: pa.int64(), SqlType.UTINYINT: pa.uint8(), SqlType.USMALLINT: pa.uint16(),
    SqlType.UINT: pa.uint32(), SqlType.UBIGINT: pa.uint64(), SqlType.FLOAT: pa.float32(),
    SqlType.DOUBLE: pa.float64(), SqlType.VARCHAR: pa.string(), SqlType.CHAR: pa.string(),
    SqlType.NVARCHAR: pa.string(), SqlType.NCHAR: pa.string(), SqlType.TEXT: pa.string(),
    SqlType.BINARY: pa.binary(), SqlType.VARBINARY: pa.binary(), SqlType.BLOB: pa.binary(),
    SqlType.DATE: pa.date32(), SqlType.TIME: pa.time64("us"), SqlType.TIMESTAMPTZ: pa.timestamp("ns", "UTC"),
}
MAX_TERMS = 4096
TIMESTAMP_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def int_bounds(op: str, v: float | int, typ: pa.DataType) -> tuple[str, Value]:
    """``x <op> v`` for an integer column and a literal it cannot hold, as an exact comparison
    with a literal it can: ``i8 < 300`` -> ``i8 <= 127``, ``i32 > 2.5`` -> ``i32 > 2``."""
    lo = -(2 ** (typ.bit_width - 1)) if pa.types.is_signed_integer(typ) else 0
    hi = 2 ** (typ.bit_width - 1) - 1 if pa.types.is_signed_integer(typ) else 2 ** typ.bit_width - 1
    if isinstance(v, float):
        if math.isnan(v):  # NaN sorts above every number
            v = math.inf
        if math.isfinite(v) and v != int(v):
            if op in ("equal", "not_equal"):  # never equal: compare with an impossible bound
                return ("less", literal(pa.scalar(lo, typ))) if op == "equal" else \
                    ("greater_equal", literal(pa.scalar(lo, typ)))
            v = math.floor(v) if op in ("greater", "less_equal") else math.ceil(v)
        if math.isfinite(v):
            v = int(v)
    if v > hi:
        new = {"less": "less_equal", "not_equal": "less_equal", "greater_equal": "greater",
               "equal": "greater"}.get(op, op)
        return new, literal(pa.scalar(hi, typ))
    if v < lo:
        new = {"greater": "greater_equal", "not_equal": "greater_equal", "less_equal": "less",
               "equal": "less"}.get(op, op)
        return new, literal(pa.scalar(lo, typ))
    return op, literal(pa.scalar(v, typ))


def exact_decimal(v: Value) -> decimal.Decimal:
    """A numeric literal as an exact Decimal (from its SQL text when it has one)."""
    return decimal.Decimal(v.text if v.text and is_floating(v.type) else str(v.scalar.as_py()))
