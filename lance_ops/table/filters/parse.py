"""SQL text -> sqlglot syntax tree, with syntax errors in the user's terms.

Lance's filter dialect (pylance syntax: '...' strings, `...` identifiers) is parsed by sqlglot;
a syntax error names what was expected and what was found and draws a caret under the position.
"""
from __future__ import annotations

import re
from typing import Any, cast

import sqlglot
from sqlglot import exp, generator, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError

from lance_ops.errors import FilterError

class LanceSQL(Dialect):
    """Lance's filter dialect: '...' strings, `...` (and "...") identifiers, backslash kept."""

    class Tokenizer(tokens.Tokenizer):
        """Single quotes delimit strings; backticks and double quotes identifiers."""

        QUOTES = ["'"]
        IDENTIFIERS = ["`", '"']
        HEX_STRINGS = [("X'", "'"), ("x'", "'")]  # binary literals X'0102

    class Generator(generator.Generator):
        """Writes ``isnan(x)`` as Lance spells it."""

        TRANSFORMS = {**generator.Generator.TRANSFORMS,
                      exp.IsNan: lambda self, e: self.func("isnan", e.this)}



def caret(sql: str, start: int, end: int) -> str:
    """The line of ``sql`` holding offset ``start`` with carets under ``start..end``."""
    start = max(0, min(start, len(sql)))
    line_start = sql.rfind("\n", 0, start) + 1
    line_end = sql.find("\n", start)
    line_end = len(sql) if line_end < 0 else line_end
    width = max(1, min(end, line_end - 1) - start + 1)
    lo, hi, pre, post = line_start, line_end, "", ""
    if line_end - line_start > 120:  # show a window around the position of long lines
        lo, hi = max(line_start, start - 50), min(line_end, start + max(width, 50) + 20)
        pre, post = ("..." if lo > line_start else ""), ("..." if hi < line_end else "")
        width = min(width, hi - start)
    pad = " " * (len(pre) + start - lo)
    return f"    {pre}{sql[lo:hi]}{post}\n    {pad}{'^' * width}"


def _is_unexpected(err: dict) -> bool:
    return "Unexpected token" in (err.get("description") or "")


_OPERATOR_WORDS = {"EQ": "=", "NEQ": "!=", "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=", "And": "AND",
                   "Or": "OR", "Not": "NOT", "Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%",
                   "Like": "LIKE", "ILike": "ILIKE", "In": "IN", "Is": "IS", "Between": "BETWEEN"}


def _parse_problem(err: dict, at_end: bool) -> str:
    """What the parser expected and what it found, in the user's terms (no parser internals)."""
    desc = err.get("description") or ""
    found = "end of input" if at_end else repr(err.get("highlight") or "")
    m = re.match(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>", desc)
    if m:
        word = _OPERATOR_WORDS.get(m.group(2), m.group(2).upper())
        if m.group(1) == "high":
            return f"expected AND and an upper bound after BETWEEN, found {found}"
        return f"expected an expression after {word}, found {found}"
    m = re.match(r"Expecting (.+)", desc)
    if m:
        return f"expected {m.group(1).strip()!r}, found {found}"
    if _is_unexpected(err):
        return f"unexpected {found}"
    return re.sub(r"<class '[\w.]*?(\w+)'>", r"\1", desc) + f" (found {found})"


def parse(sql: str, what: str = "filter") -> exp.Expression:
    """Parse ``sql`` (a ``what``: filter or expression); FilterError with a caret when it is not SQL."""
    if not sql.strip():
        raise FilterError(f"Invalid {what}: the {what} is empty")
    try:
        return cast(exp.Expression, sqlglot.parse_one(sql, read=LanceSQL, into=exp.Condition))
    except ParseError as e:
        err: dict[str, Any] = e.errors[0] if e.errors else {}
        line, col = err.get("line"), err.get("col")
        if line is None or col is None:
            raise FilterError(f"Syntax error in {what} {sql!r}: {_parse_problem(err, True)}") from None
        highlight = err.get("highlight") or ""
        length = len(highlight) or 1
        offset = sum(len(x) + 1 for x in sql.split("\n")[: line - 1])
        start = offset + max(col - length, 0)
        at_end = not err.get("end_context") and not _is_unexpected(err)
        if at_end:  # the parser ran out of input: point just past the last token
            start, length = len(sql.rstrip()), 1
            line = sql.count("\n", 0, start) + 1
            col = start - (sql.rfind("\n", 0, start) + 1) + 1
        else:
            col = col - length + 1
        raise FilterError(
            f"Syntax error in {what} at line {line}, column {col}: {_parse_problem(err, at_end)}\n"
            f"{caret(sql, start, start + length - 1)}") from None
    except TokenError as e:
        m = re.search(r"from (\d+):(\d+)", str(e.__cause__ or ""))
        pos = int(m.group(2)) if m else (e.start or 0)
        problem = str(e.__cause__ or e)
        if problem.startswith("Missing '"):
            problem = "unterminated string literal (a ' without its closing ')"
        raise FilterError(f"Syntax error in {what} at position {pos}: "
                          f"{problem}\n{caret(sql, pos, pos)}") from None
    except SqlglotError as e:
        raise FilterError(f"Syntax error in {what} {sql!r}: {e}") from None


def located_error(sql: str, node: exp.Expression, message: str) -> FilterError:
    """A FilterError for ``node`` of ``sql``, with a caret under its identifiers when they are known."""
    ids = [node] if isinstance(node, exp.Identifier) else list(node.find_all(exp.Identifier))
    spans = [(i.meta["start"], i.meta["end"]) for i in ids if "start" in i.meta]
    if not spans:
        return FilterError(f"Invalid filter {sql!r}: {message}")
    start, end = min(a for a, _ in spans), max(b for _, b in spans)
    return FilterError(f"Invalid filter: {message}\n{caret(sql, start, end)}")
