"""``write_dataset`` inputs pylance 14.0.2 takes, written by both and read back (issue 24, slice 3)."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from tests.parity.helper import same

TABLE = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "s": ["x", "y", None]})
SCHEMA = pa.schema([pa.field("a", pa.int32()), pa.field("s", pa.large_string())])


def _inputs():
    return {
        "list_of_dicts": lambda lib, tmp: [{"a": 1, "s": "x"}, {"a": 2, "s": "y"}, {"a": 3, "s": None}],
        "dict_of_columns": lambda lib, tmp: {"a": [1, 2, 3], "s": ["x", "y", None]},
        "pandas": lambda lib, tmp: pd.DataFrame({"a": [1, 2, 3], "s": ["x", "y", None]}),
        "pandas_index": lambda lib, tmp: pd.DataFrame({"a": [1, 2, 3], "s": ["x", "y", None]}, index=[7, 5, 9]),
        "record_batch": lambda lib, tmp: TABLE.to_batches()[0],
        "record_batch_reader": lambda lib, tmp: pa.RecordBatchReader.from_batches(TABLE.schema, TABLE.to_batches()),
        "dataset": lambda lib, tmp: lib.write_dataset(TABLE, str(tmp / f"src-{lib.__name__}")),
        "scanner": lambda lib, tmp: lib.write_dataset(TABLE, str(tmp / f"src-{lib.__name__}")).scanner(
            filter="a > 1"),
    }


@pytest.mark.parametrize("kind", list(_inputs()))
def test_inputs(tmp_path, kind):
    make = _inputs()[kind]

    def go(lib):
        out = str(tmp_path / f"{lib.__name__}.lance")
        ds = lib.write_dataset(make(lib, tmp_path), out)
        return ds.to_table()

    same(go)
    if kind.startswith("pandas"):  # pylance keeps pandas' schema metadata (index as metadata or column)
        same(lambda lib: lib.dataset(str(tmp_path / f"{lib.__name__}.lance")).schema.metadata)


@pytest.mark.parametrize("kind", ["list_of_dicts", "dict_of_columns", "pandas", "pandas_index"])
def test_schema_coerces_the_input(tmp_path, kind):
    make = _inputs()[kind]

    def go(lib):
        out = str(tmp_path / f"{lib.__name__}.lance")
        return lib.write_dataset(make(lib, tmp_path), out, schema=SCHEMA).to_table()

    same(go)


def test_where_lance_ops_differs_on_purpose(tmp_path):
    """Documented in docs/pylance-parity.md: pylance ignores ``schema=`` for tables and readers and
    wants a schema for a list of batches; lance-ops casts to ``schema`` and takes the first batch's."""
    import lance

    import lance_ops

    for data in (TABLE, pa.RecordBatchReader.from_batches(TABLE.schema, TABLE.to_batches())):
        theirs = lance.write_dataset(data, str(tmp_path / "p.lance"), schema=SCHEMA, mode="overwrite").to_table()
        assert theirs.schema.field("a").type == pa.int64()
    for data in (TABLE, pa.RecordBatchReader.from_batches(TABLE.schema, TABLE.to_batches())):
        ours = lance_ops.write_dataset(data, str(tmp_path / "o.lance"), schema=SCHEMA, mode="overwrite").to_table()
        assert ours.equals(TABLE.cast(SCHEMA))
    with pytest.raises(ValueError, match="Must provide schema"):
        lance.write_dataset(TABLE.to_batches(), str(tmp_path / "p2.lance"))
    assert lance_ops.write_dataset(TABLE.to_batches(), str(tmp_path / "o2.lance")).to_table().equals(TABLE)


def test_bad_inputs_raise_the_same_class(tmp_path):
    same(lambda lib: lib.write_dataset(42, str(tmp_path / f"{lib.__name__}-n.lance")))
    same(lambda lib: lib.write_dataset({"a": [1, 2], "b": [1]}, str(tmp_path / f"{lib.__name__}-r.lance")))
