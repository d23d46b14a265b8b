"""Blob columns (``lance-encoding:blob``) written by lance_ops, checked against pylance 14.0.2.

What pylance does (and what these tests pin down): a field whose metadata has the key
``lance-encoding:blob`` (any value) and type ``large_binary`` stores every valid non-empty value
out of line -- its own 64-byte-padded buffer at the end of the file when the batch arrives,
before the pages that batch completes -- and pages of (position, size) descriptions: a
``blob_layout`` around a mini-block packed struct in 2.1 / 2.2, a ``packed_struct`` page under a
``blob`` column encoding in 2.0. Nulls are (def << 16, 0) in 2.1+ and (1, 0) in 2.0, empty values
(0, 0). pylance's readers return the bytes for files; for datasets ``to_table`` returns the
descriptions and ``take_blobs`` the bytes (lance_ops' datasets alike: tests/table/test_blob_datasets.py).
"""
from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.errors import UnsupportedError, UnsupportedTypeError
from lance_ops.file import LanceFileWriter
from lance_ops.format.v2_1.reader import LanceFileReaderV21

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader as PyReader  # noqa: E402
from lance.file import LanceFileWriter as PyWriter  # noqa: E402

BLOB = {"lance-encoding:blob": "true"}
VERSIONS = ("2.0", "2.1", "2.2")


def blob_field(name: str = "b", nullable: bool = True, value: str = "true") -> pa.Field:
    return pa.field(name, pa.large_binary(), nullable=nullable, metadata={"lance-encoding:blob": value})


def rand_blobs(rng: np.random.Generator, n: int, max_len: int = 200, nulls: float = 0.2,
               empties: float = 0.1) -> pa.Array:
    lens = rng.integers(0, max_len, n)
    lens[rng.random(n) < empties] = 0
    data = rng.integers(0, 256, int(lens.sum()), dtype=np.uint8)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    mask = rng.random(n) < nulls
    validity = pa.py_buffer(np.packbits(~mask, bitorder="little").tobytes()) if mask.any() else None
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offs.tobytes()),
                                                                   pa.py_buffer(data.tobytes())])


def write_ours(path, schema: pa.Schema, batches, version: str, **kw) -> str:
    with LanceFileWriter(str(path), schema, version=version, **kw) as w:
        for b in batches:
            w.write_batch(b)
    return str(path)


def write_theirs(path, schema: pa.Schema, batches, version: str, **kw) -> str:
    with PyWriter(str(path), schema, version=version, **kw) as w:
        for b in batches:
            w.write_batch(b)
    return str(path)


def data_regions(path: str) -> tuple[bytes, bytes]:
    """Everything before the schema (blob bytes and pages) and the column metadata: the bytes
    that encode the data (the schema's metadata maps are in hash order in pylance's files)."""
    with open(path, "rb") as f:
        raw = f.read()
    cms, cmo, gbo = struct.unpack("<QQQ", raw[-40:-16])
    schema_pos = struct.unpack("<Q", raw[gbo:gbo + 8])[0]
    return raw[:schema_pos], raw[cms:cmo]


def read_theirs(path: str) -> pa.Table:
    return PyReader(path).read_all().to_table()


def page_lengths(path: str, column: int) -> list[int]:
    """Row counts of the pages of ``column`` (from the column metadata)."""
    from lance_ops._proto import file2_pb2

    with open(path, "rb") as f:
        raw = f.read()
    cmo = struct.unpack("<Q", raw[-32:-24])[0]
    pos, size = struct.unpack("<QQ", raw[cmo + 16 * column: cmo + 16 * column + 16])
    meta = file2_pb2.ColumnMetadata()
    meta.ParseFromString(raw[pos:pos + size])
    return [p.length for p in meta.pages]


def _cases(version: str):
    rng = np.random.default_rng(7)
    out = {}
    s1 = pa.schema([blob_field()])

    def t1(arr):
        return pa.table({"b": arr}, schema=s1)

    out["simple"] = (s1, [t1(pa.array([b"hello", None, b"", b"world" * 3], pa.large_binary()))], {})
    out["random_1000"] = (s1, [t1(rand_blobs(rng, 1000))], {})
    out["four_batches"] = (s1, [t1(rand_blobs(rng, 300)) for _ in range(4)], {})
    out["nullability_changes"] = (s1, [t1(pa.array(b, pa.large_binary())) for b in
                                       [[None, b"a"], [b"b"], [b"c"], [None], [b"d", None], [b""]]], {})
    out["small_cache"] = (s1, [t1(rand_blobs(rng, 50)) for _ in range(5)], {"data_cache_bytes": 400})
    out["all_null"] = (s1, [t1(pa.array([None] * 10, pa.large_binary()))], {})
    out["all_empty"] = (s1, [t1(pa.array([b""] * 10, pa.large_binary()))], {})
    out["values_over_1mib"] = (s1, [t1(pa.array([rng.integers(0, 256, 3_000_001, dtype=np.uint8).tobytes(), b"z",
                                                 None, bytes(2_000_000)], pa.large_binary()))], {})
    out["many_small"] = (s1, [t1(rand_blobs(rng, 20000, max_len=40))], {})
    out["sliced_input"] = (s1, [t1(rand_blobs(rng, 100)).slice(13, 50)], {})
    s_nn = pa.schema([blob_field(nullable=False)])
    out["non_nullable"] = (s_nn, [pa.table({"b": pa.array([b"x", b"", b"yy"], pa.large_binary())}, schema=s_nn)], {})
    s_false = pa.schema([blob_field(value="false")])  # the key alone makes it a blob field
    out["metadata_false"] = (s_false, [pa.table({"b": pa.array([b"x", None], pa.large_binary())}, schema=s_false)], {})
    s_multi = pa.schema([pa.field("a", pa.int64()), blob_field("b"), blob_field("c"), pa.field("s", pa.string())])

    def t_multi(n):
        return pa.table({"a": pa.array(rng.integers(0, 100, n)), "b": rand_blobs(rng, n), "c": rand_blobs(rng, n, 5000),
                         "s": pa.array([f"x{i}" for i in range(n)])}, schema=s_multi)

    out["with_other_columns"] = (s_multi, [t_multi(100) for _ in range(3)], {})
    st = pa.struct([blob_field("b"), pa.field("i", pa.int32())])
    s_st = pa.schema([pa.field("s", st)])
    if version == "2.0":
        out["in_struct"] = (s_st, [pa.table({"s": pa.StructArray.from_arrays(
            [rand_blobs(rng, 60), pa.array(np.arange(60, dtype=np.int32))], fields=list(st))}, schema=s_st)], {})
        lt = pa.list_(blob_field("item"))
        s_l = pa.schema([pa.field("l", lt)])
        out["in_list"] = (s_l, [pa.table({"l": pa.array([[b"a", b"bb"], None, [], [None, b"c"]], lt)}, schema=s_l)], {})
    else:
        def struct_arr(n):
            return pa.StructArray.from_arrays([rand_blobs(rng, n), pa.array(rng.integers(0, 9, n).astype(np.int32))],
                                              fields=list(st), mask=pa.array(rng.random(n) < 0.2))

        out["in_nullable_struct"] = (s_st, [pa.table({"s": struct_arr(200)}, schema=s_st) for _ in range(2)], {})
        st2 = pa.struct([blob_field("b"), blob_field("c")])
        s_st2 = pa.schema([pa.field("s", st2)])
        out["two_in_struct"] = (s_st2, [pa.table({"s": pa.StructArray.from_arrays(
            [rand_blobs(rng, 50), rand_blobs(rng, 50)], fields=list(st2))}, schema=s_st2)], {})
    return out


CASES = [(v, name) for v in VERSIONS for name in sorted(_cases(v))]


def _case(version: str, name: str):
    return _cases(version)[name]


# --------------------------------------------------------------------------------------------
# our files: byte-identical to pylance's, read back by pylance
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version,name", CASES)
def test_blob_files_identical_to_pylance_and_read_by_pylance(tmp_path, version, name):
    schema, batches, kw = _case(version, name)
    ours = write_ours(tmp_path / "ours.lance", schema, batches, version, **kw)
    theirs = write_theirs(tmp_path / "theirs.lance", schema, batches, version, **kw)
    assert data_regions(ours) == data_regions(theirs)
    expected = pa.concat_tables(batches).combine_chunks()
    assert read_theirs(ours).equals(expected)
    idx = sorted({0, len(expected) // 2, len(expected) - 1})
    assert PyReader(ours).take_rows(idx).to_table().equals(expected.take(idx))


@pytest.mark.parametrize("version", ("2.1", "2.2"))
def test_blob_layout_and_page_cuts_like_pylance(tmp_path, version):
    """A page closes when the blob's rep/def layers change between batches (pylance does)."""
    schema, batches, kw = _case(version, "nullability_changes")
    ours = LanceFileReaderV21(write_ours(tmp_path / "o.lance", schema, batches, version))
    theirs = LanceFileReaderV21(write_theirs(tmp_path / "t.lance", schema, batches, version))
    assert ours.column_layouts(0) == theirs.column_layouts(0)
    assert set(ours.column_layouts(0)) == {"blob(mini_block(packed_struct(flat(128))))"}
    assert page_lengths(str(tmp_path / "o.lance"), 0) == page_lengths(str(tmp_path / "t.lance"), 0) == [2, 2, 3, 1]


def test_blob_values_precede_the_pages_of_their_batch(tmp_path):
    """Blob bytes sit at the absolute positions the descriptions give, 64-byte aligned."""
    schema = pa.schema([blob_field()])
    t = pa.table({"b": pa.array([b"hello", None, b"", b"world" * 3], pa.large_binary())}, schema=schema)
    path = write_ours(tmp_path / "x.lance", schema, [t], "2.2")
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[0:5] == b"hello" and raw[5:64] == b"H" * 59
    assert raw[64:79] == b"world" * 3


# --------------------------------------------------------------------------------------------
# our reader on pylance's blob files
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ("2.1", "2.2"))
@pytest.mark.parametrize("name", ["simple", "random_1000", "nullability_changes", "in_nullable_struct",
                                  "two_in_struct", "all_null", "non_nullable"])
def test_our_reader_reads_pylance_blob_files(tmp_path, version, name):
    schema, batches, kw = _case(version, name)
    theirs = write_theirs(tmp_path / "t.lance", schema, batches, version, **kw)
    r = LanceFileReaderV21(theirs)
    expected = read_theirs(theirs)
    assert r.read_all().equals(expected)
    idx = np.array([len(expected) - 1, 0, len(expected) // 2])
    assert r.take_rows(idx).equals(expected.take(pa.array(idx)))


@pytest.mark.parametrize("name", sorted(_cases("2.0")))
def test_our_reader_reads_pylance_blob_files_v2_0(tmp_path, name):
    """The 2.0 reader resolves the packed (position, size) descriptions of blob columns (also in
    structs and lists) to the bytes, as pylance's file reader does, for every read."""
    from lance_ops.format.v2_0.reader import LanceFileReader

    schema, batches, kw = _case("2.0", name)
    theirs = write_theirs(tmp_path / "t.lance", schema, batches, "2.0", **kw)
    r = LanceFileReader(theirs)
    expected = read_theirs(theirs)
    assert r.read_all().equals(expected)
    idx = np.array([len(expected) - 1, 0, len(expected) // 2, 0])
    assert r.take_rows(idx).equals(expected.take(pa.array(idx)))
    n = max(len(expected) - 2, 0)
    assert r.read_range(1, n).equals(expected.slice(1, n))


def test_2_0_reader_returns_descriptions_when_asked(tmp_path):
    """``blob_descriptions=True``: the stored (position, size) pairs, nulls as (1, 0), no bytes read."""
    from lance_ops.format.v2_0.reader import LanceFileReader

    schema, batches, _ = _case("2.0", "simple")
    path = write_ours(tmp_path / "o.lance", schema, batches, "2.0")
    r = LanceFileReader(path)
    got = r.read_all(blob_descriptions=True)
    assert got.schema.field("b").type == pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
    assert got.schema.field("b").metadata == {b"lance-encoding:blob": b"true"}
    assert got.column("b").to_pylist() == [{"position": 0, "size": 5}, {"position": 1, "size": 0},
                                           {"position": 0, "size": 0}, {"position": 64, "size": 15}]
    assert r.take_rows([3, 1], blob_descriptions=True).column("b").to_pylist() == \
        [{"position": 64, "size": 15}, {"position": 1, "size": 0}]
    assert r.read_all().column("b").to_pylist() == [b"hello", None, b"", b"world" * 3]


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------
BAD_TYPES = [
    (pa.binary(), [b"a"]),
    (pa.large_string(), ["a"]),
    (pa.string(), ["a"]),
    (pa.int64(), [1]),
    (pa.struct([("x", pa.large_binary())]), [{"x": b"a"}]),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype,values", BAD_TYPES, ids=[str(t) for t, _ in BAD_TYPES])
def test_blob_metadata_on_other_types_is_refused(tmp_path, version, dtype, values):
    schema = pa.schema([pa.field("payload", dtype, metadata=BLOB)])
    path = tmp_path / "bad.lance"
    with pytest.raises(UnsupportedTypeError, match="payload.*large_binary"):
        LanceFileWriter(str(path), schema, version=version)
    assert not os.path.exists(path)
    # pylance refuses them as well (when the data arrives), or (struct at 2.0) writes a file it
    # cannot read back
    with pytest.raises(Exception):
        theirs = write_theirs(tmp_path / "theirs.lance", schema,
                              [pa.table({"payload": pa.array(values, dtype)}, schema=schema)], version)
        read_theirs(theirs)


@pytest.mark.parametrize("version", ("2.1", "2.2"))
def test_blob_below_a_list_is_refused_at_2_1_and_later(tmp_path, version):
    """pylance 14 writes list<blob> at 2.1+ but cannot read the file back; we refuse it."""
    lt = pa.list_(blob_field("item"))
    schema = pa.schema([pa.field("l", lt)])
    with pytest.raises(UnsupportedError, match="l.item.*lists"):
        LanceFileWriter(str(tmp_path / "x.lance"), schema, version=version)
    t = pa.table({"l": pa.array([[b"a", b"bb"], None, [], [None, b"c"]], lt)}, schema=schema)
    theirs = write_theirs(tmp_path / "t.lance", schema, [t], version)
    with pytest.raises(Exception):
        read_theirs(theirs)


# --------------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------------
def _dataset_table() -> pa.Table:
    schema = pa.schema([pa.field("id", pa.int64()), blob_field("b")])
    rng = np.random.default_rng(3)
    b = rand_blobs(rng, 200, max_len=3000)
    return pa.table({"id": pa.array(np.arange(200)), "b": b}, schema=schema)


@pytest.mark.parametrize("version", ("2.0", "2.1"))
def test_blob_dataset_written_by_lance_ops_reads_in_pylance(tmp_path, version):
    import lance_ops

    t = _dataset_table()
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(t, uri, data_storage_version=version)
    ds = lance.dataset(uri)
    assert ds.data_storage_version == version
    field = ds.schema.field("b")
    assert field.type == pa.large_binary() and field.metadata == {b"lance-encoding:blob": b"true"}
    # the bytes: take_blobs and blob_handling="all_binary"
    idx = list(range(len(t)))
    blobs = ds.take_blobs("b", indices=idx)
    got = [None if f is None else f.read() for f in blobs]
    assert got == t.column("b").to_pylist()
    assert ds.to_table(blob_handling="all_binary").equals(t)
    # to_table: the (position, size) descriptions of the legacy blob layout
    desc = ds.to_table().column("b").combine_chunks()
    assert [(f.name, f.type) for f in desc.type] == [("position", pa.uint64()), ("size", pa.uint64())]
    lens = [None if v is None else len(v) for v in t.column("b").to_pylist()]
    sizes = [None if d is None else d["size"] for d in desc.to_pylist()]
    if version == "2.0":  # nulls are the description (1, 0) there
        assert [d["size"] for d in desc.to_pylist()] == [x or 0 for x in lens]
    else:
        assert sizes == lens
    assert ds.take([5, 0]).column("b").to_pylist() == desc.take(pa.array([5, 0])).to_pylist()


@pytest.mark.parametrize("version", ("2.0", "2.1"))
def test_blob_dataset_descriptions_equal_pylance_dataset(tmp_path, version):
    """At 2.0 / 2.1 pylance's own dataset stores the same layout: identical to_table()."""
    import lance_ops

    t = _dataset_table()
    lance_ops.write_dataset(t, str(tmp_path / "ours"), data_storage_version=version)
    lance.write_dataset(t, str(tmp_path / "theirs"), data_storage_version=version)
    assert lance.dataset(str(tmp_path / "ours")).to_table().equals(lance.dataset(str(tmp_path / "theirs")).to_table())


def test_2_2_datasets_use_blob_v2_like_pylance(tmp_path):
    """At 2.2 both pylance's and lance_ops' write_dataset turn blob fields into lance.blob.v2
    (descriptors, large values in side .blob files); the file-level writers keep the layout above."""
    import lance_ops

    t = _dataset_table()
    ds = lance.write_dataset(t, str(tmp_path / "theirs"), data_storage_version="2.2")
    lance_ops.write_dataset(t, str(tmp_path / "ours"), data_storage_version="2.2")
    ours = lance.dataset(str(tmp_path / "ours"))
    assert ds.schema.field("b").type.extension_name == "lance.blob.v2"
    assert ours.schema == ds.schema
    assert ours.to_table().equals(ds.to_table())
    assert ours.to_table(blob_handling="all_binary").equals(ds.to_table(blob_handling="all_binary"))


@pytest.mark.parametrize("version", ("2.0", "2.1"))
def test_our_dataset_reader_returns_descriptions_like_pylance(tmp_path, version):
    import lance_ops

    t = _dataset_table()
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(t, uri, data_storage_version=version)
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.take([5, 0]).equals(theirs.take([5, 0]))
    assert ours.to_table(blob_handling="all_binary").equals(t)
    got = [None if f is None else f.read() for f in ours.take_blobs("b", indices=list(range(len(t))))]
    assert got == t.column("b").to_pylist()
