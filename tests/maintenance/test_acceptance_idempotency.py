"""Acceptance (maintenance engine, item 6): idempotency keys on every write and maintenance commit.

For each operation: the first call with a key commits (the key is in the transaction properties,
visible to pylance too); other writers then move the dataset on; the same call again with the
same key returns the earlier version and writes nothing - no file anywhere under the dataset is
added, removed or touched.
"""
from __future__ import annotations

import os

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import DatasetExistsError
from lance_ops.maintenance.compaction import compact_files, materialize_deletions
from lance_ops.maintenance.rowid_index import refresh_row_id_index
from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"r{i}" for i in ids])})


def tree(uri: str) -> dict[str, tuple[int, int]]:
    """Every file under the dataset: relative path -> (size, mtime_ns)."""
    out = {}
    for root, _, files in os.walk(uri):
        for name in files:
            path = os.path.join(root, name)
            st = os.stat(path)
            out[os.path.relpath(path, uri)] = (st.st_size, st.st_mtime_ns)
    return out


def key_of(uri: str, version: int) -> str | None:
    ours = lance_ops.dataset(uri, version=version).transaction.transaction_properties.get(IDEMPOTENCY_KEY)
    theirs = lance.dataset(uri).read_transaction(version).transaction_properties.get(IDEMPOTENCY_KEY)
    assert ours == theirs
    return ours


def move_on(uri: str, start: int = 10_000) -> int:
    """Another writer commits meanwhile; returns the new latest version."""
    return lance_ops.write_dataset(rows(start, 7), uri, mode="append").version


def test_write_dataset_create_append_overwrite(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(rows(0, 20), uri, idempotency_key="create-1")
    assert ds.version == 1 and key_of(uri, 1) == "create-1"
    # a retried create (its first try committed) is a no-op, not "dataset exists"
    files = tree(uri)
    again = lance_ops.write_dataset(rows(0, 20), uri, idempotency_key="create-1")
    assert again.version == 1 and tree(uri) == files
    with pytest.raises(DatasetExistsError):
        lance_ops.write_dataset(rows(0, 20), uri, idempotency_key="create-other")

    ds = lance_ops.write_dataset(rows(20, 10), uri, mode="append", idempotency_key="append-1")
    assert ds.version == 2 and key_of(uri, 2) == "append-1"
    latest = move_on(uri)
    files = tree(uri)
    again = lance_ops.write_dataset(rows(20, 10), uri, mode="append", idempotency_key="append-1")
    assert again.version == 2 and tree(uri) == files
    assert lance_ops.dataset(uri).latest_version == latest and lance_ops.dataset(uri).count_rows() == 37

    ds = lance_ops.write_dataset(rows(500, 5), uri, mode="overwrite", idempotency_key="ow-1")
    assert key_of(uri, ds.version) == "ow-1"
    move_on(uri)
    files = tree(uri)
    again = lance_ops.write_dataset(rows(500, 5), uri, mode="overwrite", idempotency_key="ow-1")
    assert again.version == ds.version and tree(uri) == files
    assert lance.dataset(uri).count_rows() == 12  # 5 overwritten + 7 appended after, once


def test_delete(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 100), uri)
    ds = lance_ops.dataset(uri)
    assert ds.delete("id < 10", idempotency_key="del-1") == {"num_deleted_rows": 10}
    version = ds.version
    assert key_of(uri, version) == "del-1"
    move_on(uri)
    lance_ops.write_dataset(rows(0, 3), uri, mode="append")  # rows the delete would match again
    files = tree(uri)
    again = lance_ops.dataset(uri).delete("id < 10", idempotency_key="del-1")
    assert again == {"num_deleted_rows": 10} and tree(uri) == files
    assert lance_ops.dataset(uri).count_rows("id < 10") == 3


def test_compact_files(tmp_path):
    uri = str(tmp_path / "ds")
    for i in range(6):
        lance_ops.write_dataset(rows(i * 20, 20), uri, mode="create" if i == 0 else "append")
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100, idempotency_key="compact-1")
    assert m["fragments_removed"] == 6 and key_of(uri, m["version"]) == "compact-1"
    for i in range(3):  # new small fragments: a fresh compaction would have work to do
        move_on(uri, 1000 + 10 * i)
    files = tree(uri)
    again = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100, idempotency_key="compact-1")
    assert again["already_committed"] is True and again["version"] == m["version"]
    assert again["fragments_removed"] == 6 and tree(uri) == files
    again = lance_ops.dataset(uri).optimize.compact_files(target_rows_per_fragment=100,
                                                          idempotency_key="compact-1")
    assert again["already_committed"] is True and tree(uri) == files


def test_materialize_deletions(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 300), uri, max_rows_per_file=100)
    lance_ops.dataset(uri).delete("id % 2 = 0 AND id < 100")
    m = materialize_deletions(lance_ops.dataset(uri), 0.1, idempotency_key="purge-1")
    assert m["fragments_removed"] == 1 and key_of(uri, m["version"]) == "purge-1"
    lance_ops.dataset(uri).delete("id % 2 = 0 AND id >= 100 AND id < 200")
    files = tree(uri)
    again = materialize_deletions(lance_ops.dataset(uri), 0.1, idempotency_key="purge-1")
    assert again["already_committed"] is True and again["version"] == m["version"] and tree(uri) == files
    assert materialize_deletions(lance_ops.dataset(uri), 0.1)["fragments_removed"] == 1  # new key: works


def test_refresh_row_id_index(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 100), uri, max_rows_per_file=50, enable_stable_row_ids=True)
    first = refresh_row_id_index(lance_ops.dataset(uri), idempotency_key="idx-1")
    assert first["version"] == 1 and first["rows"] == 100 and not first["up_to_date"]
    move_on(uri)  # version 2: a refresh without the key would write a new index
    files = tree(uri)
    again = refresh_row_id_index(lance_ops.dataset(uri), idempotency_key="idx-1")
    assert again["already_committed"] is True and again["version"] == 1 and again["path"] == first["path"]
    assert again["rows"] == 100 and again["up_to_date"] is False and tree(uri) == files
    fresh = refresh_row_id_index(lance_ops.dataset(uri), idempotency_key="idx-2")
    assert fresh["version"] == 2 and fresh["reused"] == 2 and fresh["rebuilt"] == 1 and tree(uri) != files
    files = tree(uri)
    assert refresh_row_id_index(lance_ops.dataset(uri), idempotency_key="idx-2")["up_to_date"] is True
    assert tree(uri) == files


def test_staged_commit(tmp_path):
    staged_commit = pytest.importorskip("lance_ops.maintenance.staged_commit")
    from lance_ops.io import open_store
    from lance_ops.table.commit.staging import StagedResult, write_staged
    from lance_ops.table.write import write_fragments

    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri)
    ds = lance_ops.dataset(uri)
    store, base = open_store(uri)
    table = rows(10, 30)
    frags = write_fragments(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()), store, base,
                            list(ds.manifest.fields))
    write_staged(store, base, StagedResult(key="stage-1", operation="append", read_version=1, fragments=frags))
    first = staged_commit.commit_staged(uri, "stage-1")
    assert first["version"] == 2 and first["already_committed"] is False and key_of(uri, 2) == "stage-1"
    move_on(uri)
    files = tree(uri)
    again = staged_commit.commit_staged(uri, "stage-1")
    assert again["version"] == 2 and again["already_committed"] is True and tree(uri) == files
    assert lance.dataset(uri).count_rows() == 47
