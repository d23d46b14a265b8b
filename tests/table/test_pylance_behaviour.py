"""Where lance_ops and pylance both answer, they answer alike (issue: behave as pylance).

Each case runs the same call through pylance 14.0.2 (the oracle) and lance_ops: same data, or the
same builtin exception class (lance_ops' own classes derive from it, see docs/errors.md).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.file import LanceFileReader as PyLanceFileReader
from lance.file import LanceFileWriter as PyLanceFileWriter

import lance_ops
from lance_ops.errors import (
    DatasetNotFoundError,
    FilterError,
    InvalidArgumentError,
    OutOfRangeError,
    SchemaMismatchError,
)
from lance_ops.file import LanceFileReader, LanceFileWriter

ROOT = Path(__file__).resolve().parents[2]
TABLE = pa.table({"a": [1, 2, 3, 4, 5], "b": [10, 20, 30, 40, 50], "s": ["x", "y", "z", "w", "v"]})


@pytest.fixture()
def both(tmp_path):
    """The same dataset opened by pylance and by lance_ops (two fragments, one deleted row)."""
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(TABLE, uri, max_rows_per_file=3)
    lance.dataset(uri).delete("a = 2")
    return lance.dataset(uri), lance_ops.dataset(uri)


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- computed projections (columns given as a dict) ------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    dict(columns={"a": "b * 100", "c": "s"}),
    dict(columns={"z": "a + b"}, filter="a > 1"),
    dict(columns={"k": "'q'", "a2": "a"}, with_row_id=True),
    dict(columns={"k": "'q'", "a2": "a"}, limit=2, offset=1),
    dict(columns={"f": "a > 2", "u": "upper(s)"}),
    dict(columns={"m": "b % 3", "n": "-a"}, filter="s != 'z'"),
], ids=["rename_and_scale", "with_filter", "literal_and_rowid", "limit_offset", "bool_and_function", "mod_neg"])
def test_computed_projections_match_pylance(both, kwargs):
    theirs, ours = both
    expected = theirs.to_table(**kwargs)
    got = ours.to_table(**kwargs)
    assert got.schema == expected.schema
    assert got.to_pydict() == expected.to_pydict()
    scan_kwargs = {k: v for k, v in kwargs.items() if k not in ("limit", "offset")}
    batches = pa.Table.from_batches(list(ours.to_batches(**scan_kwargs)), schema=got.schema)
    assert batches.to_pydict() == theirs.to_table(**scan_kwargs).to_pydict()
    assert ours.scanner(**kwargs).projected_schema == theirs.scanner(**kwargs).projected_schema
    assert ours.scanner(**kwargs).to_table().to_pydict() == expected.to_pydict()


def test_computed_projection_that_pylance_refuses_is_computed(both):
    """pylance refuses a projection of constants only; lance_ops computes it (never wrong data)."""
    theirs, ours = both
    with pytest.raises(ValueError):
        theirs.to_table(columns={"k": "1"})
    assert ours.to_table(columns={"k": "1"}).to_pydict() == {"k": [1, 1, 1, 1]}


@pytest.mark.parametrize("columns, message", [
    ({"a": "nope * 2"}, r"unknown column 'nope'; available columns: a, b, s"),
    ({"a": "b *"}, r"Syntax error in expression 'b \*' at position 4: expected a value after '\*', "
                   r"found end of input"),
])
def test_bad_computed_projection_is_refused_like_pylance(both, columns, message):
    theirs, ours = both
    with pytest.raises(ValueError):
        theirs.to_table(columns=columns)
    with pytest.raises(ValueError, match=message):
        ours.to_table(columns=columns)


def test_empty_projection_dict_is_an_empty_projection(both):
    theirs, ours = both
    assert ours.to_table(columns={}).num_columns == theirs.to_table(columns={}).num_columns == 0
    assert ours.to_table(columns={}).num_rows == theirs.to_table(columns={}).num_rows


def test_computed_projection_of_a_non_string_is_a_type_error(both):
    theirs, ours = both
    with pytest.raises(TypeError):
        theirs.to_table(columns={"a": 3})
    with pytest.raises(TypeError, match=r"a computed column must be a SQL expression string, not int"):
        ours.to_table(columns={"a": 3})


# --- offsets, limits, takes -----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(offset=-1), "Offset must be non-negative"),
    (dict(limit=-1), "Limit must be non-negative"),
    (dict(limit=-5, offset=2), "Limit must be non-negative"),
])
def test_negative_offset_or_limit(both, kwargs, message):
    theirs, ours = both
    with pytest.raises(ValueError, match=message):
        theirs.to_table(**kwargs)
    with pytest.raises(InvalidArgumentError, match=message):
        ours.to_table(**kwargs)
    with pytest.raises(ValueError, match=message):
        ours.scanner(**kwargs)


def test_offset_and_limit_in_range_match(both):
    theirs, ours = both
    for kwargs in (dict(limit=0), dict(offset=100), dict(offset=1, limit=2), dict(offset=3)):
        assert ours.to_table(**kwargs).to_pydict() == theirs.to_table(**kwargs).to_pydict(), kwargs


def test_take_out_of_range(both):
    theirs, ours = both
    with pytest.raises(OSError):
        theirs.take([4])
    with pytest.raises(OSError, match=r"take index 4 out of range for 4 rows \(valid positions are 0..3\)"):
        ours.take([4])
    with pytest.raises(OutOfRangeError):  # also an IndexError, as before
        ours.take([0, 99])
    assert ours.take([3, 0]).to_pydict() == theirs.take([3, 0]).to_pydict()


def test_file_reader_out_of_range(tmp_path):
    path = str(tmp_path / "f.lance")
    with PyLanceFileWriter(path, TABLE.schema) as w:
        w.write_batch(TABLE)
    theirs, ours = PyLanceFileReader(path), LanceFileReader(path)
    for call in (lambda r: r.take_rows([5]), lambda r: r.read_range(3, 5), lambda r: r.read_range(10, 1)):
        with pytest.raises(ValueError):
            call(theirs).to_table()
        with pytest.raises(ValueError, match=r"out of range|cannot read rows"):
            call(ours)


# --- error classes are the builtins pylance raises ------------------------------------------------
def test_missing_dataset_is_a_value_error(tmp_path):
    uri = str(tmp_path / "nope.lance")
    with pytest.raises(ValueError):
        lance.dataset(uri)
    with pytest.raises(ValueError) as info:
        lance_ops.dataset(uri)
    assert isinstance(info.value, DatasetNotFoundError) and isinstance(info.value, FileNotFoundError)


def test_missing_version_is_a_value_error(both, tmp_path):
    theirs, ours = both
    with pytest.raises(ValueError):
        lance.dataset(theirs.uri, version=99)
    with pytest.raises(ValueError):
        lance_ops.dataset(ours.uri, version=99)
    with pytest.raises(OSError):
        theirs.checkout_version(99)
    with pytest.raises(OSError):
        ours.checkout_version(99)


def test_append_schema_mismatch_is_an_os_error(both):
    theirs, ours = both
    with pytest.raises(OSError):
        lance.write_dataset(pa.table({"zz": [1]}), theirs.uri, mode="append")
    with pytest.raises(OSError) as info:
        lance_ops.write_dataset(pa.table({"zz": [1]}), ours.uri, mode="append")
    assert isinstance(info.value, SchemaMismatchError)


def test_bad_predicate_classes(both):
    theirs, ours = both
    for predicate in ("a = = 1", "nocol > 1", "a >"):
        with pytest.raises(ValueError):
            theirs.to_table(filter=predicate)
        with pytest.raises(ValueError):
            ours.to_table(filter=predicate)
        with pytest.raises(OSError):
            theirs.delete(predicate)
        with pytest.raises(OSError) as info:
            ours.delete(predicate)
        assert isinstance(info.value, FilterError)


def test_unknown_column_is_a_value_error(both):
    theirs, ours = both
    with pytest.raises(ValueError):
        theirs.to_table(columns=["zz"])
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['zz'\]"):
        ours.to_table(columns=["zz"])


def test_damaged_file_is_an_os_error(tmp_path):
    path = tmp_path / "g.lance"
    path.write_bytes(b"x" * 100)
    with pytest.raises(OSError):
        PyLanceFileReader(str(path))
    with pytest.raises(OSError, match="g.lance"):
        LanceFileReader(str(path))


def test_error_table_is_generated_from_the_code():
    """docs/errors.md is what scripts/gen_error_table.py renders from lance_ops/errors.py."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_error_table.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = (ROOT / "docs" / "errors.md").read_text()
    assert "| `DatasetNotFoundError` | `LanceOpsError` | `FileNotFoundError`, `OSError`, `ValueError` |" in text


# --- predicate error texts -------------------------------------------------------------------------
@pytest.mark.parametrize("predicate, expected", [
    ("a = = 1", "position 5: expected a value after '=', found '='\n    a = = 1\n        ^"),
    ("a >", "position 4: expected a value after '>', found end of input\n    a >\n       ^"),
    ("(a > 1", "position 7: expected ')', found end of input"),
    ("a > 1 OR OR b < 2", "position 10: expected a value after 'OR', found 'OR'"),
    ("a > 'x", "unterminated string literal"),
])
def test_predicate_errors_say_what_was_expected_and_where(both, predicate, expected):
    theirs, ours = both
    with pytest.raises(ValueError) as pylance_error:
        theirs.to_table(filter=predicate)
    with pytest.raises(FilterError) as info:
        ours.to_table(filter=predicate)
    assert expected in str(info.value)
    assert "sqlglot" not in str(info.value)  # no parser internals
    if "found" in expected:  # pylance names the same token (or the end of input)
        token = expected.split("found ")[1].split("\n")[0]
        assert ("EOF" if token == "end of input" else token.strip("'")) in str(pylance_error.value)


def test_empty_file_writer_error(tmp_path):
    with pytest.raises(ValueError, match="No schema provided on writer open and no data provided"):
        PyLanceFileWriter(str(tmp_path / "p.lance")).close()
    path = tmp_path / "o.lance"
    with pytest.raises(ValueError, match=r"o.lance: no schema was provided when the writer was opened and no data "
                                         r"was written, so the schema is unknown and the file cannot be created"):
        LanceFileWriter(str(path)).close()
    assert not path.exists()


# --- metadata must be UTF-8 ------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: TABLE.replace_schema_metadata({b"k": b"\xff\xfe"}),
    lambda: TABLE.replace_schema_metadata({b"\xff": b"v"}),
    lambda: TABLE.cast(pa.schema([pa.field("a", pa.int64(), metadata={b"k": b"\xff"}), TABLE.schema.field("b"),
                                  TABLE.schema.field("s")])),
], ids=["schema_value", "schema_key", "field_value"])
def test_non_utf8_metadata_is_refused(tmp_path, make):
    data = make()
    with pytest.raises(ValueError):
        lance.write_dataset(data, str(tmp_path / "p.lance"))
    target = tmp_path / "o.lance"
    with pytest.raises(InvalidArgumentError, match="is not valid utf8"):
        lance_ops.write_dataset(data, str(target))
    assert not target.exists() or not any(p.is_file() for p in target.rglob("*"))
    with pytest.raises(ValueError, match="is not valid utf8"):
        LanceFileWriter(str(tmp_path / "f.lance"), data.schema).close()


def test_non_utf8_metadata_is_refused_on_append(both):
    theirs, ours = both
    data = TABLE.replace_schema_metadata({b"\xff": b"v"})
    before = files(Path(ours.uri))
    with pytest.raises(ValueError):
        lance.write_dataset(data, theirs.uri, mode="append")
    with pytest.raises(ValueError, match="is not valid utf8"):
        lance_ops.write_dataset(data, ours.uri, mode="append")
    assert files(Path(ours.uri)) == before


# --- where write_dataset writes --------------------------------------------------------------------
def test_write_dataset_to_a_dataset_object_appends_to_its_uri(both, tmp_path):
    theirs, ours = both
    more = pa.table({"a": [6], "b": [60], "s": ["u"]})
    got = lance_ops.write_dataset(more, ours, mode="append")
    assert got.uri == ours.uri and got.count_rows() == 5
    assert lance.dataset(theirs.uri).to_table().to_pydict() == got.to_table().to_pydict()
    assert not any("LanceDataset" in p.name for p in tmp_path.rglob("*"))


def test_tilde_is_expanded_like_pylance(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    lance.write_dataset(TABLE, "~/p.lance")
    lance_ops.write_dataset(TABLE, "~/o.lance")
    assert (tmp_path / "home" / "p.lance").is_dir() and (tmp_path / "home" / "o.lance").is_dir()
    assert not (tmp_path / "~").exists()
    assert lance.dataset(str(tmp_path / "home" / "o.lance")).to_table() == TABLE
    assert lance_ops.dataset("~/o.lance").to_table() == TABLE
    assert os.path.isdir(os.path.expanduser("~/o.lance"))
