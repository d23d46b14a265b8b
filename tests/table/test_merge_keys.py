"""merge_insert's key matching (``table/merge_keys.py``): every way (search in sorted target keys,
hash lookup, search in the source, join) gives exactly the pairs a brute-force comparison gives,
sorted by target position then source row; and merges taking each way match pylance."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.table.merge_keys import prepare_keys


def brute(target: pa.Table, source: pa.Table) -> tuple[list[int], list[int]]:
    """The pairs of equal non-null keys, by Python comparison."""
    t_rows = list(zip(*[c.to_pylist() for c in target.columns]))
    s_rows = list(zip(*[c.to_pylist() for c in source.columns]))
    pairs = [(i, j) for i, a in enumerate(t_rows) if None not in a for j, b in enumerate(s_rows) if a == b]
    return [p for p, _ in pairs], [s for _, s in pairs]


def check(target: pa.Table, source: pa.Table, way: str) -> None:
    keys = prepare_keys(source, source.column_names)
    calls = []
    for name in ("_search_in_target", "_lookup", "_search_in_source", "_join"):
        orig = getattr(keys, name)
        setattr(keys, name, lambda *a, _o=orig, _n=name: calls.append(_n) or _o(*a))
    pos, src = keys.match(target)
    assert (pos.tolist(), src.tolist()) == brute(target, source)
    assert calls == [way]


def ints(values, t=pa.int64()):
    return pa.array(values, t)


@pytest.mark.parametrize("seed", range(6))
def test_integer_key_ways_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    src_vals = rng.integers(0, 60, 40)
    unique_src = np.unique(src_vals)
    rng.shuffle(unique_src)
    sorted_target = np.unique(rng.integers(0, 80, 50))
    shuffled_target = rng.integers(0, 80, 50)
    with_nulls = [None if i % 7 == 0 else int(v) for i, v in enumerate(shuffled_target)]
    src_nulls = [None if i % 5 == 0 else int(v) for i, v in enumerate(src_vals)]
    for source, unique in ((unique_src, True), (src_vals, False), (src_nulls, False)):
        s = pa.table({"k": ints(source)})
        check(pa.table({"k": ints(sorted_target)}), s, "_search_in_target")
        check(pa.table({"k": ints(np.arange(10, 50))}), s, "_search_in_target")  # (consecutive keys)
        check(pa.table({"k": ints(sorted_target, pa.int32())}), s, "_search_in_target")  # (other width)
        check(pa.table({"k": ints(shuffled_target)}), s, "_lookup" if unique else "_search_in_source")
        check(pa.table({"k": ints(with_nulls)}), s, "_lookup" if unique else "_search_in_source")


def test_integer_key_edges():
    s = pa.table({"k": ints([5, 3, 9])})
    check(pa.table({"k": ints([100, 200])}), s, "_search_in_target")  # no source key in range
    check(pa.table({"k": ints([9])}), s, "_search_in_target")
    check(pa.table({"k": ints([3, 3, 5])}), s, "_lookup")  # duplicate target keys: not increasing
    wide = pa.table({"k": ints([-(2 ** 62), 2 ** 62, 7, 7])})  # (a range too wide to pack)
    check(pa.table({"k": ints([-(2 ** 62), 7, 2 ** 62])}), wide, "_search_in_target")
    ts = pa.table({"k": pa.array([3, 1], pa.timestamp("us"))})
    check(pa.table({"k": pa.array([1, 2, 3], pa.timestamp("us"))}), ts, "_search_in_target")


def test_other_key_ways_equal_brute_force():
    names = pa.table({"k": ["b", "a", None, "d"]})
    check(pa.table({"k": ["a", "c", None, "d", "a"]}), names, "_lookup")
    check(pa.table({"k": ["a", "b"]}), pa.table({"k": ["b", "a", "b"]}), "_join")  # duplicate keys
    check(pa.table({"k": pa.array(["a", "b"], pa.large_string())}), names, "_join")  # other type
    check(pa.table({"k": [1.5, 2.0, None]}), pa.table({"k": [2.0, 1.5, 1.5]}), "_join")  # floats
    two = pa.table({"a": ints([1, 1, 2]), "b": ["x", "y", "x"]})
    check(pa.table({"a": ints([2, 1, 1, None]), "b": ["x", "y", "y", "x"]}), two, "_join")
    u = pa.table({"k": pa.array([2 ** 64 - 1, 3], pa.uint64())})
    check(pa.table({"k": pa.array([3, 2 ** 64 - 1, 4], pa.uint64())}), u, "_lookup")


@pytest.mark.parametrize("key", ["int_shuffled", "string"])
@pytest.mark.parametrize("stable", [False, True])
def test_merges_through_each_way_match_pylance(tmp_path, key, stable):
    """Targets with deletions (offsets come from the deletion vector), keys not in order or
    strings: the same rows, row ids and counts as pylance."""
    rng = np.random.default_rng(3)
    ids = rng.permutation(40) if key == "int_shuffled" else np.arange(40)
    col = (lambda v: pa.array(v, pa.int64())) if key == "int_shuffled" else (lambda v: pa.array([f"k{i}" for i in v]))
    first = pa.table({"id": col(ids), "v": [f"a{i}" for i in range(40)]})
    src = pa.table({"id": col([3, 17, 33, 50, 51, 8]), "v": [f"s{i}" for i in range(6)]})
    out = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(first, uri, max_rows_per_file=10, enable_stable_row_ids=stable)
        ds.delete("v = 'a2' or v = 'a15' or v = 'a31'")
        got = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        again = ds.merge_insert("id").when_matched_update_all().when_not_matched_by_source_delete(
            "v < 'a1'").execute(src.slice(0, 3))
        t = lance.dataset(uri).to_table(with_row_id=True)
        if not stable:
            t = t.drop_columns(["_rowid"])
        out[mod] = (got, again, t.sort_by("id").to_pydict())
    assert out[lance_ops] == out[lance]


@pytest.mark.parametrize("stable", [False, True])
def test_fragments_statistics_rule_out_are_not_read(tmp_path, monkeypatch, stable):
    """One integer key: fragments (and pages) whose min/max admit no source key are not read; the
    merge still equals pylance's (lance_ops writes the statistics files, pylance reads without)."""
    from lance_ops.table import scan

    first = pa.table({"id": pa.array(np.arange(400), pa.int64()), "v": [f"a{i}" for i in range(400)]})
    src = pa.table({"id": pa.array([5, 250, 1000, 7], pa.int64()), "v": ["s0", "s1", "s2", "s3"]})
    read = []
    real = scan.execute_many
    monkeypatch.setattr(scan, "execute_many", lambda ds, tasks: real(ds, read.extend(tasks) or tasks))
    out = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        ds = lance_ops.write_dataset(first, uri, max_rows_per_file=100, enable_stable_row_ids=stable)
        lance_ops.dataset(uri).delete("id = 6 or id = 260")
        ds = mod.dataset(uri)
        read.clear()
        got = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        merged = list(read)
        t = lance.dataset(uri).to_table(with_row_id=True)
        out[mod] = (got, (t if stable else t.drop_columns(["_rowid"])).sort_by("id").to_pydict())
    assert out[lance_ops] == out[lance]
    assert sorted(t.fragment.id for t in merged) == [0, 2]  # fragments 1 and 3 hold no source key


def test_merge_on_s3_writes_deletion_files_on_the_pool(moto_server, s3_bucket):
    """On an object store the deletion files of several fragments go through the kept writer pool;
    pylance reads the result as its own merge's."""
    opts = moto_server.storage_options
    first = pa.table({"id": pa.array(np.arange(30), pa.int64()), "v": [f"a{i}" for i in range(30)]})
    src = pa.table({"id": pa.array([2, 14, 25, 40], pa.int64()), "v": ["s0", "s1", "s2", "s3"]})
    out = {}
    for mod in (lance, lance_ops):
        uri = f"{s3_bucket}/{mod.__name__}.lance"
        ds = mod.write_dataset(first, uri, max_rows_per_file=10, storage_options=opts)
        got = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        out[mod] = (got, lance.dataset(uri, storage_options=opts).to_table().sort_by("id").to_pydict(),
                    sorted(f.count_rows() for f in lance.dataset(uri, storage_options=opts).get_fragments()))
    assert out[lance_ops] == out[lance]
    assert out[lance_ops][2] == [4, 9, 9, 9]  # a deletion vector in each old fragment
    import threading

    assert any(t.name.startswith("lance-ops-update") for t in threading.enumerate())  # (the kept pool)
