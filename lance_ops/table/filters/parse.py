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


#: the token an operator class is written with (to tell the operator from what follows it)
_OPERATOR_TOKENS = {"EQ": "EQ", "NEQ": "NEQ", "GT": "GT", "GTE": "GTE", "LT": "LT", "LTE": "LTE", "And": "AND",
                    "Or": "OR", "Not": "NOT", "Add": "PLUS", "Sub": "DASH", "Mul": "STAR", "Div": "SLASH",
                    "Mod": "MOD", "Like": "LIKE", "ILike": "ILIKE", "In": "IN", "Is": "IS", "Between": "BETWEEN",
                    "DPipe": "DPIPE", "NullSafeEQ": "NULLSAFE_EQ"}
#: keywords that need a value after them: a filter ending with one of them is cut short
_NEEDS_OPERAND = {"IS", "NOT", "IN", "LIKE", "ILIKE", "BETWEEN", "AND", "OR", "ESCAPE"}
_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")

#: how much of the text the first line of a syntax error quotes
_SHOWN = 80


def _shown(sql: str) -> str:
    """``sql`` quoted on one line for a message, cut to about :data:`_SHOWN` characters."""
    flat = " ".join(sql.split())
    return repr(flat if len(flat) <= _SHOWN else flat[:_SHOWN - 3] + "...")


def _tokens(sql: str) -> list[tokens.Token]:
    try:
        return list(LanceSQL().tokenize(sql))
    except SqlglotError:
        return []


def _run_before(sql: str, toks: list[tokens.Token], i: int) -> str:
    """The text of token ``i`` joined with the symbol tokens written right before it (``>>``)."""
    start = toks[i].start
    j = i
    while (j > 0 and toks[j - 1].end + 1 == toks[j].start and not toks[j].text[:1].isalnum()
           and not toks[j - 1].text[:1].isalnum()):
        j -= 1
        start = toks[j].start
    return sql[start:toks[i].end + 1]


class _Problem:
    """What went wrong and where: a message in the user's terms and the character span to mark."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.text, self.start, self.end = text, start, end


def _problem(sql: str, err: dict[str, Any]) -> _Problem:
    """The parser's error dict -> what was expected and what was found, naming the tokens of the
    text (never the parser's own class or rule names)."""
    desc = err.get("description") or ""
    toks = _tokens(sql)
    line, col = err.get("line"), err.get("col")
    end_of_input = len(sql.rstrip())
    at = None  # index of the token the parser stopped at
    if toks and line is not None and col is not None:
        offset = sum(len(x) + 1 for x in sql.split("\n")[: line - 1]) + col - 1
        at = next((k for k, t in enumerate(toks) if t.start <= offset <= t.end), None)
    if at is None:
        return _Problem("the text is not a valid expression", end_of_input, end_of_input)
    tok = toks[at]
    last = at == len(toks) - 1

    def found(k: int | None) -> tuple[str, int, int]:
        if k is None or k >= len(toks):
            return "end of input", end_of_input, end_of_input
        return repr(toks[k].text), toks[k].start, toks[k].end

    m = _MISSING.match(desc)
    if m:
        role, op = m.group(1), m.group(2)
        op_type = _OPERATOR_TOKENS.get(op)
        if role == "this":  # nothing before the operator: "AND x"
            k = next((k for k in range(at, -1, -1) if toks[k].token_type.name == op_type), at)
            return _Problem(f"expected a value before {toks[k].text!r}", toks[k].start, toks[k].end)
        if role == "high":
            what, s, e = found(None if last else at)
            k = next((k for k in range(at, -1, -1) if toks[k].token_type.name == "BETWEEN"), at)
            return _Problem(f"expected AND and an upper bound after {sql[toks[k].start:tok.end + 1]!r}, "
                            f"found {what}", s, e)
        if last and tok.token_type.name == op_type:  # the operator ends the text
            after = _run_before(sql, toks, at)
            what, s, e = found(None)
        else:
            after = _run_before(sql, toks, at - 1) if at else ""
            what, s, e = found(at)
        return _Problem(f"expected a value after {after!r}, found {what}", s, e)
    if desc.startswith("Expecting "):
        expected = desc[len("Expecting "):].strip()
        what, s, e = found(None if last else at)
        return _Problem(f"expected {expected!r}, found {what}", s, e)
    m = re.match(r"Expected (\w+) after (\w+)", desc)
    if m:
        what, s, e = found(None if last and tok.token_type.name != "R_PAREN" else at)
        thing = "a type" if m.group(1) == "TYPE" else m.group(1).lower()
        before = toks[at - 1].text if at and tok.token_type.name == "R_PAREN" else m.group(2)
        return _Problem(f"expected {thing} after {before!r}, found {what}", s, e)
    if last and tok.token_type.name in _NEEDS_OPERAND:
        after = _run_before(sql, toks, at)
        return _Problem(f"expected a value after {after!r}, found end of input", end_of_input, end_of_input)
    return _Problem(f"unexpected {tok.text!r}", tok.start, tok.end)


def _position(sql: str, offset: int) -> str:
    """``position N`` (characters counted from 1), with line and column when the text has lines."""
    if "\n" not in sql:
        return f"position {offset + 1}"
    line = sql.count("\n", 0, offset) + 1
    col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return f"position {offset + 1} (line {line}, column {col})"


def syntax_error(sql: str, what: str, problem: str, start: int, end: int) -> FilterError:
    """``Syntax error in filter 'x >' at position 4: <problem>`` and the text with a caret under
    ``start..end``. The first line alone says it all (command-line tools show only that line)."""
    return FilterError(f"Syntax error in {what} {_shown(sql)} at {_position(sql, start)}: {problem}\n"
                       f"{caret(sql, start, end)}")


def parse(sql: str, what: str = "filter") -> exp.Expression:
    """Parse ``sql`` (a ``what``: filter or expression); FilterError naming the position and the
    offending token, with a caret, when it is not SQL."""
    if not sql.strip():
        raise FilterError(f"Invalid {what}: the {what} is empty")
    try:
        return cast(exp.Expression, sqlglot.parse_one(sql, read=LanceSQL, into=exp.Condition))
    except ParseError as e:
        p = _problem(sql, e.errors[0] if e.errors else {})
        raise syntax_error(sql, what, p.text, p.start, p.end) from None
    except TokenError as e:
        cause = str(e.__cause__ or e)
        m = re.search(r"from (\d+):(\d+)", cause)
        pos = max(0, int(m.group(2)) if m else (getattr(e, "start", None) or 0))
        quote = sql[pos:pos + 1]
        if cause.startswith("Missing '") or quote == "'":
            problem = "unterminated string literal (a ' without its closing ')"
        elif quote in ("`", '"'):
            problem = f"unterminated quoted name (a {quote} without its closing {quote})"
        else:
            problem = f"cannot read the text at {sql[pos:pos + 10]!r}"
        raise syntax_error(sql, what, problem, pos, pos) from None
    except SqlglotError:
        end = len(sql.rstrip())
        raise syntax_error(sql, what, "the text is not a valid expression", end, end) from None


def located_error(sql: str, node: exp.Expression, message: str) -> FilterError:
    """A FilterError for ``node`` of ``sql``, with a caret under its identifiers when they are known."""
    ids = [node] if isinstance(node, exp.Identifier) else list(node.find_all(exp.Identifier))
    spans = [(i.meta["start"], i.meta["end"]) for i in ids if "start" in i.meta]
    if not spans:
        return FilterError(f"Invalid filter {_shown(sql)}: {message}")
    start, end = min(a for a, _ in spans), max(b for _, b in spans)
    return FilterError(f"Invalid filter {_shown(sql)} at {_position(sql, start)}: {message}\n"
                       f"{caret(sql, start, end)}")
