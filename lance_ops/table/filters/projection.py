"""Computed projections: a SQL value expression -> :class:`Projection` (``to_table(columns={...})``).

Value expressions go through the same translator as filters (:class:`~lance_ops.table.filters.sql.SqlCompiler`),
so types, literals and errors follow the same pylance rules; only the result differs (any type,
not a predicate).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from lance_ops.errors import FilterError, InvalidArgumentTypeError
from lance_ops.table import extension_types
from lance_ops.table.filters.sql import SqlCompiler

__all__ = ["Projection", "compile_expression"]


@dataclass(frozen=True, eq=False)
class Projection:
    """A compiled value expression (a computed column of ``to_table(columns={name: sql})``)."""

    expression: pc.Expression
    type: pa.DataType
    columns: frozenset[str]
    sql: str
    #: False for a constant that is not null (pylance marks such output fields non-nullable)
    nullable: bool = True
    #: the stored field when the expression is a plain reference to a column (or a struct field)
    #: holding extension types: the output shows them as a scan does (ADR 0030)
    source: pa.Field | None = None


def compile_expression(sql: str, schema: pa.Schema) -> Projection:
    """Compile a SQL value expression (``"b * 100"``, ``"upper(s)"``) against ``schema``.

    It goes through the same translation as filters, so types, literals and errors (with a
    caret under the position) follow the same pylance rules.
    """
    if not isinstance(sql, str):
        raise InvalidArgumentTypeError(
            f"a computed column must be a SQL expression string, not {type(sql).__name__}")
    compiler = SqlCompiler(sql, schema, what="expression")
    try:
        node = compiler.parse()
        v = compiler.visit(node)
    except RecursionError:
        raise FilterError(f"Invalid expression: nested too deeply ({len(sql)} characters)") from None
    expression = v.expr if v.lit is None else pc.scalar(v.lit)
    # IS [NOT] NULL never gives null: pylance marks such output fields non-nullable (not IS TRUE)
    top = node.this.unnest() if isinstance(node, exp.Not) else node.unnest()
    never_null = isinstance(top, exp.Is) and isinstance(top.expression, exp.Null)
    return Projection(expression, v.type, frozenset(compiler.columns), compiler.finish_sql(node),
                      nullable=not never_null and (v.lit is None or not v.lit.is_valid),
                      source=_extension_source(schema, v.path))


def _extension_source(schema: pa.Schema, path: tuple[str, ...] | None) -> pa.Field | None:
    """The stored field at ``path`` when it (or a field inside it) names an extension type."""
    if path is None or path[0] not in schema.names:
        return None
    f = schema.field(path[0])
    for part in path[1:]:
        if not pa.types.is_struct(f.type) or f.type.get_field_index(part) < 0:
            return None
        f = f.type.field(part)
    return f if extension_types.view_schema(pa.schema([f])).field(0).type != f.type else None
