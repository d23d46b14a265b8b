"""LegacyFileWriter: legacy (v0.1) data files, byte for byte what pylance writes.

pylance (``data_storage_version="legacy"``) is the oracle: for the same rows and group size, the
file lance_ops writes (recording pylance's writer version in the embedded manifest) must be
*identical* to pylance's data file -- pages, page table, statistics, dictionary values, embedded
manifest, metadata and footer. Files written with lance_ops' own writer version differ only in
the embedded manifest, and LegacyFileReader reads them back exactly as pylance reads its own.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.errors import SchemaMismatchError, UnsupportedError, UnsupportedTypeError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.file import LanceFileWriter
from lance_ops.format.legacy.writer import LegacyFileWriter
from lance_ops.schema import to_lance_fields

from tests.file.test_legacy_reader import GROUP, assert_same, matrix_table

lance = pytest.importorskip("lance")

PYLANCE = ("lance", lance.__version__)


def pylance_file(tmp_path: Path, table: pa.Table, group: int, name: str = "ref") -> tuple[bytes, pa.Table]:
    """(bytes of pylance's legacy data file for ``table``, pylance's read of that fragment)."""
    uri = str(tmp_path / name)
    lance.write_dataset(table, uri, data_storage_version="legacy", max_rows_per_group=group)
    frags = lance.dataset(uri).get_fragments()  # (reopened: the dictionaries as stored)
    assert len(frags) == 1
    return (Path(uri) / "data" / frags[0].metadata.files[0].path).read_bytes(), frags[0].to_table()


def our_file(tmp_path: Path, table: pa.Table | list, group: int, *, name: str = "ours.lance",
             schema: pa.Schema | None = None, **kw) -> Path:
    path = tmp_path / name
    kw.setdefault("writer_version", PYLANCE)
    with LanceFileWriter(str(path), schema if schema is not None else table.schema, version="0.1",
                         max_rows_per_group=group, **kw) as w:
        for part in (table if isinstance(table, list) else [table]):
            w.write_batch(part)
    return path


def assert_identical(ours: bytes, ref: bytes) -> None:
    if ours != ref:
        n = next((i for i in range(min(len(ours), len(ref))) if ours[i] != ref[i]), min(len(ours), len(ref)))
        pytest.fail(f"files differ (ours {len(ours)} bytes, pylance {len(ref)} bytes) first at byte {n}:\n"
                    f"pylance {ref[max(0, n - 8):n + 24].hex()}\nours    {ours[max(0, n - 8):n + 24].hex()}")


# --------------------------------------------------------------------------------------------
# byte identity with pylance
# --------------------------------------------------------------------------------------------
def _small() -> pa.Table:
    return pa.table({
        "a": pa.array([1, 2, None], pa.int64()), "s": ["x", None, ""],
        "st": pa.array([{"p": 1.5, "q": True}] * 3),
        "l": pa.array([[1], [2, 3], None], pa.list_(pa.int32())),
        "d": pa.array(["u", "v", "u"]).dictionary_encode(),
    }).replace_schema_metadata({"k": "v"})


CASES = {
    "small": (_small, 2),
    "matrix": (matrix_table, GROUP),
    # (pylance panics on sliced structs, hence take)
    "matrix_taken": (lambda: matrix_table().take(np.arange(10, 40)), GROUP),
    "one_group": (lambda: matrix_table(40), 1024),
    "default_groups": (lambda: pa.table({
        "x": np.arange(2500, dtype=np.int64), "s": [f"v{i}" for i in range(2500)],
        "l": pa.array([[i] * (i % 3) for i in range(2500)], pa.list_(pa.int64()))}), 1024),
    "all_null_batches": (lambda: pa.table({
        "i": pa.array([None, None, 3, 4], pa.int32()), "f": pa.array([None, None, 1.5, None]),
        "s": pa.array([None, None, "b", "a"]), "dec": pa.array([None, None, None, 1], pa.decimal128(5, 1)),
        "b": pa.array([None, True, False, None]), "nan": pa.array([float("nan"), None, 0.0, -0.0]),
        "d": pa.array([None, None, 5, 6], pa.date32())}), 2),
    "truncated_stats": (lambda: pa.table({
        "s": ["a" * 100, "b" * 70, "é" * 40, "\U0010ffff" * 20],
        "x": [b"\x01" * 80, b"\x00", b"\xff" * 70, b""]}), 7),
    "non_nullable": (lambda: pa.Table.from_pydict(
        {"s": ["", "x", ""], "n": ["", "x", ""], "i": [1, 2, 3]},
        schema=pa.schema([pa.field("s", pa.string(), nullable=False), pa.field("n", pa.string()),
                          pa.field("i", pa.int16(), nullable=False)])), 2),
    "dict_values": (lambda: pa.table({
        "d": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, 1]), pa.array(["", "a"])),
        "di": pa.DictionaryArray.from_arrays(pa.array([2, 1, 0, 1], pa.int8()), pa.array([15, -25, 7], pa.int32()))}), 3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_identical_to_pylance(tmp_path, case):
    make, group = CASES[case]
    table = make()
    ref, ref_table = pylance_file(tmp_path, table, group)
    ours = our_file(tmp_path, table, group)
    assert_identical(ours.read_bytes(), ref)
    assert_same(LegacyFileReader(str(ours)).read_all(), ref_table, metadata=True)


def test_batches_regrouped_like_pylance(tmp_path):
    """Input batches of any size are regrouped into groups of max_rows_per_group rows."""
    table = matrix_table()
    ref, _ = pylance_file(tmp_path, table, GROUP)
    sizes = [1, 3, 10, 2, 20, 17]
    assert sum(sizes) == table.num_rows
    parts, at = [], 0
    for n in sizes:
        parts.append(table.take(np.arange(at, at + n)))  # (take: pylance-equivalent unsliced arrays)
        at += n
    ours = our_file(tmp_path, parts, GROUP, schema=table.schema)
    # (take rewrites the slots under nulls, which v0.1 stores: compare with pylance on the parts)
    ref_parts, _ = pylance_file(tmp_path, pa.concat_tables(parts), GROUP, name="ref_parts")
    assert_identical(ours.read_bytes(), ref_parts)
    # sliced input (array offsets everywhere) encodes the same bytes
    sliced = [table.slice(a, b - a) for a, b in zip([0, 5, 6, 30], [5, 6, 30, table.num_rows])]
    ours2 = our_file(tmp_path, sliced, GROUP, name="sliced.lance", schema=table.schema)
    assert_identical(ours2.read_bytes(), ref)


def test_own_writer_version_only_changes_the_embedded_manifest(tmp_path):
    table = matrix_table()
    ref, ref_table = pylance_file(tmp_path, table, GROUP)
    path = tmp_path / "own.lance"
    with LanceFileWriter(str(path), table.schema, version="legacy", max_rows_per_group=GROUP) as w:
        w.write_batch(table)
    reader = LegacyFileReader(str(path))
    assert reader.embedded_manifest.writer_version.library == "lance-ops"
    assert reader.embedded_manifest.data_format.version == "0.1"
    start = reader.metadata.manifest_position
    assert path.read_bytes()[:start] == ref[:start]
    assert_same(reader.read_all(), ref_table, metadata=True)
    assert reader.field_statistics().keys() == LegacyFileReader(str(tmp_path / "ref" / "data" / next(
        p.name for p in (tmp_path / "ref" / "data").iterdir()))).field_statistics().keys()


# --------------------------------------------------------------------------------------------
# the writer's surface
# --------------------------------------------------------------------------------------------
def test_dispatch_and_surface(tmp_path):
    schema = pa.schema([("a", pa.int64()), ("s", pa.string())])
    w = LanceFileWriter(str(tmp_path / "x.lance"), schema, version="0.1", max_rows_per_group=4)
    assert isinstance(w, LegacyFileWriter)
    assert w.num_columns == 0 and w.pages == [] and w.tell() == 0
    w.write_batch(pa.table({"a": np.arange(10), "s": [str(i) for i in range(10)]}))
    assert w.rows_written == 10 and w.tell() > 0  # two full groups are on their way
    assert w.close() == 10
    assert w.close() == 10
    reader = LegacyFileReader(str(tmp_path / "x.lance"))
    assert reader.batch_offsets == [0, 4, 8, 10]
    assert reader.read_all()["a"].to_pylist() == list(range(10))
    with pytest.raises(ValueError, match="closed"):
        w.write_batch(pa.table({"a": [1], "s": ["x"]}))


def test_schema_from_first_batch_and_metadata(tmp_path):
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), version="0.1") as w:
        w.write_batch(pa.table({"a": [1, 2]}).replace_schema_metadata({"m": "1"}))
        w.add_schema_metadata("extra", "2")
    assert LegacyFileReader(str(path)).schema.metadata == {b"m": b"1", b"extra": b"2"}


def test_given_lance_fields_keep_their_ids(tmp_path):
    schema = pa.schema([("a", pa.int32()), ("st", pa.struct([("b", pa.string())]))])
    fields = to_lance_fields(schema, start_id=5)
    path = tmp_path / "x.lance"
    with LanceFileWriter(str(path), schema, version="0.1", lance_fields=fields) as w:
        w.write_batch(pa.table({"a": pa.array([1, 2], pa.int32()), "st": [{"b": "x"}, {"b": "y"}]}))
    reader = LegacyFileReader(str(path))
    assert [f.id for f in reader.lance_fields] == [5, 6, 7]
    assert sorted(reader.page_table()) == [5, 6, 7]
    assert reader.read_all()["st"].to_pylist() == [{"b": "x"}, {"b": "y"}]


def test_dictionaries_are_rekeyed_onto_the_first(tmp_path):
    path = tmp_path / "x.lance"
    first = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array(["a", "b"]))
    second = pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int32()), pa.array(["b", "a"]))
    lst = pa.array([["b"], ["a", "b"]]).cast(pa.list_(pa.dictionary(pa.int32(), pa.string())))
    schema = pa.schema([("d", first.type), ("l", lst.type)])
    lst2 = pa.ListArray.from_arrays(pa.array([0, 1, 1, 2], pa.int32()),
                                    pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["a"])))
    with LanceFileWriter(str(path), schema, version="0.1", max_rows_per_group=3) as w:
        w.write_batch(pa.table({"d": first, "l": lst}, schema=schema))
        w.write_batch(pa.table({"d": second, "l": lst2}, schema=schema))
    got = LegacyFileReader(str(path)).read_all()
    assert got["d"].to_pylist()[:4] == ["a", "b", "b", "a"]  # (v0.1 has no validity: the null is lost)
    assert got["d"].chunk(0).dictionary.to_pylist() == ["a", "b"]
    assert got["l"].to_pylist() == [["b"], ["a", "b"], ["a"], [], ["a"]]
    bad = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(["zzz"]))
    w = LanceFileWriter(str(tmp_path / "y.lance"), pa.schema([("d", bad.type)]), version="0.1")
    w.write_batch(pa.table({"d": first}))
    with pytest.raises(SchemaMismatchError, match="dictionary values \\['zzz'\\]"):
        w.write_batch(pa.table({"d": bad}))
    w.abort()


def test_given_dictionary_values(tmp_path):
    path = tmp_path / "x.lance"
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["b"]))
    schema = pa.schema([("d", arr.type)])
    with LanceFileWriter(str(path), schema, version="0.1", dictionaries={0: pa.array(["a", "b", "c"])}) as w:
        w.write_batch(pa.table({"d": arr}))
    got = LegacyFileReader(str(path)).read_all()["d"].chunk(0)
    assert got.dictionary.to_pylist() == ["a", "b", "c"] and got.to_pylist() == ["b", "b"]


def test_dataset_files_refuse_dictionaries(tmp_path):
    """Inside a dataset (lance_fields given) the values are the dataset's: they must be passed."""
    arr = pa.array(["a", "b"]).dictionary_encode()
    schema = pa.schema([("d", arr.type)])
    with pytest.raises(UnsupportedError, match="dictionary fields \\['d'\\]"):
        LanceFileWriter(str(tmp_path / "x.lance"), schema, version="0.1", lance_fields=to_lance_fields(schema))
    assert not any(tmp_path.iterdir())


def test_statistics_can_be_left_out(tmp_path):
    table = matrix_table()
    ref, ref_table = pylance_file(tmp_path, table, GROUP)
    path = our_file(tmp_path, table, GROUP, statistics=False)
    reader = LegacyFileReader(str(path))
    assert not reader.has_statistics and reader.statistics() is None
    assert len(path.read_bytes()) < len(ref)
    assert_same(reader.read_all(), ref_table, metadata=True)


def test_refusals_write_nothing(tmp_path):
    p = tmp_path / "x.lance"
    for dt in (pa.map_(pa.string(), pa.int32()), pa.list_(pa.string(), 2),
               pa.string_view(), pa.dictionary(pa.int32(), pa.list_(pa.int8())),
               pa.dictionary(pa.int32(), pa.float64())):  # (pylance cannot read float dictionary values)
        with pytest.raises((UnsupportedTypeError, UnsupportedError)):
            LanceFileWriter(str(p), pa.schema([("a", dt)]), version="0.1")
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    w = LanceFileWriter(str(p), schema, version="0.1")
    with pytest.raises(SchemaMismatchError, match="non-null"):
        w.write_batch(pa.table({"a": pa.array([1, None])}, schema=pa.schema([("a", pa.int64())])))
    with pytest.raises(SchemaMismatchError, match="missing fields"):
        w.write_batch(pa.table({"b": [1]}))
    w.abort()
    assert not p.exists()
    w = LanceFileWriter(str(p), version="0.1")
    with pytest.raises(SchemaMismatchError, match="schema"):
        w.close()
    assert not p.exists()


def test_exception_in_with_block_aborts(tmp_path):
    p = tmp_path / "x.lance"
    with pytest.raises(RuntimeError):
        with LanceFileWriter(str(p), pa.schema([("a", pa.int64())]), version="0.1", max_rows_per_group=2) as w:
            w.write_batch(pa.table({"a": np.arange(10)}))
            raise RuntimeError("boom")
    assert not p.exists()


def test_footer_and_metadata(tmp_path):
    path = our_file(tmp_path, pa.table({"a": [1, 2, 3]}), 2)
    data = path.read_bytes()
    meta_pos, major, minor, magic = struct.unpack("<QHH4s", data[-16:])
    assert (major, minor, magic) == (0, 2, b"LANC")
    reader = LegacyFileReader(str(path))
    assert list(reader.metadata.batch_offsets) == [0, 2, 3]
    assert reader.metadata.manifest_position < meta_pos


def test_write_to_s3(moto_server, s3_bucket):
    table = pa.table({"a": np.arange(20), "s": [f"s{i}" for i in range(20)]})
    uri = f"{s3_bucket}/legacy/x.lance"
    with LanceFileWriter(uri, table.schema, version="0.1", storage_options=moto_server.storage_options,
                         max_rows_per_group=8) as w:
        w.write_batch(table)
    reader = LegacyFileReader(uri, moto_server.storage_options)
    assert reader.read_all().equals(table)
    assert reader.batch_offsets == [0, 8, 16, 20]
