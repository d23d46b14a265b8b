"""Lance 2.1 / 2.2 files written by lance_ops, checked against the real pylance 14.0.2.

pylance must read back exactly what we wrote; for the type matrix our choice of page layouts and
compressive encodings must be the one pylance makes, and for single-page inputs without FSST our
bytes must be identical to pylance's own file.
"""
from __future__ import annotations

import decimal
import os

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.file import LanceFileWriter
from lance_ops.format.v2_1.reader import LanceFileReaderV21
from tests.file.type_matrix import assert_tables_equal, make_table

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader as PyReader  # noqa: E402
from lance.file import LanceFileWriter as PyWriter  # noqa: E402

VERSIONS = ("2.1", "2.2")


def write_ours(path, table: pa.Table, version: str, batch: int | None = None, **kw) -> str:
    with LanceFileWriter(str(path), table.schema, version=version, **kw) as w:
        for b in (table.to_batches(max_chunksize=batch) if batch else [table]):
            if b.num_rows or batch is None:
                w.write_batch(b)
    return str(path)


def write_theirs(path, table: pa.Table, version: str) -> str:
    with PyWriter(str(path), table.schema, version=version) as w:
        if table.num_rows:
            w.write_batch(table)
    return str(path)


def read_theirs(path) -> pa.Table:
    return PyReader(str(path)).read_all().to_table()


def check_take(path, expected: pa.Table, seed: int = 0) -> None:
    if expected.num_rows == 0:
        return
    rng = np.random.default_rng(seed)
    idx = np.unique(rng.integers(0, expected.num_rows, min(60, expected.num_rows)))
    assert_tables_equal(PyReader(str(path)).take_rows(idx.tolist()).to_table(), expected.take(pa.array(idx)))


def layouts(path) -> list[str]:
    r = LanceFileReaderV21(str(path))
    return [" | ".join(sorted(set(r.column_layouts(c)))) for c in range(r.num_columns)]


def matrix(n: int, mode: str, seed: int = 0) -> pa.Table:
    return make_table(n, seed=seed, null_fraction=0.0 if mode == "no_nulls" else 0.2, all_null=mode == "all_null")


# --------------------------------------------------------------------------------------------
# the type matrix
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1, 1000, 5000])
@pytest.mark.parametrize("mode", ["nulls", "no_nulls", "all_null"])
def test_type_matrix_read_by_pylance(tmp_path, version, n, mode):
    t = matrix(n, mode, seed=n + 7)
    path = write_ours(tmp_path / "m.lance", t, version)
    got = read_theirs(path)
    assert_tables_equal(got, t)
    assert got.schema.metadata == t.schema.metadata
    check_take(path, t)
    assert PyReader(path).metadata().major_version == 2
    assert PyReader(path).metadata().minor_version == int(version[-1])


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_type_matrix_200k_rows(tmp_path, version):
    t = matrix(200_000, "nulls", seed=3)
    path = write_ours(tmp_path / "big.lance", t, version)
    assert_tables_equal(read_theirs(path), t)
    check_take(path, t)
    ours, theirs = os.path.getsize(path), os.path.getsize(write_theirs(tmp_path / "py.lance", t, version))
    assert ours <= theirs * 1.05


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", ["nulls", "no_nulls", "all_null"])
def test_byte_identical_to_pylance(tmp_path, version, mode):
    t = matrix(1000, mode, seed=5)
    ours = write_ours(tmp_path / "ours.lance", t, version)
    theirs = write_theirs(tmp_path / "theirs.lance", t, version)
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("version", VERSIONS)
def test_encodings_chosen_like_pylance(tmp_path, version):
    """Same layout and compressive encoding per column as pylance (5000 rows, FSST included)."""
    t = matrix(5000, "nulls", seed=1)
    ours = layouts(write_ours(tmp_path / "ours.lance", t, version))
    theirs = layouts(write_theirs(tmp_path / "theirs.lance", t, version))
    assert ours == theirs
    size_ours = os.path.getsize(tmp_path / "ours.lance")
    size_theirs = os.path.getsize(tmp_path / "theirs.lance")
    assert abs(size_ours - size_theirs) <= 0.02 * size_theirs


# --------------------------------------------------------------------------------------------
# structure: nullable structs, nesting, many pages, many chunks
# --------------------------------------------------------------------------------------------
NESTED = {
    "struct_nulls": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}] * 400,
                             pa.struct([("x", pa.int32()), ("y", pa.string())])),
    "struct_of_struct": pa.array([{"s": {"v": 1.5}}, {"s": None}, None, {"s": {"v": None}}] * 300,
                                 pa.struct([("s", pa.struct([("v", pa.float64())]))])),
    "struct_of_list": pa.array([{"l": [1, 2]}, None, {"l": None}, {"l": []}, {"l": [None]}] * 300,
                               pa.struct([("l", pa.list_(pa.int64()))])),
    "list_of_struct": pa.array([[{"k": 1, "s": "x"}, None, {"k": None, "s": None}], None, [], [{"k": 5, "s": "y"}]] * 300,
                               pa.list_(pa.struct([("k", pa.int16()), ("s", pa.string())]))),
    "list_list_struct": pa.array([[[{"a": 1}], None, []], [], None, [[None, {"a": None}]]] * 300,
                                 pa.list_(pa.list_(pa.struct([("a", pa.int32())])))),
    "all_null_struct": pa.array([None] * 50, pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])),
    "list_all_empty": pa.array([[]] * 3000, pa.list_(pa.int32())),
    "list_of_fsl": pa.array([[[1.0, 2.0]], None, [[3.0, None]]] * 100, pa.list_(pa.list_(pa.float32(), 2))),
    "large_list_long_strings": pa.array([["x" * 300, None], None, [], ["y" * 400]] * 50, pa.large_list(pa.string())),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(NESTED))
def test_nested_and_nullable_structs(tmp_path, version, name):
    t = pa.table({"a": NESTED[name], "i": pa.array(np.arange(len(NESTED[name])))})
    path = write_ours(tmp_path / "n.lance", t, version)
    assert_tables_equal(read_theirs(path), t)
    check_take(path, t)
    assert_tables_equal(LanceFileReaderV21(path).read_all(), t)


@pytest.mark.parametrize("version", VERSIONS)
def test_many_pages_and_chunks(tmp_path, version):
    t = matrix(20_000, "nulls", seed=9)
    path = write_ours(tmp_path / "p.lance", t, version, batch=777, data_cache_bytes=256 * 1024)
    r = PyReader(path)
    assert_tables_equal(r.read_all().to_table(), t)
    meta = r.metadata()
    assert max(len(c.pages) for c in meta.columns) > 3
    assert_tables_equal(r.read_range(2000, 5000).to_table(), t.slice(2000, 5000))
    check_take(path, t, seed=4)


@pytest.mark.parametrize("version", VERSIONS)
def test_large_values_use_full_zip(tmp_path, version):
    rng = np.random.default_rng(0)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(3000 * 128, dtype=np.float32)), 128,
                                            mask=pa.array(rng.random(3000) < 0.1))
    blobs = pa.array([bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) if k % 7 else None
                      for k in rng.integers(256, 2000, 3000)], pa.binary())
    text = pa.array([("lorem ipsum %d " % i) * 30 for i in range(3000)])
    t = pa.table({"vec": vec, "blob": blobs, "text": text})
    path = write_ours(tmp_path / "z.lance", t, version)
    assert_tables_equal(read_theirs(path), t)
    check_take(path, t)
    lay = layouts(path)
    assert lay[0].startswith("full_zip(fixed_size_list(128")
    assert lay[1].startswith("full_zip(variable")
    assert lay[2].startswith("full_zip(fsst")
    assert lay == layouts(write_theirs(tmp_path / "py.lance", t, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_miniblock_encodings(tmp_path, version):
    rng = np.random.default_rng(3)
    t = pa.table({
        "narrow": pa.array(rng.integers(0, 300, 10_000), pa.int64()),
        "runs": pa.array(np.repeat(rng.integers(-10**9, 10**9, 40).astype(np.int32), 250)),
        "const": pa.array([7] * 10_000, pa.int16()),
        "lowcard": pa.array(rng.choice(["alpha", "beta", "gamma"], 10_000)),
        "lowcard_i64": pa.array(rng.choice([10**12, -5, 77], 10_000)),
        "dict": pa.array(rng.choice(["x", "yy"], 10_000)).dictionary_encode(),
        "bools": pa.array(rng.random(10_000) < 0.3),
    })
    path = write_ours(tmp_path / "e.lance", t, version)
    assert_tables_equal(read_theirs(path), t)
    ours = layouts(path)
    assert ours == layouts(write_theirs(tmp_path / "py.lance", t, version))
    assert "inline_bitpacking(64)" in ours[0]
    assert "rle" in ours[1]
    assert ("constant" if version == "2.2" else "rle") in ours[2]
    assert "dictionary" in ours[3]
    assert "dictionary" in ours[5]


# --------------------------------------------------------------------------------------------
# field metadata
# --------------------------------------------------------------------------------------------
def _fld(name, typ, **md):
    return pa.field(name, typ, metadata={f"lance-encoding:{k.replace('_', '-')}": v for k, v in md.items()})


def _metadata_table() -> pa.Table:
    rng = np.random.default_rng(1)
    strs = pa.array([("word%d " % (i % 300)) * (i % 7 + 1) for i in range(20_000)])
    ints = pa.array(rng.integers(-2**40, 2**40, 20_000))
    cols = {
        "str_zstd": (strs, _fld("str_zstd", pa.string(), compression="zstd", compression_level="7")),
        "str_lz4": (strs, _fld("str_lz4", pa.string(), compression="lz4")),
        "str_none": (strs, _fld("str_none", pa.string(), compression="none")),
        "str_fsst": (pa.array(["ab%d" % i for i in range(20_000)]), _fld("str_fsst", pa.string(), compression="fsst")),
        "int_zstd": (ints, _fld("int_zstd", pa.int64(), compression="zstd")),
        "int_fullzip": (ints, _fld("int_fullzip", pa.int64(), structural_encoding="fullzip")),
        "str_fullzip": (strs, _fld("str_fullzip", pa.string(), structural_encoding="fullzip")),
        "long_miniblock": (pa.array(["x" * 300, "y" * 400] * 10_000),
                           _fld("long_miniblock", pa.string(), structural_encoding="miniblock")),
        "long_zstd": (pa.array([("abc%d" % i) * 100 for i in range(20_000)]), _fld("long_zstd", pa.string(), compression="zstd")),
        "packed": (pa.array([{"x": i, "y": float(i)} for i in range(20_000)], pa.struct([("x", pa.int32()), ("y", pa.float64())])),
                   pa.field("packed", pa.struct([("x", pa.int32()), ("y", pa.float64())]), metadata={"lance-encoding:packed": "true"})),
    }
    return pa.table([c for c, _ in cols.values()], schema=pa.schema([f for _, f in cols.values()]))


@pytest.mark.parametrize("version", VERSIONS)
def test_field_metadata_forces_encodings(tmp_path, version):
    t = _metadata_table()
    path = write_ours(tmp_path / "md.lance", t, version)
    assert_tables_equal(read_theirs(path), t)
    check_take(path, t)
    lay = dict(zip(t.column_names, layouts(path)))
    assert lay["str_zstd"].startswith("mini_block(general(zstd,variable")
    assert lay["str_lz4"].startswith("mini_block(general(lz4,variable")
    assert lay["str_none"] == "mini_block(variable(flat(32)))"
    assert lay["str_fsst"].startswith("mini_block(fsst(")
    assert lay["int_zstd"].startswith("mini_block(general(zstd")
    assert lay["int_fullzip"].startswith("full_zip(flat(64))")
    assert lay["str_fullzip"].startswith("full_zip(")
    assert lay["long_miniblock"].startswith("mini_block(")
    assert lay["long_zstd"].startswith("full_zip(general(zstd")
    assert lay["packed"].startswith("mini_block(packed_struct")
    theirs = dict(zip(t.column_names, layouts(write_theirs(tmp_path / "py.lance", t, version))))
    for name in ("str_zstd", "str_lz4", "str_none", "str_fsst", "long_miniblock", "long_zstd", "packed"):
        assert lay[name] == theirs[name], name


# --------------------------------------------------------------------------------------------
# property test
# --------------------------------------------------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_TYPES = [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.bool_(), pa.string(),
          pa.large_binary(), pa.date32(), pa.timestamp("us"), pa.decimal128(12, 3)]


def _value(t: pa.DataType, draw):
    if pa.types.is_boolean(t):
        return draw(st.booleans())
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        small = draw(st.booleans())
        return draw(st.integers(0, 40) if small else st.integers(int(info.min), int(info.max)))
    if pa.types.is_floating(t):
        return draw(st.floats(allow_nan=False, width=32 if t == pa.float32() else 64))
    if pa.types.is_string(t):
        return draw(st.text(max_size=40))
    if pa.types.is_large_binary(t):
        return draw(st.binary(max_size=300))
    if pa.types.is_date32(t):
        return draw(st.dates())
    if pa.types.is_timestamp(t):
        return draw(st.datetimes())
    return decimal.Decimal(draw(st.integers(-10**8, 10**8))).scaleb(-3)


@st.composite
def _arrays(draw):
    t = draw(st.sampled_from(_TYPES))
    n = draw(st.integers(0, 400))
    null_p = draw(st.sampled_from([0.0, 0.3, 1.0]))
    repeat = draw(st.booleans())  # long runs / low cardinality
    pool = [_value(t, draw) for _ in range(3 if repeat else 1)]
    vals = []
    for i in range(n):
        if draw(st.floats(0, 1)) < null_p:
            vals.append(None)
        else:
            vals.append(pool[i % len(pool)] if repeat else _value(t, draw))
    arr = pa.array(vals, t)
    shape = draw(st.sampled_from(["flat", "list", "struct"]))
    if shape == "list" and n:
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=20)))
        offs = [0] + cuts + [n]
        mask = [draw(st.booleans()) and draw(st.booleans()) for _ in range(len(offs) - 1)]
        return pa.ListArray.from_arrays(pa.array(offs, pa.int32()), arr, mask=pa.array(mask))
    if shape == "struct":
        mask = pa.array([draw(st.floats(0, 1)) < null_p / 2 for _ in range(n)], pa.bool_())
        return pa.StructArray.from_arrays([arr], names=["v"], mask=mask)
    return arr


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(arr=_arrays(), version=st.sampled_from(VERSIONS))
def test_random_arrays_round_trip_through_pylance(tmp_path, arr, version):
    t = pa.table({"a": arr})
    path = write_ours(tmp_path / f"h{version}.lance", t, version)
    assert_tables_equal(read_theirs(path), t)


# --------------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_dataset_written_at_2_x_is_read_by_pylance(tmp_path, version):
    from lance_ops.table import versions
    from lance_ops.table.write import write_dataset

    if version not in versions.WRITABLE:
        pytest.skip(f"{version} not enabled for datasets")
    t = pa.table({"x": pa.array(range(3000), pa.int32()), "y": pa.array([[1.5, None]] * 3000),
                  "z": pa.array([{"a": i, "b": None if i % 3 else str(i)} if i % 5 else None for i in range(3000)])})
    uri = str(tmp_path / "ds")
    write_dataset(t, uri, data_storage_version=version, max_rows_per_file=1000)
    write_dataset(t.slice(0, 10), uri, mode="append")
    ds = lance.dataset(uri)
    assert ds.data_storage_version == version
    assert_tables_equal(ds.to_table(), pa.concat_tables([t, t.slice(0, 10)]))
    data_file = ds.get_fragments()[0].metadata.files[0]
    assert list(data_file.fields) == [0, 2, 4, 5]
    assert list(data_file.column_indices) == [0, 1, 2, 3]


@pytest.mark.parametrize("version", VERSIONS)
def test_long_lists_spanning_chunks(tmp_path, version):
    rng = np.random.default_rng(0)
    lens = rng.choice([0, 1, 3000, 9000], 60)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    total = int(offs[-1])
    vals = pa.array(rng.integers(0, 1000, total).astype(np.int32), mask=rng.random(total) < 0.1)
    t = pa.table({
        "a": pa.ListArray.from_arrays(pa.array(offs), vals, mask=pa.array(rng.random(60) < 0.2)),
        "s": pa.ListArray.from_arrays(pa.array(offs), pa.array(rng.integers(0, 10**6, total).astype(str))),
    })
    path = write_ours(tmp_path / "l.lance", t, version)
    r = PyReader(path)
    assert_tables_equal(r.read_all().to_table(), t)
    for idx in ([0], [5, 17, 59], list(range(0, 60, 7))):
        assert_tables_equal(r.take_rows(idx).to_table(), t.take(idx))
    for start, count in [(3, 10), (30, 30), (59, 1)]:
        assert_tables_equal(r.read_range(start, count).to_table(), t.slice(start, count))


@pytest.mark.parametrize("version", VERSIONS)
def test_append_and_compact_a_pylance_dataset_in_its_version(tmp_path, version):
    import lance_ops
    from lance_ops.maintenance.compaction import compact_files
    from lance_ops.table import versions

    if version not in versions.WRITABLE:
        pytest.skip(f"{version} not enabled for datasets")
    t = make_table(3000, seed=8)
    uri = str(tmp_path / "ds")
    for i in range(4):
        lance.write_dataset(t.slice(i * 500, 500), uri, mode="append" if i else "create", data_storage_version=version)
    lance_ops.write_dataset(t.slice(2000, 1000), uri, mode="append")
    compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100_000)
    ds = lance.dataset(uri)
    assert ds.data_storage_version == version
    assert len(ds.get_fragments()) == 1
    assert_tables_equal(ds.to_table(), t)
    data_file = ds.get_fragments()[0].metadata.files[0]
    assert (data_file.file_major_version, data_file.file_minor_version) == (2, int(version[-1]))


# --------------------------------------------------------------------------------------------
# details found while matching blob / BSS pages byte for byte
# --------------------------------------------------------------------------------------------
def _same_bytes(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind,n", [("f32", 1024), ("f32", 4096), ("f64", 512), ("f64", 2048), ("u8", 4096),
                                    ("bool", 8192), ("fsl", 256), ("fsl", 1024), ("fsl_nulls", 512)])
def test_full_last_chunk_keeps_its_log_like_pylance(tmp_path, version, kind, n):
    """Flat and fixed-size-list mini-blocks: a full last chunk records log2(values), not 0."""
    rng = np.random.default_rng(n)
    arr = {
        "f32": lambda: pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64": lambda: pa.array(rng.standard_normal(n)),
        "u8": lambda: pa.array(rng.integers(0, 256, n).astype(np.uint8)),
        "bool": lambda: pa.array(rng.random(n) < 0.5),
        "fsl": lambda: pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(4 * n).astype(np.float32)), 4),
        "fsl_nulls": lambda: pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(4 * n).astype(np.float32), mask=rng.random(4 * n) < 0.1), 4),
    }[kind]()
    t = pa.table({"x": arr})
    ours = write_ours(tmp_path / "o.lance", t, version)
    theirs = write_theirs(tmp_path / "t.lance", t, version)
    assert _same_bytes(ours, theirs)


@pytest.mark.parametrize("card,dictionary", [(1000, True), (1490, True), (1510, False), (2400, False)])
def test_64_bit_dictionary_choice_like_pylance(tmp_path, card, dictionary):
    """2.2: 64-bit values get a dictionary when card * 8 + n * 4 < 0.8 * n * 8 (entries at their width)."""
    rng = np.random.default_rng(card)
    n = 5000
    x = np.concatenate([rng.permutation(card), rng.integers(0, card, n - card)]) * 1_000_003 + 2**40
    for arr in (pa.array(x), pa.array(x.astype(np.float64) * 1.37)):
        t = pa.table({"x": arr})
        ours = layouts(write_ours(tmp_path / "o.lance", t, "2.2"))
        assert ours == layouts(write_theirs(tmp_path / "t.lance", t, "2.2"))
        assert ("dictionary=" in ours[0]) == dictionary
        assert_tables_equal(read_theirs(str(tmp_path / "o.lance")), t)
