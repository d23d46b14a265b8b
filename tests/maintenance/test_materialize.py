"""materialize_deletions: rewrite fragments whose deleted ratio exceeds a threshold, one for one."""
from __future__ import annotations

import lance
import pytest

import lance_ops
from lance_ops.errors import RetryableCommitConflictError
from lance_ops.maintenance.compaction import run as compaction_mod
from lance_ops.maintenance.compaction import materialize_deletions, plan_materialization
from tests.maintenance.test_compaction import all_files, build, data_files, sorted_table


def _layout(tmp_path, library="lance_ops", stable=False):
    uri = str(tmp_path / "t.lance")
    # fragment deleted ratios: 0: 0.5, 1: 0.05, 2: none, 3: 0.2 (exactly), 4: 0.25 (big fragment)
    build(uri, [100, 100, 100, 50, 4000], library=library, stable=stable, deletes=[
        "id % 2 = 0 AND id < 100", "id >= 100 AND id < 105", "id >= 300 AND id < 310", "id >= 350 AND id < 1350"])
    return uri


def _ratios(uri):
    return {f.id: (f.deletion_file.num_deleted_rows / f.physical_rows if f.HasField("deletion_file") else 0.0)
            for f in lance_ops.dataset(uri).manifest.fragments}


def test_rewrites_only_fragments_over_threshold(tmp_path):
    uri = _layout(tmp_path)
    assert _ratios(uri) == {0: 0.5, 1: 0.05, 2: 0.0, 3: 0.2, 4: 0.25}
    ds = lance_ops.dataset(uri)
    expected = sorted_table(ds.to_table())
    old = {f.id: f for f in ds.manifest.fragments}
    m = materialize_deletions(ds, threshold=0.2)
    after = lance_ops.dataset(uri)
    # 0 and 4 (> 0.2) rewritten one for one; 3 (exactly 0.2) and the rest untouched; fragments
    # listed by id, as pylance lists them after every commit
    assert [f.id for f in after.manifest.fragments] == [1, 2, 3, 5, 6]
    assert [f.physical_rows for f in after.manifest.fragments] == [100, 100, 50, 50, 3000]
    for i in (1, 2, 3):
        assert after.get_fragment(i).metadata == old[i]
    assert m == {**m, "fragments_removed": 2, "fragments_added": 2, "files_removed": 4, "files_added": 2,
                 "rows_read": 3050, "rows_written": 3050, "version": ds.version + 1, "dry_run": False}
    assert m["bytes_read"] == old[0].files[0].file_size_bytes + old[4].files[0].file_size_bytes
    assert sorted_table(after.to_table()).equals(expected)
    assert sorted_table(lance.dataset(uri).to_table()).equals(expected)
    assert after.transaction.WhichOneof("operation") == "rewrite"
    assert len(after.transaction.rewrite.groups) == 2


@pytest.mark.parametrize("threshold,rewritten", [(0.0, 4), (0.1, 3), (0.3, 1), (0.5, 0), (1.0, 0), (5.0, 0)])
def test_thresholds(tmp_path, threshold, rewritten):
    uri = _layout(tmp_path)
    m = materialize_deletions(lance_ops.dataset(uri), threshold=threshold, dry_run=True)
    assert m["fragments_removed"] == rewritten == len(m["plan"])
    assert all(p["kind"] == "materialize" and len(p["output_rows"]) == 1 for p in m["plan"])


def test_threshold_zero_purges_every_deletion_file(tmp_path):
    uri = _layout(tmp_path)
    ds = lance_ops.dataset(uri)
    ds.optimize.materialize_deletions(0.0)
    assert ds.version == 10  # 5 appends, 4 deletes, 1 rewrite
    assert not any(f.HasField("deletion_file") for f in ds.manifest.fragments)
    assert ds.manifest.reader_feature_flags & 1 == 0 and ds.count_rows() == 4350 - 50 - 5 - 10 - 1000
    assert materialize_deletions(ds, threshold=0.0)["version"] is None


def test_dry_run_writes_nothing(tmp_path):
    uri = _layout(tmp_path)
    files = all_files(uri)
    m = materialize_deletions(lance_ops.dataset(uri), threshold=0.1, dry_run=True)
    assert all_files(uri) == files
    assert [p["fragment_ids"] for p in m["plan"]] == [[0], [3], [4]]
    assert [p["output_rows"] for p in m["plan"]] == [[50], [40], [3000]]
    assert m["version"] is None and m["dry_run"] is True


def test_max_rows_per_file_and_stable_ids(tmp_path):
    uri = _layout(tmp_path, library="pylance", stable=True)
    expected = sorted_table(lance.dataset(uri).to_table(with_row_id=True))
    m = materialize_deletions(lance_ops.dataset(uri), threshold=0.3, max_rows_per_file=1000)
    assert m["fragments_removed"] == 1 and m["fragments_added"] == 1
    m = materialize_deletions(lance_ops.dataset(uri), threshold=0.2, max_rows_per_file=1000)
    assert m["fragments_removed"] == 1 and m["fragments_added"] == 3  # 3000 rows -> 3 x 1000
    assert sorted_table(lance.dataset(uri).to_table(with_row_id=True)).equals(expected)
    assert sorted_table(lance_ops.dataset(uri).to_table(with_row_id=True)).equals(expected)


def test_idempotency_and_conflicts(tmp_path, monkeypatch):
    uri = _layout(tmp_path)
    plan = plan_materialization(lance_ops.dataset(uri), 0.2)
    results = [t.execute(uri) for t in plan.tasks]
    lance.dataset(uri).delete("id = 1")  # fragment 0: its task is stale now
    with pytest.raises(RetryableCommitConflictError):
        compaction_mod.commit_compaction(uri, results)
    # compact_files-style retry: re-plan, reuse the untouched fragment 4 result
    real_commit = compaction_mod.commit_compaction
    state = {"n": 0}

    def racing(ds, res, **kw):
        state["n"] += 1
        if state["n"] == 1:
            lance.dataset(uri).delete("id = 3")
        return real_commit(ds, res, **kw)

    monkeypatch.setattr(compaction_mod, "commit_compaction", racing)
    m = materialize_deletions(lance_ops.dataset(uri), threshold=0.2, idempotency_key="purge-1")
    assert state["n"] == 2 and m["fragments_removed"] == 2
    assert sorted(lance_ops.dataset(uri).to_table()["id"].to_pylist())[:3] == [5, 7, 9]
    files = all_files(uri)
    again = materialize_deletions(lance_ops.dataset(uri), threshold=0.2, idempotency_key="purge-1")
    assert again["already_committed"] is True and again["version"] == m["version"]
    assert all_files(uri) == files
    stale = {p for r in results for p in r.new_data_files}
    assert stale <= data_files(uri)  # commit_compaction alone leaves orphans for cleanup
