"""Issue 16, acceptance 1 and 2: idempotency that survives maintenance; the staged-result lifecycle.

Every re-run below is of a step whose first run committed, after other versions, compaction and
cleanup removed the version it committed: it must commit nothing and report the first version,
and the data must be exactly the model's (checked with lance_ops and pylance).
"""
from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops import cli
from lance_ops.errors import IdempotencyUnknownError, ObjectNotFoundError, StagedResultError
from lance_ops.io import open_store
from lance_ops.maintenance.cleanup import cleanup_old_versions
from lance_ops.maintenance.compaction import commit_compaction, compact_files, plan_compaction
from lance_ops.maintenance.compaction import CompactionOptions
from lance_ops.maintenance.staged_commit import commit_result, commit_staged, pending_stages
from lance_ops.table.commit import idempotency
from lance_ops.table.commit.staging import StagedResult, read_staged, write_staged
from lance_ops.table.write import write_fragments

ZERO = timedelta(0)
OLD = 1_000_000_000.0  # 2001: older than any guard


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"r{i}" for i in ids])})


def ids(uri: str, opts=None) -> list[int]:
    ours = sorted(lance_ops.dataset(uri, storage_options=opts).to_table(columns=["id"]).column("id").to_pylist())
    theirs = sorted(lance.dataset(uri, storage_options=opts).to_table(columns=["id"]).column("id").to_pylist())
    assert ours == theirs
    return ours


def stage(uri: str, key: str, start: int, n: int, opts=None, *, max_rows_per_file: int = 1 << 20) -> StagedResult:
    """What a Spark ingest job with ``--stage-only`` leaves: data files + ``_staging/<key>.json``."""
    ds = lance_ops.dataset(uri, storage_options=opts)
    store, base = open_store(uri, opts)
    t = rows(start, n)
    frags = write_fragments(pa.RecordBatchReader.from_batches(t.schema, t.to_batches()), store, base,
                            list(ds.manifest.fields), storage_options=opts, max_rows_per_file=max_rows_per_file)
    result = StagedResult(key=key, operation="append", read_version=ds.version, fragments=frags,
                          metrics={"num_rows": n})
    write_staged(store, base, result)
    return result


def cleanup(uri: str, opts=None, **kw):
    return cleanup_old_versions(lance_ops.dataset(uri, storage_options=opts), ZERO, **kw)


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ds"), None
    server = request.getfixturevalue("moto_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"{bucket}/ds.lance", server.storage_options


# --- acceptance 1 ----------------------------------------------------------------------------------
@pytest.mark.parametrize("compact", [True, False], ids=["compacted", "not-compacted"])
def test_staged_ingest_rerun_after_maintenance_is_a_noop(where, compact):
    uri, opts = where
    lance_ops.write_dataset(rows(0, 1000), uri, storage_options=opts)
    first = stage(uri, "run-1", 1000, 100, opts)
    r1 = commit_staged(uri, "run-1", storage_options=opts)
    stage(uri, "run-2", 2000, 10, opts)
    r2 = commit_staged(uri, "run-2", storage_options=opts)
    assert (r1["version"], r2["version"], r1["already_committed"]) == (2, 3, False)
    model = list(range(0, 1100)) + list(range(2000, 2010))
    if compact:
        compact_files(lance_ops.dataset(uri, storage_options=opts), target_rows_per_fragment=10_000)
    stats = cleanup(uri, opts)
    assert stats.old_versions == (3 if compact else 2) and stats.staged_results_removed == 2
    assert ids(uri, opts) == model
    latest = lance_ops.dataset(uri, storage_options=opts).version

    again = commit_staged(uri, "run-1", storage_options=opts)  # the commit step of the old run, cleared
    assert again["already_committed"] is True and again["version"] == 2 and again["operation"] == "append"
    again = commit_result(uri, first, storage_options=opts)  # the Spark data source's path, same key
    assert again["already_committed"] is True and again["version"] == 2
    assert lance_ops.dataset(uri, storage_options=opts).version == latest
    assert ids(uri, opts) == model  # 1,110 rows, never 1,210; pylance opens it


def test_write_dataset_key_rerun_after_cleanup(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri, idempotency_key="create")
    lance_ops.write_dataset(rows(10, 5), uri, mode="append", idempotency_key="append-1")
    lance_ops.write_dataset(rows(100, 5), uri, mode="append")
    compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000)
    cleanup(uri)
    model = ids(uri)
    latest = lance_ops.dataset(uri).version
    ds = lance_ops.write_dataset(rows(10, 5), uri, mode="append", idempotency_key="append-1")
    assert ds.version == latest and ids(uri) == model
    ds = lance_ops.write_dataset(rows(0, 10), uri, idempotency_key="create")  # a retried create
    assert ds.version == latest and ids(uri) == model


def test_keyed_delete_rerun_after_101_versions_and_cleanup(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(rows(0, 100), uri)
    assert ds.delete("id < 10", idempotency_key="del-1") == {"num_deleted_rows": 10} and ds.version == 2
    deleted_at = 2
    for i in range(102):  # rows the delete would match again
        lance_ops.write_dataset(rows(i % 10, 1), uri, mode="append")
    model = ids(uri)
    again = lance_ops.dataset(uri)
    assert again.delete("id < 10", idempotency_key="del-1") == {"num_deleted_rows": 10}
    assert again.version == deleted_at and ids(uri) == model
    # without the ledger's record (say its write failed): the retained versions are scanned, all of them
    store, base = open_store(uri)
    shutil.rmtree(os.path.join(uri, "_lance_ops"))
    assert lance_ops.dataset(uri).delete("id < 10", idempotency_key="del-1") == {"num_deleted_rows": 10}
    assert ids(uri) == model
    # after cleanup removed the delete's version: the ledger knows, and the CLI reports it
    cleanup(uri)
    assert lance_ops.dataset(uri).delete("id < 10", idempotency_key="del-1") == {"num_deleted_rows": 10}
    code = cli.main(["delete", uri, "id < 10", "--idempotency-key", "del-1", "--json"])
    assert code == 0 and ids(uri) == model
    assert idempotency.lookup(store, base, "del-1", "delete").version == deleted_at


def test_cli_delete_key_rerun(tmp_path, capsys):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 50), uri)
    assert cli.main(["delete", uri, "id < 5", "--idempotency-key", "d", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    lance_ops.write_dataset(rows(0, 3), uri, mode="append")
    cleanup(uri)
    assert cli.main(["delete", uri, "id < 5", "--idempotency-key", "d", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert first == {"ok": True, "num_deleted_rows": 5, "version": 2}
    assert again == {"ok": True, "num_deleted_rows": 5, "version": 2, "already_committed": True}
    assert ids(uri) == [0, 1, 2] + list(range(5, 50))


def test_keyed_compaction_commit_rerun_after_cleanup(tmp_path):
    uri = str(tmp_path / "ds")
    for i in range(4):
        lance_ops.write_dataset(rows(i * 10, 10), uri, mode="create" if i == 0 else "append")
    ds = lance_ops.dataset(uri)
    plan = plan_compaction(ds, CompactionOptions(target_rows_per_fragment=1000))
    results = [t.execute(uri) for t in plan.tasks]
    first = commit_compaction(uri, results, idempotency_key="cmp-1")
    assert "already_committed" not in first and first["version"] == 5
    lance_ops.write_dataset(rows(100, 3), uri, mode="append")
    cleanup(uri)
    model = ids(uri)
    again = commit_compaction(uri, results, idempotency_key="cmp-1")  # the commit step, re-run
    assert again["already_committed"] is True and again["version"] == first["version"]
    assert again["fragments_removed"] == 4 and ids(uri) == model


def test_keys_are_scoped_by_operation_kind(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 100), uri, idempotency_key="shared")
    # a delete given the key a create/append used deletes (it does not answer "0 rows, done")
    assert lance_ops.dataset(uri).delete("id < 10", idempotency_key="shared") == {"num_deleted_rows": 10}
    assert lance_ops.dataset(uri).delete("id < 10", idempotency_key="shared") == {"num_deleted_rows": 10}
    # a staged commit given a delete's key commits its rows (once)
    lance_ops.dataset(uri).delete("id = 99", idempotency_key="d2")
    stage(uri, "d2", 600, 7)
    out = commit_staged(uri, "d2")
    assert out["already_committed"] is False and out["version"] == 4
    assert commit_staged(uri, "d2") == {**out, "already_committed": True}
    # compaction under a delete/append key is a first compaction, and then idempotent
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000, idempotency_key="d2")
    assert "already_committed" not in m and m["fragments_removed"] == 2
    again = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=1000, idempotency_key="d2")
    assert again["already_committed"] is True and again["version"] == m["version"]
    # a write_dataset under a delete key writes; under the staged write's key it is that write
    lance_ops.dataset(uri).delete("id = 98", idempotency_key="del-only")
    lance_ops.write_dataset(rows(700, 2), uri, mode="append", idempotency_key="del-only")
    assert lance_ops.write_dataset(rows(800, 2), uri, mode="append", idempotency_key="d2").version == 4
    assert ids(uri) == list(range(10, 98)) + list(range(600, 607)) + [700, 701]


def test_unknown_keys_are_refused_after_foreign_cleanup(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri)
    lance_ops.write_dataset(rows(10, 10), uri, mode="append", idempotency_key="a-1")
    lance_ops.write_dataset(rows(20, 10), uri, mode="append")
    shutil.rmtree(os.path.join(uri, "_lance_ops"))  # a ledger that never saw "a-1"
    lance.dataset(uri).cleanup_old_versions(older_than=ZERO)  # pylance removes versions 1, 2
    model = ids(uri)
    with pytest.raises(IdempotencyUnknownError, match=r"version\(s\) 1-2 were removed.*Nothing was committed"):
        lance_ops.write_dataset(rows(10, 10), uri, mode="append", idempotency_key="a-1")
    with pytest.raises(IdempotencyUnknownError):
        lance_ops.dataset(uri).delete("id < 5", idempotency_key="d-1")
    assert ids(uri) == model and lance_ops.dataset(uri).version == 3
    # a stage planned after the hole cannot have committed inside it: it commits
    stage(uri, "late", 100, 5)
    assert commit_staged(uri, "late")["version"] == 4
    # our cleanup keeps the hole on record (as lost), and the operator can accept it
    cleanup(uri)
    store, base = open_store(uri)
    assert idempotency.ledger_summary(store, base)["lost_versions"] == [[1, 2]]
    with pytest.raises(IdempotencyUnknownError):
        lance_ops.write_dataset(rows(10, 10), uri, mode="append", idempotency_key="a-1")
    assert cli.main(["keys", uri, "--accept-lost", "--json"]) == 0
    assert idempotency.ledger_summary(store, base)["lost_versions"] == []
    lance_ops.dataset(uri).delete("id < 5", idempotency_key="d-1")
    assert ids(uri) == [i for i in model + list(range(100, 105)) if i >= 5]


# --- acceptance 2 ----------------------------------------------------------------------------------
def test_stage_with_missing_file_is_refused(where):
    uri, opts = where
    lance_ops.write_dataset(rows(0, 10), uri, storage_options=opts)
    result = stage(uri, "gone", 100, 30, opts, max_rows_per_file=10)
    store, base = open_store(uri, opts)
    victim = result.fragments[1].files[0].path
    store.delete(store.join(base, "data", victim))
    with pytest.raises(StagedResultError, match=rf"data/{victim}: data file of the result staged under key "
                                                 r"'gone' is missing.*nothing was committed. Re-run the write step"):
        commit_staged(uri, "gone", storage_options=opts)
    assert lance_ops.dataset(uri, storage_options=opts).version == 1 and ids(uri, opts) == list(range(10))


def test_stage_with_resized_file_is_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri)
    result = stage(uri, "cut", 100, 30)
    path = os.path.join(uri, "data", result.fragments[0].files[0].path)
    size = os.path.getsize(path)
    assert result.fragments[0].files[0].file_size_bytes == size
    with open(path, "r+b") as f:
        f.truncate(size - 7)
    with pytest.raises(StagedResultError, match=rf"has {size - 7} bytes, the stage recorded {size}"):
        commit_staged(uri, "cut")
    assert lance_ops.dataset(uri).version == 1


def test_stage_whose_files_cleanup_removed_is_refused(tmp_path):
    """A stage-only run abandoned past the guard: cleanup removes its files (and its JSON); a copy of
    the JSON kept elsewhere (or one surviving a crash) cannot be committed."""
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri)
    result = stage(uri, "late", 100, 5)
    doc = os.path.join(uri, "_staging", "late.json")
    saved = open(doc, "rb").read()
    for root, _, files in os.walk(uri):
        for name in files:
            if "/data" in root or root.endswith("_staging"):
                os.utime(os.path.join(root, name), (OLD, OLD))
    stats = cleanup(uri)
    assert stats.staged_results_removed == 1 and stats.data_files_removed == 1
    assert not os.path.exists(doc)
    with pytest.raises(ObjectNotFoundError, match="nothing is staged under key 'late'"):
        commit_staged(uri, "late")
    with open(doc, "wb") as f:
        f.write(saved)
    with pytest.raises(StagedResultError, match=result.fragments[0].files[0].path):
        commit_staged(uri, "late")
    assert lance_ops.dataset(uri).version == 1 and ids(uri) == list(range(10))


def test_committed_stage_is_marked_then_removed_and_pending_ones_listed(where, capsys):
    uri, opts = where
    lance_ops.write_dataset(rows(0, 10), uri, storage_options=opts)
    stage(uri, "done", 10, 5, opts)
    stage(uri, "waiting", 20, 6, opts, max_rows_per_file=3)
    store, base = open_store(uri, opts)
    out = commit_staged(uri, "done", storage_options=opts)
    assert read_staged(store, base, "done").committed_version == out["version"] == 2
    pending = pending_stages(uri, storage_options=opts)
    assert [(p["key"], p["operation"], p["rows"], p["fragments"], p["files"], p["read_version"]) for p in pending] \
        == [("waiting", "append", 6, 2, 2, 1)]
    args = ["inspect", uri] + [a for k, v in (opts or {}).items() for a in ("-s", f"{k}={v}")]
    assert cli.main(args + ["--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [p["key"] for p in info["pending_stages"]] == ["waiting"] and info["pending_stages"][0]["bytes"] > 0
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "pending_stages:" in text and "waiting" in text
    # cleanup: the committed stage goes (the ledger answers a re-run); the young pending one stays
    stats = cleanup(uri, opts)
    assert stats.staged_results_removed == 1
    with pytest.raises(ObjectNotFoundError):
        read_staged(store, base, "done")
    assert commit_staged(uri, "done", storage_options=opts)["already_committed"] is True
    assert read_staged(store, base, "waiting").committed_version is None
    # with delete_unverified (no guard) the pending stage counts as abandoned: it and its files go
    stats = cleanup(uri, opts, delete_unverified=True)
    assert stats.staged_results_removed == 1 and stats.data_files_removed == 2
    assert pending_stages(uri, storage_options=opts) == []
    assert ids(uri, opts) == list(range(15))


def test_cli_append_key_rerun_after_cleanup(tmp_path, capsys):
    import pyarrow.parquet as pq

    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri)
    src = str(tmp_path / "in.parquet")
    pq.write_table(rows(100, 4), src)
    assert cli.main(["append", uri, src, "--idempotency-key", "ap-1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    lance_ops.write_dataset(rows(200, 2), uri, mode="append")
    cleanup(uri)
    assert cli.main(["append", uri, src, "--idempotency-key", "ap-1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (first["version"], first["rows_added"], first["already_committed"]) == (2, 4, False)
    assert (again["already_committed"], again["rows_added"], again["rows"]) == (True, 0, 16)
    assert ids(uri) == list(range(10)) + [100, 101, 102, 103, 200, 201]


class _LedgerDenied:
    """A store whose writes under ``_lance_ops/`` fail (the ledger cannot be carried forward)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _check(self, path):
        if "_lance_ops" in path:
            from lance_ops.errors import StorageError

            raise StorageError(f"put {path}: access denied")

    def put(self, path, data):
        self._check(path)
        self._inner.put(path, data)

    def put_if_absent(self, path, data):
        self._check(path)
        self._inner.put_if_absent(path, data)


def test_cleanup_deletes_nothing_when_the_ledger_cannot_be_carried_forward(tmp_path):
    from types import SimpleNamespace

    from lance_ops.errors import StorageError
    from lance_ops.table.manifest import naming

    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 10), uri)
    lance_ops.write_dataset(rows(10, 5), uri, mode="append", idempotency_key="a")
    lance_ops.write_dataset(rows(20, 5), uri, mode="append")
    shutil.rmtree(os.path.join(uri, "_lance_ops"))  # the best-effort record after the commit was lost
    store, base = open_store(uri)
    before = sorted(os.path.relpath(os.path.join(r, f), uri) for r, _, fs in os.walk(uri) for f in fs)
    with pytest.raises(StorageError, match="access denied"):
        cleanup_old_versions(SimpleNamespace(store=_LedgerDenied(store), base=base, uri=uri), ZERO)
    after = sorted(os.path.relpath(os.path.join(r, f), uri) for r, _, fs in os.walk(uri) for f in fs)
    assert after == before and [loc.version for loc in naming.list_versions(store, base)] == [1, 2, 3]
    cleanup(uri)  # with a working store the key survives its version
    assert [loc.version for loc in naming.list_versions(store, base)] == [3]
    assert lance_ops.write_dataset(rows(10, 5), uri, mode="append", idempotency_key="a").version == 3
    assert ids(uri) == list(range(15)) + list(range(20, 25))


def test_lookups_move_the_coverage_mark(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 1), uri)
    for i in range(40):
        lance_ops.write_dataset(rows(1 + i, 1), uri, mode="append", idempotency_key=f"k{i}" if i % 4 == 0 else None)
    store, base = open_store(uri)
    shutil.rmtree(os.path.join(uri, "_lance_ops"))
    assert idempotency.lookup(store, base, "nope", "write") is None  # scans 41 versions, records 10 keys
    assert idempotency.ledger_summary(store, base) == {"covered_through_version": 41, "lost_versions": []}
    assert len(os.listdir(os.path.join(uri, "_lance_ops", "keys", "write"))) == 10
    assert idempotency.lookup(store, base, "k8", "write").version == 10
    assert idempotency.lookup(store, base, "k8", "delete") is None
