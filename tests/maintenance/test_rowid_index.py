"""Persisted row-id index: building, incremental refresh, lookups, staleness and cleanup.

Oracle: the same take_by_row_id answered without any index (the fragment row-id sequences), and
pylance's ``_take_rows`` on the same dataset.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_ops
from lance_ops.format.v2_0.reader import LanceFileReader
from lance_ops.format.registry import LanceFileWriter
from lance_ops.maintenance import rowid_index as R
from lance_ops.table.commit import hooks


def table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()), "s": pa.array([f"r{i}" for i in ids])})


@contextlib.contextmanager
def no_index():
    """take_by_row_id without the persisted index (the fallback path)."""
    saved = hooks.register_row_id_index(None)
    try:
        yield
    finally:
        hooks.register_row_id_index(saved)


@contextlib.contextmanager
def count_lookups():
    hits = []

    def spy(ds, frags, ids):
        out = R.lookup(ds, frags, ids)
        hits.append(out is not None)
        return out

    saved = hooks.register_row_id_index(spy)
    try:
        yield hits
    finally:
        hooks.register_row_id_index(saved)


def all_row_ids(ds) -> np.ndarray:
    return ds.to_table(columns=[], with_row_id=True).column("_rowid").to_numpy()


def check_takes(uri: str, ids) -> pa.Table:
    """take_by_row_id with the index == without == pylance; returns the result."""
    ids = np.asarray(ids, dtype=np.uint64)
    got = lance_ops.dataset(uri).take_by_row_id(ids)
    with no_index():
        plain = lance_ops.dataset(uri).take_by_row_id(ids)
    assert got.equals(plain)
    theirs = lance.dataset(uri)._take_rows(ids.tolist())
    assert got.equals(theirs.cast(got.schema))
    return got


@pytest.fixture
def stable(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(table(0, 3000), uri, max_rows_per_file=1000, enable_stable_row_ids=True)
    return uri


def test_the_public_face_installs_the_hook():
    import lance_ops.api  # noqa: F401 - composing the layers installs it (not importing rowid_index)

    assert hooks.row_id_index() is R.lookup


def test_no_stable_row_ids_is_a_noop(tmp_path):
    uri = str(tmp_path / "plain")
    ds = lance_ops.write_dataset(table(0, 10), uri)
    assert R.refresh_row_id_index(ds) == {"skipped": "no stable row ids", "version": 1}
    assert not os.path.exists(os.path.join(uri, R.ROWID_INDEX_DIR))


def test_build_and_lookup(stable):
    ds = lance_ops.dataset(stable)
    res = R.refresh_row_id_index(ds)
    assert res["version"] == 1 and res["rebuilt"] == 3 and res["reused"] == 0 and res["rows"] == 3000
    assert not res["up_to_date"]
    name = os.path.basename(res["path"])
    assert name.startswith("1-") and name.endswith(".lance")
    # the file: sorted ids, addresses, coverage in the metadata; pylance's file reader opens it
    t = LanceFileReader(res["path"]).read_all()
    assert t.column("row_id").to_pylist() == list(range(3000))
    assert t.column("fragment_id").to_pylist() == [i // 1000 for i in range(3000)]
    assert t.column("offset").to_pylist() == [i % 1000 for i in range(3000)]
    meta = json.loads(t.schema.metadata[b"lance_ops.rowid_index"])
    assert meta["version"] == 1 and [f["id"] for f in meta["fragments"]] == [0, 1, 2]
    assert lance.file.LanceFileReader(res["path"]).read_all().to_table().num_rows == 3000
    with count_lookups() as hits:
        got = check_takes(stable, [2999, 0, 1500, 1500, 123456])
    assert hits[0] is True
    assert got.column("id").to_pylist() == [2999, 0, 1500, 1500]
    # pylance reads the dataset as before
    assert lance.dataset(stable).count_rows() == 3000


def test_refresh_is_idempotent_and_incremental(stable):
    ds = lance_ops.dataset(stable)
    first = R.refresh_row_id_index(ds, idempotency_key="k1")
    again = R.refresh_row_id_index(ds, idempotency_key="k1")
    assert again["up_to_date"] and again["path"] == first["path"] and again["idempotency_key"] == "k1"
    assert len(os.listdir(os.path.join(stable, R.ROWID_INDEX_DIR))) == 1
    ds = lance_ops.write_dataset(table(3000, 1500), stable, mode="append", max_rows_per_file=1000)
    res = R.refresh_row_id_index(ds)
    assert (res["version"], res["reused"], res["rebuilt"], res["rows"]) == (2, 3, 2, 4500)
    ds.delete("id >= 1000 AND id < 1010")
    res = R.refresh_row_id_index(lance_ops.dataset(stable))
    assert (res["version"], res["reused"], res["rebuilt"], res["rows"]) == (3, 4, 1, 4490)
    with count_lookups() as hits:
        got = check_takes(stable, [1005, 1010, 4499, 3000, 999])
    assert hits == [True]
    assert got.column("id").to_pylist() == [1010, 4499, 3000, 999]


def test_refresh_targets_latest_version(stable):
    old = lance_ops.dataset(stable)
    lance_ops.write_dataset(table(3000, 10), stable, mode="append")
    res = R.refresh_row_id_index(old)
    assert res["version"] == 2 and res["rows"] == 3010


def test_stale_index_after_delete_never_returns_deleted_rows(stable):
    R.refresh_row_id_index(lance_ops.dataset(stable))
    ds = lance_ops.dataset(stable)
    ds.delete("id < 100")
    with count_lookups() as hits:
        got = check_takes(stable, [5, 99, 100, 2999])
        # the dataset object that did the delete moved to version 2: its cache must not lie either
        assert ds.take_by_row_id(np.array([5, 100], np.uint64)).column("id").to_pylist() == [100]
    assert got.column("id").to_pylist() == [100, 2999]
    assert hits == [False, False]  # version 1's index does not cover version 2: fallback
    # the old version still uses its index
    with count_lookups() as hits:
        assert lance_ops.dataset(stable, version=1).take_by_row_id([5]).column("id").to_pylist() == [5]
    assert hits == [True]


def test_stale_index_after_compaction(stable):
    from lance_ops.maintenance.compaction import compact_files

    R.refresh_row_id_index(lance_ops.dataset(stable))
    ds = lance_ops.dataset(stable)
    ds.delete("id % 3 = 0")
    compact_files(ds, target_rows_per_fragment=5000)
    fresh = lance_ops.dataset(stable)
    assert len(fresh.manifest.fragments) == 1
    ids = [0, 1, 2, 1000, 1001, 2998, 2999]
    with count_lookups() as hits:
        got = check_takes(stable, ids)
    assert hits == [False]
    assert got.column("id").to_pylist() == [1, 2, 1000, 1001, 2998, 2999]
    res = R.refresh_row_id_index(fresh)
    assert res["rebuilt"] == 1 and res["reused"] == 0 and res["rows"] == 2000
    with count_lookups() as hits:
        assert check_takes(stable, ids).column("id").to_pylist() == [1, 2, 1000, 1001, 2998, 2999]
    assert hits == [True]


def test_pylance_compaction_then_refresh(stable):
    R.refresh_row_id_index(lance_ops.dataset(stable))
    theirs = lance.dataset(stable)
    theirs.delete("id < 500")
    theirs.optimize.compact_files(target_rows_per_fragment=2000)
    check_takes(stable, [0, 499, 500, 2999, 1234])
    res = R.refresh_row_id_index(lance_ops.dataset(stable))
    assert res["rows"] == 2500
    got = check_takes(stable, all_row_ids(lance_ops.dataset(stable))[::7])
    assert got.num_rows == len(range(0, 2500, 7))


def test_index_of_another_version_with_same_fragments_is_used(stable):
    R.refresh_row_id_index(lance_ops.dataset(stable))
    ds = lance_ops.dataset(stable)
    ds.tags.create("t", 1)
    ds.checkout_version(1).restore()  # version 2: the same fragments as version 1
    fresh = lance_ops.dataset(stable)
    assert fresh.version == 2
    with count_lookups() as hits:
        check_takes(stable, [7, 2500])
    assert hits == [True]


def test_tampered_index_is_not_trusted(stable):
    res = R.refresh_row_id_index(lance_ops.dataset(stable))
    t = LanceFileReader(res["path"]).read_all()
    meta = json.loads(t.schema.metadata[b"lance_ops.rowid_index"])
    meta["fragments"][0]["physical_rows"] = 999  # claims other fragments than version 1 has
    os.remove(res["path"])
    bad = t.replace_schema_metadata({b"lance_ops.rowid_index": json.dumps(meta).encode()})
    with LanceFileWriter(res["path"], bad.schema) as w:
        w.write_batch(bad)
    with count_lookups() as hits:
        check_takes(stable, [1, 2, 3])
    assert hits == [False]
    # a refresh does not trust it either: it writes a correct one
    res2 = R.refresh_row_id_index(lance_ops.dataset(stable))
    assert not res2["up_to_date"] and res2["rows"] == 3000


def test_cleanup_removes_index_of_removed_versions(stable):
    first = R.refresh_row_id_index(lance_ops.dataset(stable))
    lance_ops.write_dataset(table(3000, 10), stable, mode="append")
    second = R.refresh_row_id_index(lance_ops.dataset(stable))
    ds = lance_ops.dataset(stable)
    stats = ds.cleanup_old_versions(dt.timedelta(0))
    assert stats.rowid_index_files_removed == 1
    assert not os.path.exists(first["path"]) and os.path.exists(second["path"])
    assert lance.dataset(stable).count_rows() == 3010
    # pylance's cleanup leaves our area alone and the index stays valid
    lance.dataset(stable).cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    assert os.path.exists(second["path"])
    with count_lookups() as hits:
        check_takes(stable, [3005])
    assert hits == [True]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 300)),
    st.tuples(st.just("delete"), st.integers(2, 9), st.integers(0, 8)),
    st.tuples(st.just("compact"), st.integers(100, 800)),
    st.just(("refresh",)),
), min_size=1, max_size=7), probe=st.lists(st.integers(0, 4000), max_size=40))
def test_property_lookups_match_the_fallback(tmp_path_factory, ops, probe):
    from lance_ops.maintenance.compaction import compact_files

    uri = str(tmp_path_factory.mktemp("prop") / "ds")
    lance_ops.write_dataset(table(0, 200), uri, max_rows_per_file=70, enable_stable_row_ids=True)
    next_id = 200
    R.refresh_row_id_index(lance_ops.dataset(uri))
    for op in ops:
        ds = lance_ops.dataset(uri)
        if op[0] == "append":
            lance_ops.write_dataset(table(next_id, op[1]), uri, mode="append", max_rows_per_file=90)
            next_id += op[1]
        elif op[0] == "delete":
            ds.delete(f"id % {op[1]} = {op[2] % op[1]}")
        elif op[0] == "compact":
            compact_files(ds, target_rows_per_fragment=op[1])
        else:
            R.refresh_row_id_index(ds)
        ids = np.array(probe + list(all_row_ids(lance_ops.dataset(uri))[::11]), dtype=np.uint64)
        got = lance_ops.dataset(uri).take_by_row_id(ids)
        with no_index():
            plain = lance_ops.dataset(uri).take_by_row_id(ids)
        assert got.equals(plain)
    R.refresh_row_id_index(lance_ops.dataset(uri))
    check_takes(uri, probe)
