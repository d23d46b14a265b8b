"""Compaction metrics are measured (issue 20 item 5): rows, files and bytes counted from the data
read and written, ``seconds`` the wall time of the whole call, ``rewrite_seconds`` the tasks'."""
from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

import lance_ops
from lance_ops.maintenance.compaction import RewriteResult, compact_files, source
from lance_ops.table import scan
from lance_ops.table.fragment import LanceFragment

from tests.maintenance.test_compaction import rows

SLOW = 0.2  # seconds each source fragment read is slowed by (the test's own delay)


def _dataset(uri: str) -> lance_ops.LanceDataset:
    """Four small fragments, one with deleted rows."""
    for i in range(4):
        lance_ops.write_dataset(rows(i * 100, i * 100 + 100), uri, mode="create" if i == 0 else "append")
    ds = lance_ops.dataset(uri)
    ds.delete("id < 10")
    return lance_ops.dataset(uri)


def _files(ds: lance_ops.LanceDataset) -> tuple[set[str], int]:
    """Data file paths of the dataset's version, and its deletion-file count."""
    frags = ds.manifest.fragments
    return {df.path for f in frags for df in f.files}, sum(f.HasField("deletion_file") for f in frags)


def test_counts_bytes_and_seconds_are_measured(tmp_path, monkeypatch):
    uri = str(tmp_path / "m.lance")
    ds = _dataset(uri)
    before, deletion_files = _files(ds)
    live = ds.count_rows()
    source_bytes = sum(os.path.getsize(os.path.join(uri, "data", p)) for p in before)

    real = LanceFragment.locate_fields  # once per source fragment, whichever way it is read

    def slow_open(*args, **kwargs):
        time.sleep(SLOW)
        return real(*args, **kwargs)

    monkeypatch.setattr(LanceFragment, "locate_fields", slow_open)
    monkeypatch.setattr(scan, "_WORKERS", 2)
    monkeypatch.setattr(scan, "_LOCAL_WORKERS", 2)
    monkeypatch.setattr(source, "_WORKERS", 2)
    t0 = time.perf_counter()
    metrics = compact_files(ds, target_rows_per_fragment=10_000)
    wall = time.perf_counter() - t0

    after_ds = lance_ops.dataset(uri)
    after, _ = _files(after_ds)
    added, removed = after - before, before - after
    assert metrics["fragments_removed"] == 4 and metrics["fragments_added"] == len(after_ds.manifest.fragments) == 1
    assert metrics["files_removed"] == len(removed) + deletion_files
    assert metrics["files_added"] == len(added)
    assert metrics["rows_read"] == metrics["rows_written"] == live == after_ds.count_rows() == 390
    assert metrics["bytes_written"] == sum(os.path.getsize(os.path.join(uri, "data", p)) for p in added)
    assert metrics["bytes_read"] == source_bytes
    # four slowed fragment opens, two at a time on the reading pool: the rewrite and the whole
    # call both took at least two of them
    assert metrics["rewrite_seconds"] >= 2 * SLOW
    assert metrics["seconds"] >= metrics["rewrite_seconds"]
    assert metrics["seconds"] <= wall


def test_dry_run_metrics(tmp_path):
    uri = str(tmp_path / "d.lance")
    ds = _dataset(uri)
    before, deletion_files = _files(ds)
    metrics = compact_files(ds, target_rows_per_fragment=10_000, dry_run=True)
    assert metrics["dry_run"] is True and metrics["version"] is None
    assert metrics["fragments_removed"] == 4 and metrics["fragments_added"] == 1
    assert metrics["bytes_written"] == 0 and metrics["rewrite_seconds"] == 0.0
    assert metrics["seconds"] > 0
    assert _files(lance_ops.dataset(uri)) == (before, deletion_files)  # nothing written


def test_old_result_json_still_reads(tmp_path):
    """A result written before ``rewrite_seconds`` existed parses; a new one keeps the float."""
    uri = str(tmp_path / "r.lance")
    _dataset(uri)
    ds = lance_ops.dataset(uri)
    frag = ds.manifest.fragments[0]
    res = RewriteResult(ds.version, [frag], [frag], {"rows_read": 3, "rewrite_seconds": 1.5})
    again = RewriteResult.from_json(res.to_json())
    assert again.metrics == {"rows_read": 3, "rewrite_seconds": 1.5}
    raw = res.to_dict()
    raw["metrics"] = {"rows_read": 3}
    assert RewriteResult.from_dict(raw).metrics == {"rows_read": 3}
