"""ds.delete(predicate): deletion files as upstream writes them, versions, and concurrent deleters."""
from __future__ import annotations

import os
import re
import shutil

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest
from pyroaring import BitMap

import lance_ops
from lance_ops.errors import CommitConflictError
from lance_ops.io import open_store
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table.commit.transaction_file import load_transaction

DEL_NAME = re.compile(r"^(\d+)-(\d+)-(\d+)\.(arrow|bin)$")


def numbers(n: int, start: int = 0) -> pa.Table:
    return pa.table({"a": np.arange(start, start + n, dtype=np.int64)})


def create(mod, uri: str, table: pa.Table, **kw):
    if mod is lance:
        kw.setdefault("data_storage_version", "2.0")
    return mod.write_dataset(table, uri, **kw)


def deletion_state(mod, uri: str) -> list[tuple]:
    """Per fragment: (id, physical rows, deletion kind, deleted count, read_version, deleted offsets)."""
    store, base = open_store(uri, None)
    mf = read_manifest(store, naming.latest_version(store, base).path)
    out = []
    for f in mf.manifest.fragments:
        if not f.HasField("deletion_file"):
            out.append((f.id, f.physical_rows, None, 0, None, []))
            continue
        df = f.deletion_file
        name = naming.deletion_file_name(f.id, df.read_version, df.id, df.file_type)
        out.append((f.id, f.physical_rows, name.rsplit(".", 1)[1], df.num_deleted_rows, df.read_version,
                    read_offsets(os.path.join(uri, "_deletions", name))))
    return out


def read_offsets(path: str) -> list[int]:
    data = open(path, "rb").read()
    if path.endswith(".bin"):
        return list(BitMap.deserialize(data))
    table = ipc.open_file(pa.BufferReader(data)).read_all()
    return sorted(table.column(0).to_pylist())


def last_txn(uri: str):
    store, base = open_store(uri, None)
    return load_transaction(store, base, read_manifest(store, naming.latest_version(store, base).path))


SEQUENCE = [
    "a > 100000",                              # nothing matches: still a new version
    "a < 4000",                                # 4000 offsets: arrow
    "a < 5500",                                # union grows past 5000: bitmap
    "a >= 6000 AND a < 12000 AND a % 2 = 0",   # 3000 in fragment 1: arrow
    "a = 6001",                                # union with the existing arrow file
    "false",                                   # literal false: an empty delete, new version
    "a IS NULL",
    "a >= 6000 AND a < 12000",                 # rest of fragment 1: fragment dropped
]


def test_delete_sequence_matches_pylance(tmp_path):
    results = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        create(mod, uri, numbers(12000), max_rows_per_file=6000)
        steps = []
        for predicate in SEQUENCE:
            ds = mod.dataset(uri)
            result = ds.delete(predicate)
            steps.append((predicate, result, mod.dataset(uri).version, deletion_state(mod, uri)))
        results[mod.__name__] = steps
        if mod is lance_ops:
            assert ds.version == len(SEQUENCE) + 1  # delete() moves the object to the new version
    assert results["lance_ops"] == results["lance"]
    kinds = [[s[2] for s in step[3]] for step in results["lance_ops"]]
    assert kinds == [[None, None], ["arrow", None], ["bin", None], ["bin", "arrow"], ["bin", "arrow"],
                     ["bin", "arrow"], ["bin", "arrow"], ["bin"]]
    assert [step[1]["num_deleted_rows"] for step in results["lance_ops"]] == [0, 4000, 1500, 3000, 1, 0, 0, 2999]


@pytest.mark.parametrize("steps", [
    ["a < 4999"], ["a < 5000"], ["a < 5001"],
    ["a < 3000", "a >= 3000 AND a < 5000"],            # exactly 5000 after a union stays arrow
    ["a < 3000", "a >= 3000 AND a < 5001"],            # 5001 after a union: bitmap
    ["a < 5000", "a = 6000"],                          # once a bitmap, always a bitmap
], ids=lambda s: " | ".join(s))
def test_arrow_or_bitmap_threshold_as_pylance(tmp_path, steps):
    states = []
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        create(mod, uri, numbers(20000))
        for predicate in steps:
            mod.dataset(uri).delete(predicate)
        states.append(deletion_state(mod, uri))
    assert states[0] == states[1]


def test_deletion_file_contents(tmp_path):
    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(10), max_rows_per_file=5)
    ds = lance_ops.dataset(uri)
    assert ds.delete("a IN (1, 3, 7)") == {"num_deleted_rows": 3}
    names = sorted(os.listdir(os.path.join(uri, "_deletions")))
    assert [DEL_NAME.match(n).group(1, 2, 4) for n in names] == [("0", "1", "arrow"), ("1", "1", "arrow")]
    raw = open(os.path.join(uri, "_deletions", names[0]), "rb").read()
    assert raw[:6] == b"ARROW1"
    reader = ipc.open_file(pa.BufferReader(raw))
    assert reader.num_record_batches == 1
    assert reader.schema == pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    assert sorted(reader.read_all().column(0).to_pylist()) == [1, 3]
    # row offsets are fragment-local: a=7 is row 2 of fragment 1
    assert read_offsets(os.path.join(uri, "_deletions", names[1])) == [2]
    txn = last_txn(uri)
    assert txn.delete.predicate == "a IN (1, 3, 7)"
    assert sorted(f.id for f in txn.delete.updated_fragments) == [0, 1]
    # the union is a new file: the old one stays for the older version
    ds.delete("a = 0")
    assert len(os.listdir(os.path.join(uri, "_deletions"))) == 3
    assert deletion_state(lance_ops, uri)[0][2:] == ("arrow", 3, 2, [0, 1, 3])
    assert lance_ops.dataset(uri, version=2).to_table()["a"].to_pylist() == [0, 2, 4, 5, 6, 8, 9]
    assert lance.dataset(uri).to_table()["a"].to_pylist() == [2, 4, 5, 6, 8, 9]


def test_fully_deleted_fragment_is_dropped(tmp_path):
    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(9), max_rows_per_file=3)
    ds = lance_ops.dataset(uri)
    ds.delete("a = 3")
    ds.delete("a = 4 OR a = 5 OR a = 7")
    txn = last_txn(uri)
    assert list(txn.delete.deleted_fragment_ids) == [1]
    assert [f.id for f in txn.delete.updated_fragments] == [2]
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 2]
    assert ds.manifest.max_fragment_id == 2
    assert ds.to_table()["a"].to_pylist() == [0, 1, 2, 6, 8]
    assert lance.dataset(uri).to_table()["a"].to_pylist() == [0, 1, 2, 6, 8]


def test_literal_true_and_false_as_pylance(tmp_path):
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        create(mod, uri, numbers(10), max_rows_per_file=4)
        ds = mod.dataset(uri)
        assert ds.delete("false") == {"num_deleted_rows": 0}
        assert mod.dataset(uri).version == 2
        assert mod.dataset(uri).count_rows() == 10
        txn = last_txn(uri)
        assert txn.WhichOneof("operation") == "delete"
        assert (list(txn.delete.updated_fragments), list(txn.delete.deleted_fragment_ids)) == ([], [])
        result = mod.dataset(uri).delete("true")
        assert mod.dataset(uri).version == 3
        assert mod.dataset(uri).count_rows() == 0 and mod.dataset(uri).get_fragments() == []
        assert sorted(last_txn(uri).delete.deleted_fragment_ids) == [0, 1, 2]
        assert not os.path.exists(os.path.join(uri, "_deletions"))
        if mod is lance_ops:
            assert result == {"num_deleted_rows": 10}
    assert lance.dataset(str(tmp_path / "lance_ops")).to_table().num_rows == 0


def test_expression_predicates(tmp_path):
    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(10))
    ds = lance_ops.dataset(uri)
    assert ds.delete(pc.field("a") >= 7) == {"num_deleted_rows": 3}
    assert ds.delete((pc.field("a") == 1) | (pc.field("a") == 8)) == {"num_deleted_rows": 1}
    assert lance.dataset(uri).to_table()["a"].to_pylist() == [0, 2, 3, 4, 5, 6]
    assert ds.delete("_rowid = 2") == {"num_deleted_rows": 1}
    assert lance.dataset(uri).to_table()["a"].to_pylist() == [0, 3, 4, 5, 6]


def test_deletes_across_libraries(tmp_path):
    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(8000), max_rows_per_file=3000)
    lance_ops.dataset(uri).delete("a < 10")
    lance.dataset(uri).delete("a >= 3000 AND a < 8000 AND a % 2 = 1")  # arrow in 1 and 2
    lance_ops.dataset(uri).delete("a % 5 = 0")                          # unions with pylance's files
    lance.dataset(uri).delete("a < 100")
    expected = [a for a in range(100, 8000) if not (a >= 3000 and a % 2 == 1) and a % 5]
    for mod in (lance, lance_ops):
        assert mod.dataset(uri).to_table()["a"].to_pylist() == expected
        assert mod.dataset(uri).count_rows("a > 7000") == len([a for a in expected if a > 7000])


# --- two deleters at the same version ----------------------------------------------------------
def test_two_deleters_at_the_same_version(tmp_path):
    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(100), max_rows_per_file=50)
    first, second = lance_ops.dataset(uri), lance_ops.dataset(uri)
    assert first.delete("a < 10") == {"num_deleted_rows": 10}
    assert second.delete("a >= 40 AND a < 60") == {"num_deleted_rows": 20}  # same fragment 0: rebased
    assert (first.version, second.version) == (2, 3)
    assert last_txn(uri).read_version == 1
    expected = [a for a in range(100) if not (a < 10 or 40 <= a < 60)]
    assert lance_ops.dataset(uri).to_table()["a"].to_pylist() == expected
    assert lance.dataset(uri).to_table()["a"].to_pylist() == expected
    state = deletion_state(lance_ops, uri)
    assert [s[3] for s in state] == [20, 10]
    assert state[0][5] == list(range(10)) + list(range(40, 50))

    # overlapping deletes: the loser re-reads and deletes only what is left
    a, b = lance_ops.dataset(uri), lance_ops.dataset(uri)
    assert a.delete("a >= 60 AND a < 70") == {"num_deleted_rows": 10}
    assert b.delete("a >= 65 AND a < 75") == {"num_deleted_rows": 5}
    expected = [x for x in expected if not 60 <= x < 75]
    assert lance.dataset(uri).to_table()["a"].to_pylist() == expected


def test_delete_racing_a_pylance_delete_for_the_same_version(tmp_path, monkeypatch):
    import lance_ops.table.commit.loop as commit_mod

    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(20))
    real = commit_mod.write_transaction_file
    raced = []

    def racing(store, base, txn):
        if not raced:
            raced.append(True)
            lance.dataset(uri).delete("a = 19")  # commits version 2 under our feet
        return real(store, base, txn)

    monkeypatch.setattr(commit_mod, "write_transaction_file", racing)
    assert lance_ops.dataset(uri).delete("a < 3") == {"num_deleted_rows": 3}
    monkeypatch.undo()
    store, base = open_store(uri, None)
    libs = [read_manifest(store, loc.path).manifest.writer_version.library for loc in naming.list_versions(store, base)]
    assert libs == ["lance-ops", "lance", "lance-ops"]
    assert lance.dataset(uri).to_table()["a"].to_pylist() == list(range(3, 19))


def test_delete_after_a_concurrent_overwrite_fails(tmp_path):
    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(10))
    stale = lance_ops.dataset(uri)
    lance_ops.write_dataset(numbers(3, 100), uri, mode="overwrite")
    with pytest.raises(CommitConflictError, match="overwrite"):
        stale.delete("a < 5")
    assert stale.version == 1
    assert lance_ops.dataset(uri).version == 2
    assert lance.dataset(uri).to_table()["a"].to_pylist() == [100, 101, 102]


@pytest.mark.parametrize("predicate", [
    "a % 7 = 2 OR (a >= 300 AND a < 400) OR _rowid = 12",  # (row ids: read by the scan)
    "a % 7 = 2 OR (a >= 300 AND a < 400) OR a = 12",
])
@pytest.mark.parametrize("group_rows", [1, 250, 1 << 20])
def test_delete_over_many_fragments_evaluates_groups_of_them_as_pylance(tmp_path, monkeypatch, group_rows, predicate):
    """The predicate is evaluated once per group of fragments (one, some, all): same deletion
    vectors as pylance's, fragment by fragment, including a fragment deleted whole."""
    from lance_ops.table import delete as delete_mod
    from lance_ops.table import scan

    monkeypatch.setattr(delete_mod, "_GROUP_ROWS", group_rows)
    monkeypatch.setattr(scan, "_FILTER_GROUP_ROWS", group_rows)  # (the _rowid predicates' path)
    state = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        create(mod, uri, numbers(1000), max_rows_per_file=100)
        mod.dataset(uri).delete("a % 11 = 0")
        mod.dataset(uri).delete(predicate)
        state[mod.__name__] = deletion_state(mod, uri)
    assert [s[:4] + s[5:] for s in state["lance_ops"]] == [s[:4] + s[5:] for s in state["lance"]]
    assert len(state["lance"]) == 9  # fragment 3 (rows 300-399) went whole


def test_delete_reads_only_the_fragments_statistics_do_not_exclude(tmp_path, monkeypatch):
    """Fragments whose statistics rule the predicate out are not read; the deletion vectors are
    pylance's all the same."""
    from lance_ops.table.fragment import LanceFragment

    state = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        create(mod, uri, numbers(1000), max_rows_per_file=100)
        mod.dataset(uri).delete("a % 11 = 0")
        read: list[int] = []
        if mod is lance_ops:
            real = LanceFragment.locate_fields  # (every read of a fragment's columns finds them first)

            def counting(self, *args, **kwargs):
                read.append(self.fragment_id)
                return real(self, *args, **kwargs)

            monkeypatch.setattr(LanceFragment, "locate_fields", counting)
        mod.dataset(uri).delete("a >= 420 AND a < 530")
        monkeypatch.undo()
        state[mod.__name__] = deletion_state(mod, uri)
        if mod is lance_ops:
            assert sorted(set(read)) == [4, 5]  # (rows 400-499 and 500-599; lance_ops writes statistics)
    assert [s[:4] + s[5:] for s in state["lance_ops"]] == [s[:4] + s[5:] for s in state["lance"]]


def test_delete_over_pruned_page_ranges_as_pylance(tmp_path, monkeypatch):
    """Statistics leave only some pages of a fragment (the scan reads the live rows of those
    ranges): the deletion vectors still equal pylance's, old deletions kept."""
    from lance_ops.table import scan
    from lance_ops.table.filters import compile_filter

    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "2048")  # many pages per fragment
    src = str(tmp_path / "src")
    lance_ops.write_dataset(pa.table({"a": np.arange(6000, dtype=np.int64), "b": np.arange(6000) * 0.5}), src,
                            max_rows_per_file=3000)
    lance_ops.dataset(src).delete("a % 11 = 0")
    predicate = "(a >= 1200 AND a < 1300 AND a % 2 = 0) OR a = 4500"
    ds = lance_ops.dataset(src)
    tasks = scan.plan(ds, ["a"], compile_filter(predicate, ds.storage_schema))
    assert tasks and all(t.ranges is not None for t in tasks)  # (the case under test: pages pruned)
    state = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        shutil.copytree(src, uri)
        mod.dataset(uri).delete(predicate)
        state[mod.__name__] = deletion_state(mod, uri)
    assert [s[:4] + s[5:] for s in state["lance_ops"]] == [s[:4] + s[5:] for s in state["lance"]]
    ids = lance.dataset(str(tmp_path / "lance_ops")).to_table()["a"].to_numpy()
    model = np.arange(6000)
    model = model[~((model % 11 == 0) | ((model >= 1200) & (model < 1300) & (model % 2 == 0)) | (model == 4500))]
    assert ids.tolist() == model.tolist()


def test_a_failed_delete_leaves_no_deletion_files(tmp_path, monkeypatch):
    """A deletion file that cannot be written fails the delete before its commit: no new version,
    and the files the other jobs wrote are removed (the failing job's too: the file it created
    in place and could not write, and those before it)."""
    from lance_ops.io import local

    uri = str(tmp_path / "ds")
    create(lance_ops, uri, numbers(2000), max_rows_per_file=20)  # 100 fragments
    lance_ops.dataset(uri).delete("a % 10 = 0")
    before = sorted(os.listdir(os.path.join(uri, "_deletions")))
    real, calls = local._write_all, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 70:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(local, "_write_all", failing)
    with pytest.raises(OSError, match="disk full"):
        lance_ops.dataset(uri).delete("a % 10 = 1")
    assert len(calls) >= 70
    assert sorted(os.listdir(os.path.join(uri, "_deletions"))) == before
    assert lance_ops.dataset(uri).version == 2
    assert lance.dataset(uri).count_rows() == 1800
