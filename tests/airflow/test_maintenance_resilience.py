"""The lance_maintenance DAG never stalls (issue 19, item 7), run for real with dag.test().

On an indexed pylance dataset with deletions and small fragments (BTREE, BITMAP, LABEL_LIST,
INVERTED, IVF_PQ) the whole run ends green: compaction remaps every index, cleanup and the health
report run, and pylance's index queries are exact afterwards. A failed verify keeps cleanup from running (old versions stay for recovery), while
the health report still runs and the run ends failed naming verify.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.slow

DIM = 8


def _table(lo: int, hi: int) -> pa.Table:
    rng = np.random.default_rng(lo)
    vec = rng.standard_normal((hi - lo, DIM)).astype("float32")
    return pa.table({
        "id": pa.array(range(lo, hi), pa.int64()),
        "cat": pa.array([f"c{i % 5}" for i in range(lo, hi)]),
        "tags": pa.array([[f"t{i % 3}", f"t{i % 7}"] for i in range(lo, hi)]),
        "text": pa.array([f"word{i % 11} number {i}" for i in range(lo, hi)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM),
    })


def indexed_dataset(uri: str) -> Any:
    """4 indexed fragments (BTREE, BITMAP, LABEL_LIST, INVERTED, IVF_PQ), 3 small appends, deletions."""
    import lance

    ds = lance.write_dataset(_table(0, 800), uri, max_rows_per_file=200)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    ds.create_scalar_index("text", "INVERTED")
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    for lo in (800, 850, 900):
        ds = lance.write_dataset(_table(lo, lo + 50), uri, mode="append")
    ds.delete("id % 10 = 3")
    return lance.dataset(uri)


def run_report(res: Any) -> dict[str, Any] | None:
    """The ``run_report`` XCom the final task pushed when a step failed (None otherwise)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter(
            XComModel.dag_id == res.dag_id, XComModel.run_id == res.run_id, XComModel.task_id == "run_report",
            XComModel.key == "run_report").one_or_none()
    if row is None:
        return None
    import json

    return json.loads(row.value) if isinstance(row.value, (str, bytes)) else row.value


def assert_index_queries_exact(uri: str) -> None:
    """Every scalar / full-text query through pylance's indices returns the brute-force rows; the
    vector index finds each probed row's own vector and never a deleted row."""
    import lance

    ds = lance.dataset(uri)
    everything = ds.to_table(columns=["id", "cat", "tags", "text", "vec"])
    live = set(everything["id"].to_pylist())
    assert live == {i for i in range(950) if i % 10 != 3}
    rows = everything.to_pylist()
    for flt, want in [
        ("id = 17", {17}), ("id >= 780 AND id < 820", set(range(780, 820))), ("cat = 'c2'", None),
        ("array_has_any(tags, ['t5'])", None),
    ]:
        got = set(ds.to_table(columns=["id"], filter=flt)["id"].to_pylist())
        brute = set(ds.to_table(columns=["id"], filter=flt, use_scalar_index=False)["id"].to_pylist())
        assert got == brute, flt
        if want is not None:
            assert got == want & live, flt
    fts = set(ds.to_table(columns=["id"], full_text_query="word4")["id"].to_pylist())
    assert fts == {r["id"] for r in rows if r["text"].split()[0] == "word4"}
    assert fts and not fts - live
    for probe in (0, 401, 830, 925):
        vec = np.asarray(next(r["vec"] for r in rows if r["id"] == probe), dtype="float32")
        hits = ds.to_table(columns=["id"], nearest={"column": "vec", "q": vec, "k": 10, "nprobes": 2,
                                                    "refine_factor": 10})["id"].to_pylist()
        assert hits[0] == probe and not set(hits) - live


def segment_uuids(ds: Any) -> dict[str, set[str]]:
    """index name -> the uuids of its segments, as pylance lists them."""
    out: dict[str, set[str]] = {}
    for entry in ds.list_indices():
        out.setdefault(entry["name"], set()).add(entry["uuid"])
    return out


def test_indexed_dataset_maintenance_ends_green_and_indices_stay_exact(airflow_runner, tmp_path: Path):
    """Item 7: compaction (small fragments merged, deletions materialised) runs on the indexed
    dataset: every index is remapped, the run ends green, pylance's index queries are exact."""
    import lance

    uri = str(tmp_path / "indexed.lance")
    before = indexed_dataset(uri)
    names = sorted(i["name"] for i in before.list_indices())
    uuids = segment_uuids(before)
    fragments_before = len(before.get_fragments())
    res = airflow_runner.run("lance_maintenance", {
        "dataset_uri": uri, "target_rows_per_fragment": 1000, "small_fragments_threshold": 3,
        "materialize_deletions_threshold": 0.05, "cleanup_older_than": "0s",
    })
    states = res.task_states
    failed = sorted(t for t, s in states.items() if s == "failed")
    assert failed == [] and res.state == "success", (states, run_report(res))
    for step in ("verify", "cleanup", "health", "run_report"):
        assert states[step] == "success", states
    assert res.xcoms["run_report"]["failed"] == []
    ds = lance.dataset(uri)
    ds.validate()
    # compaction really rewrote the indexed fragments: fewer fragments, no deletion files left,
    # and every index segment was remapped under a new uuid
    assert len(ds.get_fragments()) < fragments_before
    assert all(f.metadata.deletion_file is None for f in ds.get_fragments())
    after = segment_uuids(ds)
    assert all(not (after[n] & uuids[n]) for n in names), (uuids, after)
    # cleanup removed every old version; the indices are all still there
    ds = lance.dataset(uri)
    assert [v["version"] for v in ds.versions()] == [ds.version]
    # (pylance lists each segment: the IVF_PQ index now has a delta segment over the appended rows)
    assert sorted({i["name"] for i in ds.list_indices()}) == names
    # index upkeep (issue 22): every kind lance_ops updates covers all rows; INVERTED is reported and left
    upkeep = res.xcoms["optimize_indices"]["metrics"]
    assert sorted(upkeep["updated"]) == ["cat_idx", "id_idx", "tags_idx", "vec_idx"]
    assert list(upkeep["skipped_indices"]) == ["text_idx"] and "INVERTED" in upkeep["skipped_indices"]["text_idx"]
    assert {n: ds.stats.index_stats(n)["num_unindexed_rows"] for n in names if n != "text_idx"} == \
        {"cat_idx": 0, "id_idx": 0, "tags_idx": 0, "vec_idx": 0}
    health = res.xcoms["health"]["metrics"]
    assert sorted(i["name"] for i in health["indices"]) == names
    kinds = {i["name"]: i["kind"] for i in health["indices"]}
    assert kinds == {"id_idx": "BTREE", "cat_idx": "BITMAP", "tags_idx": "LABEL_LIST", "text_idx": "INVERTED",
                     "vec_idx": "IVF_PQ"}
    for info in health["indices"]:
        stats = ds.stats.index_stats(info["name"])
        assert info["indexed_rows"] == stats["num_indexed_rows"]
        assert info["unindexed_rows"] == stats["num_unindexed_rows"]
        assert info["indexed_fragments"] == stats["num_indexed_fragments"]
    assert_index_queries_exact(uri)


def test_failed_verify_keeps_cleanup_from_running(airflow_runner, tmp_path: Path):
    import lance_ops

    uri = str(tmp_path / "broken.lance")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(1000), pa.int64())}), uri)
    ds = lance_ops.dataset(uri)
    ds.delete("id = 5")  # a second version, awaiting cleanup
    ds = lance_ops.dataset(uri)
    data = ds.get_fragments()[0].metadata.files[0].path
    with open(Path(uri) / "data" / data, "ab") as f:  # verify: recorded size != actual size
        f.write(b"garbage")
    res = airflow_runner.run("lance_maintenance", {
        "dataset_uri": uri, "versions_to_clean_threshold": 1, "cleanup_older_than": "0s",
    })
    states = res.task_states
    assert states["verify"] == "failed", states
    assert states["cleanup"] == "upstream_failed", states
    assert states["health"] == "success", states
    assert res.state == "failed" and states["run_report"] == "failed"
    report = run_report(res)
    assert report is not None and "verify" in report["failed"] and report["not_run"] == ["cleanup"], report
    assert [v["version"] for v in lance_ops.dataset(uri).versions()] == [1, 2]  # kept for recovery
