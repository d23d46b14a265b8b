"""2.0 files read together (``LanceFileReader.read_all_of``, ADR 0037): exactly the rows of the
files read one by one, for the type matrix written by pylance (nulls, all-null pages, several
pages, odd row counts so validity bitmaps do not end on a byte), and errors name the damaged file.
"""
from __future__ import annotations

import pyarrow as pa
import pytest

from lance_ops.errors import CorruptFileError
from lance_ops.format.v2_0.reader import LanceFileReader
from tests.file.test_bad_input import write_pylance
from tests.file.type_matrix import assert_tables_equal, make_table

pytest.importorskip("lance")


def _files(tmp_path, parts):
    return [write_pylance(tmp_path / f"f{i}.lance", t, "2.0", batch=batch) for i, (t, batch) in enumerate(parts)]


def test_read_all_of_equals_one_by_one(tmp_path):
    full = make_table(572, seed=1)
    cuts = [(0, 13, None), (13, 213, None), (213, 220, None), (220, 521, None), (521, 571, 17), (571, 572, None)]
    parts = [(full.slice(a, b - a), batch) for a, b, batch in cuts]
    paths = _files(tmp_path, parts)
    names = LanceFileReader(paths[0]).schema.names
    one_by_one = pa.concat_tables([LanceFileReader(p).read_all() for p in paths])
    assert_tables_equal(one_by_one, full)
    # every column (nested and dictionary columns are read file by file)
    assert_tables_equal(LanceFileReader.read_all_of([LanceFileReader(p) for p in paths], names), full)
    # the plain columns (decoded together), in another order
    plain = [n for n in reversed(names) if not pa.types.is_nested(full.schema.field(n).type)
             and not pa.types.is_dictionary(full.schema.field(n).type)
             or pa.types.is_fixed_size_list(full.schema.field(n).type)]
    assert len(plain) > 10
    got = LanceFileReader.read_all_of([LanceFileReader(p) for p in paths], plain)
    assert_tables_equal(got, full.select(plain))


def test_plain_columns_are_joined_into_one_chunk(tmp_path):
    t = pa.table({"id": pa.array(range(40), pa.int64()), "s": pa.array([None if i % 3 == 0 else f"v{i}" for i in range(40)]),
                  "b": pa.array([i % 2 == 0 for i in range(40)]),
                  "v": pa.FixedSizeListArray.from_arrays(pa.array(range(160), pa.float32()), 4)})
    paths = _files(tmp_path, [(t.slice(i, 10), None) for i in range(0, 40, 10)])
    got = LanceFileReader.read_all_of([LanceFileReader(p) for p in paths], t.column_names)
    assert got.equals(t)
    assert [c.num_chunks for c in got.columns] == [1, 1, 1, 1]


def test_damaged_file_is_named(tmp_path):
    t = pa.table({"id": pa.array(range(30), pa.int64()), "s": pa.array([f"value-{i}" for i in range(30)])})
    paths = _files(tmp_path, [(t.slice(i, 10), None) for i in range(0, 30, 10)])
    readers = [LanceFileReader(p) for p in paths]
    bad = readers[1]
    col = bad._column(1)  # the string column: its offsets point past its bytes
    page = col.pages[0]
    data_index = 1
    col.pages[0] = type(page)(page.index, page.row_start, page.length, page.buffer_offsets,
                              tuple(s if i != data_index else 3 for i, s in enumerate(page.buffer_sizes)),
                              page.priority, page.encoding)
    with pytest.raises(CorruptFileError) as info:
        LanceFileReader.read_all_of(readers, ["id", "s"])
    assert paths[1] in str(info.value)
