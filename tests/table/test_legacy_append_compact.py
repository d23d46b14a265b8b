"""lance_ops appends to, deletes from and compacts legacy (v0.1) datasets pylance wrote.

Every operation is done twice: by lance_ops on one copy and by pylance on a twin; pylance must
then read both copies identically (v0.1 is lossy about nulls, so "identically" means what pylance
itself would have stored), the dataset must stay ``data_format 0.1`` with legacy data files, and
pylance must be able to keep working on what lance_ops wrote.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import SchemaMismatchError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.maintenance.compaction import compact_files

lance = pytest.importorskip("lance")

GROUP = 8


def source_table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": ids,
        "name": pa.array([None if i % 6 == 1 else f"n{i}" for i in ids]),
        "score": pa.array((ids * 0.25).astype(np.float32)),
        "flag": pa.array(ids % 3 == 0),
        "ts": pa.array(ids * 1_000_000, pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[f"t{j}" for j in range(i % 3)] for i in ids], pa.list_(pa.string())),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 2).astype(np.float32)), 2),
        "meta": pa.array([{"a": int(i), "b": f"b{i}"} for i in ids],
                         pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "blob": pa.array([bytes([i % 256]) * int(i % 5) for i in ids], pa.large_binary()),
    }).replace_schema_metadata({"dataset": "legacy"})


@pytest.fixture
def twins(tmp_path):
    """Two identical pylance legacy datasets (2 fragments, groups of 8): ours and pylance's."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(source_table(0, 60), ours, data_storage_version="legacy",
                        max_rows_per_group=GROUP, max_rows_per_file=25)
    shutil.copytree(ours, ref)
    return ours, ref


def assert_same_dataset(ours: str, ref: str) -> None:
    a, b = lance.dataset(ours), lance.dataset(ref)
    assert a.data_storage_version == b.data_storage_version == "0.1"
    assert a.schema.equals(b.schema, check_metadata=True)
    assert a.count_rows() == b.count_rows()
    ta, tb = a.to_table(), b.to_table()
    assert ta.equals(tb), f"\n{ta}\n!=\n{tb}"
    # and lance_ops reads the same
    assert lance_ops.dataset(ours).to_table().equals(tb)


def assert_legacy_files(uri: str) -> None:
    for frag in lance.dataset(uri).get_fragments():
        for df in frag.metadata.files:
            assert (df.file_major_version, df.file_minor_version) == (0, 2)
            assert list(df.column_indices) == []
            reader = LegacyFileReader(str(Path(uri) / "data" / df.path))
            assert reader.num_rows == frag.physical_rows
            assert df.file_size_bytes == (Path(uri) / "data" / df.path).stat().st_size
        assert frag.to_table().num_rows == frag.count_rows()


def test_append(twins):
    ours, ref = twins
    lance_ops.write_dataset(source_table(60, 30), ours, mode="append", max_rows_per_file=20)
    lance.write_dataset(source_table(60, 30), ref, mode="append", max_rows_per_file=20)
    assert_same_dataset(ours, ref)
    assert_legacy_files(ours)
    frags = lance.dataset(ours).get_fragments()
    assert [f.physical_rows for f in frags] == [32, 28, 20, 10]
    # each appended fragment alone, through pylance's fragment API
    for f_ours, f_ref in zip(frags[2:], lance.dataset(ref).get_fragments()[2:]):
        assert f_ours.to_table().equals(f_ref.to_table())
        assert f_ours.to_table(columns=["tags", "meta"]).equals(f_ref.to_table(columns=["tags", "meta"]))
    # pylance keeps working on it: append, filter, take
    lance.write_dataset(source_table(90, 5), ours, mode="append")
    lance.write_dataset(source_table(90, 5), ref, mode="append")
    assert_same_dataset(ours, ref)
    a, b = lance.dataset(ours), lance.dataset(ref)
    assert a.to_table(filter="id >= 58 AND id < 70").equals(b.to_table(filter="id >= 58 AND id < 70"))
    assert a.take([0, 61, 89, 94]).equals(b.take([0, 61, 89, 94]))


def test_append_default_groups_matches_pylance_files(twins):
    """With pylance's default group size our data file equals pylance's up to the embedded manifest."""
    ours, ref = twins
    big = source_table(60, 2500)
    lance_ops.write_dataset(big, ours, mode="append")
    lance.write_dataset(big, ref, mode="append")
    assert_same_dataset(ours, ref)
    a = lance.dataset(ours).get_fragments()[-1].metadata.files[0]
    b = lance.dataset(ref).get_fragments()[-1].metadata.files[0]
    da, db = (Path(ours) / "data" / a.path).read_bytes(), (Path(ref) / "data" / b.path).read_bytes()
    ra = LegacyFileReader(str(Path(ours) / "data" / a.path))
    assert ra.batch_offsets == [0, 1024, 2048, 2500]
    start = ra.metadata.manifest_position
    assert da[:start] == db[:start]


def test_create_legacy_dataset_with_lance_ops(tmp_path):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    table = source_table(0, 40)
    lance_ops.write_dataset(table, ours, data_storage_version="legacy", max_rows_per_file=15)
    lance.write_dataset(table, ref, data_storage_version="legacy", max_rows_per_file=15)
    assert lance.dataset(ours).data_storage_version == "0.1"
    assert lance.dataset(ours).to_table().equals(lance.dataset(ref).to_table())
    assert_legacy_files(ours)


def test_delete(twins):
    ours, ref = twins
    lance_ops.dataset(ours).delete("id % 7 = 3 OR id = 24")
    lance.dataset(ref).delete("id % 7 = 3 OR id = 24")
    assert_same_dataset(ours, ref)
    lance_ops.dataset(ours).delete("id < 32")  # the whole first fragment
    lance.dataset(ref).delete("id < 32")
    assert_same_dataset(ours, ref)
    assert len(lance.dataset(ours).get_fragments()) == 1
    # pylance deletes on top of lance_ops' deletion files
    lance.dataset(ours).delete("id = 40")
    lance.dataset(ref).delete("id = 40")
    assert_same_dataset(ours, ref)


def test_compact(twins):
    ours, ref = twins
    lance_ops.write_dataset(source_table(60, 30), ours, mode="append", max_rows_per_file=10)
    lance.write_dataset(source_table(60, 30), ref, mode="append", max_rows_per_file=10)
    lance_ops.dataset(ours).delete("id % 5 = 2")
    lance.dataset(ref).delete("id % 5 = 2")
    before = lance.dataset(ours).to_table()
    metrics = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=40)
    assert metrics["fragments_removed"] >= 2
    after = lance.dataset(ours)
    assert after.data_storage_version == "0.1"
    assert after.to_table().equals(before)
    assert after.to_table().equals(lance.dataset(ref).to_table())
    assert_legacy_files(ours)
    # pylance compacts what lance_ops wrote
    lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=1000)
    assert lance.dataset(ours).to_table().equals(before)


def test_compact_pylance_dataset_untouched_by_lance_ops_writes(twins):
    """Compaction alone (no lance_ops append first): pylance's groups become lance_ops' groups."""
    ours, ref = twins
    lance_ops.dataset(ours).delete("id = 3")
    before = lance.dataset(ours).to_table()
    compact_files(lance_ops.dataset(ours), target_rows_per_fragment=1000)
    ds = lance.dataset(ours)
    assert len(ds.get_fragments()) == 1 and ds.to_table().equals(before)
    reader = LegacyFileReader(str(Path(ours) / "data" / ds.get_fragments()[0].metadata.files[0].path))
    assert reader.batch_offsets == [0, 59]
    assert reader.field_statistics()["id"]["max_value"].to_pylist() == [59]


def test_dictionary_datasets_append_and_create(tmp_path):
    """Dictionary columns (their values live in the manifest file) append and create like pylance;
    an append whose dictionary differs from the dataset's is refused before anything is written."""
    uri = str(tmp_path / "ds")
    t = pa.table({"id": np.arange(6), "cat": pa.DictionaryArray.from_arrays(
        pa.array(np.arange(6) % 3, pa.int32()), pa.array(["alpha", "beta", "gamma"]))})
    lance.write_dataset(t, uri, data_storage_version="legacy")
    lance_ops.write_dataset(t, uri, mode="append")
    assert lance.dataset(uri).version == 2
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([t, t]))
    files = sorted(p.name for p in (Path(uri) / "data").iterdir())
    other = t.set_column(1, "cat", pa.DictionaryArray.from_arrays(
        pa.array(np.arange(6) % 3, pa.int32()), pa.array(["beta", "alpha", "gamma"])))
    with pytest.raises(SchemaMismatchError, match="dictionary for `cat` did not match"):
        lance_ops.write_dataset(other, uri, mode="append")
    assert lance.dataset(uri).version == 2
    assert sorted(p.name for p in (Path(uri) / "data").iterdir()) == files
    new = str(tmp_path / "new")
    lance_ops.write_dataset(t, new, data_storage_version="legacy")
    assert lance.dataset(new).data_storage_version == "0.1"
    assert lance.dataset(new).to_table().equals(t)


def test_commit_to_legacy_dataset_with_dictionaries(tmp_path):
    """Dictionary values of legacy datasets live in the manifest file: every new version carries
    them (this used to be refused), so pylance reads the values, not empty strings."""
    uri = str(tmp_path / "ds")
    table = pa.table({"id": pa.array(range(6), pa.int64()),
                      "d": pa.array(["a", "b", "a", "c", "b", "a"]).dictionary_encode()})
    lance.write_dataset(table, uri, data_storage_version="legacy")
    assert lance_ops.dataset(uri).delete("id = 1") == {"num_deleted_rows": 1}
    assert lance.dataset(uri).version == 2
    assert lance.dataset(uri).to_table().column("d").to_pylist() == ["a", "a", "c", "b", "a"]
    assert lance_ops.dataset(uri).to_table().equals(lance.dataset(uri).to_table())
