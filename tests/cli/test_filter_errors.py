"""Filter errors name the position and the offending token, never the parser's internals
(issue 21, item 6): the FilterError message itself, and the CLI's one line / JSON object."""
from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest

import lance_ops
from lance_ops import cli
from lance_ops.errors import FilterError
from lance_ops.table.filters.sql import compile_filter

SCHEMA = pa.schema([("x", pa.int64()), ("name", pa.string())])

#: (filter, the error's first line); positions count characters from 1
CASES = [
    ("x >", "Syntax error in filter 'x >' at position 4: expected a value after '>', found end of input"),
    ("x > ", "Syntax error in filter 'x >' at position 4: expected a value after '>', found end of input"),
    ("x = = 1", "Syntax error in filter 'x = = 1' at position 5: expected a value after '=', found '='"),
    ("x >>> 3", "Syntax error in filter 'x >>> 3' at position 5: expected a value after '>>', found '>'"),
    ("x = #", "Syntax error in filter 'x = #' at position 5: expected a value after '=', found '#'"),
    ("x = 1 AND", "Syntax error in filter 'x = 1 AND' at position 10: expected a value after 'AND', found end of input"),
    ("AND x = 1", "Syntax error in filter 'AND x = 1' at position 1: expected a value before 'AND'"),
    ("x > 1 OR OR x < 2", "Syntax error in filter 'x > 1 OR OR x < 2' at position 10: expected a value after 'OR', "
                          "found 'OR'"),
    ("x IS", "Syntax error in filter 'x IS' at position 5: expected a value after 'IS', found end of input"),
    ("x BETWEEN 1", "Syntax error in filter 'x BETWEEN 1' at position 12: expected AND and an upper bound after "
                    "'BETWEEN 1', found end of input"),
    ("x IN (1, 2", "Syntax error in filter 'x IN (1, 2' at position 11: expected ')', found end of input"),
    ("x > 1)", "Syntax error in filter 'x > 1)' at position 6: unexpected ')'"),
    ("x > 1 x", "Syntax error in filter 'x > 1 x' at position 7: unexpected 'x'"),
    ("CAST(x AS)", "Syntax error in filter 'CAST(x AS)' at position 10: expected a type after 'AS', found ')'"),
    ("name = 'abc", "Syntax error in filter \"name = 'abc\" at position 8: unterminated string literal "
                    "(a ' without its closing ')"),
    ("x = 1\nAND", "Syntax error in filter 'x = 1 AND' at position 10 (line 2, column 4): expected a value after "
                   "'AND', found end of input"),
    ("x >> 1", "Invalid filter 'x >> 1' at position 1: unsupported SQL construct: x >> 1"),
    ("nope = 1", "Invalid filter 'nope = 1' at position 1: unknown column 'nope'; available columns: x, name, "
                 "_rowid, _rowaddr"),
]

#: what the parser calls things (class names, rule names): never shown
INTERNALS = re.compile(r"<class|sqlglot|BITWISE|Required keyword|Invalid expression|Unexpected token|Expecting |"
                       r"[A-Z][a-z]+[A-Z]\w*")


@pytest.mark.parametrize("text, first_line", CASES, ids=[c[0] for c in CASES])
def test_filter_error_message(text, first_line):
    with pytest.raises(FilterError) as info:
        compile_filter(text, SCHEMA)
    lines = str(info.value).split("\n")
    assert lines[0] == first_line
    assert not INTERNALS.search(str(info.value)), str(info.value)
    # then the line of the text holding the position, with a caret under the offending token
    assert lines[-2].strip() == text.split("\n")[-1].strip() and set(lines[-1].strip()) == {"^"}


def test_caret_marks_the_offending_token():
    with pytest.raises(FilterError) as info:
        compile_filter("x > 1 OR OR x < 2", SCHEMA)
    assert str(info.value).split("\n")[1:] == ["    x > 1 OR OR x < 2", "             ^^"]
    with pytest.raises(FilterError) as info:
        compile_filter("x >", SCHEMA)
    assert str(info.value).split("\n")[1:] == ["    x >", "       ^"]  # just past the end of the text


@pytest.fixture
def ds_uri(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(pa.table({"x": pa.array(range(10), pa.int64()), "name": [str(i) for i in range(10)]}), uri)
    return uri


@pytest.mark.parametrize("text, first_line", CASES[:6], ids=[c[0] for c in CASES[:6]])
def test_cli_shows_the_first_line_only(capsys, ds_uri, text, first_line):
    assert cli.main(["delete", ds_uri, text]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: {first_line}\n")
    assert cli.main(["delete", ds_uri, text, "--json"]) == 2
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out) == {
        "ok": False, "error": {"type": "FilterError", "message": first_line, "exit_code": 2}}
    assert lance_ops.dataset(ds_uri).version == 1
