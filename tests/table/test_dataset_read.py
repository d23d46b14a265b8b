"""LanceDataset reads: scans, filters, projections, row ids, takes, versions, tags, fragments.

Every read is done through lance_ops and through pylance on the same dataset (one written by
pylance, one written by lance_ops) and the results must be equal.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from lance_ops.errors import DatasetNotFoundError, FilterError, LanceOpsError, TagExistsError, TagNotFoundError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def source_table(n: int = 40) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    return pa.table({
        "a": ids,
        "b": pa.array([f"s{i}" if i % 3 else None for i in range(n)]),
        "c": pa.StructArray.from_arrays([pa.array(ids * 10), pa.array(ids / 2)], names=["x", "y"]),
        "l": pa.array([list(range(i % 4)) if i % 5 else None for i in range(n)], pa.list_(pa.int32())),
        "f": pa.array(np.where(ids % 7 == 0, np.nan, ids * 0.5)),
    }).replace_schema_metadata({"owner": "tests"})


def _build(mod, uri: str) -> None:
    kw = {"data_storage_version": "2.0"} if mod is lance else {}
    t = source_table()
    mod.write_dataset(t.slice(0, 30), uri, max_rows_per_file=7, **kw)
    mod.write_dataset(t.slice(30), uri, mode="append")
    mod.dataset(uri).delete("a IN (1, 8, 9, 15, 33)")
    mod.dataset(uri).delete("a >= 21 AND a < 28")  # a whole fragment


@pytest.fixture(scope="module", params=["pylance_written", "lance_ops_written"])
def pair(request, tmp_path_factory):
    """(pylance dataset, lance_ops dataset) over the same directory."""
    uri = str(tmp_path_factory.mktemp("read") / "ds")
    _build(lance if request.param == "pylance_written" else lance_ops, uri)
    return lance.dataset(uri), lance_ops.dataset(uri)


def take_rows(ds, ids, columns=None):
    if isinstance(ds, lance.LanceDataset):
        return ds._take_rows(ids, columns=columns)
    return ds.take_by_row_id(ids, columns=columns)


def _nan_free(table: pa.Table) -> pa.Table:
    """NaN != NaN in Table.equals: swap NaNs in top-level float columns for a sentinel."""
    cols = []
    for col in table.columns:
        if pa.types.is_floating(col.type):
            col = pc.if_else(pc.is_nan(col), pa.scalar(-12345.0, col.type), col)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=table.schema)


def assert_same_table(ours: pa.Table, ref: pa.Table, *, metadata: bool = True) -> None:
    assert ours.schema.equals(ref.schema, check_metadata=metadata), f"{ours.schema}\n!=\n{ref.schema}"
    assert _nan_free(ours).equals(_nan_free(ref)), f"{ours}\n!=\n{ref}"


SCANS = {
    "all": dict(),
    "columns": dict(columns=["l", "a"]),
    "sql_filter": dict(filter="a > 5 AND b IS NOT NULL"),
    "sql_filter_nested": dict(filter="c.x >= 100 AND c.y < 18"),
    "sql_in_like": dict(filter="b LIKE 's1%' OR a IN (2, 3, 39)"),
    "sql_nan": dict(filter="f > 3.0"),
    "sql_or_null": dict(filter="b IS NULL OR l IS NULL"),
    "expr_filter": dict(filter=pc.field("a") > 5),
    "expr_compound": dict(filter=pc.field("a").isin([1, 2, 3, 30, 31]) | (pc.field("b").is_null() & (pc.field("a") > 20))),
    "filter_on_unprojected": dict(columns=["b"], filter="a > 10"),
    "matches_nothing": dict(filter="a > 1000"),
    "literal_true": dict(filter="true"),
    "literal_false": dict(filter="false"),
    "with_row_id": dict(with_row_id=True),
    "with_row_address": dict(with_row_address=True),
    "row_id_and_address": dict(columns=["a"], with_row_id=True, with_row_address=True),
    "row_id_column_first": dict(columns=["_rowid", "a"]),
    "row_address_column": dict(columns=["a", "_rowaddr"]),
    "filter_on_rowid": dict(filter="_rowid >= 8589934592", with_row_id=True),
    "limit_offset": dict(limit=4, offset=3),
    "limit_filter": dict(filter="a > 10", limit=5),
}


@pytest.mark.parametrize("name", list(SCANS))
def test_to_table_matches_pylance(pair, name):
    ref_ds, ds = pair
    kwargs = SCANS[name]
    assert_same_table(ds.to_table(**kwargs), ref_ds.to_table(**kwargs))


@pytest.mark.parametrize("name", ["all", "columns", "sql_filter", "with_row_id", "literal_false"])
def test_to_batches_matches_pylance(pair, name):
    ref_ds, ds = pair
    kwargs = {k: v for k, v in SCANS[name].items() if k not in ("limit", "offset")}
    ours = list(ds.to_batches(**kwargs))
    assert all(isinstance(b, pa.RecordBatch) for b in ours)
    assert all(b.schema.metadata == ds.schema.metadata for b in ours)
    ref = ref_ds.to_table(**kwargs)
    got = pa.Table.from_batches(ours, schema=ref.schema) if ours else ref.schema.empty_table()
    assert_same_table(got, ref)
    small = list(ds.to_batches(**kwargs, batch_size=3))
    assert all(b.num_rows <= 3 for b in small)


@pytest.mark.parametrize("flt", [None, "a < 10", "b IS NULL", pc.field("f").is_nan(), "false", "true"])
def test_count_rows_matches_pylance(pair, flt):
    ref_ds, ds = pair
    assert ds.count_rows(flt) == ref_ds.count_rows(flt)


def test_schema_and_versions(pair):
    ref_ds, ds = pair
    assert ds.schema == ref_ds.schema
    assert ds.schema.metadata == {b"owner": b"tests"}
    assert (ds.version, ds.latest_version) == (ref_ds.version, ref_ds.latest_version) == (4, 4)
    ours, ref = ds.versions(), ref_ds.versions()
    assert [v["version"] for v in ours] == [v["version"] for v in ref] == [1, 2, 3, 4]
    assert [v["metadata"] for v in ours] == [v["metadata"] for v in ref]
    assert [v["timestamp"] for v in ours] == [v["timestamp"] for v in ref]
    assert all(isinstance(v["timestamp"], dt.datetime) and v["timestamp"].tzinfo is None for v in ours)


def test_versions_timestamps_are_local_time_like_pylance(tmp_path):
    """pylance reports naive local times; run in a non-UTC zone to tell them apart."""
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(pa.table({"a": [1]}), uri)
    code = (
        "import lance, lance_ops, sys; u = sys.argv[1];"
        "print(lance.dataset(u).versions()[0]['timestamp'] == lance_ops.dataset(u).versions()[0]['timestamp'])"
    )
    env = dict(os.environ, TZ="America/New_York", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code, uri], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_fragments_match_pylance(pair):
    ref_ds, ds = pair
    frags, ref_frags = ds.get_fragments(), ref_ds.get_fragments()
    assert [f.fragment_id for f in frags] == [f.fragment_id for f in ref_frags] == [0, 1, 2, 4, 5]
    assert [f.count_rows() for f in frags] == [f.count_rows() for f in ref_frags]
    assert [f.count_rows("a > 3") for f in frags] == [f.count_rows("a > 3") for f in ref_frags]
    assert [f.physical_rows for f in frags] == [f.physical_rows for f in ref_frags]
    assert [f.num_deletions for f in frags] == [
        f.metadata.deletion_file.num_deleted_rows if f.metadata.deletion_file else 0 for f in ref_frags]
    assert [[df.path for df in f.data_files()] for f in frags] == [
        [df.path for df in f.metadata.files] for f in ref_frags]
    assert ds.get_fragment(4).fragment_id == 4 and ds.get_fragment(3) is None


TAKES = [[5, 0, 3, 3, 27], [0], [27], list(range(28)), [], [27, 0, 13, 13, 6]]


@pytest.mark.parametrize("indices", TAKES, ids=[str(i)[:20] for i in TAKES])
@pytest.mark.parametrize("columns", [None, ["b"], ["l", "a"]])
def test_take_matches_pylance(pair, indices, columns):
    ref_ds, ds = pair
    assert ds.count_rows() == 28
    # pylance drops the schema metadata from some take results; compare the rest exactly
    assert_same_table(ds.take(indices, columns=columns), ref_ds.take(indices, columns=columns), metadata=False)
    assert_same_table(ds.take(pa.array(indices, pa.int64()), columns=columns),
                      ref_ds.take(indices, columns=columns), metadata=False)


def test_take_out_of_range(pair):
    _, ds = pair
    with pytest.raises(IndexError, match="index 28 out of range for 28 rows"):
        ds.take([1, 28])
    with pytest.raises(IndexError, match="index -1 out of range"):
        ds.take([-1])


def test_take_by_row_id_matches_pylance(pair):
    ref_ds, ds = pair
    ids = ref_ds.to_table(with_row_id=True)["_rowid"].to_pylist()
    picks = [ids[5], ids[0], ids[5], ids[-1], ids[12]]
    assert_same_table(ds.take_by_row_id(picks), take_rows(ref_ds, picks), metadata=False)
    assert_same_table(ds.take_by_row_id(picks, columns=["a"]), take_rows(ref_ds, picks, columns=["a"]), metadata=False)
    # ids of deleted rows are skipped, as pylance does
    deleted = [1, (1 << 32) | 1, ids[3]]
    assert take_rows(ref_ds, deleted, columns=["a"])["a"].to_pylist() == ds.take_by_row_id(deleted, columns=["a"])["a"].to_pylist()
    assert ds.take_by_row_id([1], columns=["a"]).num_rows == 0
    # an address outside every fragment is an error (pylance: "non-existent fragment")
    with pytest.raises(KeyError, match="point outside every fragment"):
        ds.take_by_row_id([ids[0], 3 << 32])
    with pytest.raises(KeyError, match="point outside every fragment"):
        ds.take_by_row_id([(1 << 32) | 500])


def test_checkout_versions_and_tags(tmp_path):
    uri = str(tmp_path / "ds")
    t = source_table()
    lance_ops.write_dataset(t.slice(0, 10), uri)
    lance_ops.write_dataset(t.slice(10, 10), uri, mode="append")
    ds = lance_ops.dataset(uri)
    ds.delete("a < 3")
    assert ds.version == 3
    v1 = ds.checkout_version(1)
    assert (v1.version, v1.latest_version, v1.count_rows()) == (1, 3, 10)
    assert_same_table(v1.to_table(), lance.dataset(uri, version=1).to_table())

    ds.tags.create("first", 1)
    lance.dataset(uri).tags.create("second", 2)  # both libraries write the same tag files
    assert set(ds.tags.list()) == set(lance.dataset(uri).tags.list()) == {"first", "second"}
    assert ds.tags.list() == lance.dataset(uri).tags.list()
    assert ds.tags.list()["second"]["version"] == 2
    assert_same_table(lance_ops.dataset(uri, version="first").to_table(), lance.dataset(uri, version="first").to_table())
    assert ds.checkout_version("second").count_rows() == lance.dataset(uri).checkout_version("second").count_rows() == 20
    with pytest.raises(TagExistsError, match="first"):
        ds.tags.create("first", 2)
    with pytest.raises(DatasetNotFoundError, match="version 9"):
        ds.tags.create("nine", 9)
    ds.tags.update("first", 3)
    assert lance.dataset(uri).tags.list()["first"]["version"] == 3
    ds.tags.delete("second")
    assert set(lance.dataset(uri).tags.list()) == {"first"}
    with pytest.raises(TagNotFoundError, match="second"):
        lance_ops.dataset(uri, version="second")
    with pytest.raises(TagNotFoundError, match="nope"):
        ds.tags.delete("nope")
    with pytest.raises(DatasetNotFoundError, match="version 7 does not exist"):
        ds.checkout_version(7)


def test_nested_expression_filter(pair):
    """pylance cannot push nested references down; lance_ops evaluates them like the SQL form."""
    _, ds = pair
    expr = (pc.field("c", "x") > 100) & pc.field("b").is_valid()
    assert_same_table(ds.to_table(filter=expr), ds.to_table(filter="c.x > 100 AND b IS NOT NULL"))
    assert ds.count_rows(expr) == pair[0].count_rows("c.x > 100 AND b IS NOT NULL") == 15


def test_unknown_columns_and_bad_filters(pair):
    _, ds = pair
    with pytest.raises(LanceOpsError, match=r"unknown column\(s\) \['zz'\]"):
        ds.to_table(columns=["zz"])
    with pytest.raises(FilterError, match="unknown column 'zz'"):
        ds.to_table(filter="zz > 1")
    with pytest.raises(FilterError, match="unknown column 'zz'"):
        ds.count_rows("zz > 1")
    with pytest.raises(FilterError):
        ds.to_table(filter=pc.field("zz") > 1)


# --- schema evolution by pylance: several data files per fragment, columns missing from files -----
@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    """A pylance 2.0 dataset whose schema changed over 7 versions."""
    uri = str(tmp_path_factory.mktemp("evolved") / "ds")
    t = pa.table({"a": np.arange(10), "b": [str(i) for i in range(10)]})
    ds = lance.write_dataset(t, uri, data_storage_version="2.0", max_rows_per_file=4)   # v1
    ds.add_columns({"c": "a * 2"})                                                          # v2: 2 files per fragment
    ds = lance.write_dataset(pa.table({"a": [100, 101], "b": ["x", "y"], "c": [1, 2]}), uri, mode="append")  # v3
    ds.add_columns(pa.field("n", pa.float32()))                                             # v4: column in no file
    ds.add_columns({"d": "concat(b, 'z')"})                                                 # v5
    ds.delete("a = 5 OR a = 100")                                                           # v6
    ds.drop_columns(["c"])                                                                  # v7: column left in files
    ds.alter_columns({"path": "b", "name": "bb"})                                           # v8: renamed
    other = pa.table({"a": np.arange(0, 10, 2), "m": [f"m{i}" for i in range(0, 10, 2)]})
    ds.merge(other, "a")                                                                    # v9: merge by key
    return uri


def test_evolved_dataset_reads_like_pylance_at_every_version(evolved):
    latest = lance.dataset(evolved).version
    assert latest == 9
    for v in range(1, latest + 1):
        ref, ours = lance.dataset(evolved, version=v), lance_ops.dataset(evolved, version=v)
        assert ours.schema == ref.schema, f"version {v}"
        assert_same_table(ours.to_table(), ref.to_table())
        assert_same_table(ours.to_table(with_row_id=True, filter="a > 2"), ref.to_table(with_row_id=True, filter="a > 2"))
        assert ours.count_rows() == ref.count_rows()
        n = ref.count_rows()
        idx = [n - 1, 0, n // 2]
        assert_same_table(ours.take(idx), ref.take(idx), metadata=False)


def test_evolved_dataset_shape(evolved):
    ds = lance_ops.dataset(evolved, version=5)
    assert [len(f.data_files()) for f in ds.get_fragments()] == [3, 3, 3, 2]
    tbl = ds.to_table()
    assert tbl["n"].null_count == tbl.num_rows and tbl["n"].type == pa.float32()
    assert tbl["d"].to_pylist()[:3] == ["0z", "1z", "2z"]
    assert ds.to_table(columns=["n"], filter="n IS NULL").num_rows == 12
    latest = lance_ops.dataset(evolved)
    assert latest.schema.names == ["a", "bb", "n", "d", "m"]
    assert latest.to_table(columns=["m"])["m"].to_pylist() == ["m0", None, "m2", None, "m4", "m6", None, "m8", None, None]
    assert latest.to_table(filter="bb = 'y'")["a"].to_pylist() == [101]
