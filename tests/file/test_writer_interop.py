"""Files written by lance_ops.file.LanceFileWriter, checked against real pylance 14.0.2.

pylance must read back exactly what we wrote (full reads and take_rows), and for single-page
inputs our bytes must be identical to the file pylance itself writes for the same data.
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from lance_ops._proto import file2_pb2, file_pb2
from lance_ops.format.registry import LanceFileWriter
from lance_ops.format.container import FOOTER_SIZE, PAD_BYTE
from tests.file.type_matrix import assert_tables_equal, make_table

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader as PyReader  # noqa: E402
from lance.file import LanceFileWriter as PyWriter  # noqa: E402


# --- helpers ---------------------------------------------------------------------------------


def write_ours(path, table_or_batches, schema=None, **kwargs) -> int:
    batches = table_or_batches if isinstance(table_or_batches, list) else [table_or_batches]
    schema = schema or batches[0].schema
    with LanceFileWriter(str(path), schema, **kwargs) as w:
        for b in batches:
            w.write_batch(b)
    return w.rows_written


def write_pylance(path, table_or_batches, schema=None, **kwargs) -> None:
    batches = table_or_batches if isinstance(table_or_batches, list) else [table_or_batches]
    schema = schema or batches[0].schema
    with PyWriter(str(path), schema, version="2.0", **kwargs) as w:
        for b in batches:
            w.write_batch(b)


def read_pylance(path, columns=None) -> pa.Table:
    return PyReader(str(path), columns=columns).read_all().to_table()


def check_take(path, expected: pa.Table, count: int = 50, seed: int = 0) -> None:
    if expected.num_rows == 0:
        return
    rng = np.random.default_rng(seed)
    idx = np.unique(rng.integers(0, expected.num_rows, min(count, expected.num_rows)))
    got = PyReader(str(path)).take_rows(idx.tolist()).to_table()
    assert_tables_equal(got, expected.take(pa.array(idx)))


def parse(data: bytes):
    """(footer tuple, gbo list, cmo list, column metadatas, file descriptor) of a file's bytes."""
    footer = struct.unpack("<QQQIIHH4s", data[-FOOTER_SIZE:])
    col_start, cmo_start, gbo_start, ngb, ncols = footer[:5]
    gbo = [struct.unpack_from("<QQ", data, gbo_start + 16 * i) for i in range(ngb)]
    cmo = [struct.unpack_from("<QQ", data, cmo_start + 16 * i) for i in range(ncols)]
    columns = []
    for pos, size in cmo:
        cm = file2_pb2.ColumnMetadata()
        cm.ParseFromString(data[pos:pos + size])
        columns.append(cm)
    fd = file_pb2.FileDescriptor()
    fd.ParseFromString(data[gbo[0][0]:gbo[0][0] + gbo[0][1]])
    return footer, gbo, cmo, columns, fd


def assert_layout(data: bytes, num_rows: int) -> None:
    """What the spec fixes regardless of page order: footer, tables, alignment, padding."""
    footer, gbo, cmo, columns, fd = parse(data)
    col_start, cmo_start, gbo_start, ngb, ncols, major, minor, magic = footer
    assert magic == b"LANC" and (major, minor) == (0, 3)
    assert fd.length == num_rows
    assert ncols == len(fd.schema.fields)  # 2.0: one column per field, pre-order
    assert gbo_start == cmo_start + 16 * ncols
    assert len(data) == gbo_start + 16 * ngb + FOOTER_SIZE
    # GB0 directly precedes the column metadatas, which are back to back
    assert gbo[0][0] + gbo[0][1] == col_start == cmo[0][0] if ncols else True
    for (p1, s1), (p2, _) in zip(cmo, cmo[1:]):
        assert p1 + s1 == p2
    data_end = gbo[0][0]
    spans = []
    for cm in columns:
        assert cm.encoding.WhichOneof("location") == "direct"
        for page in cm.pages:
            assert page.priority == 0
            for off, size in zip(page.buffer_offsets, page.buffer_sizes):
                assert off % 64 == 0
                assert off + size <= data_end
                if size:
                    spans.append((off, size))
    spans.sort()
    for (o1, s1), (o2, _) in zip(spans, spans[1:]):
        assert o1 + s1 <= o2
        assert set(data[o1 + s1:o2]) <= set(PAD_BYTE)  # padding is 0x48


# --- the type matrix ---------------------------------------------------------------------------

NULL_MODES = {"no_nulls": dict(null_fraction=0.0), "some_nulls": dict(null_fraction=0.2),
              "all_null": dict(null_fraction=0.0, all_null=True)}


@pytest.mark.parametrize("mode", list(NULL_MODES))
@pytest.mark.parametrize("n", [0, 1, 1000, 5000])
def test_type_matrix_roundtrip_and_bytes(tmp_path, n, mode):
    table = make_table(n, seed=n + 7, **NULL_MODES[mode])
    ours, theirs = tmp_path / "ours.lance", tmp_path / "pylance.lance"
    assert write_ours(ours, table) == n
    got = read_pylance(ours)
    assert_tables_equal(got, table)
    assert got.schema.metadata == table.schema.metadata
    check_take(ours, table)
    write_pylance(theirs, table)
    data = ours.read_bytes()
    assert_layout(data, n)
    assert data == theirs.read_bytes()


def test_type_matrix_many_batches_same_bytes(tmp_path):
    """Separately built batches accumulate into the same pages as pylance's."""
    schema = make_table(1).schema
    batches = [make_table(500, seed=s).cast(schema) for s in range(12)]
    ours, theirs = tmp_path / "ours.lance", tmp_path / "pylance.lance"
    write_ours(ours, batches)
    write_pylance(theirs, batches)
    expected = pa.concat_tables(batches)
    assert_tables_equal(read_pylance(ours), expected)
    check_take(ours, expected, count=200)
    assert ours.read_bytes() == theirs.read_bytes()


def test_type_matrix_multi_page(tmp_path):
    """A small cache makes several pages per column; pylance still reads everything."""
    table = make_table(20000, seed=3)
    batches = [table.slice(i, 1000) for i in range(0, table.num_rows, 1000)]
    path = tmp_path / "multi.lance"
    with LanceFileWriter(str(path), table.schema, data_cache_bytes=64 * 1024) as w:
        for b in batches:
            w.write_batch(b)
    pages = w.pages
    assert all(len(p) > 1 for i, p in enumerate(pages) if p[0].encoding.WhichOneof("array_encoding") != "struct")
    assert_tables_equal(read_pylance(path), table)
    check_take(path, table, count=300)
    assert_layout(path.read_bytes(), table.num_rows)


# --- larger, vectorised tables -----------------------------------------------------------------


def _strings(rng, n, low, high):
    lengths = rng.integers(low, high + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def wide_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < 0.1
    lengths = rng.integers(0, 5, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    items = pa.array(rng.integers(-100, 100, int(offsets[-1]), dtype=np.int32))
    inner = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 9, int(offsets[-1]))), _strings(rng, int(offsets[-1]), 0, 6)], names=["k", "v"])
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "f": pa.array(rng.standard_normal(n), mask=mask),
        "s": _strings(rng, n, 0, 30),
        "l": pa.ListArray.from_arrays(pa.array(offsets), items, mask=pa.array(mask)),
        "ls": pa.ListArray.from_arrays(pa.array(offsets), inner),
        "st": pa.StructArray.from_arrays([pa.array(rng.integers(0, 5, n).astype(np.int8)), _strings(rng, n, 1, 3)],
                                         names=["a", "b"]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
        "b": pa.array(rng.random(n) < 0.5, mask=mask),
    })


def test_multi_page_200k_rows_small_cache(tmp_path):
    table = wide_table(200_000, seed=5)
    path = tmp_path / "big.lance"
    with LanceFileWriter(str(path), table.schema, data_cache_bytes=64 * 1024) as w:
        for start in range(0, table.num_rows, 4096):
            w.write_batch(table.slice(start, 4096))
    for pages in w.pages:
        if pages[0].encoding.WhichOneof("array_encoding") != "struct":
            assert len(pages) >= 5
    assert_tables_equal(read_pylance(path), table)
    check_take(path, table, count=1000, seed=2)
    projected = read_pylance(path, columns=["id", "ls", "st"])
    assert_tables_equal(projected, table.select(["id", "ls", "st"]))
    assert_layout(path.read_bytes(), table.num_rows)


def test_default_cache_string_column_over_8mib(tmp_path):
    rng = np.random.default_rng(11)
    n = 600_000
    strings = _strings(rng, n, 10, 30)  # ~12 MiB of string data
    table = pa.table({"s": strings, "i": pa.array(np.arange(n, dtype=np.int32))})
    path = tmp_path / "strings.lance"
    with LanceFileWriter(str(path), table.schema) as w:
        for start in range(0, n, 50_000):
            w.write_batch(table.slice(start, 50_000))
    assert len(w.pages[0]) >= 2  # more than 8 MiB -> several pages
    assert len(w.pages[1]) == 1  # 2.4 MB of int32 -> one page
    assert sum(p.num_rows for p in w.pages[0]) == n
    assert_tables_equal(read_pylance(path), table)
    check_take(path, table, count=500)


# --- the worked example of the facts doc ---------------------------------------------------


def example_table() -> pa.Table:
    return pa.table({
        "i": pa.array([1, None, 3, 4], pa.int32()),
        "s": pa.array(["a", None, "ccc", ""]),
        "st": pa.StructArray.from_arrays(
            [pa.array([1, 2, 3, 4], pa.int64()), pa.array(["x", "y", None, "zz"])], names=["x", "y"]),
        "l": pa.array([[1, 2], None, [], [5]], pa.list_(pa.int16())),
        "v": pa.array([[1, 2], [3, 4], None, [5, 6]], pa.list_(pa.float32(), 2)),
    })


def test_example_byte_identical_to_pylance(tmp_path):
    table = example_table()
    ours, theirs = tmp_path / "ours.lance", tmp_path / "pylance.lance"
    write_ours(ours, table)
    write_pylance(theirs, table)
    data = ours.read_bytes()
    assert data == theirs.read_bytes()
    assert_layout(data, 4)
    footer, gbo, cmo, columns, fd = parse(data)
    assert footer[3:5] == (1, 8)  # one global buffer, 8 columns: i s st st.x st.y l l.item v
    assert [f.name for f in fd.schema.fields] == ["i", "s", "st", "x", "y", "l", "item", "v"]
    page = columns[0].pages[0]
    assert data[page.buffer_offsets[0]:page.buffer_offsets[0] + 1] == b"\x0d"  # validity 1011
    assert data[page.buffer_offsets[1]:page.buffer_offsets[1] + 16] == struct.pack("<4i", 1, 0, 3, 4)
    page = columns[1].pages[0]  # utf8: u64 ends without leading 0, null = end + (bytes + 1)
    assert data[page.buffer_offsets[0]:page.buffer_offsets[0] + 32] == struct.pack("<4Q", 1, 6, 4, 4)
    assert data[page.buffer_offsets[1]:page.buffer_offsets[1] + 4] == b"accc"
    assert list(columns[2].pages[0].buffer_sizes) == []  # struct header page has no buffers
    page = columns[5].pages[0]  # list offsets [2, 2+4, 2, 3]
    assert data[page.buffer_offsets[0]:page.buffer_offsets[0] + 32] == struct.pack("<4Q", 2, 6, 2, 3)
    assert_tables_equal(read_pylance(ours), table)


def test_global_buffers_and_schema_metadata_like_pylance(tmp_path):
    table = example_table()
    ours, theirs = tmp_path / "ours.lance", tmp_path / "pylance.lance"
    with LanceFileWriter(str(ours), table.schema) as w:
        w.write_batch(table)
        assert w.add_global_buffer(b"hello global") == 1
        assert w.add_global_buffer(b"x" * 100) == 2
        w.add_schema_metadata("k", "v")
    with PyWriter(str(theirs), table.schema, version="2.0") as w:
        w.write_batch(table)
        w.add_global_buffer(b"hello global")
        w.add_global_buffer(b"x" * 100)
        w.add_schema_metadata("k", "v")
    assert ours.read_bytes() == theirs.read_bytes()
    reader = PyReader(str(ours))
    assert reader.read_global_buffer(1) == b"hello global"
    assert reader.read_global_buffer(2) == b"x" * 100
    assert reader.metadata().schema.metadata == {b"k": b"v"}


@pytest.mark.parametrize("scheme,level", [("zstd", None), ("zstd", "7"), ("lz4", None), ("none", None)])
def test_compressed_strings_like_pylance(tmp_path, scheme, level):
    meta = {"lance-encoding:compression": scheme}
    if level is not None:
        meta["lance-encoding:compression-level"] = level
    field = pa.field("s", pa.string(), metadata=meta)
    values = [f"value {i % 700} " * (i % 5) if i % 11 else None for i in range(3000)]
    table = pa.Table.from_arrays([pa.array(values), pa.array(values, pa.large_binary())],
                                 schema=pa.schema([field, pa.field("b", pa.large_binary(), metadata=meta)]))
    ours, theirs = tmp_path / "ours.lance", tmp_path / "pylance.lance"
    write_ours(ours, table)
    write_pylance(theirs, table)
    assert_tables_equal(read_pylance(ours), table)
    check_take(ours, table)
    if level is None:  # at other levels the zstd library versions may pick different (valid) bytes
        assert ours.read_bytes() == theirs.read_bytes()
    else:
        assert len(ours.read_bytes()) == len(theirs.read_bytes())
