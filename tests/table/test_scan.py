"""The scan planner (ADR 0005): plan() prunes by statistics, tasks pickle, execute() reads a task
exactly as the dataset scan does."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from lance_ops.errors import InvalidArgumentError
from lance_ops.table import scan
from lance_ops.table.filters import compile_filter

ROWS = 6000


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    """Three fragments of 2000 rows (ids ascending), small pages, some rows deleted."""
    mp = pytest.MonkeyPatch()
    mp.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "2048")  # many pages per fragment
    try:
        path = str(tmp_path_factory.mktemp("scan") / "ds")
        ids = np.arange(ROWS)
        table = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 0.5),
                          "s": pa.array([f"s{i:05d}" for i in ids])})
        lance_ops.write_dataset(table, path, max_rows_per_file=2000)
        lance_ops.dataset(path).delete("id % 10 = 3")
        return path
    finally:
        mp.undo()


def run(ds, tasks) -> pa.Table:
    tables = [scan.execute(ds, t) for t in tasks]
    return pa.concat_tables([t.replace_schema_metadata(None) for t in tables])


def test_unfiltered_plan_is_one_task_per_fragment(uri):
    ds = lance_ops.dataset(uri)
    tasks = scan.plan(ds)
    assert [t.fragment_id for t in tasks] == [f.fragment_id for f in ds.get_fragments()]
    assert all(t.ranges is None and t.offsets is None and t.filter is None for t in tasks)
    assert tasks[0].columns == ("id", "v", "s") and tasks[0].field_ids == (0, 1, 2)
    assert tasks[0].deletion_file is not None and tasks[0].deletion_file.num_deleted_rows == 200
    assert run(ds, tasks).equals(ds.to_table().replace_schema_metadata(None))


def test_filter_on_a_column_with_statistics_prunes_fragments_and_pages(uri):
    ds = lance_ops.dataset(uri)
    tasks = scan.plan(ds, ["id", "s"], "id >= 4500 AND id < 4600")
    assert [t.fragment_id for t in tasks] == [2]  # fragments 0 and 1 are ruled out
    (task,) = tasks
    assert task.ranges is not None and 100 <= task.planned_rows < 2000  # only some pages of fragment 2
    assert (task.ranges[:, 0] >= 0).all() and (task.ranges[:, 1] <= 2000).all()
    got = run(ds, tasks)
    expected = [i for i in range(4500, 4600) if i % 10 != 3]
    assert got.column("id").to_pylist() == expected
    assert got.equals(ds.to_table(columns=["id", "s"], filter="id >= 4500 AND id < 4600")
                      .replace_schema_metadata(None))
    # without statistics: every fragment, every row
    plain = scan.plan(ds, ["id", "s"], "id >= 4500 AND id < 4600", prune=False)
    assert [t.ranges for t in plain] == [None, None, None]
    assert run(ds, plain).equals(got)


def test_a_filter_that_never_matches_plans_nothing(uri):
    ds = lance_ops.dataset(uri)
    assert scan.plan(ds, None, "id > 1000000") == []  # by statistics
    assert scan.plan(ds, None, "false") == []  # constant
    assert len(scan.plan(ds, None, "true")) == 3 and scan.plan(ds, None, "true")[0].filter is None


def test_fragments_subset_keeps_manifest_order(uri):
    ds = lance_ops.dataset(uri)
    frags = ds.get_fragments()
    tasks = scan.plan(ds, ["id"], fragments=[2, 0])
    assert [t.fragment_id for t in tasks] == [0, 2]
    assert [t.fragment_id for t in scan.plan(ds, ["id"], fragments=[frags[1]])] == [1]
    assert [t.fragment_id for t in scan.plan(ds, ["id"], fragments=[frags[1].proto])] == [1]
    assert [t.fragment_id for t in scan.plan(ds, ["id"], fragments=np.array([1]))] == [1]
    got = run(ds, tasks).column("id").to_pylist()
    assert got == [i for i in list(range(2000)) + list(range(4000, 6000)) if i % 10 != 3]


def test_with_row_id_and_address(uri):
    ds = lance_ops.dataset(uri)
    tasks = scan.plan(ds, ["id"], "id < 50", with_row_id=True, with_row_address=True)
    got = run(ds, tasks)
    assert got.column_names == ["id", "_rowid", "_rowaddr"]
    expected = ds.to_table(columns=["id"], filter="id < 50", with_row_id=True, with_row_address=True)
    assert got.equals(expected.replace_schema_metadata(None))
    assert got.column("_rowaddr").to_pylist() == [i for i in range(50) if i % 10 != 3]


def test_unknown_columns_are_refused(uri):
    ds = lance_ops.dataset(uri)
    with pytest.raises(InvalidArgumentError, match="unknown column"):
        scan.plan(ds, ["nope"])


def test_tasks_pickle_and_describe_as_json(uri):
    ds = lance_ops.dataset(uri)
    for flt in ("id >= 4500 AND s < 's04600'", pc.field("id") < 10, None):
        for task in scan.plan(ds, ["s", "id"], flt, with_row_id=True):
            back = pickle.loads(pickle.dumps(task))
            assert back.fragment == task.fragment and back.version == task.version
            assert back.describe() == task.describe()
            assert scan.execute(ds, back).equals(scan.execute(ds, task))
            described = json.loads(json.dumps(task.describe()))
            assert described["fragment_id"] == task.fragment_id and described["columns"] == ["s", "id"]
            assert described["deletion_file"]["num_deleted_rows"] == 200
    (pruned,) = scan.plan(ds, ["id"], "id >= 4500 AND id < 4600")
    assert pruned.describe()["ranges"] == pruned.ranges.tolist() and pruned.describe()["filter"]


def test_split_cuts_tasks_into_partitions(uri):
    ds = lance_ops.dataset(uri)
    whole = scan.plan(ds, ["id"])[0]
    pieces = whole.split(700)
    assert [p.ranges.tolist() for p in pieces] == [[[0, 700]], [[700, 1400]], [[1400, 2000]]]
    assert run(ds, pieces).equals(scan.execute(ds, whole))
    (pruned,) = scan.plan(ds, ["id"], "id >= 4500 AND id < 4600")
    parts = pruned.split(300)
    assert len(parts) < 2000 // 300 + 1  # pieces without planned rows are left out
    assert run(ds, parts).equals(scan.execute(ds, pruned))


def test_a_task_runs_only_on_its_version(uri):
    ds = lance_ops.dataset(uri)
    task = scan.plan(ds, ["id"])[0]
    with pytest.raises(InvalidArgumentError, match="version"):
        scan.execute(ds.checkout_version(1), task)


def test_a_compiled_filter_is_taken_as_is(uri):
    ds = lance_ops.dataset(uri)
    filt = compile_filter("id < 5", ds.schema)
    (task,) = scan.plan(ds, ["id"], filt)
    assert task.filter is filt
    assert scan.execute(ds, task).column("id").to_pylist() == [0, 1, 2, 4]


@pytest.mark.parametrize("columns, predicate, row_id", [
    (None, "v > 100 AND id % 3 = 0", False),          # late materialisation of the other columns
    (["s"], "id < 2500 OR id >= 5990", False),         # some tasks pruned to page ranges, one empty
    (["id"], "_rowid % 7 = 1", True),                   # the filter reads row ids
    (["s", "v"], "v < 0", False),                       # nothing matches anywhere
])
def test_execute_many_filters_groups_of_tasks_as_execute_does_one(uri, monkeypatch, columns, predicate, row_id):
    ds = lance_ops.dataset(uri)
    tasks = scan.plan(ds, columns, predicate, with_row_id=row_id)
    one_by_one = [scan.execute(ds, t) for t in tasks]
    for group_rows in (1, 2500, 1 << 20):  # groups of one task, of two, of all
        monkeypatch.setattr(scan, "_FILTER_GROUP_ROWS", group_rows)
        together = list(scan.execute_many(ds, tasks))
        assert len(together) == len(one_by_one)
        for a, b in zip(together, one_by_one):
            assert a.schema == b.schema and a.combine_chunks().equals(b.combine_chunks())
    import lance

    assert ds.to_table(columns=columns, filter=predicate, with_row_id=row_id).equals(
        lance.dataset(uri).to_table(columns=columns, filter=predicate, with_row_id=row_id))


@pytest.fixture(scope="module", params=["2.0", "2.2"])
def small_v22(tmp_path_factory, request):
    """Many small fragments (2.0 and 2.2) written by pylance, with deletions; the later ones after
    an ``add_columns`` (so the earlier fragments have two data files, the later ones one)."""
    import lance

    path = str(tmp_path_factory.mktemp("scan_small") / "ds")
    version = request.param

    def rows(start: int, n: int, with_w: bool = False) -> pa.Table:
        ids = np.arange(start, start + n)
        cols = {"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 0.25 - 20),
                "s": pa.array([f"s{i}" * (i % 4) for i in ids])}
        if with_w:
            cols["w"] = pa.array(ids * 2, pa.int64())
        return pa.table(cols)

    for i in range(4):
        lance.write_dataset(rows(i * 60, 60), path, mode="create" if i == 0 else "append",
                            max_rows_per_file=20, data_storage_version=version)
    lance.dataset(path).delete("id % 7 = 2")
    lance.dataset(path).add_columns({"w": "id * 2"})
    lance.write_dataset(rows(240, 100, True), path, mode="append", max_rows_per_file=20)
    lance.dataset(path).delete("id % 11 = 5")
    return path


@pytest.mark.parametrize("columns, predicate", [
    (None, None),
    (["s", "id"], None),
    (None, "v > 10 AND id % 3 = 0"),    # filter columns probed in batches, the others read together
    (["s"], "id % 5 = 1"),
    (["w", "v"], "v < -100"),           # nothing matches
])
def test_small_fragments_read_together_equal_one_by_one_and_pylance(small_v22, monkeypatch, columns, predicate):
    import lance
    from lance_ops.format.v2_1.reader import LanceFileReaderV21

    ds = lance_ops.dataset(small_v22)
    tasks = scan.plan(ds, columns, predicate)
    one_by_one = [scan.execute(ds, t) for t in tasks]
    calls, together_reads = [], []
    real = LanceFileReaderV21.read_all_of
    monkeypatch.setattr(LanceFileReaderV21, "read_all_of",
                        staticmethod(lambda readers, cols: calls.append(len(readers)) or real(readers, cols)))
    real_together = scan.read_together

    def spy(ds, frags, cols, offsets=None):
        got = real_together(ds, frags, cols, offsets)
        together_reads.append(len(frags) if got is not None else 0)
        return got

    monkeypatch.setattr(scan, "read_together", spy)
    for batch_tasks in (2, 5, 128):
        monkeypatch.setattr(scan, "_BATCH_TASKS", batch_tasks)
        together = list(scan.execute_many(ds, tasks))
        assert len(together) == len(one_by_one)
        for a, b in zip(together, one_by_one):
            assert a.schema == b.schema and a.combine_chunks().equals(b.combine_chunks())
    assert max(together_reads) > 1  # fragments were read as batches
    if ds.data_storage_version != "2.0":
        assert calls and max(calls) > 1  # 2.1+ files were decoded together
    assert ds.to_table(columns=columns, filter=predicate).equals(
        lance.dataset(small_v22).to_table(columns=columns, filter=predicate))


@pytest.mark.parametrize("columns", [None, ["s", "id"], ["w"]])
def test_takes_from_many_small_fragments_decode_together_and_equal_pylance(small_v22, monkeypatch, columns):
    import lance
    from lance_ops.format.v2_1.reader import LanceFileReaderV21

    ds = lance_ops.dataset(small_v22)
    live = ds.count_rows()
    picks = np.random.default_rng(3).choice(live, min(live, 150), replace=False)  # unsorted: any order
    picks = np.concatenate([picks, picks[:7]])  # and repeats
    calls = []
    real = LanceFileReaderV21.take_all_of
    monkeypatch.setattr(LanceFileReaderV21, "take_all_of",
                        staticmethod(lambda readers, idx, cols: calls.append(len(readers)) or real(readers, idx, cols)))
    got = ds.take(picks, columns=columns)
    if ds.data_storage_version != "2.0":
        assert calls and max(calls) > 1  # the picked rows of many 2.1+ files in one decode
    else:
        assert not calls  # 2.0 files: fragment by fragment
    assert got.equals(lance.dataset(small_v22).take(picks, columns=columns))
    monkeypatch.setattr(scan, "_BATCH_TASKS", 1)  # every fragment alone: the same rows
    assert lance_ops.dataset(small_v22).take(picks, columns=columns).equals(got)
