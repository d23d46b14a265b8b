"""LanceFileWriter behaviour: errors, paging, metadata, page info; read back with real pylance."""
from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops._proto import file_pb2
from lance_ops.errors import SchemaMismatchError, UnsupportedError, UnsupportedTypeError
from lance_ops.format.registry import LanceFileWriter
from lance_ops.schema import to_lance_fields
from tests.file.type_matrix import assert_tables_equal

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader as PyReader  # noqa: E402


def read_pylance(path) -> pa.Table:
    return PyReader(str(path)).read_all().to_table()


def dir_is_empty(path) -> bool:
    return not os.path.exists(path) or os.listdir(path) == []


# --- errors -----------------------------------------------------------------------------------


def test_null_struct_value_is_refused_before_writing(tmp_path):
    out = tmp_path / "out"
    table = pa.table({"st": pa.array([{"a": 1}, None], pa.struct([("a", pa.int32())])), "i": [1, 2]})
    w = LanceFileWriter(str(out / "x.lance"), table.schema)
    with pytest.raises(UnsupportedTypeError, match="2.1 or later"):
        w.write_batch(table)
    w.abort()
    assert dir_is_empty(out)
    with pytest.raises(UnsupportedTypeError):
        with LanceFileWriter(str(out / "y.lance")) as w:  # schema taken from the batch
            w.write_batch(table)
    assert dir_is_empty(out)


def test_null_struct_inside_list_is_refused(tmp_path):
    items = pa.array([{"a": 1}, None, {"a": 3}], pa.struct([("a", pa.int32())]))
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 3], pa.int32()), items)
    with pytest.raises(UnsupportedTypeError, match="struct"):
        with LanceFileWriter(str(tmp_path / "x.lance")) as w:
            w.write_batch(pa.table({"l": lists}))
    assert dir_is_empty(tmp_path)


def test_null_struct_in_later_batch_keeps_writer_usable(tmp_path):
    schema = pa.schema([("st", pa.struct([("a", pa.int32())]))])
    good = pa.table({"st": pa.array([{"a": 1}], schema[0].type)})
    bad = pa.table({"st": pa.array([None], schema[0].type)})
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), schema) as w:
        w.write_batch(good)
        with pytest.raises(UnsupportedTypeError):
            w.write_batch(bad)
        w.write_batch(good)
    assert read_pylance(path).to_pylist() == [{"st": {"a": 1}}, {"st": {"a": 1}}]


@pytest.mark.parametrize("dtype", [
    pa.map_(pa.string(), pa.int32()),
    pa.dense_union([pa.field("a", pa.int32())]),
    pa.string_view(),
    pa.list_view(pa.int32()),
    pa.list_(pa.string(), 2),  # fixed_size_list of non-fixed-width items
    pa.struct([("m", pa.map_(pa.int8(), pa.int8()))]),
    pa.month_day_nano_interval(),
])
def test_unstorable_types_are_refused_before_writing(tmp_path, dtype):
    schema = pa.schema([pa.field("x", dtype)])
    with pytest.raises(UnsupportedTypeError):
        LanceFileWriter(str(tmp_path / "x.lance"), schema)
    assert dir_is_empty(tmp_path)


def test_packed_struct_is_refused(tmp_path):
    field = pa.field("p", pa.struct([("a", pa.int32())]), metadata={"packed": "true"})
    with pytest.raises(UnsupportedTypeError, match="packed"):
        LanceFileWriter(str(tmp_path / "x.lance"), pa.schema([field]))


def test_mismatched_second_batch(tmp_path):
    first = pa.table({"a": pa.array([1], pa.int64()), "b": ["x"]})
    with LanceFileWriter(str(tmp_path / "x.lance")) as w:
        w.write_batch(first)
        with pytest.raises(SchemaMismatchError, match="'a'.*int32"):
            w.write_batch(pa.table({"a": pa.array([1], pa.int32()), "b": ["y"]}))
        with pytest.raises(SchemaMismatchError, match=r"missing fields \['b'\]"):
            w.write_batch(pa.table({"a": pa.array([1], pa.int64())}))
        with pytest.raises(SchemaMismatchError, match=r"unexpected fields \['c'\]"):
            w.write_batch(pa.table({"a": pa.array([1], pa.int64()), "b": ["y"], "c": [1]}))
        w.write_batch(pa.table({"b": ["z"], "a": pa.array([2], pa.int64())}))  # other order is fine
    assert read_pylance(tmp_path / "x.lance").to_pydict() == {"a": [1, 2], "b": ["x", "z"]}


def test_nulls_in_non_nullable_field(tmp_path):
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    with LanceFileWriter(str(tmp_path / "x.lance"), schema) as w:
        with pytest.raises(SchemaMismatchError, match="non-null"):
            w.write_batch(pa.table({"a": pa.array([1, None])}))
        w.write_batch(pa.table({"a": pa.array([1, 2])}))
    got = read_pylance(tmp_path / "x.lance")
    assert got.schema.field("a").nullable is False and got["a"].to_pylist() == [1, 2]


def test_unsupported_versions(tmp_path):
    for version in ("2.3", "next", "9.9"):
        with pytest.raises(UnsupportedError):
            LanceFileWriter(str(tmp_path / "x.lance"), pa.schema([("a", pa.int8())]), version=version)


def test_no_schema_and_no_data(tmp_path):
    w = LanceFileWriter(str(tmp_path / "x.lance"))
    with pytest.raises(SchemaMismatchError, match="schema"):
        w.close()
    assert dir_is_empty(tmp_path)


def test_exception_in_with_block_aborts(tmp_path):
    with pytest.raises(RuntimeError):
        with LanceFileWriter(str(tmp_path / "x.lance")) as w:
            w.write_batch(pa.table({"a": np.arange(100_000)}))
            w.add_global_buffer(b"abc")
            assert w.tell() > 0
            raise RuntimeError("boom")
    assert dir_is_empty(tmp_path)


# --- pages ------------------------------------------------------------------------------------


def test_page_counts_follow_the_cache_budget(tmp_path):
    path = tmp_path / "x.lance"
    # one top-level field: the whole budget is its column's; 1000 int64 = 8000 bytes per batch
    with LanceFileWriter(str(path), pa.schema([("a", pa.int64())]), data_cache_bytes=80_000) as w:
        for i in range(100):
            w.write_batch(pa.table({"a": np.arange(i * 1000, (i + 1) * 1000)}))
    lengths = [p.num_rows for p in w.pages[0]]
    assert lengths == [11_000] * 9 + [1000]  # flushed once the budget is exceeded
    assert [p.row_start for p in w.pages[0]] == list(range(0, 100_000, 11_000))
    assert read_pylance(path)["a"].to_numpy().tolist() == list(range(100_000))


def test_budget_is_shared_by_top_level_fields(tmp_path):
    path = tmp_path / "x.lance"
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    with LanceFileWriter(str(path), schema, data_cache_bytes=160_000) as w:
        for i in range(30):
            w.write_batch(pa.table({"a": np.arange(1000), "b": np.arange(1000)}))
    assert [p.num_rows for p in w.pages[0]] == [11_000, 11_000, 8000]


def test_sliced_input_is_measured_by_slice(tmp_path):
    table = pa.table({"a": np.arange(1_000_000)})
    with LanceFileWriter(str(tmp_path / "x.lance"), table.schema) as w:
        for start in range(0, table.num_rows, 1024):
            w.write_batch(table.slice(start, 1024))
    assert len(w.pages[0]) == 1  # 8 MB of slices is one page, not one page per slice


def test_oversized_array_is_split_by_max_page_bytes(tmp_path):
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), pa.schema([("a", pa.int64())]), max_page_bytes=100_000) as w:
        w.write_batch(pa.table({"a": np.arange(100_000)}))
    assert [p.num_rows for p in w.pages[0]] == [12_500] * 8
    assert read_pylance(path)["a"].to_numpy().tolist() == list(range(100_000))


def test_items_pages_end_with_offsets_pages(tmp_path):
    rng = np.random.default_rng(0)
    n = 50_000
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 6, n))]).astype(np.int32)
    items = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 9, offsets[-1])), pa.array(rng.random(offsets[-1]))], names=["x", "y"])
    table = pa.table({"l": pa.ListArray.from_arrays(pa.array(offsets), items)})
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), table.schema, data_cache_bytes=20_000) as w:
        for start in range(0, n, 500):
            w.write_batch(table.slice(start, 500))
    offsets_pages, header, x_pages, y_pages = w.pages
    assert len(offsets_pages) > 3 and len(header) == 1 and header[0].num_rows == offsets[-1]
    ends = np.cumsum([p.encoding.list.num_items for p in offsets_pages])
    for item_pages in (x_pages, y_pages):
        item_ends = set(np.cumsum([p.num_rows for p in item_pages]).tolist())
        assert set(ends.tolist()) <= item_ends  # no items page spans two offsets pages
    assert_tables_equal(read_pylance(path), table)


def test_page_info_locations(tmp_path):
    path = tmp_path / "x.lance"
    table = pa.table({"a": pa.array([1, None, 3]), "s": ["x", "yy", None]})
    with LanceFileWriter(str(path), table.schema) as w:
        w.write_batch(table)
    data = path.read_bytes()
    (a_page,), (s_page,) = w.pages
    assert (a_page.column_index, a_page.row_start, a_page.num_rows) == (0, 0, 3)
    assert a_page.encoding.nullable.WhichOneof("nullability") == "some_nulls"
    (v_off, v_size), (d_off, d_size) = a_page.buffers
    assert v_off % 64 == 0 and d_off % 64 == 0 and v_size == 1 and d_size == 24
    assert data[d_off:d_off + d_size] == struct.pack("<3q", 1, 0, 3)
    (i_off, i_size), (b_off, b_size) = s_page.buffers
    assert data[i_off:i_off + i_size] == struct.pack("<3Q", 1, 3, 3 + 4)
    assert data[b_off:b_off + b_size] == b"xyy"


def test_empty_file_with_schema(tmp_path):
    schema = pa.schema([("a", pa.int32()), ("st", pa.struct([("b", pa.string())]))])
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), schema) as w:
        w.write_batch(pa.Table.from_pylist([], schema=schema))
    assert w.rows_written == 0
    got = read_pylance(path)
    assert got.num_rows == 0 and got.schema.equals(schema)


# --- metadata ---------------------------------------------------------------------------------


def test_schema_and_field_metadata_kept(tmp_path):
    schema = pa.schema(
        [pa.field("a", pa.int32(), metadata={"unit": "m"}),
         pa.field("st", pa.struct([pa.field("b", pa.string(), metadata={"k": "v"})]))],
        metadata={"origin": "test"})
    table = pa.Table.from_pylist([{"a": 1, "st": {"b": "x"}}], schema=schema)
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), schema) as w:
        w.write_batch(table)
        w.add_schema_metadata("late", "added")
    reader = PyReader(str(path))
    got = reader.read_all().to_table()
    assert got.schema.metadata == {b"origin": b"test", b"late": b"added"}
    assert got.schema.field("a").metadata == {b"unit": b"m"}
    assert got.schema.field("st").type.field("b").metadata == {b"k": b"v"}
    assert got.to_pylist() == table.to_pylist()


def test_lance_fields_with_preassigned_ids(tmp_path):
    schema = pa.schema([("a", pa.int32()), ("l", pa.list_(pa.string()))])
    fields = to_lance_fields(schema, start_id=7)
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), schema, lance_fields=fields) as w:
        w.write_batch(pa.table({"a": pa.array([1, 2], pa.int32()), "l": [["x"], None]}))
    data = path.read_bytes()
    gbo = struct.unpack_from("<Q", data, len(data) - 40 + 16)[0]
    pos, size = struct.unpack_from("<QQ", data, gbo)
    fd = file_pb2.FileDescriptor()
    fd.ParseFromString(data[pos:pos + size])
    assert [f.id for f in fd.schema.fields] == [7, 8, 9]
    assert read_pylance(path).to_pydict() == {"a": [1, 2], "l": [["x"], None]}
    with pytest.raises(SchemaMismatchError):
        LanceFileWriter(str(tmp_path / "y.lance"), schema, lance_fields=fields[:2])


def test_table_with_many_chunks_and_batch_reader(tmp_path):
    t = pa.table({"a": np.arange(10), "s": [str(i) for i in range(10)]})
    chunked = pa.concat_tables([t.slice(0, 3), t.slice(3, 4), t.slice(7)])
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path)) as w:
        w.write_batch(chunked)
        w.write_batch(pa.RecordBatchReader.from_batches(t.schema, t.to_batches()))
    assert w.close() == 20
    assert read_pylance(path).to_pydict() == pa.concat_tables([t, t]).to_pydict()


# --- property test ----------------------------------------------------------------------------

@st.composite
def _columns(draw):
    n = draw(st.integers(0, 250))
    kinds = draw(st.lists(st.sampled_from(["int", "float", "str", "list"]), min_size=1, max_size=4))
    cols, types = {}, {}
    for i, kind in enumerate(kinds):
        if kind == "int":
            vals, t = draw(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=n, max_size=n)), pa.int64()
        elif kind == "float":
            vals, t = draw(st.lists(st.one_of(st.none(), st.floats(allow_nan=False, width=32)), min_size=n, max_size=n)), pa.float32()
        elif kind == "str":
            vals, t = draw(st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=n, max_size=n)), pa.string()
        else:
            vals = draw(st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-1000, 1000)), max_size=5)),
                                 min_size=n, max_size=n))
            t = pa.list_(pa.int32())
        cols[f"c{i}"], types[f"c{i}"] = vals, t
    splits = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    return cols, types, splits


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_columns())
def test_property_roundtrip_through_pylance(tmp_path, data):
    cols, types, splits = data
    table = pa.table({k: pa.array(v, types[k]) for k, v in cols.items()})
    path = tmp_path / "prop.lance"
    bounds = [0, *splits, table.num_rows]
    with LanceFileWriter(str(path), table.schema, data_cache_bytes=256) as w:
        for start, end in zip(bounds, bounds[1:]):
            w.write_batch(table.slice(start, end - start))
    assert_tables_equal(read_pylance(path), table)
