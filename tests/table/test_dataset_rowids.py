"""``_rowid`` / ``_rowaddr`` and take_by_row_id, with and without stable row ids, against pylance."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.table.manifest import feature_flags


def numbers(n: int, start: int = 0) -> pa.Table:
    return pa.table({"a": np.arange(start, start + n, dtype=np.int64), "s": [f"v{i}" for i in range(start, start + n)]})


def take_rows(ds, ids, columns=None) -> pa.Table:
    if isinstance(ds, lance.LanceDataset):
        return ds._take_rows(ids, columns=columns)
    return ds.take_by_row_id(ids, columns=columns)


def ids_table(ds) -> pa.Table:
    return ds.to_table(with_row_id=True, with_row_address=True)


def assert_agree(uri: str, probe_ids) -> None:
    """lance_ops and pylance agree on _rowid/_rowaddr and on takes by row id at the latest version."""
    ref, ours = lance.dataset(uri), lance_ops.dataset(uri)
    assert ours.has_stable_row_ids == ref.has_stable_row_ids
    assert ids_table(ours).equals(ids_table(ref))
    got = take_rows(ours, probe_ids)
    want = take_rows(ref, probe_ids)
    assert got.schema.equals(want.schema, check_metadata=False)
    assert got.equals(want), f"{got}\n!=\n{want}"


def test_row_ids_are_addresses_without_stable_ids(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(numbers(10), uri, max_rows_per_file=4)
    ds = lance_ops.dataset(uri)
    ds.delete("a = 5")
    t = ids_table(ds)
    addrs = [(f << 32) | o for f, o in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 2), (1, 3), (2, 0), (2, 1)]]
    assert t["_rowid"].to_pylist() == t["_rowaddr"].to_pylist() == addrs
    assert not ds.has_stable_row_ids
    assert_agree(uri, [addrs[4], addrs[0], (1 << 32) | 1, addrs[8]])
    assert take_rows(ds, [(2 << 32) | 1, 1 << 32])["a"].to_pylist() == [9, 4]


def test_stable_row_ids_written_by_lance_ops(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(numbers(30), uri, max_rows_per_file=10, enable_stable_row_ids=True)
    assert ds.has_stable_row_ids
    assert ds.manifest.reader_feature_flags & feature_flags.FLAG_STABLE_ROW_IDS
    assert ds.manifest.next_row_id == 30
    lance_ops.write_dataset(numbers(10, 30), uri, mode="append")
    ds = lance_ops.dataset(uri)
    ds.delete("a % 3 = 0")
    ids = ds.to_table(with_row_id=True)["_rowid"].to_pylist()
    assert ids == [a for a in range(40) if a % 3]  # ids handed out in write order, never reused
    assert ds.manifest.next_row_id == 40
    assert_agree(uri, [ids[5], ids[0], 3, ids[-1], 10**6, ids[5]])  # deleted / unknown ids are skipped
    assert take_rows(ds, [38, 3, 1, 10**6])["a"].to_pylist() == [38, 1]

    # pylance compacts: row addresses change, row ids do not
    before = ds.to_table(with_row_id=True)
    metrics = lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100)
    assert metrics.fragments_removed == 4 and metrics.fragments_added == 1
    after = lance_ops.dataset(uri)
    assert after.to_table(with_row_id=True).equals(before)
    assert after.to_table(with_row_address=True)["_rowaddr"].to_pylist()[:2] == [4 << 32, (4 << 32) | 1]
    assert_agree(uri, ids[::4][::-1] + [3, 0])

    # appends and deletes after the compaction keep counting from next_row_id
    lance_ops.write_dataset(numbers(5, 100), uri, mode="append")
    lance_ops.dataset(uri).delete("a = 101 OR a = 1")
    lance.dataset(uri).delete("a = 4")
    lance.write_dataset(numbers(2, 200), uri, mode="append")
    final = lance_ops.dataset(uri)
    rowids = final.to_table(with_row_id=True)["_rowid"].to_pylist()
    assert rowids[-6:] == [40, 42, 43, 44, 45, 46]
    assert_agree(uri, [46, 40, 41, 2, 45, 0])
    for v in range(1, final.version + 1):  # every version, both libraries
        assert ids_table(lance_ops.dataset(uri, version=v)).equals(ids_table(lance.dataset(uri, version=v))), v


def test_stable_row_ids_written_by_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(numbers(25), uri, max_rows_per_file=10, enable_stable_row_ids=True, data_storage_version="2.0")
    lance.write_dataset(numbers(5, 25), uri, mode="append")
    lance.dataset(uri).delete("a > 20 AND a < 27")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=12, materialize_deletions_threshold=0.0)
    lance.dataset(uri).delete("a = 0")
    latest = lance.dataset(uri).version
    for v in range(1, latest + 1):
        ref, ours = lance.dataset(uri, version=v), lance_ops.dataset(uri, version=v)
        assert ids_table(ours).equals(ids_table(ref)), v
        probe = ids_table(ref)["_rowid"].to_pylist()[::3] + [22, 999]
        assert take_rows(ours, probe).equals(take_rows(ref, probe)), v
    # lance_ops keeps stable ids going on a pylance dataset
    lance_ops.write_dataset(numbers(3, 50), uri, mode="append")
    assert lance.dataset(uri).to_table(with_row_id=True)["_rowid"].to_pylist()[-3:] == [30, 31, 32]
    assert_agree(uri, [31, 5, 22])


def test_stable_row_ids_cannot_be_turned_on_later(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(numbers(3), uri)
    ds = lance_ops.write_dataset(numbers(3, 3), uri, mode="append", enable_stable_row_ids=True)
    assert not ds.has_stable_row_ids
    ds = lance_ops.write_dataset(numbers(3, 3), uri, mode="overwrite", enable_stable_row_ids=True)
    assert not ds.has_stable_row_ids and not lance.dataset(uri).has_stable_row_ids
    # and an overwrite keeps them on (ids keep counting), as pylance does
    other = str(tmp_path / "stable")
    lance_ops.write_dataset(numbers(3), other, enable_stable_row_ids=True)
    ds = lance_ops.write_dataset(numbers(2, 10), other, mode="overwrite")
    assert ds.has_stable_row_ids
    assert ds.to_table(with_row_id=True)["_rowid"].to_pylist() == [3, 4]
    assert lance.dataset(other).to_table(with_row_id=True)["_rowid"].to_pylist() == [3, 4]


@pytest.mark.parametrize("stable", [False, True])
def test_take_by_row_id_order_duplicates_and_columns(tmp_path, stable):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(numbers(12), uri, max_rows_per_file=5, enable_stable_row_ids=stable)
    ds = lance_ops.dataset(uri)
    ids = ds.to_table(with_row_id=True)["_rowid"].to_pylist()
    picks = [ids[11], ids[0], ids[6], ids[0]]
    assert take_rows(ds, picks)["a"].to_pylist() == [11, 0, 6, 0]
    assert take_rows(ds, pa.array(picks, pa.uint64()), columns=["s"]).to_pylist() == [
        {"s": "v11"}, {"s": "v0"}, {"s": "v6"}, {"s": "v0"}]
    assert take_rows(ds, []).num_rows == 0
    assert_agree(uri, picks)
