"""``LanceDataSource``: Lance datasets as a PySpark 4 Python data source (format name ``"lance"``).

    from lance_ops.spark import LanceDataSource, register
    register(spark)                    # or spark.dataSource.register(LanceDataSource)
    df.write.format("lance").mode("append").save("/lake/events.lance")
    spark.read.format("lance").load("/lake/events.lance").where("id > 10").select("id", "name")

Options (all optional):

==============================  ===========================================================
``storage_option.<key>``        a Lance storage option, e.g. ``storage_option.aws_region``,
                                ``storage_option.endpoint``, ``storage_option.aws_access_key_id``
``version``                     read: the version (number or tag) to read; default latest
``rows_per_partition``          read: split fragments into Spark partitions of at most this
                                many physical rows (default 1048576: one partition per fragment)
``pushFilters``                 read: ``true``/``false``; push Spark filters into the scan. Spark
                                refuses a reader that pushes filters unless the session has
                                ``spark.sql.python.filterPushdown.enabled=true``, so the default
                                is ``true`` only when registered with :func:`register` (which
                                sets that conf) and ``false`` for ``LanceDataSource`` itself
``max_rows_per_file``           write: rows per data file / fragment (default 1048576)
``data_storage_version``        write: file format of a new dataset (default
                                ``lance_ops.table.versions.DEFAULT``); appends keep the dataset's
``idempotency_key``             write: recorded with the commit; a write whose key was already
                                committed writes and commits nothing
==============================  ===========================================================

Upserts: ``.option("mode", "upsert")`` (or ``"on"``) is refused with a UsageError naming the
equivalent, :func:`lance_ops.spark.merge.merge_dataframe` ``(df, uri, on=["id"])``: a Python data
source's writer only sees its own partition, so it cannot join the source with the target's keys.

Column pruning: Python data sources are given the full schema, so read a subset of columns
by passing it: ``spark.read.format("lance").schema("id long, name string").load(uri)`` reads
only those columns from storage.

Write protocol (as lance-spark's ``LanceBatchWrite``): ``writer()`` runs on the driver and pins
the read version and the field ids; every task writes fragments (data files only) and returns
their metadata; the driver's ``commit()`` builds one Append/Overwrite transaction and commits it
once. ``abort()`` commits nothing: files of failed, retried or speculative attempts stay as
orphans for ``cleanup_old_versions(delete_unverified=True)``.
"""
from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)

from lance_ops.spark._common import (
    arrow_to_spark_schema,
    check_spark_append,
    latest_manifest,
    spark_to_arrow_schema,
    storage_options_from,
)
from lance_ops.table.deletion import live_rows
from lance_ops.table.filters import pruning as sp

if TYPE_CHECKING:  # PySpark's types and the dataset load only where they are used
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from lance_ops.table.dataset import LanceDataset
    from lance_ops.table.filters import Filter as ScanFilter
    from lance_ops.table.scan import FragmentScanTask

log = logging.getLogger(__name__)

DEFAULT_ROWS_PER_PARTITION = 1024 * 1024
READ_BATCH_ROWS = 64 * 1024
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["LanceDataSource", "LanceInputPartition", "LanceCommitMessage", "register", "spark_filter_to_expression",
           "spark_filter_to_tree"]


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _uri_of(options: Mapping[str, str]) -> str:
    uri = options.get("path")
    if not uri:
        raise ValueError("the lance data source needs a dataset URI: .load(uri) / .save(uri) or .option('path', uri)")
    return uri


class LanceDataSource(DataSource):
    """Read and write Lance datasets from Spark (``format("lance")``)."""

    #: whether readers push filters by default (see the module docs)
    push_filters_default = False

    @classmethod
    def name(cls) -> str:
        """The format name Spark knows this source by: ``"lance"``."""
        return "lance"

    def _storage_options(self) -> dict[str, str]:
        return storage_options_from(dict(self.options))

    def _open(self, version: int | str | None = None) -> LanceDataset:
        from lance_ops.table.dataset import LanceDataset

        if version is None:
            version = self.options.get("version")
        if isinstance(version, str) and version.isdigit():
            version = int(version)
        return LanceDataset(_uri_of(self.options), version, self._storage_options())

    def schema(self) -> StructType:
        """The Spark schema of the dataset's latest (or ``version`` option's) version."""
        return arrow_to_spark_schema(self._open().storage_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader of the pinned dataset version for the columns of ``schema``; it takes Spark's
        pushed filters when ``pushFilters`` (or the registered default) says so."""
        ds = self._open()
        option = self.options.get("pushFilters")
        push = self.push_filters_default if option is None else _truthy(option)
        rows = int(self.options.get("rows_per_partition") or DEFAULT_ROWS_PER_PARTITION)
        cls = LanceFilteringReader if push else LanceReader
        return cls(ds.uri, self._storage_options(), ds.version, ds.storage_schema, schema, rows)

    def writer(self, schema: StructType, overwrite: bool) -> "LanceWriter":
        """The writer of one Spark write (append, or overwrite when ``overwrite``): it pins the
        read version and field ids on the driver (see the module doc). An upsert (option
        ``mode=upsert`` / ``merge`` or ``on``) is refused naming its equivalent: a Python data
        source's writer sees only its own partition, never the target's keys to join with."""
        mode = str(self.options.get("mode") or "").strip().lower()
        if mode in ("upsert", "merge", "merge_insert") or self.options.get("on"):
            from lance_ops.errors import UsageError

            raise UsageError(
                "format('lance') writes append or overwrite; for an upsert use "
                "lance_ops.spark.merge.merge_dataframe(df, uri, on=[...]) (or spark-submit "
                "lance_ops/spark/merge.py --on ...): it joins the source with the dataset's keys on the "
                "executors and commits one Update")
        return LanceWriter(_uri_of(self.options), self._storage_options(), schema, overwrite, dict(self.options))


class _PushdownLanceDataSource(LanceDataSource):
    """What :func:`register` registers: pushes filters by default (it also enables the conf)."""

    push_filters_default = True


def register(spark: SparkSession, *, push_filters: bool = True) -> None:
    """Register the ``lance`` format on ``spark`` (and, by default, enable Python filter pushdown)."""
    if push_filters:
        spark.conf.set(PUSHDOWN_CONF, "true")
        spark.dataSource.register(_PushdownLanceDataSource)
    else:
        spark.dataSource.register(LanceDataSource)


# --- reading -----------------------------------------------------------------------------------------
@dataclass
class LanceInputPartition(InputPartition):
    """One planned scan task (:class:`~lance_ops.table.scan.FragmentScanTask`: a fragment's rows left
    after statistics pruning, at most ``rows_per_partition`` physical rows); None: an empty dataset."""

    task: FragmentScanTask | None = None

    @property
    def fragment_id(self) -> int:
        """The id of the fragment this partition reads (-1 for the empty dataset's partition)."""
        return -1 if self.task is None else self.task.fragment_id


class LanceReader(DataSourceReader):
    """Reads one pinned version, one or more partitions per fragment, only the requested columns.

    Partitions are the scan planner's tasks (ADR 0005), planned on the driver after Spark pushed
    its filters: fragments and pages whose statistics rule the pushed filters out are not read.
    """

    def __init__(self, uri: str, storage_options: dict[str, str], version: int, dataset_schema: pa.Schema,
                 spark_schema: StructType, rows_per_partition: int) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.uri = uri
        self.storage_options = storage_options
        self.version = version
        self.rows_per_partition = max(1, int(rows_per_partition))
        names = set(dataset_schema.names)
        unknown = [f.name for f in spark_schema.fields if f.name not in names]
        if unknown:
            raise ValueError(f"{uri}: column(s) {unknown} are not in the dataset; it has {dataset_schema.names}")
        self.columns = [f.name for f in spark_schema.fields]
        self.dataset_schema = dataset_schema
        self.output_schema = to_arrow_schema(spark_schema, timezone="UTC")
        #: Spark filters pushed into the scan (AND-ed)
        self.filters: list[Filter] = []

    def _dataset(self) -> LanceDataset:
        from lance_ops.table.dataset import LanceDataset

        return LanceDataset(self.uri, self.version, self.storage_options)

    def plan(self, ds: LanceDataset | None = None) -> list[FragmentScanTask]:
        """The scan tasks of this read (one per fragment left after pruning, split into pieces of
        at most ``rows_per_partition`` physical rows), in fragment order."""
        from lance_ops.table import scan

        ds = ds if ds is not None else self._dataset()
        columns = self.columns or [ds.storage_schema.names[0]]
        tasks: list[FragmentScanTask] = []
        for task in scan.iter_plan(ds, columns, self._filter(ds)):
            frag = task.fragment
            if frag.physical_rows == 0 or live_rows(frag) == 0:
                continue
            tasks.extend(task.split(self.rows_per_partition))
        return tasks

    def partitions(self) -> list[LanceInputPartition]:
        """One Spark partition per scan task of :meth:`plan`; a single empty one when there is none
        (Spark needs at least one)."""
        parts = [LanceInputPartition(task) for task in self.plan()]
        return parts or [LanceInputPartition(None)]

    def _expression(self) -> pc.Expression | None:
        compiled = [spark_filter_to_expression(f, self.dataset_schema) for f in self.filters]
        exprs = [e for e in compiled if e is not None]
        if not exprs:
            return None
        out = exprs[0]
        for e in exprs[1:]:
            out = out & e
        return out

    def _filter(self, ds: LanceDataset) -> ScanFilter | None:
        """The pushed filters compiled for the scan, with their statistics pruning tree."""
        from dataclasses import replace

        from lance_ops.table.filters import compile_filter

        expr = self._expression()
        if expr is None:
            return None
        filt = compile_filter(expr, ds.storage_schema)
        assert filt is not None  # an expression always compiles to a Filter
        trees = [spark_filter_to_tree(f, self.dataset_schema) for f in self.filters]
        return replace(filt, tree=trees[0] if len(trees) == 1 else sp.And(tuple(trees)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one partition (a scan task) as Arrow batches in the requested columns and types."""
        task = cast(LanceInputPartition, partition).task  # Spark hands back what partitions() made
        if task is None:
            return
        from lance_ops.table import scan

        ds = self._dataset()
        table = scan.execute(ds, task)
        if not self.columns:
            table = table.select([])
        table = _cast_table(table, self.output_schema)
        yield from table.to_batches(max_chunksize=READ_BATCH_ROWS)


class LanceFilteringReader(LanceReader):
    """A LanceReader that also takes Spark's pushed filters (needs the pushdown conf enabled)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Keep the filters that translate to a scan expression (they prune and filter the scan);
        yield the others back to Spark, which applies them after the scan."""
        for f in filters:
            try:
                expr = spark_filter_to_expression(f, self.dataset_schema)
            except Exception:  # noqa: BLE001 - anything we cannot translate stays with Spark
                expr = None
            if expr is None:
                yield f
            else:
                self.filters.append(f)


def _cast_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.schema.equals(schema, check_metadata=False):
        return table
    arrays = []
    for f in schema:
        col = table.column(f.name)
        arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


# --- filters -----------------------------------------------------------------------------------------
def _pushable_type(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_date(t)
            or pa.types.is_decimal(t))


def _scalar(value: Any, t: pa.DataType) -> pa.Scalar:
    s = pa.scalar(value, type=t)  # raises when the literal does not fit the column type
    if value is not None and not _is_nan(value) and s.as_py() != value:
        raise ValueError(f"literal {value!r} does not survive conversion to {t}")
    return s


def spark_filter_to_expression(f: Filter, schema: pa.Schema) -> pc.Expression | None:
    """A pyarrow expression with SQL semantics for Spark filter ``f``, or None if not pushable.

    Comparisons use Kleene logic (NULL propagates, so a row whose predicate is NULL is dropped, as
    in SQL) and Spark's float ordering (NaN = NaN, NaN above every number); only top-level columns of integer, floating, boolean, string, date and decimal types
    are pushed. Everything else is returned to Spark, which evaluates it after the scan.
    """
    if isinstance(f, Not):
        inner = spark_filter_to_expression(f.child, schema)
        return None if inner is None else ~inner
    attr = getattr(f, "attribute", None)
    if attr is None or len(attr) != 1 or attr[0] not in schema.names:
        return None
    t = schema.field(attr[0]).type
    col = pc.field(attr[0])
    if isinstance(f, IsNull):
        return col.is_null()
    if isinstance(f, IsNotNull):
        return col.is_valid()
    if not _pushable_type(t):
        return None
    if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)):
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)) or not isinstance(f.value, str):
            return None
        fn = {StringStartsWith: pc.starts_with, StringEndsWith: pc.ends_with,
              StringContains: pc.match_substring}[type(f)]
        return fn(col, pattern=f.value)
    if isinstance(f, In):
        values = list(f.value)
        if pa.types.is_floating(t) and any(_is_nan(v) for v in values):
            return None
        scalars = [_scalar(v, t) for v in values if v is not None]
        null_bool = pa.scalar(None, pa.bool_())
        expr = pc.if_else(col.is_null(), null_bool, pc.is_in(col, value_set=pa.array([s.as_py() for s in scalars], t)))
        if any(v is None for v in values):  # x IN (..., NULL): TRUE if found, else NULL
            expr = pc.if_else(expr, pa.scalar(True), null_bool)
        return expr
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return col.is_null()
        return pc.and_kleene(col.is_valid(), _compare(EqualTo, col, f.value, t))
    if type(f) in _COMPARISONS:
        value = cast(EqualTo, f).value  # every comparison filter carries a value
        if value is None:
            return None
        return _compare(type(f), col, value, t)
    return None


_COMPARISONS = {EqualTo: "__eq__", GreaterThan: "__gt__", GreaterThanOrEqual: "__ge__",
                LessThan: "__lt__", LessThanOrEqual: "__le__"}
_TREE_OPS = {EqualTo: "equal", GreaterThan: "greater", GreaterThanOrEqual: "greater_equal",
             LessThan: "less", LessThanOrEqual: "less_equal"}


def spark_filter_to_tree(f: Filter, schema: pa.Schema) -> sp.Node:
    """The statistics pruning tree of Spark filter ``f`` (same semantics as
    :func:`spark_filter_to_expression`: Kleene logic, NaN equal to itself and above every number),
    so the scan planner can skip fragments and pages no row of which can match; ``sp.UNKNOWN``
    (prunes nothing) for what it does not understand."""
    try:
        return _tree(f, schema)
    except Exception:  # noqa: BLE001 - a filter we cannot lower only costs pruning
        return sp.UNKNOWN


def _tree(f: Filter, schema: pa.Schema) -> sp.Node:
    if isinstance(f, Not):
        return sp.Not(_tree(f.child, schema))
    attr = getattr(f, "attribute", None)
    if attr is None or len(attr) != 1 or attr[0] not in schema.names:
        return sp.UNKNOWN
    name = attr[0]
    t = schema.field(name).type
    if isinstance(f, IsNull):
        return sp.IsNull(name)
    if isinstance(f, IsNotNull):
        return sp.Not(sp.IsNull(name))
    if not _pushable_type(t):
        return sp.UNKNOWN
    floating = pa.types.is_floating(t)
    if isinstance(f, In):
        values = list(f.value)
        if floating and any(_is_nan(v) for v in values):
            return sp.UNKNOWN
        kept = [_scalar(v, t).as_py() for v in values if v is not None]
        return sp.In.of(name, kept, any(v is None for v in values), floating)
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return sp.IsNull(name)
        return sp.IsBool(sp.Cmp(name, "equal", _scalar(f.value, t).as_py(), floating), True)
    if type(f) in _TREE_OPS:
        value = cast(EqualTo, f).value  # every comparison filter carries a value
        if value is not None:
            return sp.Cmp(name, _TREE_OPS[type(f)], _scalar(value, t).as_py(), floating)
    return sp.UNKNOWN


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _compare(kind: type[Filter], col: pc.Expression, value: Any, t: pa.DataType) -> pc.Expression:
    """``col <op> value`` with Spark's semantics; for floats NaN equals NaN and sorts above all."""
    if not pa.types.is_floating(t):
        return getattr(col, _COMPARISONS[kind])(_scalar(value, t))
    nan = pc.is_nan(col)  # NULL for NULL: comparisons stay NULL on NULL input
    if _is_nan(value):
        return {EqualTo: nan, GreaterThan: col > pa.scalar(value, t),  # FALSE, NULL on NULL
                GreaterThanOrEqual: nan, LessThan: pc.invert(nan),
                LessThanOrEqual: pc.or_kleene(nan, pc.invert(nan))}[kind]
    plain = getattr(col, _COMPARISONS[kind])(_scalar(value, t))  # FALSE for a NaN column value
    if kind in (GreaterThan, GreaterThanOrEqual):
        return pc.or_kleene(plain, nan)
    return plain


# --- writing -----------------------------------------------------------------------------------------
@dataclass
class LanceCommitMessage(WriterCommitMessage):
    """What one write task produced: its fragments (base64 DataFragment protos)."""

    partition: int
    attempt: int
    num_rows: int
    fragments: list[str] = field(default_factory=list)


class LanceWriter(DataSourceArrowWriter):
    """Driver: pins read version and field ids; tasks: write fragments; driver: commit once."""

    def __init__(self, uri: str, storage_options: dict[str, str], spark_schema: StructType, overwrite: bool,
                 options: Mapping[str, str]) -> None:
        from lance_ops.io import open_store
        from lance_ops.maintenance.staged_commit import fields_to_b64
        from lance_ops.schema import from_lance_fields, to_lance_fields
        from lance_ops.table import versions
        from lance_ops.table.commit import idempotency
        from lance_ops.table.commit.staging import sanitize_key

        self.uri = uri
        self.storage_options = storage_options
        self.overwrite = overwrite
        self.max_rows_per_file = int(options.get("max_rows_per_file") or 1024 * 1024)
        raw_key = options.get("idempotency_key")
        self.key = sanitize_key(raw_key) if raw_key else f"spark-write-{uuid.uuid4().hex}"
        store, base = open_store(uri, storage_options)
        current = latest_manifest(store, base, uri)
        self.read_version = current.version if current is not None else 0
        self.already_committed = bool(
            raw_key and current is not None
            and idempotency.lookup(store, base, self.key, "write") is not None
        )
        data_schema = spark_to_arrow_schema(spark_schema)
        self.appending = current is not None and not overwrite
        if self.appending and current is not None:
            manifest = current.manifest
            fields = list(manifest.fields)
            check_spark_append(from_lance_fields(fields, dict(manifest.schema_metadata)), data_schema, uri)
            self.version = versions.normalize(manifest.data_format.version or None)
            self.schema_metadata = {k: v.decode("utf-8", "surrogateescape") for k, v in manifest.schema_metadata.items()}
        else:
            fields = to_lance_fields(data_schema)
            default = (current.manifest.data_format.version or None) if current is not None else None
            self.version = versions.normalize(options.get("data_storage_version") or default)
            self.schema_metadata = {}
        versions.require_writable(self.version, uri)
        self.fields_b64 = fields_to_b64(fields)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LanceCommitMessage:
        """On an executor: write this task's batches as fragments (data files only, nothing
        committed) and return their metadata; a write already committed only drains its input."""
        from lance_ops.spark._tasks import task_context, write_partition
        from lance_ops.table.commit.staging import fragment_to_b64

        ctx = task_context()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        if self.already_committed:
            for _ in iterator:  # drain; this write was committed before
                pass
            return LanceCommitMessage(partition, attempt, 0, [])
        fragments = write_partition(
            iterator, uri=self.uri, storage_options=self.storage_options, fields_b64=self.fields_b64,
            schema_metadata=self.schema_metadata, max_rows_per_file=self.max_rows_per_file,
            data_storage_version=self.version,
        )
        return LanceCommitMessage(partition, attempt, sum(f.physical_rows for f in fragments),
                                  [fragment_to_b64(f) for f in fragments])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """On the driver: commit the fragments of every task as one Append or Overwrite, once."""
        from lance_ops.maintenance.staged_commit import commit_result
        from lance_ops.table.commit.staging import StagedResult, fragment_from_b64

        if self.already_committed:
            log.info("%s: write %s was already committed; nothing to do", self.uri, self.key)
            return
        msgs = sorted((cast(LanceCommitMessage, m) for m in messages if m is not None), key=lambda m: m.partition)
        fragments = [fragment_from_b64(b) for m in msgs for b in m.fragments]
        result = StagedResult(
            key=self.key, operation="append" if self.appending else "overwrite",
            read_version=self.read_version, fragments=fragments, schema_fields=self.fields_b64,
            schema_metadata=self.schema_metadata, data_storage_version=self.version,
            metrics={"num_rows": sum(m.num_rows for m in msgs), "num_fragments": len(fragments)},
        )
        out = commit_result(self.uri, result, storage_options=self.storage_options)
        log.info("%s: committed version %d (%s)", self.uri, out["version"], out["metrics"])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """On the driver, after a failed write: commit nothing and log the orphan files left."""
        written = sum(len(cast(LanceCommitMessage, m).fragments) for m in messages if m is not None)
        log.warning("%s: write aborted; %d fragment(s) written by finished tasks stay as orphan files "
                    "(cleanup_old_versions(delete_unverified=True) removes them)", self.uri, written)
