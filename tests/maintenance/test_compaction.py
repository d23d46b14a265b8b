"""Compaction: planning equals pylance's, data and row ids survive, commits are safe and idempotent.

Layouts are built with pylance (so both libraries plan the very same manifest), planned by
lance_ops, and compacted by pylance on a copy: the fragments our plan groups and the row counts
of the new fragments must equal what pylance 14.0.2 produces.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil

import lance
import lance.optimize
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import LanceOpsError, RetryableCommitConflictError, UnsupportedError
from lance_ops.maintenance.compaction import run as compaction_mod
from lance_ops.maintenance.compaction import (
    CompactionOptions,
    CompactionPlan,
    CompactionTask,
    RewriteResult,
    commit_compaction,
    compact_files,
    output_sizes,
    plan_compaction,
)


# --- helpers (imported by the other compaction test modules) --------------------------------------
def rows(start: int, stop: int) -> pa.Table:
    ids = np.arange(start, stop, dtype=np.int64)
    return pa.table({
        "id": ids,
        "s": pa.array([f"row-{i}" for i in range(start, stop)]),
        "v": pa.array(ids.astype(np.float64) * 0.25),
        "tags": pa.array([[int(i % 3)] * int(i % 3) for i in range(start, stop)], pa.list_(pa.int32())),
    })


def build(uri: str, sizes, *, library: str = "pylance", stable: bool = False, deletes=()) -> int:
    """Append one fragment per size (ids consecutive), then run ``deletes``; returns the row count."""
    shutil.rmtree(uri, ignore_errors=True)
    start = 0
    for i, n in enumerate(sizes):
        mode = "create" if i == 0 else "append"
        if library == "pylance":
            lance.write_dataset(rows(start, start + n), uri, mode=mode, data_storage_version="2.0",
                                enable_stable_row_ids=stable)
        else:
            lance_ops.write_dataset(rows(start, start + n), uri, mode=mode, enable_stable_row_ids=stable)
        start += n
    for predicate in deletes:
        if library == "pylance":
            lance.dataset(uri).delete(predicate)
        else:
            lance_ops.dataset(uri).delete(predicate)
    return start


def data_files(uri: str) -> set[str]:
    d = os.path.join(uri, "data")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


def written_files(uri: str) -> set[str]:
    """Files a rewrite creates: data files and their statistics sidecars (if any)."""
    return {p for p in all_files(uri) if p.startswith(("data/", "_stats/"))}


def all_files(uri: str) -> set[str]:
    out = set()
    for root, _, files in os.walk(uri):
        for f in files:
            out.add(os.path.relpath(os.path.join(root, f), uri))
    return out


def referenced_data_files(uri: str) -> set[str]:
    return {df.path for f in lance_ops.dataset(uri).manifest.fragments for df in f.files}


def sorted_table(t: pa.Table) -> pa.Table:
    return t.sort_by("id").replace_schema_metadata(None).combine_chunks()


def pylance_new_counts(uri: str, target: int, **kw) -> tuple[list[list[int]], list[int]]:
    """pylance's plan (fragment ids per task) and the row counts of the fragments it adds."""
    ds = lance.dataset(uri)
    plan = lance.optimize.Compaction.plan(ds, dict(target_rows_per_fragment=target, **kw))
    groups = [[f.id for f in t.fragments] for t in plan.tasks]
    before = {f.fragment_id for f in ds.get_fragments()}
    ds.optimize.compact_files(target_rows_per_fragment=target, **kw)
    after = lance.dataset(uri).get_fragments()
    added = sorted((f for f in after if f.fragment_id not in before), key=lambda f: f.fragment_id)
    return groups, [f.count_rows() for f in added]


def ours(plan: CompactionPlan) -> tuple[list[list[int]], list[int]]:
    return [t.fragment_ids for t in plan.tasks], [n for t in plan.tasks for n in t.output_rows]


# --- output sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("rows_, target, expected", [
    (270, 250, [270]), (427, 250, [427]), (800, 250, [267, 267, 266]), (1001, 250, [251, 250, 250, 250]),
    (1249, 250, [313, 312, 312, 312]), (1250, 250, [250] * 5), (10, 3, [4, 3, 3]), (7, 1, [1] * 7),
    (0, 10, []), (5, 100, [5]),
])
def test_output_sizes_match_observed_pylance(rows_, target, expected):
    assert output_sizes(rows_, target) == expected


def test_output_sizes_respect_max_rows_per_file():
    assert output_sizes(1000, 600, 300) == [250, 250, 250, 250]
    assert output_sizes(1000, 100, 300) == [100] * 10


# --- planning vs pylance ------------------------------------------------------------------------------
LAYOUTS = [
    # (sizes, target, deletes, extra pylance options)
    ([90, 90, 90] + [100] * 7 + [9, 9, 9], 250, (), {}),
    ([200] * 5, 300, (), {}),
    ([1200], 250, ("id % 5 = 0",), {}),                           # 960 live -> 320 x 3
    ([10] * 6 + [100] + [20] * 3, 50, (), {}),
    ([10] * 12, 30, (), {"max_source_fragments": 7}),
    ([10] * 6 + [100] + [20] * 3, 50, (), {"max_source_fragments": 4}),
    ([100, 1000, 100], 50, ("id < 10", "id >= 1100 AND id < 1111"), {}),  # ratio 0.1 exactly vs 0.11
    ([100, 1000, 100], 50, ("id < 10", "id >= 1100 AND id < 1111"), {"materialize_deletions_threshold": 0.09}),
    ([100, 1000, 100], 50, ("id < 30", "id >= 1100 AND id < 1150"), {"materialize_deletions": False}),
    ([100, 1000, 100], 50, ("id < 30",), {"materialize_deletions_threshold": 1.0}),
    ([40, 40, 500, 40, 500, 40, 40, 40], 100, ("id >= 80 AND id < 300",), {}),
    ([40, 40, 40], 1000, ("id < 50",), {}),
]


@pytest.mark.parametrize("sizes,target,deletes,kw", LAYOUTS)
def test_plan_matches_pylance(tmp_path, sizes, target, deletes, kw):
    uri = str(tmp_path / "t.lance")
    build(uri, sizes, deletes=deletes)
    plan = plan_compaction(lance_ops.dataset(uri), CompactionOptions(target_rows_per_fragment=target, **kw))
    assert ours(plan) == pylance_new_counts(uri, target, **kw)


def test_plan_matches_pylance_random_layouts(tmp_path):
    rng = random.Random(1234)
    for case in range(8):
        uri = str(tmp_path / f"r{case}.lance")
        sizes = [rng.choice([rng.randint(1, 60), rng.randint(60, 400)]) for _ in range(rng.randint(3, 12))]
        total = sum(sizes)
        deletes = []
        for _ in range(rng.randint(0, 3)):
            lo = rng.randint(0, total - 1)
            deletes.append(f"id >= {lo} AND id < {lo + rng.randint(1, 80)}")
        target = rng.choice([50, 120, 250, 700])
        kw = {}
        if rng.random() < 0.3:
            kw["materialize_deletions_threshold"] = rng.choice([0.0, 0.05, 0.3])
        if rng.random() < 0.3:
            kw["max_source_fragments"] = rng.randint(1, 6)
        build(uri, sizes, deletes=deletes)
        plan = plan_compaction(lance_ops.dataset(uri), CompactionOptions(target_rows_per_fragment=target, **kw))
        assert ours(plan) == pylance_new_counts(uri, target, **kw), (sizes, deletes, target, kw)


def test_compacting_gives_pylance_fragment_sizes(tmp_path):
    """Execute, not only plan: the committed dataset has pylance's new fragment sizes."""
    a, b = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    build(a, [90, 90, 90] + [100] * 7 + [9, 9, 9])
    shutil.copytree(a, b)
    metrics = compact_files(lance_ops.dataset(a), target_rows_per_fragment=250)
    _, theirs = pylance_new_counts(b, 250)
    assert [f.physical_rows for f in lance_ops.dataset(a).manifest.fragments] == theirs == [270, 300, 427]
    pm = lance.dataset(b).version  # pylance: reserve + rewrite
    assert metrics["version"] == 14 and pm == 15
    assert sorted_table(lance.dataset(a).to_table()).equals(sorted_table(lance.dataset(b).to_table()))


def test_planning_rules(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [50, 500, 50, 50, 500, 20], library="lance_ops", deletes=["id >= 60 AND id < 300"])
    ds = lance_ops.dataset(uri)
    plan = plan_compaction(ds, CompactionOptions(target_rows_per_fragment=100))
    # fragment 1 (48% deleted) compacts itself in a run with its small neighbours 0, 2, 3, split
    # into tasks of >= 100 live rows; the lone small fragment 5 after the big fragment 4 stays.
    assert [t.fragment_ids for t in plan.tasks] == [[0, 1], [2, 3]]
    assert [t.live_rows for t in plan.tasks] == [[50, 500 - 240], [50, 50]]
    assert [t.output_rows for t in plan.tasks] == [[104, 103, 103], [100]]
    off = plan_compaction(ds, CompactionOptions(target_rows_per_fragment=100, materialize_deletions=False))
    assert [t.fragment_ids for t in off.tasks] == [[2, 3]]
    assert plan_compaction(ds, target_rows_per_fragment=10).tasks[0].fragment_ids == [1]
    with pytest.raises(ValueError):
        CompactionOptions(target_rows_per_fragment=0)
    assert CompactionOptions(materialize_deletions_threshold=1.5).materialize_deletions is False


def test_empty_and_single_fragment_datasets(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [10], library="lance_ops")
    ds = lance_ops.dataset(uri)
    m = compact_files(ds, target_rows_per_fragment=100)
    assert m["version"] is None and m["fragments_removed"] == 0 and ds.latest_version == 1
    lance_ops.dataset(uri).delete("true")
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)
    assert m["version"] is None and m["tasks"] == 0


# --- execution and metrics --------------------------------------------------------------------------
def test_compact_metrics_and_data(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [30] * 10 + [1000] + [30] * 3, library="lance_ops",
          deletes=["id % 7 = 3 AND id < 300", "id >= 1300 AND id < 1320"])
    before = lance_ops.dataset(uri)
    expected = sorted_table(before.to_table())
    frags = {f.id: f for f in before.manifest.fragments}
    plan = plan_compaction(before, target_rows_per_fragment=100)
    removed_ids = [i for t in plan.tasks for i in t.fragment_ids]
    removed_files = sum(len(frags[i].files) + frags[i].HasField("deletion_file") for i in removed_ids)
    live = sum(frags[i].physical_rows - frags[i].deletion_file.num_deleted_rows for i in removed_ids)
    files_before = data_files(uri)

    m = before.optimize.compact_files(target_rows_per_fragment=100)

    after = lance_ops.dataset(uri)
    assert before.version == after.version == m["version"] == 17
    new_ids = [f.id for f in after.manifest.fragments if f.id not in frags]
    assert m["fragments_removed"] == len(removed_ids) == 13
    assert m["fragments_added"] == len(new_ids) == sum(len(t.output_rows) for t in plan.tasks)
    assert m["files_removed"] == removed_files == 13 + 11  # data files + deletion files
    assert m["files_added"] == len(data_files(uri) - files_before) == len(new_ids)
    assert m["rows_read"] == m["rows_written"] == live
    assert m["bytes_read"] == sum(df.file_size_bytes for i in removed_ids for df in frags[i].files)
    new_bytes = sum(os.path.getsize(os.path.join(uri, "data", p)) for p in data_files(uri) - files_before)
    assert m["bytes_written"] == new_bytes
    assert m["dry_run"] is False and m["seconds"] >= 0
    assert not any(f.HasField("deletion_file") for f in after.manifest.fragments if f.id in new_ids)
    assert after.manifest.reader_feature_flags & 1 == 0  # no deletion files left
    assert sorted_table(after.to_table()).equals(expected)
    assert sorted_table(lance.dataset(uri).to_table()).equals(expected)
    assert after.transaction.WhichOneof("operation") == "rewrite"
    assert len(after.transaction.rewrite.groups) == len(plan.tasks)
    # rows inside each task keep their order (new fragments = old live rows concatenated), and the
    # manifest lists fragments by id as pylance's compaction leaves them (scan order identical)
    assert [f.id for f in after.manifest.fragments] == sorted(f.id for f in after.manifest.fragments)
    theirs = str(tmp_path / "theirs.lance")
    build(theirs, [30] * 10 + [1000] + [30] * 3, library="lance_ops",
          deletes=["id % 7 = 3 AND id < 300", "id >= 1300 AND id < 1320"])
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100)
    assert after.to_table()["id"].to_pylist() == lance.dataset(theirs).to_table()["id"].to_pylist()
    assert compact_files(after, target_rows_per_fragment=100)["version"] is None  # idempotent by selection


def test_dry_run_writes_nothing(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 8, library="lance_ops", deletes=["id < 5"])
    files = all_files(uri)
    ds = lance_ops.dataset(uri)
    m = compact_files(ds, target_rows_per_fragment=50, dry_run=True)
    assert all_files(uri) == files and ds.latest_version == 9
    assert m["dry_run"] is True and m["version"] is None
    assert [p["fragment_ids"] for p in m["plan"]] == [[0, 1, 2], [3, 4, 5, 6, 7]]
    assert [p["output_rows"] for p in m["plan"]] == [[55], [50, 50]]
    assert m["fragments_removed"] == 8 and m["fragments_added"] == 3 and m["files_removed"] == 9
    assert m["rows_read"] == 155
    real = compact_files(ds, target_rows_per_fragment=50)
    for k in ("fragments_removed", "fragments_added", "files_removed", "files_added", "rows_read",
              "rows_written", "bytes_read"):
        assert real[k] == m[k], k


def test_max_rows_per_file_and_max_source_fragments(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [50] * 12, library="lance_ops")
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=200, max_rows_per_file=70,
                      max_source_fragments=8)
    sizes = [f.physical_rows for f in lance_ops.dataset(uri).manifest.fragments]
    # tasks [0..3] and [4..7] (200 rows each, 8 source fragments), each cut to <= 70 rows; the
    # untouched fragments 8..11 come first (fragments are listed by id, as pylance lists them)
    assert sizes == [50, 50, 50, 50, 67, 67, 66, 67, 67, 66]
    assert m["fragments_removed"] == 8 and m["fragments_added"] == 6
    assert lance_ops.dataset(uri).count_rows() == 600


def test_stable_row_ids_survive(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [40] * 6 + [300], library="lance_ops", stable=True,
          deletes=["id % 4 = 1", "id >= 100 AND id < 130"])
    lance_ops.write_dataset(rows(340, 360), uri, mode="append")
    lance_ops.dataset(uri).delete("id = 345")
    before = lance_ops.dataset(uri)
    with_ids = before.to_table(with_row_id=True)
    probe = with_ids["_rowid"].to_numpy()[::7]
    taken = before.take_by_row_id(probe)
    created = {f.id: lance_ops.table.rowids.read_fragment_versions(before._store, before._base, f)
               for f in before.manifest.fragments}

    m = compact_files(before, target_rows_per_fragment=100)
    assert m["version"] == before.version + 1

    after = lance_ops.dataset(uri)
    assert after.has_stable_row_ids and after.manifest.next_row_id == before.manifest.next_row_id
    assert sorted_table(after.to_table(with_row_id=True)).equals(sorted_table(with_ids))
    assert after.take_by_row_id(probe).equals(taken)
    theirs = lance.dataset(uri)
    assert sorted_table(theirs.to_table(with_row_id=True)).equals(sorted_table(with_ids))
    assert theirs._take_rows(probe.tolist())["id"].to_pylist() == taken["id"].to_pylist()
    # created-at versions follow the rows: rows of the last fragment were created at version 2+...
    ids_to_created = {}
    for f in before.manifest.fragments:
        frag = before.get_fragment(f.id)
        live = frag.live_offsets().astype(np.int64)
        for rid, ver in zip(frag.stable_row_ids[live], created[f.id][live]):
            ids_to_created[int(rid)] = int(ver)
    for f in after.manifest.fragments:
        frag = after.get_fragment(f.id)
        vers = lance_ops.table.rowids.read_fragment_versions(after._store, after._base, f)
        live = frag.live_offsets().astype(np.int64)
        for rid, ver in zip(frag.stable_row_ids[live], vers[live]):
            assert ids_to_created[int(rid)] == int(ver)


# --- distributed: JSON round trips and execution in another process ------------------------------
def _execute_in_child(uri: str, task_json: str) -> str:
    task = CompactionTask.from_json(task_json)
    return task.execute(uri).to_json()


def _compact_in_child(uri: str, barrier) -> dict:
    barrier.wait(timeout=60)
    return compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)


def test_two_compactors_race(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 10, library="lance_ops", deletes=["id % 9 = 4"])
    expected = sorted_table(lance_ops.dataset(uri).to_table())
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            outs = pool.starmap(_compact_in_child, [(uri, barrier), (uri, barrier)])
    committed = [m for m in outs if m["version"] is not None]
    assert len(committed) >= 1
    assert sorted(m["version"] for m in committed) == list(range(12, 12 + len(committed)))
    ds = lance_ops.dataset(uri)
    assert sorted_table(ds.to_table()).equals(expected)
    assert sorted_table(lance.dataset(uri).to_table()).equals(expected)
    assert [f.physical_rows for f in ds.manifest.fragments] == [expected.num_rows] == [178]
    assert data_files(uri) == {df.path for v in range(1, ds.version + 1)
                               for f in lance_ops.dataset(uri, version=v).manifest.fragments for df in f.files}


def test_plan_and_task_json_round_trip(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 9, library="lance_ops", stable=True, deletes=["id % 9 = 0"])
    plan = plan_compaction(lance_ops.dataset(uri), CompactionOptions(target_rows_per_fragment=60))
    again = CompactionPlan.from_json(plan.to_json())
    assert again.to_json() == plan.to_json()
    assert again.read_version == plan.read_version == 10 and again.options == plan.options
    for t in plan.tasks:
        t2 = CompactionTask.from_json(t.to_json())
        assert t2.to_json() == t.to_json()
        assert t2.fragments == t.fragments and t2.output_rows == t.output_rows
        raw = json.loads(t.to_json())
        assert raw["read_version"] == 10 and raw["fragment_ids"] == t.fragment_ids
        assert uri not in t.to_json()  # URI-independent
    import pickle

    assert pickle.loads(pickle.dumps(plan.tasks[0])).to_json() == plan.tasks[0].to_json()
    with pytest.raises(LanceOpsError):
        CompactionTask.from_json('{"format": "something else"}')
    with pytest.raises(LanceOpsError):
        RewriteResult.from_json("not json")


def test_tasks_execute_in_other_processes(tmp_path):
    src = str(tmp_path / "src.lance")
    build(src, [25] * 12, library="lance_ops", stable=True, deletes=["id % 10 = 3"])
    expected = sorted_table(lance_ops.dataset(src).to_table(with_row_id=True))
    plan = plan_compaction(lance_ops.dataset(src), CompactionOptions(target_rows_per_fragment=80))
    assert len(plan.tasks) == 3
    # the executors see the dataset under another path (another machine's mount)
    moved = str(tmp_path / "elsewhere.lance")
    shutil.move(src, moved)
    payloads = [t.to_json() for t in plan.tasks]
    with mp.get_context("spawn").Pool(2) as pool:
        outs = pool.starmap(_execute_in_child, [(moved, p) for p in payloads])
    results = [RewriteResult.from_json(o) for o in outs]
    assert [r.original_fragment_ids for r in results] == [t.fragment_ids for t in plan.tasks]
    assert all(f.id == 0 for r in results for f in r.new_fragments)
    m = commit_compaction(moved, results, idempotency_key="airflow:compact:1")
    assert m["version"] == 14 and m["fragments_removed"] == 12
    assert m["rows_written"] == expected.num_rows
    assert sorted_table(lance_ops.dataset(moved).to_table(with_row_id=True)).equals(expected)
    assert sorted_table(lance.dataset(moved).to_table(with_row_id=True)).equals(expected)
    # committing the same key again writes nothing and reports the earlier version
    files = all_files(moved)
    again = commit_compaction(moved, results, idempotency_key="airflow:compact:1")
    assert again["version"] == 14 and again["already_committed"] is True
    assert again["fragments_removed"] == 12 and all_files(moved) == files


def test_commit_a_subset_of_tasks(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 9, library="lance_ops")
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=60)
    results = [t.execute(uri) for t in plan.tasks]
    m = commit_compaction(uri, results[:1])
    assert m["fragments_removed"] == 3 and m["version"] == 10
    # the remaining tasks are still valid: they touch other fragments
    m2 = commit_compaction(uri, results[1:])
    assert m2["fragments_removed"] == 6 and m2["version"] == 11
    # but a task whose fragments were already rewritten is rejected
    again = plan.tasks[0].execute(uri)
    with pytest.raises(RetryableCommitConflictError):
        commit_compaction(uri, [again])
    assert lance_ops.dataset(uri).count_rows() == 180


# --- concurrency ------------------------------------------------------------------------------------
@pytest.mark.parametrize("appender", ["pylance", "lance_ops"])
def test_concurrent_append_does_not_conflict(tmp_path, appender):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 6, library="lance_ops", deletes=["id % 5 = 0"])
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=50)
    results = [t.execute(uri) for t in plan.tasks]
    if appender == "pylance":
        lance.write_dataset(rows(1000, 1010), uri, mode="append")
    else:
        lance_ops.write_dataset(rows(1000, 1010), uri, mode="append")
    m = commit_compaction(uri, results)
    assert m["version"] == 9
    ds = lance_ops.dataset(uri)
    ids = sorted(ds.to_table()["id"].to_pylist())
    assert ids == [i for i in range(120) if i % 5] + list(range(1000, 1010))
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == ids
    assert len({f.id for f in ds.manifest.fragments}) == len(ds.manifest.fragments)


@pytest.mark.parametrize("deleter", ["pylance", "lance_ops"])
def test_concurrent_delete_on_rewritten_fragment_conflicts(tmp_path, deleter):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 6, library="lance_ops")
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=50)
    results = [t.execute(uri) for t in plan.tasks]
    if deleter == "pylance":
        lance.dataset(uri).delete("id = 3")
    else:
        lance_ops.dataset(uri).delete("id = 3")
    version, files = lance_ops.dataset(uri).latest_version, all_files(uri)
    with pytest.raises(RetryableCommitConflictError):
        commit_compaction(uri, results)
    ds = lance_ops.dataset(uri)
    assert ds.version == version and all_files(uri) == files  # nothing committed
    assert 3 not in ds.to_table()["id"].to_pylist() and ds.count_rows() == 119
    orphans = {p for r in results for p in r.new_data_files}
    assert orphans <= data_files(uri) and not orphans & referenced_data_files(uri)


def test_compact_files_retries_and_reuses_unchanged_tasks(tmp_path, monkeypatch):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 9, library="lance_ops")
    executed: list[list[int]] = []
    real_execute, real_commit = compaction_mod.execute_task, compaction_mod.commit_compaction
    calls = {"commit": 0}

    def counting_execute(task, *a, **kw):
        executed.append(task.fragment_ids)
        return real_execute(task, *a, **kw)

    def racing_commit(ds, results, **kw):
        calls["commit"] += 1
        if calls["commit"] == 1:  # a writer deletes from fragment 4 while we compact
            lance.dataset(uri).delete("id = 85")
        return real_commit(ds, results, **kw)

    monkeypatch.setattr(compaction_mod, "execute_task", counting_execute)
    monkeypatch.setattr(compaction_mod, "commit_compaction", racing_commit)
    m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=60)
    assert calls["commit"] == 2
    # re-planned: fragment 4 lost a row, so the run 3..8 no longer splits in two; task 0..2 is reused
    assert executed == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [3, 4, 5, 6, 7, 8]]
    assert m["version"] == 11 and m["fragments_removed"] == 9
    ds = lance_ops.dataset(uri)
    assert sorted(ds.to_table()["id"].to_pylist()) == [i for i in range(180) if i != 85]
    # the discarded result's files were removed: every data file is referenced
    assert data_files(uri) == referenced_data_files(uri) | {
        df.path for v in range(1, 11) for f in lance_ops.dataset(uri, version=v).manifest.fragments
        for df in f.files}


def test_compact_files_gives_up_after_conflict_retries(tmp_path, monkeypatch):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 4, library="lance_ops")
    real_commit = compaction_mod.commit_compaction
    state = {"n": 0}

    def always_racing(ds, results, **kw):
        lance_ops.dataset(uri).delete(f"id = {state['n']}")
        state["n"] += 1
        return real_commit(ds, results, **kw)

    monkeypatch.setattr(compaction_mod, "commit_compaction", always_racing)
    files_before = written_files(uri)
    with pytest.raises(RetryableCommitConflictError):
        compact_files(lance_ops.dataset(uri), target_rows_per_fragment=60, conflict_retries=2)
    assert state["n"] == 3
    assert written_files(uri) == files_before  # nothing of ours left behind
    assert lance_ops.dataset(uri).count_rows() == 77


def test_failed_execution_leaves_no_files(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [30] * 6, library="lance_ops")
    ds = lance_ops.dataset(uri)
    # a source data file of the second task disappears (e.g. removed by a too-eager cleanup)
    victim = ds.manifest.fragments[4].files[0].path
    os.remove(os.path.join(uri, "data", victim))
    before, version = written_files(uri), ds.version
    with pytest.raises(Exception):
        compact_files(ds, target_rows_per_fragment=60, max_rows_per_file=20)
    assert written_files(uri) == before and lance_ops.dataset(uri).latest_version == version


def test_pylance_style_arguments(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [30] * 4, library="lance_ops")
    ds = lance_ops.dataset(uri)
    m = ds.optimize.compact_files(target_rows_per_fragment=None, materialize_deletions=None,
                                  materialize_deletions_threshold=None, max_rows_per_group=1024, batch_size=512,
                                  num_threads=2)
    assert m["fragments_removed"] == 4 and ds.version == 5
    with pytest.raises(UnsupportedError):
        ds.optimize.compact_files(defer_index_remap=True)


def test_idempotency_key(tmp_path):
    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 6, library="lance_ops")
    m1 = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=50, idempotency_key="run-7")
    lance_ops.write_dataset(rows(500, 510), uri, mode="append")
    files = all_files(uri)
    m2 = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=50, idempotency_key="run-7")
    assert m2["already_committed"] is True and m2["version"] == m1["version"] == 7
    for k in ("fragments_removed", "fragments_added", "files_removed", "rows_written"):
        assert m2[k] == m1[k]
    assert all_files(uri) == files and lance_ops.dataset(uri).latest_version == 8
    txn = lance_ops.dataset(uri, version=7).transaction
    assert txn.transaction_properties["lance_ops.idempotency_key"] == "run-7"


# --- refusals ---------------------------------------------------------------------------------------
def test_indexed_fragments_are_held_back_or_refused(tmp_path, monkeypatch):
    """Fragments covered by a kind without a remapper are never rewritten (ADR 0011; more in
    test_compaction_indices.py); with its remapper the same run is a task remapping the index."""
    from lance_ops.maintenance.index_remap import registry

    uri = str(tmp_path / "t.lance")
    build(uri, [20] * 4)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=100)
    assert [(t.fragment_ids, t.index_action) for t in plan.tasks] == [([0, 1, 2, 3], "remap")]
    monkeypatch.setattr(registry, "REMAPPERS", {})
    files = all_files(uri)
    plan = plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=100)
    assert plan.tasks == [] and [t.fragment_ids for t in plan.held_back] == [[0, 1, 2, 3]]
    assert compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)["version"] is None
    assert all_files(uri) == files
    lance.dataset(uri).delete("id < 5")
    files = all_files(uri)
    with pytest.raises(UnsupportedError, match="indices"):
        compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)
    with pytest.raises(UnsupportedError, match="id_idx"):
        plan_compaction(lance_ops.dataset(uri), target_rows_per_fragment=100)
    assert all_files(uri) == files


def test_refuses_storage_versions_it_cannot_write(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(rows(0, 10), uri, data_storage_version="2.3")
    lance.write_dataset(rows(10, 20), uri, mode="append")
    files = all_files(uri)
    with pytest.raises(UnsupportedError, match="2.3"):
        compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)
    assert all_files(uri) == files


def test_compaction_on_s3(s3_bucket, moto_server):
    uri = f"{s3_bucket}/compact.lance"
    opts = moto_server.storage_options
    for i in range(5):
        lance_ops.write_dataset(rows(i * 20, i * 20 + 20), uri, mode="create" if i == 0 else "append",
                                storage_options=opts)
    lance_ops.dataset(uri, storage_options=opts).delete("id % 6 = 0")
    ds = lance_ops.dataset(uri, storage_options=opts)
    expected = sorted_table(ds.to_table())
    m = ds.optimize.compact_files(target_rows_per_fragment=1000)
    assert m["fragments_removed"] == 5 and m["fragments_added"] == 1 and ds.version == 7
    assert sorted_table(lance.dataset(uri, storage_options=opts).to_table()).equals(expected)


def test_compaction_keeps_extension_columns_and_deletions(tmp_path):
    """Extension columns (stored as their storage type) and deleted rows survive the direct read
    path of compaction (ADR 0034); pylance reads the same rows before and after."""
    uri = str(tmp_path / "ext.lance")
    tensor = pa.fixed_shape_tensor(pa.float32(), [2, 2])
    for i in range(3):
        n = 50
        storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(i * n * 4, (i + 1) * n * 4, dtype=np.float32)), 4)
        table = pa.table({"id": pa.array(np.arange(i * n, (i + 1) * n, dtype=np.int64)),
                          "t": pa.ExtensionArray.from_storage(tensor, storage)})
        lance_ops.write_dataset(table, uri, mode="create" if i == 0 else "append", data_storage_version="2.2")
    lance_ops.dataset(uri).delete("id % 7 = 3")
    before = lance.dataset(uri).to_table()
    metrics = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=10_000)
    assert metrics["fragments_removed"] == 3 and metrics["fragments_added"] == 1
    assert metrics["rows_written"] == before.num_rows == 150 - len([i for i in range(150) if i % 7 == 3])
    after = lance.dataset(uri)
    assert len(after.get_fragments()) == 1
    assert after.to_table().equals(before)
    assert lance_ops.dataset(uri).to_table().equals(before)
