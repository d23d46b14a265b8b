"""Helpers shared by the Spark jobs and the data source (driver side and executor side).

Nothing here starts Spark; PySpark is imported lazily inside the few functions that need it, so
executor-side helpers can be imported cheaply by the Python workers.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from lance_ops.errors import DatasetNotFoundError
from lance_ops.table.dataset import open_manifest
from lance_ops.table.manifest import ManifestFile
from lance_ops.table.write import check_append_schema

#: prefix of data source options that are storage options (``storage_option.aws_region``)
STORAGE_OPTION_PREFIX = "storage_option."


def parse_kv(pairs: Sequence[str] | None, what: str = "option") -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; a pair without ``=`` is an error (not echoed: it may be
    a secret glued to its key)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--{what.replace('_', '-')} expects KEY=VALUE; got an item without a key or '=' "
                             f"(item {len(out) + 1}, not shown: it may hold a secret)")
        out[key.strip()] = value
    return out


def latest_manifest(store, base: str, uri: str) -> ManifestFile | None:
    try:
        return open_manifest(store, base, None, uri)
    except DatasetNotFoundError:
        return None


def configure_logging(level: int = logging.INFO) -> None:
    """Job logs of ``lance_ops`` loggers on stderr; other libraries (py4j) keep their defaults.

    spark-submit merges the Python driver's stderr into its stdout, so nothing but our own
    messages may be printed after the summary line.
    """
    logger = logging.getLogger("lance_ops")
    if not any(getattr(h, "_lance_ops_job", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._lance_ops_job = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)


def print_summary(summary: Mapping[str, Any], stream=None) -> None:
    """The job's one-line JSON summary (its last stdout line: Airflow pushes it to XCom).

    Readers should take the last line that parses as a JSON object: spark-submit mixes the
    driver's stderr into stdout.
    """
    stream = stream or sys.stdout
    stream.write(json.dumps(dict(summary), sort_keys=True, default=str) + "\n")
    stream.flush()


# --- Arrow types as Spark produces them ------------------------------------------------------------
def _normalize_type(t: pa.DataType, *, timestamps: bool) -> pa.DataType:
    """Spark's Arrow rendering of a type collapsed to one canonical Arrow type.

    Spark has no large/small distinction and only microsecond timestamps; tz-aware timestamps
    come out in the session time zone. With ``timestamps`` every tz-aware timestamp becomes
    ``timestamp[us, UTC]`` and every naive one ``timestamp[us]``.
    """
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t) and timestamps:
        return pa.timestamp("us", "UTC" if t.tz else None)
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(_normalize_field(t.value_field, timestamps=timestamps))
    if pa.types.is_struct(t):
        return pa.struct([_normalize_field(t.field(i), timestamps=timestamps) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(_normalize_field(t.key_field, timestamps=timestamps),
                       _normalize_field(t.item_field, timestamps=timestamps))
    return t


def _normalize_field(f: pa.Field, *, timestamps: bool) -> pa.Field:
    return f.with_type(_normalize_type(f.type, timestamps=timestamps))


def normalize_schema(schema: pa.Schema, *, timestamps: bool = True) -> pa.Schema:
    return pa.schema([_normalize_field(f, timestamps=timestamps) for f in schema], metadata=schema.metadata)


def spark_to_arrow_schema(spark_schema) -> pa.Schema:
    """The Arrow schema of a new dataset made from a Spark DataFrame schema."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return normalize_schema(to_arrow_schema(spark_schema, timezone="UTC"))


def check_spark_append(dataset_schema: pa.Schema, data_schema: pa.Schema, uri: str) -> None:
    """Append check up to what Spark cannot express (string vs large_string, timestamp units).

    Raises SchemaMismatchError naming every missing, extra or differently typed field.
    """
    check_append_schema(normalize_schema(dataset_schema), normalize_schema(data_schema), uri)


def cast_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the columns of ``schema`` (selected by name, cast where the type differs).
    Blob v2 columns are left as they come (bytes): the fragment writer converts them."""
    from lance_ops.file.blob_v2 import is_blob_v2

    if batch.schema.equals(schema, check_metadata=False):
        return batch
    arrays, fields = [], []
    for field in schema:
        col = batch.column(field.name)
        if is_blob_v2(field):
            field = batch.schema.field(field.name)
        elif col.type != field.type:
            col = col.cast(field.type)
        arrays.append(col)
        fields.append(field)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


def cast_batches(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatchReader:
    from lance_ops.file.blob_v2 import is_blob_v2

    if not any(is_blob_v2(f) for f in schema):
        return pa.RecordBatchReader.from_batches(schema, (cast_batch(b, schema) for b in batches))
    # blob v2 columns keep their input type: the reader's schema is the first batch's
    it = (cast_batch(b, schema) for b in batches)
    first = next(it, None)
    if first is None:
        return pa.RecordBatchReader.from_batches(schema, [])

    def chain():
        yield first
        yield from it

    return pa.RecordBatchReader.from_batches(first.schema, chain())


# --- Arrow -> Spark (for the data source's schema) ---------------------------------------------------
def arrow_to_spark_type(t: pa.DataType):
    """A Spark type able to hold ``t`` (unsigned ints widen, uint64 becomes decimal(20,0))."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_type

    if pa.types.is_uint8(t):
        return T.ShortType()
    if pa.types.is_uint16(t):
        return T.IntegerType()
    if pa.types.is_uint32(t):
        return T.LongType()
    if pa.types.is_uint64(t):
        return T.DecimalType(20, 0)
    if pa.types.is_float16(t):
        return T.FloatType()
    if pa.types.is_dictionary(t):
        return arrow_to_spark_type(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(arrow_to_spark_type(t.value_type), t.value_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(t.field(i).name, arrow_to_spark_type(t.field(i).type), t.field(i).nullable)
                             for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return T.MapType(arrow_to_spark_type(t.key_type), arrow_to_spark_type(t.item_type), t.item_field.nullable)
    return from_arrow_type(t, prefer_timestamp_ntz=True)


def arrow_to_spark_schema(schema: pa.Schema):
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, arrow_to_spark_type(f.type), f.nullable) for f in schema])


def storage_options_from(options: Mapping[str, str]) -> dict[str, str]:
    """Data source options ``storage_option.<key>`` -> storage options ``{<key>: value}``."""
    return {k[len(STORAGE_OPTION_PREFIX):]: v for k, v in options.items()
            if k.lower().startswith(STORAGE_OPTION_PREFIX) and len(k) > len(STORAGE_OPTION_PREFIX)}


def commit_or_stage(summary: dict, args, uri: str, key: str, storage_options, version_if_staged) -> dict:
    """End of a job: with ``--stage-only`` leave the staged result for a separate commit step,
    otherwise commit it (once: a committed key is a no-op) and record the outcome in ``summary``."""
    if args.stage_only:
        summary.update(version=version_if_staged, committed=False, already_committed=False)
        return summary
    from lance_ops.maintenance.staged_commit import commit_staged

    res = commit_staged(uri, key, storage_options=storage_options)
    summary.update(version=res["version"], committed=True, already_committed=res["already_committed"])
    if res.get("metrics"):
        summary["metrics"] = res["metrics"]
    return summary


def run_job(name: str, parser, run, argv=None) -> int:
    """Parse arguments, run ``run(spark, args)`` in a SparkSession, print the JSON summary line."""
    args = parser.parse_args(argv)
    configure_logging()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"lance-ops {name} {args.uri}").getOrCreate()
    try:
        summary = run(spark, args)
    finally:
        spark.stop()
    print_summary(summary)
    return 0
