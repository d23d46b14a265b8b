"""The package face (ADR 0003): users get ``lance_ops.LanceDataset``, the core dataset plus the
maintenance verbs, from every entry point and from every dataset-returning method."""
from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

import lance_ops
from lance_ops.table import dataset as core
from lance_ops.table import write as core_write


def _t(start: int, stop: int) -> pa.Table:
    return pa.table({"a": pa.array(range(start, stop), pa.int64())})


def test_every_entry_point_returns_the_face_class(tmp_path):
    uri = str(tmp_path / "ds")
    written = lance_ops.write_dataset(_t(0, 10), uri, max_rows_per_file=5)
    appended = lance_ops.write_dataset(_t(10, 20), uri, mode="append", max_rows_per_file=5)
    opened = lance_ops.dataset(uri, version=1)
    got = [written, appended, opened, opened.checkout_version(2), opened.reopen_latest()]
    assert [d.version for d in got] == [1, 2, 1, 2, 2]
    got.append(opened.restore())  # moves ``opened`` to the new version 3
    assert got[-1] is opened and opened.version == 3
    assert [type(d) for d in got] == [lance_ops.LanceDataset] * 6
    assert issubclass(lance_ops.LanceDataset, core.LanceDataset)
    assert written.manifest_file is not None and written.to_table() == _t(0, 10)


def test_the_face_adds_the_maintenance_verbs_the_core_lacks(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(_t(0, 10), uri, max_rows_per_file=2)
    ds = lance_ops.write_dataset(_t(10, 12), ds, mode="append")
    assert not hasattr(core.LanceDataset(uri), "optimize")
    assert not hasattr(core_write.write_dataset(_t(12, 13), uri, mode="append"), "cleanup_old_versions")
    ds = lance_ops.dataset(uri)
    metrics = ds.optimize.compact_files(target_rows_per_fragment=100)
    assert (metrics["fragments_removed"], metrics["fragments_added"]) == (7, 1)
    assert ds.version == 4 and ds.to_table() == _t(0, 13)
    stats = ds.cleanup_old_versions(older_than=timedelta(0))
    assert stats.old_versions == 3
    assert [v["version"] for v in ds.versions()] == [4]
