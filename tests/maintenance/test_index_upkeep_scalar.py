"""optimize_indices on scalar indices (issue 22), with pylance 14.0.2 as the oracle.

Datasets are made by pylance with BTREE, BITMAP and LABEL_LIST indices, then get appended
fragments (pylance and lance-ops appends) and deletions. Our ``optimize_indices`` runs on the
dataset, pylance's own on a copy; both must give pylance the same index metadata, the same decoded
index files and the same query results, which equal a scan without indices.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import lance_ops
from lance_ops.errors import RetryableCommitConflictError, UnsupportedError
from lance_ops.maintenance import optimize_indices
from lance_ops.maintenance.index_remap import codecs
from lance_ops.table.dataset import LanceDataset
from lance_ops.table.index_files import listed_files
from lance_ops.table.indices import fragment_ids, segment_uuid

from tests.maintenance.index_remap_helpers import make_table

lance = pytest.importorskip("lance")

NAMES = ("id_idx", "cat_idx", "labels_idx")
FILTERS = [
    "id >= 1400 and id < 1600", "id < 20", "id = 1503", "cat = 'c3'", "cat is null",
    "array_has_any(labels, ['l1'])", "array_has_all(labels, ['l0', 'l2'])",
]


def _build(path: str, *, stable: bool, version: str, ops_append: bool = False) -> None:
    """2 indexed fragments, then an append, a delete and another append (unindexed)."""
    t = make_table(2000)
    ds = lance.write_dataset(t.slice(0, 1000), path, max_rows_per_file=500, enable_stable_row_ids=stable,
                             data_storage_version=version)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    lance.write_dataset(t.slice(1000, 500), path, mode="append")
    lance.dataset(path).delete("id % 10 = 3")
    if ops_append:
        lance_ops.write_dataset(t.slice(1500, 500), path, mode="append")
    else:
        lance.write_dataset(t.slice(1500, 500), path, mode="append")


def _index_dirs(path: str) -> set[str]:
    """Index directories holding files (deleted files may leave empty directories behind)."""
    return {d for d in os.listdir(f"{path}/_indices") if os.listdir(f"{path}/_indices/{d}")}


def _copy(path: str, tmp: Path, name: str = "pylance_copy") -> str:
    copy = str(tmp / name)
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    return copy


def _segments(path: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for index in LanceDataset(path).manifest_file.index_section.indices:
        out.setdefault(index.name, []).append(index)
    return out


def _decoded(path: str, index) -> dict:
    """An index segment's files decoded (BTREE: the page tables; bitmaps: key -> row set)."""
    ds = LanceDataset(path)
    uid = segment_uuid(index)
    names = [n for n, _ in listed_files(index)]
    out: dict = {"files": names}
    for name in names:
        f = codecs.read_index_file(ds.store, ds.base, uid, name)
        if name == "bitmap_page_lookup.lance":
            keys = f.table.column("keys").to_pylist()
            sets = [codecs.decode_row_addr_treemap(b).addresses.tolist() for b in f.table.column("bitmaps").to_pylist()]
            nulls = f.buffer_for("lance:label_list_nulls")
            out[name] = (keys, sets, None if nulls is None else codecs.decode_row_addr_treemap(nulls).addresses.tolist(),
                         {k: v for k, v in f.metadata.items() if k != "lance:label_list_nulls"}, str(f.version))
        else:
            table = f.table
            if name == "page_data.lance":  # equal values may come in any order: compare sorted pairs
                table = table.sort_by([("values", "ascending"), ("ids", "ascending")])
            out[name] = (table.to_pylist(), f.metadata, str(f.version))
    return out


def _meta(index) -> tuple:
    return (index.name, list(index.fields), fragment_ids(index), index.dataset_version, index.index_version,
            index.index_details.type_url, bytes(index.index_details.value), [n for n, _ in listed_files(index)])


def _assert_same_as_pylance(ours: str, theirs: str) -> None:
    a, b = _segments(ours), _segments(theirs)
    assert sorted(a) == sorted(b)
    for name in a:
        assert [_meta(i) for i in a[name]] == [_meta(i) for i in b[name]], name
        for x, y in zip(a[name], b[name]):
            assert _decoded(ours, x) == _decoded(theirs, y), name


def _deleted(i: int) -> bool:
    return i % 10 == 3 and i < 1500


def _assert_queries(ours: str, theirs: str, *, full: bool = True, deleted=_deleted) -> None:
    a, b = lance.dataset(ours), lance.dataset(theirs)
    for name in NAMES:
        stats = a.stats.index_stats(name)
        if full:
            assert stats["num_unindexed_rows"] == 0, (name, stats)
            assert stats["num_indexed_fragments"] == len(a.get_fragments())
    for f in FILTERS:
        got = sorted(a.to_table(filter=f, columns=["id"]).column("id").to_pylist())
        want = sorted(b.to_table(filter=f, columns=["id"]).column("id").to_pylist())
        brute = sorted(a.to_table(filter=f, columns=["id"], use_scalar_index=False).column("id").to_pylist())
        assert got == want == brute, f
        assert not any(deleted(i) for i in got)  # deleted rows never appear
    assert "ScalarIndexQuery" in a.scanner(filter="cat = 'c3'").explain_plan()


@pytest.mark.parametrize("version,stable", [("2.0", False), ("2.1", False), ("2.2", False),
                                            ("2.1", True), ("2.2", True)])
def test_default_merges_newest_segment_like_pylance(tmp_path: Path, version: str, stable: bool) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=stable, version=version)
    theirs = _copy(path, tmp_path)
    lance.dataset(theirs).optimize.optimize_indices()
    before = LanceDataset(path).version
    result = optimize_indices(LanceDataset(path))
    assert result.committed and result.version == before + 1
    txn = LanceDataset(path).transaction
    assert txn.HasField("create_index")
    assert [i.name for i in txn.create_index.new_indices] == sorted(NAMES)
    assert sorted(i.name for i in txn.create_index.removed_indices) == sorted(NAMES)
    _assert_same_as_pylance(path, theirs)
    _assert_queries(path, theirs)


def test_delta_then_default_like_pylance(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1", ops_append=True)
    theirs = _copy(path, tmp_path)
    read_version = LanceDataset(path).version
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    ds = lance_ops.dataset(path)
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    assert ds.version == read_version + 1
    segs = _segments(path)
    assert all(len(s) == 2 and s[1].dataset_version == read_version for s in segs.values())
    assert fragment_ids(segs["id_idx"][1]) == [2, 3]
    _assert_same_as_pylance(path, theirs)
    _assert_queries(path, theirs)
    # another append, then the default folds it into the newest (delta) segment only
    more = make_table(2300).slice(2000, 300)
    lance.write_dataset(more, path, mode="append")
    lance.write_dataset(more, theirs, mode="append")
    lance.dataset(theirs).optimize.optimize_indices()
    optimize_indices(LanceDataset(path))
    assert [fragment_ids(s) for s in _segments(path)["cat_idx"]] == [[0, 1], [2, 3, 4]]
    _assert_same_as_pylance(path, theirs)
    _assert_queries(path, theirs)


def test_merging_two_segments(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.2")
    optimize_indices(LanceDataset(path), num_indices_to_merge=0)
    lance.write_dataset(make_table(2300).slice(2000, 300), path, mode="append")
    theirs = _copy(path, tmp_path)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=2)
    optimize_indices(LanceDataset(path), num_indices_to_merge=2)
    _assert_same_as_pylance(path, theirs)
    _assert_queries(path, theirs)


def test_nothing_to_do_commits_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")
    optimize_indices(LanceDataset(path))
    version = LanceDataset(path).version
    result = optimize_indices(LanceDataset(path))
    assert not result.committed and result.version is None
    assert {i.skipped for i in result.indices} == {"every live fragment is indexed"}
    assert LanceDataset(path).version == version


def test_removed_fragment_leaves_the_bitmap(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    t = make_table(2000)
    for stable in (False, True):
        shutil.rmtree(path, ignore_errors=True)
        ds = lance.write_dataset(t.slice(0, 1000), path, max_rows_per_file=500, enable_stable_row_ids=stable)
        for col, kind in (("id", "BTREE"), ("cat", "BITMAP"), ("labels", "LABEL_LIST")):
            ds.create_scalar_index(col, kind)
        ds = lance.write_dataset(t.slice(1000, 500), path, mode="append")
        ds.delete("id >= 500 and id < 1000")
        ds.delete("id < 10")
        theirs = _copy(path, tmp_path, f"copy{stable}")
        lance.dataset(theirs).optimize.optimize_indices()
        optimize_indices(LanceDataset(path))
        assert fragment_ids(_segments(path)["id_idx"][0]) == [0, 2]
        _assert_same_as_pylance(path, theirs)
        _assert_queries(path, theirs, deleted=lambda i: 500 <= i < 1000 or i < 10)


def test_unsupported_kind_refused_before_writing(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")
    lance.dataset(path).create_scalar_index("text", "INVERTED")
    lance.write_dataset(make_table(2300).slice(2000, 300), path, mode="append")
    before = _index_dirs(path)
    version = LanceDataset(path).version
    with pytest.raises(UnsupportedError, match=r"'text_idx' \(INVERTED\).*Nothing was written"):
        optimize_indices(LanceDataset(path))
    assert _index_dirs(path) == before and LanceDataset(path).version == version
    optimize_indices(LanceDataset(path), index_names=list(NAMES))
    stats = lance.dataset(path).stats
    assert stats.index_stats("cat_idx")["num_unindexed_rows"] == 0
    assert stats.index_stats("text_idx")["num_unindexed_rows"] > 0
    with pytest.raises(ValueError, match="no index named 'nope'"):
        optimize_indices(LanceDataset(path), index_names=["nope"])


def test_pylance_maintenance_works_afterwards(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")
    optimize_indices(LanceDataset(path))
    lance.write_dataset(make_table(2300).slice(2000, 300), path, mode="append")
    ds = lance.dataset(path)
    ds.optimize.optimize_indices()
    ds.optimize.compact_files()
    ds.cleanup_old_versions(older_than=__import__("datetime").timedelta(0), delete_unverified=True)
    ds = lance.dataset(path)
    for f in FILTERS:
        got = sorted(ds.to_table(filter=f, columns=["id"]).column("id").to_pylist())
        assert got == sorted(ds.to_table(filter=f, columns=["id"], use_scalar_index=False).column("id").to_pylist())
    live = {segment_uuid(i) for i in LanceDataset(path).manifest_file.index_section.indices}
    assert _index_dirs(path) == live


def test_concurrent_append_is_kept(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")
    stale = LanceDataset(path)
    lance.write_dataset(make_table(2300).slice(2000, 300), path, mode="append")  # after our read
    optimize_indices(stale)
    ds = lance.dataset(path)
    assert ds.count_rows() == 1850 + 300
    stats = ds.stats.index_stats("id_idx")
    assert stats["num_unindexed_rows"] == 300 and stats["num_indexed_fragments"] == 4
    got = sorted(ds.to_table(filter="id >= 1990", columns=["id"]).column("id").to_pylist())
    assert got == list(range(1990, 2300))


def test_concurrent_compaction_fails_cleanly(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")
    stale = LanceDataset(path)
    lance.dataset(path).optimize.compact_files()
    after_compaction = _index_dirs(path)
    with pytest.raises(RetryableCommitConflictError, match="preempted"):
        optimize_indices(stale)
    assert _index_dirs(path) == after_compaction  # the uncommitted segments were removed
    optimize_indices(LanceDataset(path))  # a re-run on the new version succeeds
    ds = lance.dataset(path)
    assert ds.stats.index_stats("cat_idx")["num_unindexed_rows"] == 0
    want = sorted(ds.to_table(filter="cat = 'c1'", columns=["id"], use_scalar_index=False).column("id").to_pylist())
    assert sorted(ds.to_table(filter="cat = 'c1'", columns=["id"]).column("id").to_pylist()) == want


def test_cli_optimize_indices_and_inspect_coverage(tmp_path: Path, capsys) -> None:
    import json

    from lance_ops import cli

    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")

    def run(*argv: str) -> dict:
        assert cli.main(["--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    unindexed = {i["name"]: i["unindexed_rows"] for i in run("inspect", path)["indices"]}
    assert unindexed == {n: 950 for n in NAMES}  # frag 2 (450 live rows) and frag 3 (500)
    dry = run("optimize-indices", path, "--dry-run", "--index", "cat_idx")
    assert dry["dry_run"] and not dry["committed"] and dry["indices"][0]["unindexed_fragments"] == [2, 3]
    assert LanceDataset(path).version == 7
    res = run("optimize-indices", path, "--num-indices-to-merge", "0")
    assert res["committed"] and res["version"] == 8 and {i["name"] for i in res["indices"]} == set(NAMES)
    assert {i["name"]: i["unindexed_rows"] for i in run("inspect", path)["indices"]} == {n: 0 for n in NAMES}
    again = run("optimize-indices", path)
    assert not again["committed"] and LanceDataset(path).version == 8


@pytest.mark.parametrize("error,kept", [("unknown", True), ("conflict", False)])
def test_failed_commit_removes_segments_unknown_outcome_keeps_them(tmp_path: Path, monkeypatch, error: str,
                                                                   kept: bool) -> None:
    from lance_ops.errors import CommitConflictError, CommitOutcomeUnknownError
    from lance_ops.maintenance.index_upkeep import optimize as upkeep

    path = str(tmp_path / "ds")
    _build(path, stable=False, version="2.1")
    before = _index_dirs(path)
    exc = CommitOutcomeUnknownError("may have landed") if error == "unknown" else CommitConflictError("lost")

    def failing(*args, **kwargs):
        raise exc

    monkeypatch.setattr(upkeep, "commit_transaction", failing)
    with pytest.raises(type(exc)):
        optimize_indices(LanceDataset(path))
    new = _index_dirs(path) - before
    assert len(new) == (3 if kept else 0)
    assert LanceDataset(path).version == 7


def test_create_index_conflicts_with_create_index_on_the_same_name() -> None:
    from lance_ops._proto import table_pb2, transaction_pb2
    from lance_ops.table.commit import conflicts

    def txn(*names: str) -> transaction_pb2.Transaction:
        t = transaction_pb2.Transaction(read_version=1)
        t.create_index.new_indices.extend(table_pb2.IndexMetadata(name=n) for n in names)
        return t

    assert conflicts.check(txn("a", "b"), txn("b")).verdict == conflicts.Verdict.RETRYABLE
    assert conflicts.check(txn("a"), txn("b")).verdict == conflicts.Verdict.OK
    append = transaction_pb2.Transaction(read_version=1)
    append.append.SetInParent()
    assert conflicts.check(txn("a"), append).verdict == conflicts.Verdict.OK
