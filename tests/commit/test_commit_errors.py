"""Commit outcomes that must never be guessed, retry exhaustion, the matrix, and row-id rebases."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops._proto import transaction_pb2
from lance_ops.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CommitRetriesExhaustedError,
    RetryableCommitConflictError,
    StorageError,
)
from lance_ops.table.commit import conflicts
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.write import to_reader, write_fragments
from lance_ops.table.manifest import naming


def _append_txn(ds, ids, **kw):
    frags = write_fragments(to_reader(pa.table({"id": pa.array(ids, pa.int64())})), ds._store, ds._base,
                            list(ds.manifest.fields), **kw)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=ds.version)
    txn.append.fragments.extend(frags)
    return txn


@pytest.fixture
def ds(tmp_path):
    return lance_ops.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), str(tmp_path / "ds"))


def test_ambiguous_failure_is_reported_unknown(ds, monkeypatch):
    store = ds._store

    def broken(path, data):
        raise StorageError("connection reset while writing")

    monkeypatch.setattr(store, "put_if_absent", broken)
    with pytest.raises(CommitOutcomeUnknownError, match="may or may not have landed"):
        commit_transaction(store, ds._base, _append_txn(ds, [10]), CommitContext(ds._manifest_file))
    assert lance_ops.dataset(ds.uri).version == 1


def test_landed_write_with_lost_response_counts_as_committed(ds, monkeypatch):
    store = ds._store
    real = store.put_if_absent

    def lands_then_fails(path, data):
        real(path, data)
        raise StorageError("timeout after the write")

    monkeypatch.setattr(store, "put_if_absent", lands_then_fails)
    mf = commit_transaction(store, ds._base, _append_txn(ds, [10]), CommitContext(ds._manifest_file))
    monkeypatch.undo()
    assert mf.version == 2
    assert lance_ops.dataset(ds.uri).count_rows() == 11


def test_retries_exhausted(ds, monkeypatch):
    store = ds._store

    def always_taken(path, data):
        raise AlreadyExistsError(path)

    monkeypatch.setattr(store, "put_if_absent", always_taken)
    with pytest.raises(CommitRetriesExhaustedError):
        commit_transaction(store, ds._base, _append_txn(ds, [10]), CommitContext(ds._manifest_file),
                           CommitOptions(max_retries=3, backoff_base=0.001))
    assert lance_ops.dataset(ds.uri).version == 1


def test_missing_concurrent_transaction_is_a_conflict():
    ours = transaction_pb2.Transaction()
    ours.append.SetInParent()
    assert conflicts.check(ours, None).verdict == conflicts.Verdict.RETRYABLE


@pytest.mark.parametrize("mine,theirs,verdict", [
    ("append", "append", "OK"), ("append", "delete", "OK"), ("append", "rewrite", "OK"),
    ("append", "overwrite", "INCOMPATIBLE"), ("append", "restore", "INCOMPATIBLE"),
    ("delete", "append", "OK"), ("delete", "overwrite", "INCOMPATIBLE"), ("delete", "merge", "RETRYABLE"),
    ("rewrite", "append", "OK"), ("rewrite", "reserve_fragments", "OK"), ("rewrite", "overwrite", "INCOMPATIBLE"),
    ("overwrite", "overwrite", "RETRYABLE"), ("overwrite", "append", "OK"), ("restore", "overwrite", "OK"),
    ("reserve_fragments", "append", "OK"), ("reserve_fragments", "overwrite", "INCOMPATIBLE"),
    ("merge", "append", "RETRYABLE"), ("merge", "project", "INCOMPATIBLE"), ("project", "merge", "RETRYABLE"),
    ("update_config", "append", "OK"),
])
def test_compatibility_matrix(mine, theirs, verdict):
    a, b = transaction_pb2.Transaction(), transaction_pb2.Transaction()
    getattr(a, mine).SetInParent()
    getattr(b, theirs).SetInParent()
    assert conflicts.check(a, b).verdict == conflicts.Verdict[verdict]


def test_rewrite_vs_delete_on_same_fragment_is_retryable():
    a, b = transaction_pb2.Transaction(), transaction_pb2.Transaction()
    a.rewrite.groups.add().old_fragments.add(id=3)
    b.delete.updated_fragments.add(id=3)
    assert conflicts.check(a, b).verdict == conflicts.Verdict.RETRYABLE
    b2 = transaction_pb2.Transaction()
    b2.delete.updated_fragments.add(id=4)
    assert conflicts.check(a, b2).verdict == conflicts.Verdict.OK


def test_incompatible_is_not_retryable(ds):
    txn = _append_txn(ds, [10])
    lance_ops.write_dataset(pa.table({"id": pa.array([99], pa.int64())}), ds.uri, mode="overwrite")
    with pytest.raises(CommitConflictError) as info:
        commit_transaction(ds._store, ds._base, txn, CommitContext(ds._manifest_file))
    assert not isinstance(info.value, RetryableCommitConflictError)
    assert lance_ops.dataset(ds.uri).to_table()["id"].to_pylist() == [99]


def test_concurrent_appends_rebase_fragment_and_row_ids(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(pa.table({"id": pa.array(range(5), pa.int64())}), uri, enable_stable_row_ids=True)
    a, b = _append_txn(ds, [5, 6, 7]), _append_txn(ds, [8, 9])
    commit_transaction(ds._store, ds._base, a, CommitContext(ds._manifest_file))
    commit_transaction(ds._store, ds._base, b, CommitContext(ds._manifest_file))
    final = lance_ops.dataset(uri)
    assert [f.fragment_id for f in final.get_fragments()] == [0, 1, 2]
    ours = final.to_table(with_row_id=True)
    assert ours["_rowid"].to_pylist() == list(range(10))
    theirs = lance.dataset(uri).to_table(with_row_id=True)
    assert theirs["_rowid"].to_pylist() == ours["_rowid"].to_pylist()
    assert theirs["id"].to_pylist() == ours["id"].to_pylist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert final.take_by_row_id([9, 0, 6])["id"].to_pylist() == [9, 0, 6]


def test_delete_with_idempotency_key_applies_once(ds):
    first = ds.delete("id < 3", idempotency_key="dag.run1.delete")
    again = lance_ops.dataset(ds.uri).delete("id < 3 OR id = 9", idempotency_key="dag.run1.delete")
    assert first == again == {"num_deleted_rows": 3}
    final = lance_ops.dataset(ds.uri)
    assert final.version == 2
    assert final.to_table()["id"].to_pylist() == list(range(3, 10))


def test_data_files_of_another_format_version_are_refused(tmp_path):
    """Fragments written at 2.0 cannot join a 2.2 dataset (pylance could not open it): the
    commit is refused naming the file, and no version is written."""
    from lance_ops.errors import SchemaMismatchError

    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(pa.table({"id": pa.array(range(3), pa.int64())}), uri, data_storage_version="2.2")
    txn = _append_txn(ds, [7], version="2.0")
    name = txn.append.fragments[0].files[0].path
    with pytest.raises(SchemaMismatchError, match=rf"data file '{name}' .* is Lance file version 2.0, but the "
                                                  r"dataset stores 2.2"):
        commit_transaction(ds._store, ds._base, txn, CommitContext(ds._manifest_file))
    assert lance_ops.dataset(uri).version == 1
    assert lance.dataset(uri).to_table()["id"].to_pylist() == [0, 1, 2]
