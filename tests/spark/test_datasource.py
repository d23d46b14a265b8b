"""The ``lance`` Python data source: write/read round trips, projection, pushed filters, retries.

JVM tests share the session-scoped ``spark`` fixture; the filter translation tests need no JVM.
"""
from __future__ import annotations

import math
import pickle

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from tests.spark._support import data_files, fail_first_attempts, make_rows, referenced_files

pytest.importorskip("pyspark")

from pyspark.sql.datasource import (  # noqa: E402
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from lance_ops.spark.datasource import (  # noqa: E402
    LanceFilteringReader,
    spark_filter_to_expression,
    spark_filter_to_tree,
)
from lance_ops.table.filters import pruning as sp  # noqa: E402


def optimized_plan(df) -> str:
    return df._jdf.queryExecution().optimizedPlan().toString()


def sorted_table(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


# --- filter translation (no JVM) ----------------------------------------------------------------
FILTER_DATA = pa.table({"a": pa.array([1, 2, None, 4], pa.int64()), "s": pa.array(["ab", None, "b", "abc"])})


def apply(f) -> list:
    expr = spark_filter_to_expression(f, FILTER_DATA.schema)
    assert expr is not None
    return FILTER_DATA.filter(expr)["a"].to_pylist()


@pytest.mark.parametrize("f, expected", [
    (EqualTo(("a",), 2), [2]),
    (Not(EqualTo(("a",), 2)), [1, 4]),  # NULL <> 2 is NULL: dropped, as in SQL
    (GreaterThan(("a",), 1), [2, 4]),
    (LessThanOrEqual(("a",), 2), [1, 2]),
    (In(("a",), (1, 4)), [1, 4]),
    (Not(In(("a",), (1, 4))), [2]),
    (Not(In(("a",), (1, None))), []),  # NOT IN with a NULL in the list is never TRUE
    (EqualNullSafe(("a",), None), [None]),
    (Not(EqualNullSafe(("a",), 2)), [1, None, 4]),
    (IsNull(("s",)), [2]),
    (StringStartsWith(("s",), "ab"), [1, 4]),
    (Not(StringStartsWith(("s",), "ab")), [None]),
])
def test_spark_filters_have_sql_semantics(f, expected):
    assert apply(f) == expected


FLOATS = pa.table({"i": [0, 1, 2, 3], "x": pa.array([1.0, float("nan"), None, -2.0])})
NAN = float("nan")


@pytest.mark.parametrize("f, expected", [
    (GreaterThan(("x",), 0.0), [0, 1]),  # NaN sorts above every number in Spark
    (Not(GreaterThan(("x",), 0.0)), [3]),
    (LessThanOrEqual(("x",), 1.0), [0, 3]),
    (EqualTo(("x",), NAN), [1]),  # NaN = NaN in Spark
    (Not(EqualTo(("x",), NAN)), [0, 3]),
    (GreaterThan(("x",), NAN), []),
    (Not(GreaterThan(("x",), NAN)), [0, 1, 3]),
    (LessThan(("x",), NAN), [0, 3]),
    (LessThanOrEqual(("x",), NAN), [0, 1, 3]),
    (GreaterThanOrEqual(("x",), NAN), [1]),
    (EqualNullSafe(("x",), NAN), [1]),
])
def test_float_filters_follow_spark_nan_ordering(f, expected):
    expr = spark_filter_to_expression(f, FLOATS.schema)
    assert FLOATS.filter(expr)["i"].to_pylist() == expected


def test_unpushable_filters_are_left_to_spark():
    schema = pa.schema([("a", pa.int64()), ("t", pa.timestamp("us", "UTC")), ("st", pa.struct([("x", pa.int32())]))])
    assert spark_filter_to_expression(EqualTo(("t",), 1), schema) is None
    assert spark_filter_to_expression(EqualTo(("st", "x"), 1), schema) is None
    assert spark_filter_to_expression(EqualTo(("missing",), 1), schema) is None
    assert spark_filter_to_expression(StringStartsWith(("a",), "1"), schema) is None


# --- statistics pruning of pushed filters (no JVM) ----------------------------------------------
def row_stats(table: pa.Table, i: int) -> dict[str, sp.ColumnStats]:
    """Statistics of a one-row chunk (row ``i``), as page statistics would hold them."""
    out = {}
    for name in table.column_names:
        v = table[name][i].as_py()
        nan = isinstance(v, float) and math.isnan(v)
        bound = None if v is None or nan else v
        out[name] = sp.ColumnStats(bound, bound, int(v is None), 1, int(nan))
    return out


TREE_CASES = [(FILTER_DATA, f, "a") for f, _ in [
    (EqualTo(("a",), 2), 0), (Not(EqualTo(("a",), 2)), 0), (GreaterThan(("a",), 1), 0),
    (LessThanOrEqual(("a",), 2), 0), (In(("a",), (1, 4)), 0), (Not(In(("a",), (1, 4))), 0),
    (Not(In(("a",), (1, None))), 0), (In(("a",), (2, None)), 0), (EqualNullSafe(("a",), None), 0),
    (Not(EqualNullSafe(("a",), 2)), 0), (EqualNullSafe(("a",), 2), 0), (IsNull(("s",)), 0),
    (Not(IsNull(("s",))), 0), (EqualTo(("s",), "b"), 0), (GreaterThanOrEqual(("s",), "abc"), 0),
    (StringStartsWith(("s",), "ab"), 0)]] + [(FLOATS, f, "i") for f in [
    GreaterThan(("x",), 0.0), Not(GreaterThan(("x",), 0.0)), LessThanOrEqual(("x",), 1.0),
    EqualTo(("x",), NAN), Not(EqualTo(("x",), NAN)), GreaterThan(("x",), NAN), LessThan(("x",), NAN),
    GreaterThanOrEqual(("x",), NAN), EqualNullSafe(("x",), NAN), EqualTo(("x",), -2.0), LessThan(("x",), 0.0)]]


@pytest.mark.parametrize("table, f, key", TREE_CASES)
def test_pruning_trees_never_rule_out_a_matching_row(table, f, key):
    tree = spark_filter_to_tree(f, table.schema)
    kept = set(table.filter(spark_filter_to_expression(f, table.schema))[key].to_pylist())
    for i in range(table.num_rows):
        if table[key][i].as_py() in kept:
            assert sp.may_match(tree, row_stats(table, i)), (f, i)


def test_pruning_trees_rule_out_what_statistics_exclude():
    schema = FLOATS.schema
    far = {"x": sp.ColumnStats(10.0, 20.0, 0, 5, 0), "i": sp.ColumnStats(0, 4, 0, 5)}
    assert not sp.may_match(spark_filter_to_tree(LessThan(("x",), 5.0), schema), far)
    assert not sp.may_match(spark_filter_to_tree(In(("i",), (7, 9)), schema), far)
    assert not sp.may_match(spark_filter_to_tree(IsNull(("x",)), schema), far)
    assert sp.may_match(spark_filter_to_tree(GreaterThan(("x",), 15.0), schema), far)
    with_nan = {"x": sp.ColumnStats(10.0, 20.0, 0, 5, 1)}
    assert sp.may_match(spark_filter_to_tree(GreaterThan(("x",), 100.0), schema), with_nan)  # NaN is above
    assert spark_filter_to_tree(StringStartsWith(("s",), "a"), FILTER_DATA.schema) == sp.UNKNOWN


class CountingReader(LanceFilteringReader):
    """The reader with every data-file read of its datasets recorded (injected by the test)."""

    reads: list = []

    def _dataset(self):
        ds = super()._dataset()
        store, original = ds.store, ds.store.read_ranges

        def spy(path, ranges):
            if "/data/" in str(path).replace("\\", "/"):
                CountingReader.reads.append((path, len(ranges)))
            return original(path, ranges)

        store.read_ranges = spy
        return ds


def reader_for(uri: str, rows_per_partition: int = 1 << 20) -> CountingReader:
    from lance_ops.spark._common import arrow_to_spark_schema

    ds = lance_ops.dataset(uri)
    spark_schema = arrow_to_spark_schema(ds.schema.remove(ds.schema.get_field_index("ts")))
    return CountingReader(uri, {}, ds.version, ds.schema, spark_schema, rows_per_partition)


def read_all(reader, partitions) -> pa.Table:
    batches = [b for p in partitions for b in reader.read(pickle.loads(pickle.dumps(p)))]
    return pa.Table.from_batches(batches, reader.output_schema)


def test_the_spark_reader_plans_pruned_partitions(tmp_path, monkeypatch):
    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "4096")  # several pages per fragment
    uri = str(tmp_path / "ds.lance")
    lance_ops.write_dataset(make_rows(0, 20_000), uri, max_rows_per_file=5_000)
    lance_ops.dataset(uri).delete("id % 10 = 1")

    plain = reader_for(uri, 2_000)
    assert len(plain.partitions()) == 4 * 3  # no filter: every fragment, in 2000-row pieces
    wanted = reader_for(uri, 2_000)
    assert list(wanted.pushFilters([GreaterThanOrEqual(("id",), 15_500), LessThan(("id",), 15_600)])) == []
    parts = wanted.partitions()
    assert {p.fragment_id for p in parts} == {3}  # fragments 0-2 are ruled out by statistics
    assert sum(p.task.planned_rows for p in parts) < 2_000  # and most pages of fragment 3

    CountingReader.reads = []
    got = read_all(wanted, parts)
    pruned_reads = sum(n for _, n in CountingReader.reads)
    assert got["id"].to_pylist() == [i for i in range(15_500, 15_600) if i % 10 != 1]
    assert got.schema.names == ["id", "value", "small", "name", "flag", "day"]

    CountingReader.reads = []
    everything = read_all(plain, plain.partitions())
    assert everything.num_rows == 18_000
    assert len({p for p, _ in CountingReader.reads}) == 4 and pruned_reads < sum(n for _, n in CountingReader.reads)

    never = reader_for(uri)
    list(never.pushFilters([GreaterThan(("id",), 10**9)]))
    assert [p.task for p in never.partitions()] == [None]  # nothing to read: one empty partition
    assert read_all(never, never.partitions()).num_rows == 0


# --- with Spark ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_write_then_read_with_projection_and_pushed_filter(spark, tmp_path):
    uri = str(tmp_path / "ds.lance")
    source = make_rows(0, 60_000)
    df = spark.createDataFrame(source).repartition(3)
    df.write.format("lance").mode("overwrite").option("max_rows_per_file", 15_000).save(uri)

    ds = lance.dataset(uri)  # pylance reads what the data source wrote
    assert ds.version == 1 and ds.count_rows() == 60_000
    assert sorted_table(ds.to_table()).equals(source)
    assert all(f.count_rows() <= 15_000 for f in ds.get_fragments())

    whole = spark.read.format("lance").load(uri)
    assert whole.schema.simpleString() == (
        "struct<id:bigint,value:double,small:int,name:string,flag:boolean,day:date,ts:timestamp>")
    back = pa.Table.from_pandas(whole.toPandas(), preserve_index=False)
    assert sorted(back["id"].to_pylist()) == list(range(60_000))

    # projection through the reader's schema + filters Spark pushes into the scan
    q = (spark.read.format("lance").schema("id long, name string, small int").load(uri)
         .where("id >= 1000 AND name = 'name-7' AND small <= 40000"))
    plan = optimized_plan(q)
    assert "Filter" not in plan, plan  # every predicate was pushed down
    rows = sorted((r.id, r.name) for r in q.collect())
    mask = pc.and_(pc.greater_equal(source["id"], 1000), pc.equal(source["name"], "name-7"))
    expected = source.filter(mask)
    assert rows == list(zip(expected["id"].to_pylist(), expected["name"].to_pylist()))
    assert len(rows) > 0

    # a predicate Spark cannot push stays in Spark and is still applied
    odd = spark.read.format("lance").load(uri).where("id % 7 = 3 AND id < 100")
    assert "Filter" in optimized_plan(odd)
    assert sorted(r.id for r in odd.select("id").collect()) == [i for i in range(100) if i % 7 == 3]


@pytest.mark.slow
def test_read_partitions_split_fragments_and_skip_deleted_rows(spark, tmp_path):
    uri = str(tmp_path / "ds.lance")
    lance_ops.write_dataset(make_rows(0, 50_000), uri, max_rows_per_file=20_000)  # 20k, 20k, 10k
    lance_ops.dataset(uri).delete("id % 5 = 0 OR (id >= 40000 AND id < 45000)")
    df = spark.read.format("lance").option("rows_per_partition", 7_000).load(uri)
    assert df.rdd.getNumPartitions() == 3 + 3 + 2
    ids = sorted(r.id for r in df.select("id").collect())
    expected = lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist()
    assert ids == sorted(expected)
    assert len(ids) == 50_000 - 10_000 - 4_000
    # a pinned old version
    old = spark.read.format("lance").option("version", 1).load(uri)
    assert old.count() == 50_000
    # pushed filters prune: the partitions are the planned tasks left after statistics pruning
    few = spark.read.format("lance").option("rows_per_partition", 7_000).load(uri).where("id >= 41000")
    assert few.rdd.getNumPartitions() == 2  # fragment 2 only
    assert sorted(r.id for r in few.select("id").collect()) == [i for i in expected if i >= 41_000]


@pytest.mark.slow
def test_append_to_a_pylance_dataset_and_schema_errors(spark, tmp_path):
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(make_rows(0, 1_000), uri, data_storage_version="2.0")
    spark.createDataFrame(make_rows(1_000, 3_000)).write.format("lance").mode("append").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert sorted_table(ds.to_table()).equals(make_rows(0, 3_000))

    bad = spark.createDataFrame(make_rows(0, 10).drop(["flag"]).append_column("extra", pa.array(range(10))))
    with pytest.raises(Exception, match=r"missing fields \['flag'\].*not in the dataset \['extra'\]"):
        bad.write.format("lance").mode("append").save(uri)
    assert lance.dataset(uri).version == 2


@pytest.mark.slow
@pytest.mark.parametrize("version", [None, "2.0", "2.1", "2.2", "legacy"])
def test_write_in_the_storage_version_asked(spark, tmp_path, version):
    """The ``data_storage_version`` option picks a new dataset's format (none: the library's
    default); an append keeps the dataset's own, whatever it asks; pylance and Spark read it."""
    from lance_ops.table.versions import DEFAULT

    uri = str(tmp_path / "ds.lance")
    want = {None: str(DEFAULT), "legacy": "0.1"}.get(version, version)
    writer = spark.createDataFrame(make_rows(0, 2_000)).repartition(2).write.format("lance").mode("overwrite")
    (writer.option("data_storage_version", version) if version else writer).save(uri)
    assert lance.dataset(uri).data_storage_version == want
    other = "2.1" if want == "2.0" else "2.0"  # asked for, and ignored: the dataset exists
    spark.createDataFrame(make_rows(2_000, 2_500)).write.format("lance").mode("append") \
        .option("data_storage_version", other).save(uri)
    ds = lance.dataset(uri)
    assert (ds.version, ds.data_storage_version) == (2, want)
    assert sorted_table(ds.to_table()).equals(make_rows(0, 2_500))
    back = spark.read.format("lance").load(uri).where("id >= 1990").select("id").collect()
    assert sorted(r.id for r in back) == list(range(1990, 2_500))


@pytest.mark.slow
def test_write_retried_tasks_never_duplicate_rows(spark, tmp_path):
    uri = str(tmp_path / "ds.lance")
    df = spark.createDataFrame(make_rows(0, 30_000)).repartition(3)
    with fail_first_attempts(spark):
        df.write.format("lance").mode("overwrite").option("idempotency_key", "dsw-1").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 30_000
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(30_000))
    orphans = data_files(uri) - referenced_files(uri)
    assert len(orphans) == 3  # one per failed first attempt, never committed

    # the same idempotency key again: nothing written, nothing committed
    before = data_files(uri)
    df.write.format("lance").mode("append").option("idempotency_key", "dsw-1").save(uri)
    assert lance.dataset(uri).version == 1 and data_files(uri) == before


@pytest.mark.slow
def test_s3_round_trip_with_storage_options(spark, moto_server, s3_bucket):
    uri = f"{s3_bucket}/ds.lance"
    opts = {f"storage_option.{k}": v for k, v in moto_server.storage_options.items()}
    source = make_rows(0, 5_000)
    spark.createDataFrame(source).repartition(2).write.format("lance").mode("append").options(**opts).save(uri)
    ds = lance.dataset(uri, storage_options=moto_server.storage_options)
    assert ds.count_rows() == 5_000
    back = spark.read.format("lance").options(**opts).load(uri).where("id < 10").select("id").collect()
    assert sorted(r.id for r in back) == list(range(10))
