"""Deterministic interleavings around the post-publish standing check (ADR 0024) with no cleanup:
a version that the next one was built on must be acknowledged, never withdrawn or left unknown."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

import lance_ops
from lance_ops.table.commit import standing as standing_mod
from tests.commit import workers


def _seed(uri: str) -> None:
    lance_ops.write_dataset(workers.rows(0, 1000, "base"), uri, max_rows_per_file=250)


def _overtaken(monkeypatch, action):
    """Run ``action`` once, right after our manifest put and before our standing check."""
    real = standing_mod.standing
    pending = [action]

    def standing(*args, **kwargs):
        if pending:
            pending.pop()()
        return real(*args, **kwargs)

    monkeypatch.setattr(standing_mod, "standing", standing)


def _ids(uri: str) -> np.ndarray:
    return np.sort(lance.dataset(uri).to_table()["id"].to_numpy())


def test_delete_followed_by_a_rebased_delete_of_the_same_fragments_is_acknowledged(tmp_path, monkeypatch):
    """del2 (planned on v1) rebases onto del1's v2 and replaces every deletion file del1 wrote:
    nothing of del1's manifest is left as it was in v3, yet v3 was built on it."""
    uri = str(tmp_path / "ds")
    _seed(uri)
    other = lance_ops.dataset(uri)
    seen = {}
    _overtaken(monkeypatch, lambda: seen.setdefault("other", (other.delete("id % 10 = 2"), other.version)))
    ds = lance_ops.dataset(uri)
    assert ds.delete("id % 10 = 1") == {"num_deleted_rows": 100}
    assert (ds.version, seen["other"]) == (2, ({"num_deleted_rows": 100}, 3))
    assert lance_ops.dataset(uri).version == 3
    ids = np.arange(1000)
    np.testing.assert_array_equal(_ids(uri), ids[(ids % 10 != 1) & (ids % 10 != 2)])


def test_append_followed_by_a_delete_is_acknowledged(tmp_path, monkeypatch):
    uri = str(tmp_path / "ds")
    _seed(uri)
    other = lance_ops.dataset(uri)
    _overtaken(monkeypatch, lambda: other.delete("id < 1000 AND id % 10 = 2"))
    ds = lance_ops.write_dataset(workers.rows(1000, 100, "app"), uri, mode="append")
    assert ds.version == 2 and lance_ops.dataset(uri).version == 3
    ids = np.arange(1100)
    np.testing.assert_array_equal(_ids(uri), ids[(ids >= 1000) | (ids % 10 != 2)])


def test_delete_followed_by_an_append_is_acknowledged(tmp_path, monkeypatch):
    uri = str(tmp_path / "ds")
    _seed(uri)
    _overtaken(monkeypatch, lambda: lance_ops.write_dataset(workers.rows(1000, 100, "app"), uri, mode="append"))
    ds = lance_ops.dataset(uri)
    ds.delete("id % 10 = 1")
    assert ds.version == 2 and lance_ops.dataset(uri).version == 3
    ids = np.arange(1100)
    np.testing.assert_array_equal(_ids(uri), ids[(ids >= 1000) | (ids % 10 != 1)])


def test_orphaned_delete_is_still_withdrawn_when_the_next_version_rewrote_its_deletion_file(tmp_path):
    """The containment rule must not acknowledge an orphan: ours (id 2) lands in slot 2 after v2'
    (id 1) and v3 (id 3, same fragment) were committed and v2' cleaned up; v3 does not have row
    2 deleted, so ours is withdrawn and committed again on top of v3."""
    from datetime import timedelta

    from lance_ops.maintenance.cleanup import cleanup_old_versions
    from lance_ops.table.commit.loop import CommitOptions, commit_transaction
    from lance_ops.table.delete import plan_delete
    from tests.safety.test_lost_append import HookedStore, _uuids_by_version

    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri, max_rows_per_file=5)

    def others():
        lance_ops.dataset(uri).delete("id = 1")
        lance_ops.dataset(uri).delete("id = 3")
        cleanup_old_versions(lance_ops.dataset(uri), timedelta(0), min_superseded_age=timedelta(0))

    store = HookedStore(ds.store)
    store.before_manifest_put = others
    txn, ctx, count = plan_delete(ds, "id = 2")
    mf = commit_transaction(store, ds.base, txn, ctx, CommitOptions(backoff_base=0.001))
    assert count == 1 and mf.version == 4
    assert list(_uuids_by_version(uri)) == [3, 4] and _uuids_by_version(uri)[4] == txn.uuid
    np.testing.assert_array_equal(_ids(uri), [0, 4, 5, 6, 7, 8, 9])
