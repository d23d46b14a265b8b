"""Interop both ways: pylance datasets read by lance_ops at every version, lance_ops datasets read
(and then modified) by pylance, and the type matrix through both libraries."""
from __future__ import annotations

import os

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from tests.file.type_matrix import assert_tables_equal, make_table

FILTERS = [None, "a % 7 = 3", "a >= 5000 AND s IS NOT NULL", "s LIKE 'v1%'"]


def numbers(n: int, start: int = 0) -> pa.Table:
    a = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"a": a, "s": pa.array([f"v{i}" if i % 11 else None for i in a.tolist()])})


def _nan_free(table: pa.Table) -> pa.Table:
    cols = [pc.if_else(pc.is_nan(c), pa.scalar(-1.0, c.type), c) if pa.types.is_floating(c.type) else c
            for c in table.columns]
    return pa.Table.from_arrays(cols, schema=table.schema)


def assert_version_equal(uri: str, version, *, row_ids: bool) -> None:
    """lance_ops and pylance agree on scans, counts and takes of ``version``."""
    ref, ours = lance.dataset(uri, version=version), lance_ops.dataset(uri, version=version)
    assert ours.version == ref.version
    assert ours.schema == ref.schema
    got, want = ours.to_table(with_row_id=row_ids), ref.to_table(with_row_id=row_ids)
    assert _nan_free(got).equals(_nan_free(want)), f"version {version}"
    for flt in FILTERS:
        if flt is not None and any(name not in ref.schema.names for name in ("a", "s")):
            continue
        assert ours.count_rows(flt) == ref.count_rows(flt), (version, flt)
    n = ref.count_rows()
    if n:
        idx = sorted({0, n - 1, n // 2, n // 3})[::-1] + [0]
        assert _nan_free(ours.take(idx)).equals(_nan_free(ref.take(idx))), f"version {version}"


# --- pylance writes, lance_ops reads -------------------------------------------------------------------
def _pylance_history(uri: str, *, stable: bool, v2: bool, version: str) -> None:
    kw = dict(data_storage_version=version, enable_stable_row_ids=stable, enable_v2_manifest_paths=v2)
    lance.write_dataset(numbers(9000), uri, max_rows_per_file=8000, **kw)   # v1: 2 fragments
    ds = lance.write_dataset(numbers(50, 9000), uri, mode="append")          # v2
    ds.tags.create("appended", 2)
    ds.delete("a % 10 = 1")                                                  # v3: arrow files
    ds.delete("a < 8000 AND a % 10 < 8")                                     # v4: bitmap (6400 in fragment 0)
    ds.delete("a >= 8000 AND a < 9000")                                      # v5: fragment 1 dropped
    ds.add_columns({"twice": "a * 2"})                                       # v6: two files per fragment
    ds.add_columns(pa.field("empty", pa.float64()))                          # v7: a column no file has
    ds.tags.create("evolved", 7)
    lance.write_dataset(pa.table({"a": [1, 2], "s": ["x", None], "twice": [2, 4], "empty": [0.5, None]}),
                        uri, mode="append")                                  # v8: all columns in one file
    if stable:
        ds = lance.dataset(uri)
        ds.optimize.compact_files(target_rows_per_fragment=20000)            # v9, v10
    lance.dataset(uri, version=3).restore()                                  # restore


#: (stable row ids, v2 manifest names, storage version): every combination at 2.0, and 2.1, 2.2 and
#: 2.2 with and without stable row ids (2.2 is what pylance and LanceDB write by default). Not legacy:
#: pylance cannot add an all-null column to a legacy dataset (tests/table/test_legacy_dataset.py
#: covers legacy histories)
PYLANCE_HISTORIES = [(False, True, "2.0"), (True, True, "2.0"), (False, False, "2.0"), (True, False, "2.0"),
                     (False, True, "2.1"), (False, True, "2.2"), (True, True, "2.2")]


@pytest.mark.parametrize("stable, v2, version", PYLANCE_HISTORIES, ids=[
    f"{'stable_row_ids' if s else 'addresses'}-{'v2' if v else 'v1'}_names-{ver}" for s, v, ver in PYLANCE_HISTORIES])
def test_pylance_datasets_read_by_lance_ops_at_every_version(tmp_path, stable, v2, version):
    uri = str(tmp_path / "ds")
    _pylance_history(uri, stable=stable, v2=v2, version=version)
    assert lance_ops.dataset(uri).data_storage_version == lance.dataset(uri).data_storage_version \
        == {"legacy": "0.1"}.get(version, version)
    names = os.listdir(os.path.join(uri, "_versions"))
    assert ("1.manifest" in names) == (not v2)
    assert {n.rsplit(".", 1)[1] for n in os.listdir(os.path.join(uri, "_deletions"))} == {"arrow", "bin"}
    latest = lance.dataset(uri).version
    assert lance_ops.dataset(uri).version == latest == (11 if stable else 9)
    for v in range(1, latest + 1):
        assert_version_equal(uri, v, row_ids=True)
    for tag in ("appended", "evolved"):
        assert_version_equal(uri, tag, row_ids=True)
    assert lance_ops.dataset(uri).versions() == lance.dataset(uri).versions()
    assert lance_ops.dataset(uri).tags.list() == lance.dataset(uri).tags.list()
    # the column added without data reads as nulls in the old fragments only
    empty = lance_ops.dataset(uri, version=8).to_table(columns=["empty"])["empty"]
    assert empty.null_count == len(empty) - 1


# --- lance_ops writes, pylance reads (and then writes) -----------------------------------------------------
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2", "legacy"])
def test_lance_ops_datasets_read_by_pylance_at_every_version(tmp_path, version):
    """Each storage version lance_ops writes on request: pylance reads every version of a history
    lance_ops wrote, then continues it (append, delete, compaction), and lance_ops reads that."""
    uri = str(tmp_path / "ds")
    expected: dict[int, pa.Table] = {}

    def record(ds, table):
        expected[ds.version] = table.combine_chunks()

    t = numbers(12000)
    record(lance_ops.write_dataset(t, uri, max_rows_per_file=5000, data_storage_version=version), t)  # v1
    assert lance.dataset(uri).data_storage_version == {"legacy": "0.1"}.get(version, version)
    t = pa.concat_tables([t, numbers(100, 20000)])
    record(lance_ops.write_dataset(numbers(100, 20000), uri, mode="append"), t)              # v2
    ds = lance_ops.dataset(uri)
    ds.delete("a % 3 = 0")                                                                   # v3
    t = t.filter(pa.array(t["a"].to_numpy() % 3 != 0))
    record(ds, t)
    ds.delete("a < 6000")                                                                    # v4: bitmap + dropped
    t = t.filter(pc.greater_equal(t["a"], 6000))
    record(ds, t)
    ow = numbers(7, 500)
    record(lance_ops.write_dataset(ow, uri, mode="overwrite"), ow)                           # v5
    record(lance_ops.dataset(uri, version=4).restore(), expected[4])                         # v6
    ds = lance_ops.dataset(uri)
    ds.tags.create("restored", 6)
    assert ds.delete("false") == {"num_deleted_rows": 0}                                      # v7
    record(ds, expected[6])
    for v, want in expected.items():
        assert lance.dataset(uri, version=v).to_table().equals(want), f"version {v}"
        assert lance_ops.dataset(uri, version=v).to_table().equals(want), f"version {v}"
        assert_version_equal(uri, v, row_ids=True)
    assert lance.dataset(uri, version="restored").to_table().equals(expected[4])
    assert lance.dataset(uri).versions() == lance_ops.dataset(uri).versions()

    # pylance continues the history; lance_ops reads what it wrote
    lance.write_dataset(numbers(5, 90000), uri, mode="append")
    lance.dataset(uri).delete("a = 90001 OR a = 11999")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100000)
    lance_ops.dataset(uri).delete("a = 90004")
    lance_ops.write_dataset(numbers(2, 95000), uri, mode="append")
    final = lance.dataset(uri).to_table()
    assert final["a"].to_pylist() == [a for a in range(6000, 12000) if a % 3 and a != 11999] + [
        a for a in range(20000, 20100) if a % 3] + [90000, 90002, 90003, 95000, 95001]
    for v in range(1, lance.dataset(uri).version + 1):
        assert_version_equal(uri, v, row_ids=True)
    assert lance.dataset(uri).data_storage_version == {"legacy": "0.1"}.get(version, version)


def test_stable_row_id_dataset_from_lance_ops_modified_by_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(numbers(20), uri, max_rows_per_file=8, enable_stable_row_ids=True)
    lance_ops.dataset(uri).delete("a < 3")
    lance.write_dataset(numbers(4, 100), uri, mode="append")
    lance.dataset(uri).delete("a = 101")
    lance_ops.write_dataset(numbers(2, 200), uri, mode="append")
    ids = lance.dataset(uri).to_table(with_row_id=True)["_rowid"].to_pylist()
    assert ids == list(range(3, 20)) + [20, 22, 23, 24, 25]
    for v in range(1, lance.dataset(uri).version + 1):
        assert_version_equal(uri, v, row_ids=True)


# --- the type matrix through both libraries ----------------------------------------------------------
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_type_matrix_round_trips(tmp_path, version):
    table = make_table(3000, seed=7)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")

    # lance_ops writes (3 fragments), deletes; pylance reads the same rows
    lance_ops.write_dataset(table, ours, max_rows_per_file=1200, data_storage_version=version)
    lance_ops.dataset(ours).delete("int32 > 0 OR utf8 IS NULL")
    keep = pc.invert(pc.fill_null(pc.or_kleene(pc.greater(table["int32"], 0), pc.is_null(table["utf8"])), False))
    expected = table.filter(keep)
    assert_tables_equal(lance.dataset(ours).to_table(), expected)
    assert_tables_equal(lance_ops.dataset(ours).to_table(), expected)
    idx = [0, 17, expected.num_rows - 1, 5]
    assert_tables_equal(lance.dataset(ours).take(idx), expected.take(idx))
    assert_tables_equal(lance_ops.dataset(ours).take(idx), expected.take(idx))

    # pylance appends to it; lance_ops reads both parts
    lance.write_dataset(make_table(500, seed=8), ours, mode="append")
    both = pa.concat_tables([expected, make_table(500, seed=8)])
    assert_tables_equal(lance_ops.dataset(ours).to_table(), both)

    # pylance writes (same version) and deletes; lance_ops reads the same rows and appends
    lance.write_dataset(table, theirs, max_rows_per_file=1200, data_storage_version=version)
    lance.dataset(theirs).delete("int32 > 0 OR utf8 IS NULL")
    assert_tables_equal(lance_ops.dataset(theirs).to_table(), expected)
    cols = ["struct", "list_struct", "dict_utf8", "decimal256"]
    assert_tables_equal(lance_ops.dataset(theirs).to_table(columns=cols), expected.select(cols))
    lance_ops.write_dataset(make_table(500, seed=8), theirs, mode="append")
    assert_tables_equal(lance.dataset(theirs).to_table(), both)
    assert lance.dataset(ours).data_storage_version == lance.dataset(theirs).data_storage_version == version
