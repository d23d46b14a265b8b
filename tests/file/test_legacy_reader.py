"""LegacyFileReader: legacy (v0.1) data files written by real pylance (``data_storage_version="legacy"``).

Every data file of the datasets built here is read with lance_ops and compared, exactly, with
what pylance returns for the same fragment (``fragment.to_table()``); pylance is the oracle and
also decides what v0.1 does with nulls (it drops most of them). The page statistics are checked
against statistics computed from the source data, and damaged files must fail with a
CorruptFileError that names the file.
"""
from __future__ import annotations

import decimal
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_ops._proto import file_pb2
from lance_ops.errors import CorruptFileError, LanceOpsError, UnsupportedError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.io import open_store
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table.manifest.naming import latest_version

lance = pytest.importorskip("lance")

GROUP = 7  # rows per batch ("group") in the matrix datasets -> many batches per file
N = 53


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------
def matrix_table(n: int = N) -> pa.Table:
    """Every type pylance's legacy writer accepts, with nulls, empties and edge values."""
    rng = np.random.default_rng(7)
    ids = np.arange(n)
    some_null = ids % 5 == 3
    ints = rng.integers(-1000, 1000, n)
    strs = [None if i % 6 == 4 else ("" if i % 11 == 2 else f"s{i}-é{'x' * (i % 4)}") for i in range(n)]
    lists = [None if i % 7 == 5 else list(range(i % 4)) for i in range(n)]
    struct_t = pa.struct([("x", pa.int64()), ("y", pa.string()), ("z", pa.struct([("w", pa.bool_())]))])
    structs = [None if i == 9 else {"x": i * 10, "y": None if i % 4 == 0 else f"y{i}",
                                    "z": {"w": bool(i % 2)}} for i in range(n)]
    item_t = pa.struct([("a", pa.int64()), ("b", pa.string())])
    list_structs = [[{"a": j, "b": f"b{j}" if j % 2 else None} for j in range(i % 3)] for i in range(n)]
    f64 = rng.normal(size=n)
    f64[[2, 17]] = np.nan
    f64[5], f64[6], f64[30] = -0.0, np.inf, 0.0
    words = np.array(["red", "green", "blue", "cyan"])
    return pa.table({
        "i8": pa.array(ints.astype(np.int8)),
        "u16": pa.array(np.abs(ints).astype(np.uint16)),
        "i32": pa.array(ints.astype(np.int32), mask=some_null),
        "i64": pa.array(ids.astype(np.int64) * 1_000_000_007),
        "u64": pa.array(np.uint64(2**63) + ids.astype(np.uint64)),
        "f16": pa.array(rng.normal(size=n).astype(np.float16)),
        "f32": pa.array(rng.normal(size=n).astype(np.float32), mask=ids % 9 == 1),
        "f64": pa.array(f64),
        "b": pa.array([None if i % 8 == 3 else bool(i % 3) for i in range(n)], pa.bool_()),
        "s": pa.array(strs, pa.string()),
        "ls": pa.array(strs, pa.large_string()),
        "bin": pa.array([None if s is None else s.encode() for s in strs], pa.binary()),
        "lbin": pa.array([None if s is None else s.encode()[::-1] for s in strs], pa.large_binary()),
        "ts": pa.array((ids * 86_400_000_123).astype(np.int64), pa.timestamp("us", tz="UTC"), mask=some_null),
        "ts_ns": pa.array(ids.astype(np.int64) * 17, pa.timestamp("ns")),
        "d32": pa.array((ids * 3).astype(np.int32), pa.date32()),
        "d64": pa.array(ids.astype(np.int64) * 86_400_000, pa.date64()),
        "t32": pa.array((ids * 61).astype(np.int32), pa.time32("s")),
        "t64": pa.array(ids.astype(np.int64) * 1_000_003, pa.time64("ns")),
        "dur": pa.array(ids.astype(np.int64) - 20, pa.duration("ms")),
        "dec": pa.array([decimal.Decimal(int(v)).scaleb(-2) for v in ints], pa.decimal128(10, 2)),
        "dec256": pa.array([decimal.Decimal(int(v)).scaleb(-3) for v in ints], pa.decimal256(40, 3)),
        "fsb": pa.array([bytes([i % 256, (i * 7) % 256, 65]) for i in range(n)], pa.binary(3)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 4).astype(np.float32)), 4),
        "vec_bool": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3) > 0.5), 3),
        "vec2d": pa.FixedSizeListArray.from_arrays(
            pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 6, dtype=np.int16)), 2), 3),
        "lst": pa.array(lists, pa.list_(pa.int32())),
        "llst": pa.array([None if i % 9 == 0 else [f"w{j}" if j else "" for j in range(i % 3)] for i in range(n)],
                         pa.large_list(pa.string())),
        "lst_st": pa.array(list_structs, pa.list_(item_t)),
        "lst_lst": pa.array([[[i, j] for j in range(i % 3)] if i % 4 else [] for i in range(n)],
                            pa.list_(pa.list_(pa.int32()))),
        "st": pa.array(structs, struct_t),
        "dict": pa.array([None if i % 10 == 7 else str(words[i % 4]) for i in range(n)]).dictionary_encode(),
        "dict_u8": pa.DictionaryArray.from_arrays(pa.array(ids % 3, pa.uint8()), pa.array(["a", "bb", "ccc"])),
        "dict_int": pa.DictionaryArray.from_arrays(pa.array(ids % 4, pa.int16()),
                                                   pa.array([10, 20, 30, 40], pa.int64())),
        "lst_dict": pa.array([[str(words[(i + j) % 4]) for j in range(i % 3)] for i in range(n)],
                             pa.list_(pa.string())).cast(pa.list_(pa.dictionary(pa.int32(), pa.string()))),
        "nul": pa.nulls(n),
    }).replace_schema_metadata({"origin": "legacy-test"})


def write_legacy(uri: str, table: pa.Table, **kw) -> "lance.LanceDataset":
    kw.setdefault("max_rows_per_group", GROUP)
    return lance.write_dataset(table, uri, data_storage_version="legacy", **kw)


def data_path(uri: str, df) -> str:
    return str(Path(uri) / "data" / df.path)


def _nan_free(table: pa.Table) -> pa.Table:
    cols = []
    for col in table.columns:
        if pa.types.is_floating(col.type):
            col = pc.if_else(pc.is_nan(col), pa.scalar(-12345.0, col.type), col)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=table.schema)


def assert_same(ours: pa.Table, ref: pa.Table, *, metadata: bool = False) -> None:
    assert ours.schema.equals(ref.schema, check_metadata=metadata), f"{ours.schema}\n!=\n{ref.schema}"
    assert ours.num_rows == ref.num_rows
    for name in ref.column_names:
        a, b = _nan_free(ours.select([name])), _nan_free(ref.select([name]))
        assert a.equals(b), f"column {name!r} differs:\n{a.column(0)}\n!=\n{b.column(0)}"


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """A legacy dataset with the type matrix: 2 files of N rows, GROUP rows per batch."""
    uri = str(tmp_path_factory.mktemp("legacy") / "matrix")
    table = matrix_table()
    write_legacy(uri, table)
    write_legacy(uri, table.take(np.arange(10, 40)), mode="append")  # (pylance panics on sliced structs)
    ds = lance.dataset(uri)
    frags = ds.get_fragments()
    assert [f.metadata.files[0].file_major_version for f in frags] == [0, 0]
    assert [f.metadata.files[0].file_minor_version for f in frags] == [2, 2]
    return uri, ds, table


@pytest.fixture(scope="module")
def matrix_files(matrix):
    """(reader on the first data file, pylance's table for that fragment, the source table)."""
    uri, ds, table = matrix
    frag = ds.get_fragments()[0]
    return LegacyFileReader(data_path(uri, frag.metadata.files[0])), frag.to_table(), table


# --------------------------------------------------------------------------------------------
# whole files, every type
# --------------------------------------------------------------------------------------------
def test_read_all_matches_pylance_per_fragment(matrix):
    uri, ds, _ = matrix
    for frag in ds.get_fragments():
        reader = LegacyFileReader(data_path(uri, frag.metadata.files[0]))
        assert reader.version == "0.1" and (reader.major_version, reader.minor_version) == (0, 2)
        assert reader.num_rows == frag.physical_rows
        assert reader.num_batches == -(-frag.physical_rows // GROUP)
        ref = frag.to_table()
        ours = reader.read_all()
        assert_same(ours, ref, metadata=True)


def test_schema_and_batches(matrix_files):
    reader, ref, table = matrix_files
    assert reader.schema.equals(ref.schema, check_metadata=True)
    assert reader.schema.metadata == {b"origin": b"legacy-test"}
    assert reader.batch_offsets == list(range(0, N, GROUP)) + [N]
    ids = [f.id for f in reader.lance_fields]
    assert ids == sorted(ids) and ids[0] == 0
    pt = reader.page_table()
    assert set(pt) == set(range(ids[0], ids[-1] + 1))
    st_id = next(f.id for f in reader.lance_fields if f.name == "st")
    assert all(p == (0, 0) for p in pt[st_id]), "struct fields have no pages"


@pytest.mark.parametrize("column", list(matrix_table().column_names))
def test_each_column_alone(matrix_files, column):
    reader, ref, _ = matrix_files
    assert_same(reader.read_all(columns=[column]), ref.select([column]))


def test_what_v01_does_with_nulls(matrix_files):
    """Pin the lossy v0.1 semantics that pylance shows (and that the reader reproduces)."""
    reader, ref, table = matrix_files
    ours = reader.read_all(columns=["i32", "s", "b", "lst", "st", "dict", "nul"])
    # fixed width: nulls become the stored slot value; strings: "" and null both read as null
    assert ours["i32"].null_count == 0
    s_src = table["s"].to_pylist()
    assert ours["s"].to_pylist() == [v if v else None for v in s_src]
    assert ours["b"].null_count == 0
    assert ours["lst"].null_count == 0 and ours["lst"].to_pylist()[5] == []
    assert ours["st"].null_count == 0
    assert ours["dict"].null_count == 0
    assert ours["nul"].null_count == N


def test_projection_order(matrix_files):
    reader, ref, _ = matrix_files
    cols = ["st", "s", "vec", "i8"]
    ours = reader.read_all(columns=cols)
    assert ours.column_names == cols
    assert_same(ours, ref.select(cols))


@pytest.mark.parametrize("start,count", [(0, 0), (0, 1), (3, 4), (6, 2), (7, 7), (5, 30), (0, N), (50, 3), (N, 0)])
def test_read_range(matrix_files, start, count):
    reader, ref, _ = matrix_files
    assert_same(reader.read_range(start, count), ref.slice(start, count))


def test_take_rows(matrix_files):
    reader, ref, _ = matrix_files
    rng = np.random.default_rng(3)
    for idx in ([], [0], [N - 1, 0, 7, 7, 6], rng.integers(0, N, 40), np.arange(N)[::-1], [13, 14, 15, 16, 40]):
        idx = np.asarray(idx, dtype=np.int64)
        assert_same(reader.take_rows(idx), ref.take(pa.array(idx, pa.int64())))
    assert_same(reader.take_rows(pa.array([3, 1], pa.uint32()), columns=["lst_st"]),
                ref.select(["lst_st"]).take([3, 1]))


def test_bad_arguments(matrix_files):
    reader, _, _ = matrix_files
    with pytest.raises(IndexError):
        reader.read_range(50, 10)
    with pytest.raises(IndexError):
        reader.take_rows([0, N])
    with pytest.raises(IndexError):
        reader.take_rows([-1])
    with pytest.raises(ValueError, match="no column named 'nope'"):
        reader.read_all(columns=["nope"])
    with pytest.raises(TypeError):
        reader.take_rows([0.5])


def test_many_default_sized_groups(tmp_path):
    """Default max_rows_per_group (1024): 2500 rows -> batches of 1024, 1024, 452."""
    n = 2500
    t = pa.table({"x": np.arange(n, dtype=np.int64), "s": [f"v{i}" for i in range(n)],
                  "l": pa.array([[i] * (i % 3) for i in range(n)], pa.list_(pa.int64()))})
    uri = str(tmp_path / "ds")
    lance.write_dataset(t, uri, data_storage_version="legacy")
    frag = lance.dataset(uri).get_fragments()[0]
    reader = LegacyFileReader(data_path(uri, frag.metadata.files[0]))
    assert reader.batch_offsets == [0, 1024, 2048, 2500]
    ref = frag.to_table()
    assert_same(reader.read_all(), ref)
    assert_same(reader.read_range(1000, 1100), ref.slice(1000, 1100))
    idx = np.array([2499, 0, 1023, 1024, 2047, 2048])
    assert_same(reader.take_rows(idx), ref.take(idx))


def test_data_storage_version_alias_01(tmp_path):
    uri = str(tmp_path / "ds")
    t = pa.table({"a": [1, 2, 3]})
    lance.write_dataset(t, uri, data_storage_version="0.1")
    frag = lance.dataset(uri).get_fragments()[0]
    assert LegacyFileReader(data_path(uri, frag.metadata.files[0])).read_all().equals(frag.to_table())


def test_non_nullable_strings_keep_empty_values(tmp_path):
    uri = str(tmp_path / "ds")
    schema = pa.schema([pa.field("s", pa.string(), nullable=False), pa.field("n", pa.string())])
    t = pa.Table.from_pydict({"s": ["", "x", ""], "n": ["", "x", ""]}, schema=schema)
    lance.write_dataset(t, uri, data_storage_version="legacy")
    frag = lance.dataset(uri).get_fragments()[0]
    ours = LegacyFileReader(data_path(uri, frag.metadata.files[0])).read_all()
    assert ours.equals(frag.to_table())
    assert ours["s"].to_pylist() == ["", "x", ""] and ours["n"].to_pylist() == [None, "x", None]


# --------------------------------------------------------------------------------------------
# schema and dictionaries from the dataset manifest
# --------------------------------------------------------------------------------------------
def _manifest(uri: str):
    store, base = open_store(uri)
    mf = read_manifest(store, latest_version(store, base).path)
    return store, mf


def test_schema_fields_from_manifest(matrix):
    uri, ds, _ = matrix
    store, mf = _manifest(uri)
    assert mf.manifest.data_format.version == "0.1"
    for frag, pfrag in zip(mf.manifest.fragments, ds.get_fragments()):
        df = frag.files[0]
        path = store.join(str(Path(uri).resolve()), "data", df.path)
        reader = LegacyFileReader(path, store=store, schema_fields=mf.manifest.fields, field_ids=df.fields,
                                  dictionaries=mf.path, schema_metadata=dict(mf.manifest.schema_metadata))
        assert_same(reader.read_all(), pfrag.to_table(), metadata=True)


def _strip_embedded_manifest(src: str, dst: str) -> None:
    """Rewrite a legacy file as a non-self-describing one (Metadata.manifest_position = 0)."""
    data = Path(src).read_bytes()
    meta_pos, major, minor, magic = struct.unpack("<QHH4s", data[-16:])
    (length,) = struct.unpack("<I", data[meta_pos:meta_pos + 4])
    meta = file_pb2.Metadata()
    meta.ParseFromString(data[meta_pos + 4:meta_pos + 4 + length])
    assert meta.manifest_position > 0
    meta.manifest_position = 0
    blob = meta.SerializeToString()
    Path(dst).write_bytes(data[:meta_pos] + struct.pack("<I", len(blob)) + blob
                          + struct.pack("<QHH4s", meta_pos, major, minor, magic))


def test_file_without_embedded_manifest(matrix, tmp_path):
    uri, ds, _ = matrix
    store, mf = _manifest(uri)
    df = mf.manifest.fragments[0].files[0]
    bare = str(tmp_path / "bare.lance")
    _strip_embedded_manifest(data_path(uri, df), bare)
    ref = ds.get_fragments()[0].to_table()

    with pytest.raises(UnsupportedError, match="schema_fields"):
        LegacyFileReader(bare)
    # dictionary values from the dataset manifest file (positions inside that file)
    reader = LegacyFileReader(bare, schema_fields=mf.manifest.fields, dictionaries=mf.path)
    assert reader.embedded_manifest is None
    assert_same(reader.read_all(), ref)
    # ... or given directly
    dict_fields = {f.name: f.id for f in mf.manifest.fields if f.logical_type.startswith("dict:")}
    values = {fid: ref.column(name).chunk(0).dictionary for name, fid in dict_fields.items() if name in ref.column_names}
    values[dict_fields["item"]] = ref["lst_dict"].chunk(0).values.dictionary
    reader = LegacyFileReader(bare, schema_fields=mf.manifest.fields, dictionaries=values)
    assert_same(reader.read_all(), ref)
    # without any source, only non-dictionary columns can be read
    reader = LegacyFileReader(bare, schema_fields=mf.manifest.fields)
    assert_same(reader.read_all(columns=["s", "lst"]), ref.select(["s", "lst"]))
    with pytest.raises(CorruptFileError, match="dictionary values"):
        reader.read_all(columns=["dict"])


def test_dictionary_values_with_empty_string(tmp_path):
    """Dictionary values are var-binary too: "" in a nullable field's dictionary reads as null."""
    uri = str(tmp_path / "ds")
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, 1]), pa.array(["", "a"]))
    lance.write_dataset(pa.table({"d": arr}), uri, data_storage_version="legacy")
    frag = lance.dataset(uri).get_fragments()[0]
    ours = LegacyFileReader(data_path(uri, frag.metadata.files[0])).read_all()
    assert ours.equals(frag.to_table())
    assert ours["d"].to_pylist() == [None, "a", None, "a"]


# --------------------------------------------------------------------------------------------
# statistics page table
# --------------------------------------------------------------------------------------------
def _expected_stats(arr: pa.Array):
    """(null_count, min, max) the legacy writer records for one batch of a leaf column."""
    null_count = arr.null_count
    if pa.types.is_floating(arr.type):
        vals = [v for v in arr.to_pylist() if v is not None and v == v]
        if not vals:
            return null_count, float("-inf"), float("inf")
        return null_count, min(vals), max(vals)
    vals = [v for v in arr.to_pylist() if v is not None]
    if not vals:
        return null_count, None, None
    lo, hi = min(vals), max(vals)
    if isinstance(lo, (str, bytes)) and len(lo) == 0:
        lo = None  # a nullable var-binary "" reads back as null
    return null_count, lo, hi


# Leaf fields pylance 14.0.2 writes page statistics for (observed): none for f16, timestamps, times,
# durations, decimal256, fixed_size_binary, fixed-size lists, dictionaries, null, or anything in a list.
STATS_COLUMNS = ["i8", "u16", "i32", "i64", "u64", "f32", "f64", "b", "s", "ls", "bin", "lbin",
                 "d32", "d64", "dec", "st.x", "st.y", "st.z.w"]


def test_statistics_match_the_data(matrix_files):
    reader, _, table = matrix_files
    assert reader.has_statistics
    raw = reader.statistics()
    assert raw.num_rows == reader.num_batches
    stats = reader.field_statistics()
    assert sorted(stats) == sorted(STATS_COLUMNS)
    offsets = reader.batch_offsets
    for name in STATS_COLUMNS:
        col = table.column(name.split(".")[0]).combine_chunks()
        for part in name.split(".")[1:]:
            col = col.field(part)
        got = stats[name]
        assert got["batch"].to_pylist() == list(range(reader.num_batches))
        for b in range(reader.num_batches):
            batch = col.slice(offsets[b], offsets[b + 1] - offsets[b])
            want = _expected_stats(batch)
            have = (got["null_count"][b].as_py(), got["min_value"][b].as_py(), got["max_value"][b].as_py())
            assert have == want, f"{name} batch {b}: {have} != {want}"


def test_statistics_all_null_batch(tmp_path):
    """An all-null batch records the type's full range (ints) or (-inf, inf) (floats)."""
    uri = str(tmp_path / "ds")
    t = pa.table({"i": pa.array([None, None, 3, 4], pa.int32()), "f": pa.array([None, None, 1.5, None]),
                  "s": pa.array([None, None, "b", "a"])})
    write_legacy(uri, t, max_rows_per_group=2)
    frag = lance.dataset(uri).get_fragments()[0]
    stats = LegacyFileReader(data_path(uri, frag.metadata.files[0])).field_statistics()
    assert stats["i"].to_pydict()["min_value"] == [-(2**31), 3]
    assert stats["i"].to_pydict()["max_value"] == [2**31 - 1, 4]
    assert stats["i"].to_pydict()["null_count"] == [2, 0]
    assert stats["f"].to_pydict()["min_value"] == [float("-inf"), 1.5]
    assert stats["f"].to_pydict()["max_value"] == [float("inf"), 1.5]
    assert stats["s"].to_pydict()["min_value"] == [None, "a"]
    assert stats["s"].to_pydict()["null_count"] == [2, 0]


def test_statistics_truncate_long_strings(tmp_path):
    uri = str(tmp_path / "ds")
    long_a, long_b = "a" * 100, "b" * 70
    write_legacy(uri, pa.table({"s": [long_a, long_b], "x": [b"\x01" * 80, b"\x00"]}))
    frag = lance.dataset(uri).get_fragments()[0]
    stats = LegacyFileReader(data_path(uri, frag.metadata.files[0])).field_statistics()
    assert stats["s"]["min_value"][0].as_py() == "a" * 64
    assert stats["s"]["max_value"][0].as_py() == "b" * 63 + "c"  # truncated max bound is incremented
    assert stats["x"]["min_value"][0].as_py() == b"\x00"
    assert stats["x"]["max_value"][0].as_py() == b"\x01" * 63 + b"\x02"


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------
@pytest.fixture
def small_file(tmp_path):
    uri = str(tmp_path / "ds")
    t = pa.table({"a": np.arange(40, dtype=np.int64), "s": [f"s{i}" for i in range(40)]})
    write_legacy(uri, t, max_rows_per_group=8)
    frag = lance.dataset(uri).get_fragments()[0]
    return Path(data_path(uri, frag.metadata.files[0])), frag.to_table()


def _damaged(src: Path, dst: Path, fn) -> str:
    data = bytearray(src.read_bytes())
    dst.write_bytes(bytes(fn(data)))
    return str(dst)


def _expect_corrupt(path: str, read_too: bool = True):
    with pytest.raises(CorruptFileError) as info:
        r = LegacyFileReader(path)
        if read_too:
            r.read_all()
            r.statistics()
    assert path in str(info.value) and info.value.path == path
    return info.value


def test_truncated_files(small_file, tmp_path):
    src, _ = small_file
    size = src.stat().st_size
    for keep in (0, 3, 15, 16, size // 3, size // 2, size - 20, size - 1):
        path = _damaged(src, tmp_path / f"trunc{keep}.lance", lambda d: d[:keep])
        _expect_corrupt(path)


def test_cut_from_the_front(small_file, tmp_path):
    """Footer intact but the data shifted: every position is now wrong."""
    src, _ = small_file
    path = _damaged(src, tmp_path / "front.lance", lambda d: d[200:])
    _expect_corrupt(path)


def test_bad_magic_and_metadata(small_file, tmp_path):
    src, _ = small_file

    def bad_magic(d):
        d[-4:] = b"NOPE"
        return d

    assert "magic" in str(_expect_corrupt(_damaged(src, tmp_path / "magic.lance", bad_magic)))

    def meta_past_end(d):
        d[-16:-8] = struct.pack("<Q", len(d) + 100)
        return d

    _expect_corrupt(_damaged(src, tmp_path / "metapos.lance", meta_past_end))

    def garbage_metadata(d):
        meta_pos = struct.unpack("<Q", bytes(d[-16:-8]))[0]
        d[meta_pos + 4:len(d) - 16] = b"\xff" * (len(d) - 16 - meta_pos - 4)
        return d

    _expect_corrupt(_damaged(src, tmp_path / "garbage.lance", garbage_metadata))


def _rewrite_metadata(src: Path, dst: Path, edit) -> str:
    data = src.read_bytes()
    meta_pos = struct.unpack("<Q", data[-16:-8])[0]
    (length,) = struct.unpack("<I", data[meta_pos:meta_pos + 4])
    meta = file_pb2.Metadata()
    meta.ParseFromString(data[meta_pos + 4:meta_pos + 4 + length])
    edit(meta)
    blob = meta.SerializeToString()
    dst.write_bytes(data[:meta_pos] + struct.pack("<I", len(blob)) + blob + data[-16:])
    return str(dst)


def test_inconsistent_metadata(small_file, tmp_path):
    src, _ = small_file

    def page_table_past_end(m):
        m.page_table_position = 10**9

    def decreasing_batches(m):
        m.batch_offsets[1] = 30

    def too_many_rows(m):
        m.batch_offsets[-1] = 400  # the last batch now claims pages far longer than stored

    def stats_table_past_end(m):
        m.statistics.page_table_position = 10**9

    for i, edit in enumerate([page_table_past_end, decreasing_batches, too_many_rows, stats_table_past_end]):
        _expect_corrupt(_rewrite_metadata(src, tmp_path / f"meta{i}.lance", edit))


def test_corrupt_page_table_entries(small_file, tmp_path):
    src, _ = small_file
    data = src.read_bytes()
    meta_pos = struct.unpack("<Q", data[-16:-8])[0]
    (length,) = struct.unpack("<I", data[meta_pos:meta_pos + 4])
    meta = file_pb2.Metadata()
    meta.ParseFromString(data[meta_pos + 4:meta_pos + 4 + length])
    pt = meta.page_table_position
    for i, value in enumerate([10**12, 3, 0]):
        d = bytearray(data)
        # field 1 ("s"), batch 0: position (10**12 -> past the end; 3 -> garbage positions) / length 0
        slot = pt + (1 * (len(meta.batch_offsets) - 1) + 0) * 16 + (8 if value == 0 else 0)
        d[slot:slot + 8] = struct.pack("<q", value)
        path = tmp_path / f"pt{i}.lance"
        path.write_bytes(bytes(d))
        _expect_corrupt(str(path))


def test_random_byte_damage_never_leaks_raw_errors(small_file, tmp_path):
    src, ref = small_file
    data = src.read_bytes()
    rng = np.random.default_rng(11)
    for trial in range(60):
        d = bytearray(data)
        for pos in rng.integers(0, len(d), 3):
            d[pos] ^= int(rng.integers(1, 256))
        path = tmp_path / f"rand{trial}.lance"
        path.write_bytes(bytes(d))
        try:
            r = LegacyFileReader(str(path))
            r.read_all()
            r.take_rows([0, 39, 17])
            r.statistics()
        except LanceOpsError as exc:
            assert str(path) in str(exc)


def test_v2_file_is_refused_clearly(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": [1, 2]}), uri, data_storage_version="2.0")
    frag = lance.dataset(uri).get_fragments()[0]
    with pytest.raises(UnsupportedError, match="LanceFileReader"):
        LegacyFileReader(data_path(uri, frag.metadata.files[0]))


def test_missing_file(tmp_path):
    with pytest.raises(LanceOpsError):
        LegacyFileReader(str(tmp_path / "nope.lance"))


# --------------------------------------------------------------------------------------------
# object store
# --------------------------------------------------------------------------------------------
def test_read_from_s3(small_file, moto_server, s3_bucket):
    src, ref = small_file
    key = "legacy/file.lance"
    moto_server.client().put_object(Bucket=s3_bucket[len("s3://"):], Key=key, Body=src.read_bytes())
    reader = LegacyFileReader(f"{s3_bucket}/{key}", moto_server.storage_options)
    assert reader.read_all().equals(ref)
    assert reader.take_rows([39, 0]).equals(ref.take([39, 0]))
    assert reader.field_statistics()["a"]["max_value"].to_pylist() == [7, 15, 23, 31, 39]


def test_footer_version_tells_legacy_from_v2(small_file, tmp_path):
    from lance_ops.format.legacy.reader import footer_version, is_legacy_footer

    src, _ = small_file
    assert footer_version(src.read_bytes()[-64:]) == (0, 2) and is_legacy_footer(0, 2)
    uri = str(tmp_path / "v2")
    lance.write_dataset(pa.table({"a": [1]}), uri, data_storage_version="2.0")
    v2 = data_path(uri, lance.dataset(uri).get_fragments()[0].metadata.files[0])
    assert footer_version(Path(v2).read_bytes()) == (0, 3) and not is_legacy_footer(0, 3)
    with pytest.raises(ValueError):
        footer_version(b"nothing here")
