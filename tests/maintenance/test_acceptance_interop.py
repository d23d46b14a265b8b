"""Acceptance (maintenance engine, item 8): the whole lance_ops maintenance chain on a pylance dataset.

pylance writes and deletes; lance_ops materializes deletions, compacts, rebuilds statistics,
refreshes the row-id index and cleans up. Then pylance reads the same rows with the same stable
row ids, keeps writing, and its own ``compact_files`` / ``cleanup_old_versions`` still work; and
lance_ops keeps agreeing with it all the way.
"""
from __future__ import annotations

import os
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.maintenance.cleanup import cleanup_old_versions
from lance_ops.maintenance.compaction import compact_files, materialize_deletions
from lance_ops.maintenance.rowid_index import refresh_row_id_index
from lance_ops.maintenance.statistics import rebuild_statistics, statistics_coverage


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"row-{i}" for i in ids]), "v": ids.astype(np.float64) / 3})


def canon(t: pa.Table) -> pa.Table:
    return t.replace_schema_metadata(None).sort_by("id").combine_chunks()


def both(uri: str, stable: bool) -> pa.Table:
    """pylance's and our reads of the latest version (equal); returns pylance's."""
    theirs = canon(lance.dataset(uri).to_table(with_row_id=stable))
    ours = canon(lance_ops.dataset(uri).to_table(with_row_id=stable))
    assert ours.equals(theirs.cast(ours.schema))
    return theirs


def files_in(uri: str, area: str) -> set[str]:
    d = os.path.join(uri, area)
    return set(os.listdir(d)) if os.path.isdir(d) else set()


@pytest.mark.parametrize("stable", [False, True])
def test_pylance_dataset_through_our_maintenance_and_back(tmp_path, stable):
    uri = str(tmp_path / "ds")
    lance.write_dataset(rows(0, 20), uri, data_storage_version="2.0", enable_stable_row_ids=stable)
    for i in range(1, 8):
        lance.write_dataset(rows(20 * i, 20), uri, mode="append")
    lance.write_dataset(rows(1000, 6000), uri, mode="append")  # a big fragment
    theirs = lance.dataset(uri)
    theirs.delete("id % 7 = 0 AND id < 160")
    theirs.delete("id >= 1100 AND id < 5000")  # 65% of the big fragment (bitmap deletion file)
    expected = both(uri, stable)

    # --- our maintenance ---------------------------------------------------------------------------
    m = materialize_deletions(lance_ops.dataset(uri), 0.5)
    assert m["fragments_removed"] == 1 and m["rows_written"] == 2100
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)
    assert m["fragments_removed"] == 8 and m["version"] is not None
    assert statistics_coverage(lance_ops.dataset(uri))["with_stats"] == 2  # only the files we wrote
    res = rebuild_statistics(lance_ops.dataset(uri))
    cov = statistics_coverage(lance_ops.dataset(uri))
    assert res["failed"] == 0 and cov["with_stats"] == cov["data_files"]
    if stable:
        assert refresh_row_id_index(lance_ops.dataset(uri))["rows"] == expected.num_rows
    stats = cleanup_old_versions(lance_ops.dataset(uri), timedelta(0), delete_unverified=True)
    assert stats.old_versions == lance_ops.dataset(uri).version - 1

    # pylance reads the same rows with the same row ids, and so do we (through the index too)
    assert both(uri, stable).equals(expected)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [lance_ops.dataset(uri).version]
    if stable:
        probe = expected["_rowid"].to_numpy()[::13]
        want = lance.dataset(uri)._take_rows(probe.tolist())
        got = lance_ops.dataset(uri).take_by_row_id(probe)
        assert got.select(["id", "s", "v"]).equals(want.select(["id", "s", "v"]).cast(got.select(["id", "s", "v"]).schema))

    # --- pylance keeps writing ------------------------------------------------------------------------
    lance.write_dataset(rows(20000, 50), uri, mode="append")
    lance.dataset(uri).delete("id % 5 = 1")
    lance.dataset(uri).update({"s": "'updated'"}, where="id = 20")
    after_writes = both(uri, stable)
    assert after_writes.num_rows == expected.num_rows + 50 - sum(
        1 for i in expected["id"].to_pylist() + list(range(20000, 20050)) if i % 5 == 1)
    if stable:  # surviving old rows kept their row ids
        pairs = dict(zip(expected["id"].to_pylist(), expected["_rowid"].to_pylist()))
        survivors = [(i, rid) for i, rid in zip(after_writes["id"].to_pylist(), after_writes["_rowid"].to_pylist())
                     if i in pairs and i != 20]  # (the updated row is rewritten by pylance)
        assert len(survivors) > 1000 and all(pairs[i] == rid for i, rid in survivors)

    # --- and its own maintenance still works on it -------------------------------------------------------
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)
    assert len(lance.dataset(uri).get_fragments()) == 1
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    final = both(uri, stable)
    assert final.num_rows == after_writes.num_rows
    assert final.select(["id", "s"]).equals(after_writes.select(["id", "s"]))
    # pylance left our extension areas alone; our cleanup tidies them, a rebuild covers its file
    stats = cleanup_old_versions(lance_ops.dataset(uri), timedelta(0), delete_unverified=True)
    assert stats.old_versions == 0 and stats.statistics_files_removed >= 1
    assert rebuild_statistics(lance_ops.dataset(uri))["written"] == 1
    assert len(files_in(uri, "_stats")) == 1
    if stable:
        assert stats.rowid_index_files_removed == 1 and files_in(uri, "_rowid_index") == set()
        assert refresh_row_id_index(lance_ops.dataset(uri))["rows"] == final.num_rows
    assert both(uri, stable).equals(final)
    assert lance_ops.dataset(uri).count_rows("id >= 20000") == lance.dataset(uri).count_rows("id >= 20000") == 40
