"""Commits on legacy (v0.1) datasets with dictionary columns, checked against pylance 14.0.2.

A legacy dataset keeps the values of its dictionary columns in the *manifest file* (before the
sections and the manifest message): every version lance_ops commits must carry them, byte for
byte as pylance lays them out, or pylance would read the columns as empty strings. Datasets are
built twice ("ours" through lance_ops, "ref" through pylance) and must read identically, version
after version, in pylance and in lance_ops; pylance must keep writing on what lance_ops wrote.
"""
from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest

import lance_ops
from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import CorruptFileError, SchemaMismatchError, UnsupportedError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.maintenance.compaction import compact_files
from lance_ops.table.manifest import codec as mf

lance = pytest.importorskip("lance")

GROUP = 8
WORDS = ["alpha", "beta", "gamma"]


def dict_array(values, keys, index_type=pa.int32()) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(keys, index_type), pa.array(values))


def source_table(start: int, n: int) -> pa.Table:
    """Several dictionary columns: top level, inside a struct, inside a list, int8 keys, large strings."""
    ids = np.arange(start, start + n, dtype=np.int64)
    inner = pa.StructArray.from_arrays([pa.array(ids * 2), dict_array(["p", "q"], ids % 2)], names=["a", "c"])
    items = dict_array(["x", "yy", "zzz"], np.arange(3 * n) % 3)
    return pa.table({
        "id": ids,
        "cat": dict_array(WORDS, ids % 3),
        "s": inner,
        "l": pa.ListArray.from_arrays(pa.array(np.arange(n + 1) * 3, pa.int32()), items),
        "small": dict_array(["u", "vv"], (ids + 1) % 2, pa.int8()),
        "big": pa.DictionaryArray.from_arrays(pa.array(ids % 2, pa.int16()), pa.array(["L0", "L1"], pa.large_string())),
        "name": pa.array([f"n{i}" for i in ids]),
    }).replace_schema_metadata({"dataset": "legacy-dict"})


def manifests(uri: str) -> list[str]:
    """Manifest paths, oldest version first (V2 names count down)."""
    return sorted(glob.glob(os.path.join(uri, "_versions", "*.manifest")), reverse=True)


def latest(uri: str) -> tuple[mf.ManifestFile, bytes]:
    path = manifests(uri)[-1]
    data = Path(path).read_bytes()
    return mf.decode_manifest(data, path), data


def assert_same(ours: str, ref: str) -> None:
    """pylance reads both datasets identically, and lance_ops reads ours as pylance does."""
    a, b = lance.dataset(ours), lance.dataset(ref)
    assert a.data_storage_version == b.data_storage_version == "0.1"
    assert a.schema.equals(b.schema, check_metadata=True)
    ta, tb = a.to_table(), b.to_table()
    assert ta.equals(tb), f"\n{ta.to_pydict()}\n!=\n{tb.to_pydict()}"
    assert lance_ops.dataset(ours).to_table().equals(tb)


def assert_every_version_readable(uri: str) -> None:
    """Every version: pylance and lance_ops read the same rows, and the values are never empty."""
    for v in lance.dataset(uri).versions():
        version = v["version"]
        want = lance.dataset(uri, version=version).to_table()
        assert lance_ops.dataset(uri, version=version).to_table().equals(want), version
        if want.num_rows:
            assert "" not in want["cat"].to_pylist()


def assert_dictionaries_everywhere(uri: str, expected: dict[str, list]) -> None:
    """Each manifest and each data file carries the dictionary values ``expected`` (name -> values)."""
    for path in manifests(uri):
        m = mf.decode_manifest(Path(path).read_bytes(), path)
        names = {f.id: f.name for f in m.manifest.fields}
        assert {names[i]: v.to_pylist() for i, v in m.dictionaries.items()} == expected, path
    for frag in lance.dataset(uri).get_fragments():
        for df in frag.metadata.files:
            reader = LegacyFileReader(str(Path(uri) / "data" / df.path))
            got = {f.name: reader._dictionary(next(n for t in reader._tree for n in t.walk() if n.id == f.id)).to_pylist()
                   for f in reader.embedded_manifest.fields if f.HasField("dictionary")}
            assert got == expected, df.path


EXPECTED = {"cat": WORDS, "c": ["p", "q"], "item": ["x", "yy", "zzz"], "small": ["u", "vv"], "big": ["L0", "L1"]}


@pytest.fixture
def twins(tmp_path):
    """Two identical pylance legacy datasets with dictionary columns (2 fragments, groups of 8)."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(source_table(0, 40), ours, data_storage_version="legacy",
                        max_rows_per_group=GROUP, max_rows_per_file=25)
    shutil.copytree(ours, ref)
    return ours, ref


# --- pylance's layout ---------------------------------------------------------------------------
def test_pylance_layout_decodes_and_reencodes(twins):
    """Values sit at the start of the manifest file in field id order; re-encoding is byte-identical."""
    ours, _ = twins
    lance.write_dataset(source_table(40, 5), ours, mode="append")
    lance.dataset(ours).delete("id = 3")
    lance.dataset(ours).create_scalar_index("id", "BTREE")  # an index section after the values
    for path in manifests(ours):
        data = Path(path).read_bytes()
        m = mf.decode_manifest(data, path)
        fields = mf.dictionary_fields(m.manifest)
        assert [f.name for f in fields] == ["cat", "c", "item", "small", "big"]
        assert [f.id for f in fields] == sorted(f.id for f in fields)
        # the first values start at byte 0; string offsets point at the positions after the bytes
        assert fields[0].dictionary.offset == len("alphabetagamma")
        assert data[:14] == b"alphabetagamma"
        first_section = min(x for x in (m.manifest.index_section if m.manifest.HasField("index_section") else None,
                                         m.manifest.transaction_section) if x is not None)
        prefix = mf.place_dictionaries(table_pb2.Manifest(fields=m.manifest.fields, data_format=m.manifest.data_format),
                                       m.dictionaries)
        assert data[:first_section] == prefix
        again = mf.encode_manifest(m.manifest, m.transaction, m.index_section, m.dictionaries)
        assert again == data, path
    assert_dictionaries_everywhere(ours, EXPECTED)


def test_integer_and_binary_values_and_nulls(tmp_path):
    uri = str(tmp_path / "ds")
    t = pa.table({
        "i": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array([10, 20], pa.int64())),
        "b": pa.DictionaryArray.from_arrays(pa.array([0, 1, 2], pa.uint8()), pa.array([b"a", b"", None], pa.binary())),
        "n": dict_array(["a", None, ""], [0, 1, 2]),
    })
    lance.write_dataset(t, uri, data_storage_version="legacy")
    m, data = latest(uri)
    assert m.dictionaries[0].to_pylist() == [10, 20] and m.manifest.fields[0].dictionary.offset == 0
    assert m.dictionaries[1].to_pylist() == [b"a", None, None]  # empty reads as null, as in pylance
    assert m.dictionaries[2].to_pylist() == ["a", None, None]
    assert mf.encode_manifest(m.manifest, m.transaction, m.index_section, m.dictionaries) == data
    lance_ops.dataset(uri).delete("i = 20")
    assert lance.dataset(uri).to_table().to_pydict() == {"i": [10, 10], "b": [b"a", None], "n": ["a", None]}
    # pylance's append rule compares with the values as read back: our check does the same
    t2 = t.set_column(2, "n", dict_array(["a", None, None], [0, 1, 2])).set_column(
        1, "b", pa.DictionaryArray.from_arrays(pa.array([0, 1, 2], pa.uint8()), pa.array([b"a", None, None], pa.binary())))
    lance_ops.write_dataset(t2, uri, mode="append")
    with pytest.raises(SchemaMismatchError, match="dictionary for `b`"):
        lance_ops.write_dataset(t, uri, mode="append")
    with pytest.raises(OSError, match="dictionary for `b`"):
        lance.write_dataset(t, uri, mode="append")
    assert lance.dataset(uri).to_table()["i"].to_pylist() == [10, 10, 10, 20, 10]
    assert_every_version_readable_generic(uri)


def assert_every_version_readable_generic(uri: str) -> None:
    for v in lance.dataset(uri).versions():
        want = lance.dataset(uri, version=v["version"]).to_table()
        assert lance_ops.dataset(uri, version=v["version"]).to_table().equals(want)


# --- lance_ops commits on a pylance dataset -----------------------------------------------------
def test_append_delete_compact_then_pylance_continues(twins):
    ours, ref = twins
    # append: several batches, each with the dataset's dictionaries
    batches = source_table(40, 30).to_batches(max_chunksize=7)
    lance_ops.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, batches), ours, mode="append",
                            max_rows_per_file=20, max_rows_per_group=GROUP)
    lance.write_dataset(source_table(40, 30), ref, mode="append", max_rows_per_file=20, max_rows_per_group=GROUP)
    assert_same(ours, ref)
    # delete rows, then a whole fragment
    lance_ops.dataset(ours).delete("id % 7 = 3 OR id = 24")
    lance.dataset(ref).delete("id % 7 = 3 OR id = 24")
    assert_same(ours, ref)
    lance_ops.dataset(ours).delete("id >= 60")
    lance.dataset(ref).delete("id >= 60")
    assert_same(ours, ref)
    # compact
    metrics = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=1000)
    assert metrics["fragments_removed"] >= 2
    lance.dataset(ref).optimize.compact_files(target_rows_per_fragment=1000)
    assert_same(ours, ref)
    assert len(lance.dataset(ours).get_fragments()) == 1
    assert_dictionaries_everywhere(ours, EXPECTED)
    assert_every_version_readable(ours)
    # pylance keeps writing on what lance_ops wrote: append, delete, compact, filter, take
    lance.write_dataset(source_table(100, 12), ours, mode="append")
    lance.write_dataset(source_table(100, 12), ref, mode="append")
    lance.dataset(ours).delete("id = 101")
    lance.dataset(ref).delete("id = 101")
    assert_same(ours, ref)
    lance.dataset(ours).optimize.compact_files()
    assert_same(ours, ref)
    a, b = lance.dataset(ours), lance.dataset(ref)
    assert a.to_table(filter="cat = 'beta'").equals(b.to_table(filter="cat = 'beta'"))
    assert a.take([0, 5, 30]).equals(b.take([0, 5, 30]))
    # and lance_ops again on top of pylance's versions
    lance_ops.write_dataset(source_table(200, 3), ours, mode="append")
    lance.write_dataset(source_table(200, 3), ref, mode="append")
    assert_same(ours, ref)
    assert_every_version_readable(ours)
    assert_dictionaries_everywhere(ours, EXPECTED)


def test_restore_and_overwrite(twins):
    ours, _ = twins
    lance_ops.write_dataset(source_table(40, 5), ours, mode="append")
    lance_ops.dataset(ours, version=1).restore()
    assert lance.dataset(ours).to_table().equals(lance.dataset(ours, version=1).to_table())
    # an overwrite brings new dictionary values (and a new schema)
    new = pa.table({"k": dict_array(["one", "two"], [1, 0, 1]), "id": [1, 2, 3]})
    lance_ops.write_dataset(new, ours, mode="overwrite")
    assert lance.dataset(ours).to_table().equals(new)
    assert lance.dataset(ours).data_storage_version == "0.1"
    assert lance_ops.dataset(ours).to_table().equals(new)
    lance.write_dataset(new, ours, mode="append")
    assert lance.dataset(ours).to_table()["k"].to_pylist() == ["two", "one", "two"] * 2
    assert_every_version_readable_generic(ours)


# --- byte-identical manifests -------------------------------------------------------------------
def _normalised(ours: mf.ManifestFile, ref: mf.ManifestFile) -> bytes:
    """Our manifest file re-encoded with ref's random or writer-specific values: uuid, time, file
    names and sizes (a data file embeds its writer's name), deletion file ids, writer version (and
    the Overwrite's schema metadata, which only lance_ops records in the transaction)."""
    m = table_pb2.Manifest()
    m.CopyFrom(ours.manifest)
    m.timestamp.CopyFrom(ref.manifest.timestamp)
    m.transaction_file = ref.manifest.transaction_file
    m.writer_version.CopyFrom(ref.manifest.writer_version)
    assert len(m.fragments) == len(ref.manifest.fragments)
    del m.fragments[:]
    m.fragments.extend(ref.manifest.fragments)
    txn = transaction_pb2.Transaction()
    txn.CopyFrom(ours.transaction)
    txn.uuid = ref.transaction.uuid
    op = txn.WhichOneof("operation")
    assert op == ref.transaction.WhichOneof("operation")
    if op == "overwrite":
        # pylance 14 leaves Overwrite.schema_metadata empty (the manifest has it); lance_ops fills it
        assert dict(txn.overwrite.schema_metadata) == dict(ref.manifest.schema_metadata)
        txn.overwrite.ClearField("schema_metadata")
    if op in ("append", "overwrite"):
        getattr(txn, op).ClearField("fragments")
        getattr(txn, op).fragments.extend(getattr(ref.transaction, op).fragments)
    elif op == "delete":
        txn.delete.ClearField("updated_fragments")
        txn.delete.updated_fragments.extend(ref.transaction.delete.updated_fragments)
    return mf.encode_manifest(m, txn, ours.index_section, ours.dictionaries)


def test_manifest_bytes_equal_pylance(tmp_path):
    """Create, append and delete: lance_ops' manifest files equal pylance's but for the random parts."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    table = source_table(0, 30)
    lance_ops.write_dataset(table, ours, data_storage_version="legacy", max_rows_per_group=GROUP)
    lance.write_dataset(table, ref, data_storage_version="legacy", max_rows_per_group=GROUP)
    steps = [
        (lambda u: lance_ops.write_dataset(source_table(30, 10), u, mode="append", max_rows_per_group=GROUP),
         lambda u: lance.write_dataset(source_table(30, 10), u, mode="append", max_rows_per_group=GROUP)),
        (lambda u: lance_ops.dataset(u).delete("id % 4 = 1"), lambda u: lance.dataset(u).delete("id % 4 = 1")),
    ]
    for i in range(len(steps) + 1):
        if i:
            steps[i - 1][0](ours)
            steps[i - 1][1](ref)
        (a, da), (b, db) = latest(ours), latest(ref)
        end = a.manifest.transaction_section
        assert end == b.manifest.transaction_section > 0
        assert da[:end] == db[:end]  # the dictionary values, byte for byte
        assert _normalised(a, b) == db, f"step {i}"
        assert_same(ours, ref)
    # data files too: identical up to the embedded manifest (which names its writer)
    for fa, fb in zip(lance.dataset(ours).get_fragments(), lance.dataset(ref).get_fragments()):
        pa_, pb_ = (Path(u) / "data" / f.metadata.files[0].path for u, f in ((ours, fa), (ref, fb)))
        start = LegacyFileReader(str(pa_)).metadata.manifest_position
        assert pa_.read_bytes()[:start] == pb_.read_bytes()[:start]


# --- lance_ops-created datasets -------------------------------------------------------------------
def test_lance_ops_created_dataset_read_by_pylance(tmp_path):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    table = source_table(0, 50)
    lance_ops.write_dataset(table, ours, data_storage_version="legacy", max_rows_per_file=20, max_rows_per_group=GROUP)
    lance.write_dataset(table, ref, data_storage_version="legacy", max_rows_per_file=20, max_rows_per_group=GROUP)
    assert_same(ours, ref)
    assert lance.dataset(ours).to_table().equals(table)
    assert [f.physical_rows for f in lance.dataset(ours).get_fragments()] == [20, 20, 10]
    assert LegacyFileReader(str(Path(ours) / "data" / lance.dataset(ours).get_fragments()[0]
                                 .metadata.files[0].path)).batch_offsets == [0, 8, 16, 20]
    assert_dictionaries_everywhere(ours, EXPECTED)
    # pylance appends (its dictionary check passes against our manifest), then lance_ops again
    lance.write_dataset(source_table(50, 5), ours, mode="append")
    lance.write_dataset(source_table(50, 5), ref, mode="append")
    lance_ops.dataset(ours).delete("id < 3")
    lance.dataset(ref).delete("id < 3")
    assert_same(ours, ref)
    assert_every_version_readable(ours)


def test_later_batches_are_rekeyed(tmp_path):
    """The first batch fixes the values; later batches holding a subset, in any order, are re-keyed
    (pylance would store their keys unchanged and so read other values)."""
    uri = str(tmp_path / "ds")
    schema = pa.schema([("id", pa.int64()), ("cat", pa.dictionary(pa.int32(), pa.string()))])
    b1 = pa.record_batch([pa.array([0, 1, 2]), dict_array(WORDS, [0, 1, 2])], schema=schema)
    b2 = pa.record_batch([pa.array([3, 4, 5]), dict_array(["gamma", "alpha"], [0, 1, 0])], schema=schema)
    lance_ops.write_dataset(pa.RecordBatchReader.from_batches(schema, [b1, b2]), uri, data_storage_version="legacy")
    want = ["alpha", "beta", "gamma", "gamma", "alpha", "gamma"]
    assert lance.dataset(uri).to_table()["cat"].to_pylist() == want
    assert latest(uri)[0].dictionaries[1].to_pylist() == WORDS
    lance_ops.write_dataset(pa.RecordBatchReader.from_batches(schema, [b1, b2]), uri, mode="append")
    assert lance.dataset(uri).to_table()["cat"].to_pylist() == want * 2
    assert lance_ops.dataset(uri).to_table().equals(lance.dataset(uri).to_table())


# --- refusals -------------------------------------------------------------------------------------
def _files(uri: str) -> list[str]:
    return sorted(str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file())


def test_append_with_other_dictionary_is_refused_like_pylance(twins):
    ours, ref = twins
    before = _files(ours)
    base = source_table(40, 6)
    for values in (["gamma", "alpha", "beta"], WORDS + ["delta"], ["alpha", "beta"]):
        other = base.set_column(1, "cat", dict_array(values, np.arange(6) % 2))
        with pytest.raises(SchemaMismatchError, match="dictionary for `cat` did not match"):
            lance_ops.write_dataset(other, ours, mode="append")
        with pytest.raises(OSError, match="dictionary for `cat` did not match"):
            lance.write_dataset(other, ref, mode="append")
    nested = base.set_column(2, "s", pa.StructArray.from_arrays(
        [base["s"].combine_chunks().field(0), dict_array(["q", "p"], np.arange(6) % 2)], names=["a", "c"]))
    with pytest.raises(SchemaMismatchError, match="dictionary for `s.c`"):
        lance_ops.write_dataset(nested, ours, mode="append")
    assert _files(ours) == before  # nothing written
    assert lance.dataset(ours).version == 1


def test_new_values_in_a_later_batch_are_refused(twins):
    ours, _ = twins
    schema = source_table(0, 1).schema
    good = source_table(40, 4).to_batches()[0]
    bad = good.set_column(1, "cat", dict_array(["omega"], [0, 0, 0, 0]))
    with pytest.raises(SchemaMismatchError, match=r"dictionary values \['omega'\]"):
        lance_ops.write_dataset(pa.RecordBatchReader.from_batches(schema, [good, bad]), ours, mode="append")
    assert lance.dataset(ours).version == 1
    assert lance.dataset(ours).count_rows() == 40


def test_create_without_data_is_refused(tmp_path):
    empty = source_table(0, 0)
    with pytest.raises(UnsupportedError, match="first batch"):
        lance_ops.write_dataset(pa.RecordBatchReader.from_batches(empty.schema, []), str(tmp_path / "a"),
                                data_storage_version="legacy")
    assert not (tmp_path / "a" / "_versions").exists()
    with pytest.raises(OSError, match="dictionary"):
        lance.write_dataset(empty, str(tmp_path / "b"), data_storage_version="legacy")


def test_manifest_without_values_is_refused_and_corrupt_values_are_reported(twins):
    ours, _ = twins
    m, data = latest(ours)
    with pytest.raises(UnsupportedError, match="dictionary values"):
        mf.encode_manifest(m.manifest, m.transaction, m.index_section)
    partial = dict(m.dictionaries)
    partial.pop(next(iter(partial)))
    with pytest.raises(UnsupportedError, match=r"\['cat \(id 1\)'\]"):
        mf.encode_manifest(m.manifest, m.transaction, m.index_section, partial)
    # 2.x manifests carry no values: nothing is asked for
    v2 = table_pb2.Manifest()
    v2.CopyFrom(m.manifest)
    v2.data_format.version = "2.0"
    assert mf.dictionary_fields(v2) == []
    mf.encode_manifest(v2)
    # offsets are recomputed from the values whatever the manifest held
    moved = table_pb2.Manifest()
    moved.CopyFrom(m.manifest)
    next(f for f in moved.fields if f.name == "cat").dictionary.offset = 10**6
    assert mf.encode_manifest(moved, m.transaction, m.index_section, m.dictionaries) == data
    # positions pointing past the file body are reported, naming the field
    blob = bytearray(data)
    at = next(f for f in m.manifest.fields if f.name == "cat").dictionary.offset
    blob[at:at + 8] = (10**6).to_bytes(8, "little")
    with pytest.raises(CorruptFileError, match="dictionary values of field 'cat'"):
        mf.decode_manifest(bytes(blob))


def test_commit_after_a_concurrent_pylance_version(twins):
    """A lance_ops commit that catches up with a newer pylance version carries that version's values."""
    ours, _ = twins
    stale = lance_ops.dataset(ours)
    lance.write_dataset(source_table(40, 6), ours, mode="append")  # v2, behind lance_ops' back
    stale.delete("id = 3")  # (planned on version 1: rows appended since are not its business)
    assert lance.dataset(ours).version == 3
    want = pa.concat_tables([source_table(0, 40), source_table(40, 6)])
    want = want.filter(pa.compute.not_equal(want["id"], 3))
    assert lance.dataset(ours).to_table().to_pydict() == want.to_pydict()
    assert lance.dataset(ours).to_table().equals(lance_ops.dataset(ours).to_table())
    assert_dictionaries_everywhere(ours, EXPECTED)
    assert_every_version_readable(ours)
