"""Issue 16, defects 3-5: commit outcomes under injected store faults and concurrent cleanup.

Faults are injected deterministically by a store wrapper (:class:`FaultyStore`) around the real
local store: a manifest put that lands and then raises, reads of the manifest just written that
fail or come back truncated, ``_versions/`` listings that come back empty. Every test checks the
versions on disk (no transaction uuid at two versions, no new version 1) and the rows, with
pylance as the oracle.
"""
from __future__ import annotations

import time
from datetime import timedelta

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops._proto import transaction_pb2
from lance_ops.io import ObjectStore
from lance_ops.errors import AlreadyExistsError, CommitOutcomeUnknownError, ObjectNotFoundError, StorageError
from lance_ops.maintenance.cleanup import DEFAULT_MIN_SUPERSEDED_AGE, cleanup_old_versions
from lance_ops.table.manifest import naming
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.dataset import LanceDataset
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table.commit.transaction_file import load_transaction
from lance_ops.table.write import to_reader, write_fragments

ZERO = timedelta(0)
FAST = CommitOptions(backoff_base=0.001)


class FaultyStore:
    """The real store, with faults switched on per test (all counters are "how many more")."""

    def __init__(self, inner):
        self._inner = inner
        #: manifest puts that write and then raise (the response is lost)
        self.land_then_fail = 0
        #: what they raise: StorageError (HTTP 500), AlreadyExistsError (a retried request's 412)
        self.landed_error = StorageError
        #: manifest puts that raise without writing
        self.fail_puts = 0
        #: reads of a manifest this wrapper saw put that fail: ("error" | "truncate", count)
        self.bad_reads = ("error", 0)
        #: ``_versions/`` listings that come back empty
        self.empty_listings = 0
        #: the version hint reads as missing (as on S3, where nobody writes it)
        self.hide_hint = False
        #: called once after the first failed put (simulates what others do meanwhile)
        self.after_failed_put = None
        #: called once when a transaction file is written (just before the manifest put)
        self.on_transaction_put = None
        self.written: list[str] = []
        self.manifest_puts = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put_if_absent(self, path, data):
        if path.endswith(naming.MANIFEST_SUFFIX):
            self.manifest_puts += 1
            if self.fail_puts:
                self.fail_puts -= 1
                self._failed()
                raise StorageError(f"put {path}: HTTP 500 before the write")
            if self.land_then_fail:
                self.land_then_fail -= 1
                self._inner.put_if_absent(path, data)
                self.written.append(path)
                self._failed()
                raise self.landed_error(f"put {path}: lost response after the write")
        return self._inner.put_if_absent(path, data)

    def put(self, path, data):
        if naming.TRANSACTIONS_DIR in path:
            hook, self.on_transaction_put = self.on_transaction_put, None
            if hook is not None:
                hook()
        return self._inner.put(path, data)

    def _failed(self):
        hook, self.after_failed_put = self.after_failed_put, None
        if hook is not None:
            hook()

    def _maybe_bad(self, path, data):
        kind, count = self.bad_reads
        if count and path in self.written:
            self.bad_reads = (kind, count - 1)
            if kind == "error":
                raise StorageError(f"read {path}: connection reset")
            return data[: len(data) // 3]
        return data

    def read_tail(self, path, n):
        data, size = self._inner.read_tail(path, n)
        return self._maybe_bad(path, data), size

    def read(self, path):
        if self.hide_hint and path.endswith(naming.VERSION_HINT_NAME):
            raise ObjectNotFoundError(path)
        return self._maybe_bad(path, self._inner.read(path))

    def list_dir(self, prefix):
        if self.empty_listings and prefix.rstrip("/").endswith(naming.VERSIONS_DIR):
            self.empty_listings -= 1
            return iter(())
        return self._inner.list_dir(prefix)

    def list_dir_selected(self, prefix, select):  # through list_dir above, so empty listings reach it too
        return ObjectStore.list_dir_selected(self, prefix, select)


def _table(ids) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _append_txn(ds, ids):
    frags = write_fragments(to_reader(_table(ids)), ds._store, ds._base, list(ds.manifest.fields))
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=ds.version)
    txn.append.fragments.extend(frags)
    return txn


def _uuids_by_version(uri) -> dict[int, str]:
    ds = lance_ops.dataset(uri)
    out = {}
    for loc in naming.list_versions(ds._store, ds._base):
        mf = read_manifest(ds._store, loc.path)
        out[loc.version] = load_transaction(ds._store, ds._base, mf).uuid
    return out


def _ids(uri) -> list[int]:
    ours = sorted(lance_ops.dataset(uri).to_table()["id"].to_pylist())
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == ours
    return ours


@pytest.fixture
def ds(tmp_path):
    return lance_ops.write_dataset(_table(range(10)), str(tmp_path / "ds"))


def _faulty(ds) -> FaultyStore:
    return FaultyStore(ds._store)


# --- defect 3: an ambiguous manifest write is never committed twice --------------------------------
@pytest.mark.parametrize("error", [StorageError, AlreadyExistsError])
def test_put_lands_then_errors_returns_the_landed_version_once(ds, error):
    store = _faulty(ds)
    store.land_then_fail = 1
    store.landed_error = error
    txn = _append_txn(ds, [10, 11])
    mf = commit_transaction(store, ds._base, txn, CommitContext(ds._manifest_file), FAST)
    assert mf.version == 2 and store.manifest_puts == 1
    assert _uuids_by_version(ds.uri) == {1: ds._manifest_file.transaction.uuid, 2: txn.uuid}
    assert _ids(ds.uri) == list(range(12))


@pytest.mark.parametrize("error", [StorageError, AlreadyExistsError])
@pytest.mark.parametrize("how", ["error", "truncate"])
def test_check_read_fails_then_catch_up_finds_our_uuid(ds, how, error):
    """The put lands, its response is lost and every read-back fails (or is cut short): the old
    code called that "not ours" and committed again at version 3. Now the version is uncertain,
    the next attempt's catch-up reads version 2, finds our transaction uuid and returns it."""
    store = _faulty(ds)
    store.land_then_fail = 1
    store.landed_error = error
    store.bad_reads = (how, 3)  # every read-back of the check fails; catch-up's read succeeds
    txn = _append_txn(ds, [10, 11])
    mf = commit_transaction(store, ds._base, txn, CommitContext(ds._manifest_file), FAST)
    assert mf.version == 2 and store.manifest_puts == 1
    assert _uuids_by_version(ds.uri) == {1: ds._manifest_file.transaction.uuid, 2: txn.uuid}
    assert _ids(ds.uri) == list(range(12))


def test_uncertain_version_found_after_a_concurrent_commit(ds):
    """Our write lands at 2 (unconfirmed); another writer commits 3 before we look again: the
    catch-up finds our uuid at 2 and nothing is committed at 4."""
    store = _faulty(ds)
    store.land_then_fail = 1
    store.bad_reads = ("error", 3)
    other = _append_txn(ds, [20])
    store.after_failed_put = lambda: commit_transaction(
        ds._store, ds._base, other, CommitContext(lance_ops.dataset(ds.uri)._manifest_file), FAST)
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds._base, txn, CommitContext(ds._manifest_file), FAST)
    assert mf.version == 2
    assert sorted(_uuids_by_version(ds.uri).items())[1:] == [(2, txn.uuid), (3, other.uuid)]
    assert _ids(ds.uri) == list(range(11)) + [20]


def test_unreadable_landed_write_is_outcome_unknown(ds):
    store = _faulty(ds)
    store.land_then_fail = 1
    store.bad_reads = ("error", 10**6)  # the manifest we wrote can never be read back
    txn = _append_txn(ds, [10])
    with pytest.raises(CommitOutcomeUnknownError, match="version 2 may have been written but could not be "
                                                        "checked .* may or may not have landed"):
        commit_transaction(store, ds._base, txn, CommitContext(ds._manifest_file), FAST)
    assert store.manifest_puts == 1  # never a second put
    assert _uuids_by_version(ds.uri) == {1: ds._manifest_file.transaction.uuid, 2: txn.uuid}


def test_uncertain_version_removed_before_the_check_is_outcome_unknown(ds):
    """Our write lands at 2 unconfirmed, another writer commits 3 and cleanup removes 2 before we
    look again: nobody can tell any more whether 2 was ours."""
    store = _faulty(ds)
    store.land_then_fail = 1
    store.bad_reads = ("error", 3)
    other = _append_txn(ds, [20])

    def others():
        commit_transaction(ds._store, ds._base, other, CommitContext(lance_ops.dataset(ds.uri)._manifest_file), FAST)
        cleanup_old_versions(lance_ops.dataset(ds.uri), ZERO, min_superseded_age=ZERO)

    store.after_failed_put = others
    with pytest.raises(CommitOutcomeUnknownError, match="version 2, which this commit may have written, was "
                                                        "removed before it could be checked"):
        commit_transaction(store, ds._base, _append_txn(ds, [10]), CommitContext(ds._manifest_file), FAST)
    assert list(_uuids_by_version(ds.uri)) == [3]


def test_put_failing_before_the_write_is_retried_at_the_same_version(ds):
    store = _faulty(ds)
    store.fail_puts = 2
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds._base, txn, CommitContext(ds._manifest_file), FAST)
    assert mf.version == 2 and store.manifest_puts == 3
    assert _uuids_by_version(ds.uri)[2] == txn.uuid and _ids(ds.uri) == list(range(11))


def test_put_failing_every_time_is_outcome_unknown_and_commits_nothing(ds):
    store = _faulty(ds)
    store.fail_puts = 10**6
    with pytest.raises(CommitOutcomeUnknownError, match="writing the manifest failed 3 times"):
        commit_transaction(store, ds._base, _append_txn(ds, [10]), CommitContext(ds._manifest_file), FAST)
    assert list(_uuids_by_version(ds.uri)) == [1]


def test_no_publish_below_the_latest_after_a_cleanup(ds):
    """While we prepare version 2, others commit 2 and 3 and a cleanup (minimum age 0) removes 2:
    put-if-absent at 2 would succeed below the latest, invisible. The listing right before the
    put sees 3, so we catch up and commit 4."""
    store = _faulty(ds)

    def others():
        for ids in ([20], [21]):
            lance_ops.write_dataset(_table(ids), ds.uri, mode="append")
        cleanup_old_versions(lance_ops.dataset(ds.uri), ZERO, min_superseded_age=ZERO)

    store.on_transaction_put = others
    txn = _append_txn(ds, [10])
    mf = commit_transaction(store, ds._base, txn, CommitContext(ds._manifest_file), FAST)
    assert mf.version == 4 and store.manifest_puts == 1
    assert list(_uuids_by_version(ds.uri)) == [3, 4]
    assert _ids(ds.uri) == list(range(11)) + [20, 21]


# --- defect 4: an empty listing never re-creates the dataset ---------------------------------------
def _history(uri, n=4):
    """Versions 1..n, then cleanup at older_than=0: only version n is left (version 1 is gone)."""
    lance_ops.write_dataset(_table(range(10)), uri)
    for i in range(1, n):
        lance_ops.write_dataset(_table([100 + i]), uri, mode="append")
    cleanup_old_versions(lance_ops.dataset(uri), ZERO, min_superseded_age=ZERO)
    assert [v["version"] for v in lance_ops.dataset(uri).versions()] == [n]


@pytest.mark.parametrize("hint", ["hint", "no hint (as on S3)"])
def test_append_with_empty_listings_never_creates_version_1(tmp_path, monkeypatch, hint):
    uri = str(tmp_path / "ds")
    _history(uri)
    real = lance_ops.dataset(uri)
    store = FaultyStore(real._store)
    store.empty_listings = 10**6
    store.hide_hint = hint != "hint"
    monkeypatch.setattr("lance_ops.table.write.open_store", lambda *a, **k: (store, real._base))
    with pytest.raises(StorageError, match="listing returned no manifests 4 times although the dataset exists"):
        lance_ops.write_dataset(_table([999]), uri, mode="append")
    # opening is refused the same way, never a false DatasetNotFoundError
    with pytest.raises(StorageError, match="although the dataset exists"):
        LanceDataset(uri, _store=(store, real._base))
    assert [v["version"] for v in lance_ops.dataset(uri).versions()] == [4]
    assert naming.find_version(real._store, real._base, 1) is None
    assert _ids(uri) == list(range(10)) + [101, 102, 103]


def test_append_after_a_transient_empty_listing_appends(tmp_path, monkeypatch):
    uri = str(tmp_path / "ds")
    _history(uri)
    real = lance_ops.dataset(uri)
    store = FaultyStore(real._store)
    store.empty_listings = 2
    store.hide_hint = True
    monkeypatch.setattr("lance_ops.table.write.open_store", lambda *a, **k: (store, real._base))
    assert lance_ops.write_dataset(_table([999]), uri, mode="append").version == 5
    assert [v["version"] for v in lance_ops.dataset(uri).versions()] == [4, 5]
    assert _ids(uri) == list(range(10)) + [101, 102, 103, 999]


def test_commit_with_empty_listing_keeps_the_v1_naming(tmp_path):
    """An empty listing while committing to a V1-named dataset: re-listed (the version read
    proves the dataset exists) and published under the V1 name, never a mixed directory."""
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(_table(range(3)), uri, enable_v2_manifest_paths=False)
    store = _faulty(ds)
    store.empty_listings = 2
    mf = commit_transaction(store, ds._base, _append_txn(ds, [3]), CommitContext(ds._manifest_file), FAST)
    assert mf.version == 2 and mf.path.endswith("/_versions/2.manifest")
    assert {loc.scheme for loc in naming.list_versions(ds._store, ds._base)} == {naming.NamingScheme.V1}
    assert _ids(uri) == [0, 1, 2, 3]


def test_new_dataset_with_empty_listing_is_created(tmp_path):
    """No evidence of versions: an empty listing is believed and version 1 is written."""
    uri = str(tmp_path / "fresh")
    assert lance_ops.write_dataset(_table([1]), uri, mode="append").version == 1
    assert _ids(uri) == [1]


# --- defect 5: a read version removed by cleanup is a rebase, not an unknown outcome ---------------
def _frag_dataset(uri):
    return lance_ops.write_dataset(_table(range(100)), uri, max_rows_per_file=50)


@pytest.mark.parametrize("overlap", [False, True])
def test_delete_whose_read_version_vanished(tmp_path, overlap):
    uri = str(tmp_path / "ds")
    mine = _frag_dataset(uri)  # read version 1, fragments [0..49], [50..99]
    lance_ops.write_dataset(_table([500]), uri, mode="append")  # 2
    lance_ops.dataset(uri).delete("id = 7" if overlap else "id = 8")  # 3: same fragment as ours
    lance_ops.write_dataset(_table([501]), uri, mode="append")  # 4
    stats = cleanup_old_versions(lance_ops.dataset(uri), ZERO, min_superseded_age=ZERO)
    assert stats.old_versions == 3  # versions 1, 2, 3 are gone: our read version among them
    out = mine.delete("id = 7 OR id = 60")
    assert out == {"num_deleted_rows": 1 if overlap else 2}
    assert mine.version == 5
    gone = {7, 60} | ({8} if not overlap else set())
    assert _ids(uri) == [i for i in range(100) if i not in gone] + [500, 501]


def test_delete_whose_read_version_and_files_vanished_retries_on_the_newest(tmp_path):
    """Compaction replaced the fragments and cleanup removed the old files with the read version:
    the scan finds them missing, and the delete re-plans on the newest version."""
    uri = str(tmp_path / "ds")
    mine = _frag_dataset(uri)
    lance_ops.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)  # 2
    lance_ops.write_dataset(_table([500]), uri, mode="append")  # 3
    stats = cleanup_old_versions(lance_ops.dataset(uri), ZERO, min_superseded_age=ZERO)
    assert stats.old_versions == 2 and stats.data_files_removed == 2
    assert mine.delete("id = 7 OR id = 60 OR id = 500") == {"num_deleted_rows": 3}
    assert mine.version == 4
    assert _ids(uri) == [i for i in range(100) if i not in (7, 60)]


def test_compaction_whose_read_version_vanished(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(_table(range(40)), uri, max_rows_per_file=10)
    mine = lance_ops.dataset(uri)  # version 1
    for i in range(3):
        lance_ops.write_dataset(_table([1000 + i]), uri, mode="append")  # 2, 3, 4
    cleanup_old_versions(lance_ops.dataset(uri), ZERO, min_superseded_age=ZERO)
    metrics = mine.optimize.compact_files(target_rows_per_fragment=1000)
    assert metrics["fragments_removed"] > 0
    assert _ids(uri) == list(range(40)) + [1000, 1001, 1002]
    assert len(set(_uuids_by_version(uri).values())) == len(_uuids_by_version(uri))


# --- cleanup's minimum age for just-superseded versions ---------------------------------------------
def test_cleanup_keeps_just_superseded_versions(tmp_path, monkeypatch):
    monkeypatch.delenv("LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS")
    assert DEFAULT_MIN_SUPERSEDED_AGE == timedelta(minutes=5)
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(_table([1]), uri)
    lance_ops.write_dataset(_table([2]), uri, mode="append")
    time.sleep(1.5)
    lance_ops.write_dataset(_table([3]), uri, mode="append")
    ds = lance_ops.dataset(uri)
    # default: 5 minutes, even with older_than=0
    assert cleanup_old_versions(ds, ZERO).old_versions == 0
    # version 1 stopped being the latest 1.5 s ago (when 2 came), version 2 a moment ago
    stats = cleanup_old_versions(ds, ZERO, min_superseded_age=timedelta(seconds=1))
    assert stats.old_versions == 1
    assert [v["version"] for v in ds.versions()] == [2, 3]
    monkeypatch.setenv("LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS", "0")
    assert cleanup_old_versions(ds, ZERO).old_versions == 1
    assert [v["version"] for v in ds.versions()] == [3]
    assert _ids(uri) == [1, 2, 3]


def test_cleanup_min_age_arguments(tmp_path, monkeypatch):
    ds = lance_ops.write_dataset(_table([1]), str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="min_superseded_age must not be negative"):
        cleanup_old_versions(ds, ZERO, min_superseded_age=timedelta(seconds=-1))
    with pytest.raises(TypeError, match="min_superseded_age must be a datetime.timedelta"):
        cleanup_old_versions(ds, ZERO, min_superseded_age=5)
    monkeypatch.setenv("LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS", "soon")
    with pytest.raises(ValueError, match="LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS must be a number of seconds"):
        cleanup_old_versions(ds, ZERO)
