"""Many small 2.0 files decoded together (``lance_ops.format.v2_0.batch``, ADR 0037): exactly
what reading them one by one returns, for the whole type matrix written by pylance, and a
damaged file is still named by the error."""
from __future__ import annotations

import pyarrow as pa
import pytest

from lance_ops.errors import CorruptFileError
from lance_ops.format.v2_0 import batch
from lance_ops.format.v2_0.reader import LanceFileReader
from tests.file.test_bad_input import write_pylance
from tests.file.type_matrix import assert_tables_equal, make_table

lance = pytest.importorskip("lance")
import lance.file  # noqa: E402


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    """Small files of one schema (slices of one type-matrix table with nulls), one of them empty."""
    root = tmp_path_factory.mktemp("batch20")
    whole = make_table(261, seed=100, null_fraction=0.2)
    paths, tables, start = [], [], 0
    for i, n in enumerate([7, 50, 0, 3, 200, 1]):
        table = whole.slice(start, n)
        start += n
        paths.append(write_pylance(root / f"f{i}.lance", table, batch=32))
        tables.append(table)
    return paths, tables


def test_read_all_of_equals_one_by_one(small_files):
    paths, tables = small_files
    names = LanceFileReader(paths[0]).schema.names
    got = batch.read_all_of([LanceFileReader(p) for p in paths], names)
    expected = pa.concat_tables([LanceFileReader(p).read_all() for p in paths])
    assert got.schema.equals(expected.schema, check_metadata=True)
    assert_tables_equal(got, pa.concat_tables(tables).cast(got.schema))
    assert_tables_equal(got.combine_chunks(), expected.combine_chunks())
    # a projection, in another order
    some = [names[-1], names[0]]
    assert_tables_equal(batch.read_all_of([LanceFileReader(p) for p in paths], some),
                        pa.concat_tables([LanceFileReader(p).read_all(columns=some) for p in paths]))


def test_plain_pages_are_assembled_together(tmp_path):
    """Plain fixed-width and binary pages of many files join one array per column."""
    paths = []
    for i in range(20):
        t = pa.table({"a": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
                      "s": pa.array([f"v{i}-{k}" if k % 3 else None for k in range(10)]),
                      "v": pa.FixedSizeListArray.from_arrays(pa.array([float(i)] * 40, pa.float32()), 4)})
        paths.append(write_pylance(tmp_path / f"p{i}.lance", t))
    got = batch.read_all_of([LanceFileReader(p) for p in paths], ["a", "s", "v"])
    expected = pa.concat_tables([lance.file.LanceFileReader(p).read_all().to_table() for p in paths])
    assert got.equals(expected.cast(got.schema))
    assert [c.num_chunks for c in got.columns] == [1, 1, 1]


def test_damaged_file_is_named(tmp_path):
    paths = []
    for i in range(3):
        t = pa.table({"a": pa.array(range(100), pa.int64()), "s": pa.array([f"x{k}" for k in range(100)])})
        paths.append(write_pylance(tmp_path / f"d{i}.lance", t))
    readers = [LanceFileReader(p) for p in paths]
    raw = bytearray(open(paths[1], "rb").read())
    raw[800:1600] = b"\xff" * 800  # the offsets of column s (after 800 bytes of a)
    with open(paths[1], "wb") as f:
        f.write(bytes(raw))
    readers[1] = LanceFileReader(paths[1])
    with pytest.raises(CorruptFileError, match="d1.lance"):
        batch.read_all_of(readers, ["a", "s"])
