"""The soak's lost append (CI, commit 21eda35): hypotheses, each pinned by a deterministic test.

An acknowledged append (w1-23, version 103) had none of its rows in the final dataset, with no
error and no duplicate. Each test below drives one interleaving that could produce that, with a
store wrapper around the real local store (faults from the outside, ADR 0007), and checks the
rows with pylance as the oracle and that no transaction uuid sits at two versions.

H1 (found, fixed in ``table/commit/standing.py``): the manifest put lands in a slot that was
    taken and removed meanwhile. The listing right before the put shows version N; before the
    put lands (a slow request: S3 client retries with backoff), others commit N+1 and N+2 and a
    cleanup with a minimum superseded age of 0 (the soak's setting: tests/conftest.py) removes
    N+1. Put-if-absent at N+1 then succeeds below the latest, invisible; the append was
    acknowledged at N+1 and vanished when a later cleanup removed its orphan manifest.
H2 (excluded): a retried manifest put whose first request landed answers 412; it must be found
    ours by its uuid and returned once (never a lost race, never a second commit).
H3 (excluded): a Rewrite or a Delete committed after a concurrent Append keeps the Append's
    fragments (the manifest after is the union).
H4 (excluded): an append retried after CommitOutcomeUnknownError with an idempotency key neither
    duplicates nor loses.
H5 (excluded): a listing of ``_versions/`` that comes back empty or a failed read of the latest
    manifest never makes a writer build on an older version (the stale read is caught up).
"""
from __future__ import annotations

from datetime import timedelta

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops._proto import transaction_pb2
from lance_ops.io import ObjectStore
from lance_ops.errors import AlreadyExistsError, CommitOutcomeUnknownError, StorageError
from lance_ops.maintenance.cleanup import cleanup_old_versions
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.commit.transaction_file import load_transaction
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table.write import to_reader, write_fragments

ZERO = timedelta(0)
FAST = CommitOptions(backoff_base=0.001)


class HookedStore:
    """The real store; ``before_manifest_put`` runs (once) just before a manifest put is applied,
    i.e. after the listing that precedes it: what others do while the request is on its way."""

    def __init__(self, inner):
        self._inner = inner
        self.before_manifest_put = None
        #: manifest puts that land and then fail with this error (the response is lost)
        self.land_then_fail: type[Exception] | None = None
        self.manifest_puts = 0
        self.empty_listings = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put_if_absent(self, path, data):
        if path.endswith(naming.MANIFEST_SUFFIX):
            self.manifest_puts += 1
            hook, self.before_manifest_put = self.before_manifest_put, None
            if hook is not None:
                hook()
            if self.land_then_fail is not None:
                error, self.land_then_fail = self.land_then_fail, None
                self._inner.put_if_absent(path, data)
                raise error(f"put {path}: response lost after the write")
        return self._inner.put_if_absent(path, data)

    def list_dir(self, prefix):
        if self.empty_listings and prefix.rstrip("/").endswith(naming.VERSIONS_DIR):
            self.empty_listings -= 1
            return iter(())
        return self._inner.list_dir(prefix)

    def list_dir_selected(self, prefix, select):  # through list_dir above, so empty listings reach it too
        return ObjectStore.list_dir_selected(self, prefix, select)


def _table(ids) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _append_txn(ds, ids) -> transaction_pb2.Transaction:
    frags = write_fragments(to_reader(_table(ids)), ds.store, ds.base, list(ds.manifest.fields))
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=ds.version)
    txn.append.fragments.extend(frags)
    return txn


def _uuids_by_version(uri) -> dict[int, str]:
    ds = lance_ops.dataset(uri)
    out = {}
    for loc in naming.list_versions(ds.store, ds.base):
        out[loc.version] = load_transaction(ds.store, ds.base, read_manifest(ds.store, loc.path)).uuid
    return out


def _ids(uri) -> list[int]:
    ours = sorted(lance_ops.dataset(uri).to_table()["id"].to_pylist())
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == ours
    return ours


@pytest.fixture
def ds(tmp_path):
    return lance_ops.write_dataset(_table(range(10)), str(tmp_path / "ds"), max_rows_per_file=5)


def _others_commit_twice_and_clean(uri, min_age=ZERO):
    def run():
        for ids in ([20], [21]):
            lance_ops.write_dataset(_table(ids), uri, mode="append")
        cleanup_old_versions(lance_ops.dataset(uri), ZERO, min_superseded_age=min_age)
    return run


# --- H1 ---------------------------------------------------------------------------------------------
def test_put_landing_in_a_slot_reused_and_cleaned_meanwhile_is_not_acknowledged_there(ds):
    """Before the fix: acknowledged at version 2, below the latest (3); rows 10 lost."""
    store = HookedStore(ds.store)
    store.before_manifest_put = _others_commit_twice_and_clean(ds.uri)
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds.base, txn, CommitContext(ds.manifest_file), FAST)
    assert _ids(ds.uri) == list(range(11)) + [20, 21]
    assert mf.version == 4 and lance_ops.dataset(ds.uri).version == 4
    uuids = _uuids_by_version(ds.uri)
    assert list(uuids) == [3, 4] and uuids[4] == txn.uuid  # the orphan at 2 was withdrawn
    assert store.manifest_puts == 2


def test_with_a_minimum_superseded_age_cleanup_keeps_the_slot_and_the_put_loses_the_race(ds):
    """The guard the commit loop was designed around: the slot is kept, put-if-absent refuses."""
    store = HookedStore(ds.store)
    store.before_manifest_put = _others_commit_twice_and_clean(ds.uri, timedelta(minutes=5))
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds.base, txn, CommitContext(ds.manifest_file), FAST)
    assert mf.version == 4 and _ids(ds.uri) == list(range(11)) + [20, 21]
    assert list(_uuids_by_version(ds.uri)) == [1, 2, 3, 4]


def test_put_landing_in_a_reused_slot_after_a_lost_response_is_outcome_unknown(ds):
    """Same interleaving, but an earlier attempt's write may have landed (its response was lost
    and the store said "not there"): the orphan could hide that attempt's fate, so the outcome
    is unknown rather than retried (never a second commit)."""
    store = HookedStore(ds.store)
    fail = {"n": 1}
    real_put = store.put_if_absent

    def put(path, data):
        if path.endswith(naming.MANIFEST_SUFFIX) and fail["n"]:
            fail["n"] -= 1
            store.before_manifest_put = _others_commit_twice_and_clean(ds.uri)
            raise StorageError(f"put {path}: HTTP 500 before the write")
        return real_put(path, data)

    store.put_if_absent = put
    with pytest.raises(CommitOutcomeUnknownError):
        commit_transaction(store, ds.base, _append_txn(ds, [10]), CommitContext(ds.manifest_file), FAST)
    assert _ids(ds.uri) == list(range(10)) + [20, 21]


def test_a_version_followed_by_a_commit_built_on_it_is_acknowledged(ds):
    """The check after the put must not refuse the ordinary case: another writer committed on
    top of ours before we looked."""
    store = HookedStore(ds.store)
    other = {}

    def put(path, data, real=store.put_if_absent):
        real(path, data)
        if "done" not in other:  # right after ours lands, someone commits on top of it
            other["done"] = lance_ops.write_dataset(_table([30]), ds.uri, mode="append").version

    store.put_if_absent = put
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds.base, txn, CommitContext(ds.manifest_file), FAST)
    assert mf.version == 2 and other["done"] == 3
    assert _uuids_by_version(ds.uri)[2] == txn.uuid
    assert _ids(ds.uri) == list(range(11)) + [30]


def test_a_version_whose_fragment_was_compacted_at_once_is_acknowledged(ds):
    """The version built on ours rewrote our new fragment: found among its rewritten fragments."""
    store = HookedStore(ds.store)
    done = {}

    def put(path, data, real=store.put_if_absent):
        real(path, data)
        if "v" not in done:
            done["v"] = lance_ops.dataset(ds.uri).optimize.compact_files(target_rows_per_fragment=1000)["version"]

    store.put_if_absent = put
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds.base, txn, CommitContext(ds.manifest_file), FAST)
    assert mf.version == 2 and done["v"] == 3
    assert [f.fragment_id for f in lance_ops.dataset(ds.uri).get_fragments()] == [3]
    assert _ids(ds.uri) == list(range(11))


# --- H2 ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("error", [AlreadyExistsError, StorageError])
def test_retried_put_whose_first_request_landed_is_ours_once(ds, error):
    store = HookedStore(ds.store)
    store.land_then_fail = error
    txn = _append_txn(ds, [10, 11])
    mf = commit_transaction(store, ds.base, txn, CommitContext(ds.manifest_file), FAST)
    assert mf.version == 2 and store.manifest_puts == 1
    assert _uuids_by_version(ds.uri)[2] == txn.uuid and _ids(ds.uri) == list(range(12))


# --- H3 ---------------------------------------------------------------------------------------------
def test_rewrite_committed_after_a_concurrent_append_keeps_the_appended_fragments(ds):
    mine = lance_ops.dataset(ds.uri)  # version 1: fragments 0 and 1
    appended = lance_ops.write_dataset(_table([100, 101]), ds.uri, mode="append")  # 2: fragment 2
    added = {f.fragment_id: [d.path for d in f.data_files()] for f in appended.get_fragments()} 
    metrics = mine.optimize.compact_files(target_rows_per_fragment=1000)  # planned at 1
    assert metrics["fragments_removed"] == 2 and metrics["version"] == 3
    after = lance_ops.dataset(ds.uri)
    got = {f.fragment_id: [d.path for d in f.data_files()] for f in after.get_fragments()}
    assert got[2] == added[2]  # the append's fragment, untouched
    assert set(got) == {2, 3}
    assert _ids(ds.uri) == list(range(10)) + [100, 101]


def test_delete_committed_after_a_concurrent_append_keeps_the_appended_fragments(ds):
    mine = lance_ops.dataset(ds.uri)
    lance_ops.write_dataset(_table([100, 101]), ds.uri, mode="append")
    assert mine.delete("id = 3 OR id = 7") == {"num_deleted_rows": 2}
    assert mine.version == 3
    assert _ids(ds.uri) == [i for i in range(10) if i not in (3, 7)] + [100, 101]


def test_rewrite_over_a_removed_gap_keeps_the_appended_fragments(ds):
    """The concurrent append's version was removed by cleanup before the compaction committed:
    judged from the two manifests (the gap), the append's fragment is kept."""
    mine = lance_ops.dataset(ds.uri)
    for ids in ([100], [101]):
        lance_ops.write_dataset(_table(ids), ds.uri, mode="append")  # 2, 3
    cleanup_old_versions(lance_ops.dataset(ds.uri), ZERO, min_superseded_age=ZERO)  # only 3 left
    mine.optimize.compact_files(target_rows_per_fragment=1000)
    assert _ids(ds.uri) == list(range(10)) + [100, 101]


# --- H4 ---------------------------------------------------------------------------------------------
def test_append_retried_after_outcome_unknown_with_a_key_never_duplicates_nor_loses(ds, monkeypatch):
    """First call: the put lands, every read-back fails: CommitOutcomeUnknownError. The retry with
    the same key finds the landed version and writes nothing; a second retry too."""
    store = HookedStore(ds.store)
    store.land_then_fail = StorageError
    reads = {"n": 0}
    real_tail = store._inner.read_tail

    def read_tail(path, n):
        if path.endswith(naming.MANIFEST_SUFFIX) and reads["n"] < 10**6 and "ds/_versions/" in path \
                and naming.parse_manifest_name(path)[0] == 2 and reads.get("on", True):
            reads["n"] += 1
            raise StorageError(f"read {path}: connection reset")
        return real_tail(path, n)

    store.read_tail = read_tail
    monkeypatch.setattr("lance_ops.table.write.open_store", lambda *a, **k: (store, ds.base))
    with pytest.raises(CommitOutcomeUnknownError):
        lance_ops.write_dataset(_table([10, 11]), ds.uri, mode="append", idempotency_key="k-1")
    reads["on"] = False
    again = lance_ops.write_dataset(_table([10, 11]), ds.uri, mode="append", idempotency_key="k-1")
    assert again.version == 2
    assert lance_ops.write_dataset(_table([10, 11]), ds.uri, mode="append", idempotency_key="k-1").version == 2
    assert list(_uuids_by_version(ds.uri)) == [1, 2]
    assert _ids(ds.uri) == list(range(12))


def test_append_retried_after_outcome_unknown_that_did_not_land_commits_once(ds, monkeypatch):
    store = HookedStore(ds.store)
    monkeypatch.setattr("lance_ops.table.write.open_store", lambda *a, **k: (store, ds.base))

    def never(path, data):
        raise StorageError(f"put {path}: HTTP 500 before the write")

    store.put_if_absent = lambda path, data: (never(path, data) if path.endswith(naming.MANIFEST_SUFFIX)
                                              else store._inner.put_if_absent(path, data))
    with pytest.raises(CommitOutcomeUnknownError):
        lance_ops.write_dataset(_table([10, 11]), ds.uri, mode="append", idempotency_key="k-2")
    del store.put_if_absent
    assert lance_ops.write_dataset(_table([10, 11]), ds.uri, mode="append", idempotency_key="k-2").version == 2
    assert lance_ops.write_dataset(_table([10, 11]), ds.uri, mode="append", idempotency_key="k-2").version == 2
    assert _ids(ds.uri) == list(range(12))


# --- H5 ---------------------------------------------------------------------------------------------
def test_empty_listings_while_committing_never_build_on_an_older_version(ds):
    lance_ops.write_dataset(_table([20]), ds.uri, mode="append")  # 2: our read version is 1
    store = HookedStore(ds.store)
    store.empty_listings = 2
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds.base, txn, CommitContext(ds.manifest_file), FAST)
    assert mf.version == 3 and _ids(ds.uri) == list(range(11)) + [20]


def test_commit_from_a_stale_read_version_catches_up_over_a_rewrite(ds):
    """A writer that read version 1 commits after an append (2) and a compaction (3) of it."""
    stale = lance_ops.dataset(ds.uri)
    lance_ops.write_dataset(_table([20]), ds.uri, mode="append")
    lance_ops.dataset(ds.uri).optimize.compact_files(target_rows_per_fragment=1000)
    mf = commit_transaction(stale.store, stale.base, _append_txn(stale, [10]), CommitContext(stale.manifest_file),
                            FAST)
    assert mf.version == 4 and _ids(ds.uri) == list(range(11)) + [20]
