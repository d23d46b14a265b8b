"""Helpers shared by the Spark jobs and the data source (driver side and executor side).

Nothing here starts Spark; PySpark is imported lazily inside the few functions that need it, so
executor-side helpers can be imported cheaply by the Python workers.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, NoReturn, Sequence, TextIO

import pyarrow as pa

from lance_ops.errors import DatasetNotFoundError, InputNotFoundError, LanceOpsError, UsageError
from lance_ops.io.base import ObjectStore
from lance_ops.table.dataset import open_manifest
from lance_ops.table.manifest.codec import ManifestFile
from lance_ops.table.write import check_append_schema

if TYPE_CHECKING:  # PySpark loads only inside the functions that use it
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

#: a job's body: ``run(spark, args)`` returns the job's summary (printed as its JSON line)
JobBody = Callable[["SparkSession", argparse.Namespace], Mapping[str, Any]]

#: prefix of data source options that are storage options (``storage_option.aws_region``)
STORAGE_OPTION_PREFIX = "storage_option."


def parse_kv(pairs: Sequence[str] | None, what: str = "option") -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; a pair without ``=`` is a UsageError (the value is
    not echoed: it may be a secret)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--{what.replace('_', '-')} expects KEY=VALUE (an argument lacks '=' or a key)")
        out[key.strip()] = value
    return out


def latest_manifest(store: ObjectStore, base: str, uri: str) -> ManifestFile | None:
    """The latest manifest of the dataset at ``base`` in ``store``, or None if there is none.

    Jobs that may create the dataset use it: a missing dataset is a normal case, not an error.
    """
    try:
        return open_manifest(store, base, None, uri)
    except DatasetNotFoundError:
        return None


@contextlib.contextmanager
def job_logging(level: int = logging.INFO) -> Iterator[None]:
    """Job logs of ``lance_ops`` loggers on stderr while a job runs; other libraries (py4j) keep
    their defaults, and nothing stays attached afterwards (a job may run inside a longer process).

    spark-submit merges the Python driver's stderr into its stdout, so nothing but our own
    messages may be printed after the summary line.
    """
    logger = logging.getLogger("lance_ops")
    handler = _JobLogHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)


class _JobLogHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record comes, not the stream of the moment the
    handler was made: a job run inside a longer process (tests, notebooks) must not keep writing
    to a stream that has been swapped out and closed since."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # StreamHandler.__init__ assigns it; the property decides
        pass


def print_summary(summary: Mapping[str, Any], stream: TextIO | None = None) -> None:
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
    """``schema`` with every field's type as Spark would render it (see :func:`_normalize_type`).

    Comparing normalized schemas ignores differences Spark cannot express (string widths,
    timestamp units); schema metadata is kept.
    """
    return pa.schema([_normalize_field(f, timestamps=timestamps) for f in schema], metadata=schema.metadata)


def spark_to_arrow_schema(spark_schema: StructType) -> pa.Schema:
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
    from lance_ops.format.blob_v2 import is_blob_v2

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
    """A reader of ``batches``, each cast to ``schema`` with :func:`cast_batch` as it is read.

    With blob v2 columns (left in their input type) the reader's schema is the first batch's.
    """
    from lance_ops.format.blob_v2 import is_blob_v2

    if not any(is_blob_v2(f) for f in schema):
        return pa.RecordBatchReader.from_batches(schema, (cast_batch(b, schema) for b in batches))
    # blob v2 columns keep their input type: the reader's schema is the first batch's
    it = (cast_batch(b, schema) for b in batches)
    first = next(it, None)
    if first is None:
        return pa.RecordBatchReader.from_batches(schema, [])

    def chain() -> Iterator[pa.RecordBatch]:
        yield first
        yield from it

    return pa.RecordBatchReader.from_batches(first.schema, chain())


# --- Arrow -> Spark (for the data source's schema) ---------------------------------------------------
def arrow_to_spark_type(t: pa.DataType) -> DataType:
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


def arrow_to_spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema the data source reports for a dataset with Arrow ``schema``.

    Each field's type comes from :func:`arrow_to_spark_type`; names and nullability are kept.
    """
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, arrow_to_spark_type(f.type), f.nullable) for f in schema])


def storage_options_from(options: Mapping[str, str]) -> dict[str, str]:
    """Data source options ``storage_option.<key>`` -> storage options ``{<key>: value}``."""
    return {k[len(STORAGE_OPTION_PREFIX):]: v for k, v in options.items()
            if k.lower().startswith(STORAGE_OPTION_PREFIX) and len(k) > len(STORAGE_OPTION_PREFIX)}


def commit_or_stage(summary: dict[str, Any], args: argparse.Namespace, uri: str, key: str,
                    storage_options: Mapping[str, Any] | None, version_if_staged: int | None) -> dict[str, Any]:
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


# --- failures -------------------------------------------------------------------------------------
#: exit code of a job failure that a retry cannot fix (bad input, usage, missing dataset ...)
EXIT_NOT_RETRYABLE = 2
#: exit code of a failure a retry may fix (storage/network errors, lost commit races); EX_TEMPFAIL
EXIT_RETRYABLE = 75
#: the prefix of the one-line cause a failed job prints first on stderr
ERROR_PREFIX = "lance-ops: error: "

_REMOTE_ERROR_RE = re.compile(r"lance_ops\.errors\.([A-Za-z_]\w*): (.*)")
_MISSING_CONDITIONS = ("PATH_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND")


def translate_job_error(exc: BaseException) -> BaseException:
    """Spark's and Python's ways of saying "bad input" as lance_ops errors (others unchanged).

    A missing input path (Spark's ``PATH_NOT_FOUND``, a FileNotFoundError) or table becomes
    InputNotFoundError naming it; other analysis errors (unknown columns, bad options) become
    UsageError; a lance_ops error raised in an executor (seen by the driver as a Python worker
    traceback) becomes that error class again, so it is classified like a local one.
    """
    if isinstance(exc, LanceOpsError):
        return exc
    if isinstance(exc, FileNotFoundError):
        path = exc.filename if exc.filename is not None else exc
        return _chain(InputNotFoundError(f"input path does not exist: {path}"), exc)
    condition, params, first = _spark_error_parts(exc)
    if condition is not None and condition.split(".")[0] in _MISSING_CONDITIONS:
        what = params.get("path") or params.get("relationName") or first
        kind = "input path" if condition.startswith("PATH_NOT_FOUND") else "input table"
        return _chain(InputNotFoundError(f"{kind} does not exist: {what}"), exc)
    if _is_analysis_error(exc):
        return _chain(UsageError(first), exc)
    remote = _remote_lance_error(exc)
    return _chain(remote, exc) if remote is not None else exc


def _chain(new: BaseException, cause: BaseException) -> BaseException:
    new.__cause__ = cause
    return new


def _is_analysis_error(exc: BaseException) -> bool:
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # pragma: no cover - pyspark is there whenever a job runs
        return False
    return isinstance(exc, AnalysisException)


def _spark_error_parts(exc: BaseException) -> tuple[str | None, dict[str, str], str]:
    """(error condition, message parameters, first message line) of a PySpark error."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    if getter is None:
        return None, {}, first
    try:
        condition = getter()
        params = dict(exc.getMessageParameters() or {})  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the JVM may be gone; the message still says enough
        return None, {}, first
    return condition, {str(k): str(v) for k, v in params.items()}, first


def _remote_lance_error(exc: BaseException) -> LanceOpsError | None:
    """The last ``lance_ops.errors.X: message`` of an executor traceback inside ``exc``, as X."""
    from lance_ops import errors

    found = None
    for match in _REMOTE_ERROR_RE.finditer(str(exc)):
        cls = getattr(errors, match.group(1), None)
        if isinstance(cls, type) and issubclass(cls, LanceOpsError):
            found = (cls, match.group(2).strip())
    if found is None:
        return None
    cls, message = found
    try:
        return cls(message)
    except TypeError:  # a class built from parts, e.g. CorruptFileError(path, problem)
        try:
            return cls(*message.split(": ", 1))
        except TypeError:
            return None


def check_input_paths(spark: SparkSession, paths: Sequence[str]) -> None:
    """Raise InputNotFoundError naming the first of ``paths`` (no glob patterns) that does not
    exist, before Spark's reader logs a Java stack trace for it. Paths the check cannot
    resolve (unknown file systems, glob patterns) are left to Spark."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return
    try:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
    except Exception:  # noqa: BLE001 - no JVM context: let Spark report it
        return
    for path in paths:
        if any(ch in path for ch in "*?[{"):
            continue
        try:
            hpath = jvm.org.apache.hadoop.fs.Path(path)
            exists = hpath.getFileSystem(conf).exists(hpath)
        except Exception:  # noqa: BLE001 - e.g. no file system for the scheme: Spark says why
            continue
        if not exists:
            raise InputNotFoundError(f"input path does not exist: {path}")


def report_failure(exc: BaseException, *, idempotent: bool, stream: TextIO | None = None) -> int:
    """Print the cause as ONE line first (``lance-ops: error: <ErrorClass>: <message>``), then
    the trace; returns the exit code: EXIT_NOT_RETRYABLE or EXIT_RETRYABLE."""
    from lance_ops.errors import error_line, is_retryable

    stream = stream or sys.stderr
    err = translate_job_error(exc)
    retryable = is_retryable(err, idempotent=idempotent)
    stream.write(f"{ERROR_PREFIX}{error_line(err)}\n")
    stream.write(f"lance-ops: the job failed; {'a retry may succeed' if retryable else 'retrying cannot help'}"
                 f" (exit code {EXIT_RETRYABLE if retryable else EXIT_NOT_RETRYABLE}); trace follows\n")
    stream.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    stream.flush()
    return EXIT_RETRYABLE if retryable else EXIT_NOT_RETRYABLE


def _usage_error(parser: argparse.ArgumentParser) -> Callable[[str], NoReturn]:
    def error(message: str) -> NoReturn:
        sys.stderr.write(f"{ERROR_PREFIX}UsageError: {message}\n")
        parser.print_usage(sys.stderr)
        sys.exit(EXIT_NOT_RETRYABLE)

    return error


def run_job(name: str, parser: argparse.ArgumentParser, run: JobBody, argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run ``run(spark, args)`` in a SparkSession, print the JSON summary line.

    A failure prints its cause as the first line on stderr and the trace below it, and returns
    EXIT_NOT_RETRYABLE (2: usage errors, missing input or dataset, schema mismatch, refused
    stages ...) or EXIT_RETRYABLE (75: storage/network errors, lost commit races; an unknown
    commit outcome only with an idempotency key).
    """
    # argparse offers no hook for its usage-error exit but overriding error(); the parser is the
    # caller's, so its bound method is replaced (mypy forbids assigning to a method)
    parser.error = _usage_error(parser)  # type: ignore[method-assign, assignment]
    args = parser.parse_args(argv)
    with job_logging():
        return _run_job(name, args, run)


def _run_job(name: str, args: argparse.Namespace, run: JobBody) -> int:
    from lance_ops.io.options import parse_storage_option_args

    idempotent = bool(getattr(args, "idempotency_key", None))
    try:  # before Spark starts: a typo in a storage option name is a usage error
        parse_storage_option_args(getattr(args, "storage_option", None))
    except UsageError as exc:
        return report_failure(exc, idempotent=idempotent)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"lance-ops {name} {args.uri}").getOrCreate()
    try:
        summary = run(spark, args)
    except Exception as exc:  # noqa: BLE001 - reported as one line + trace, classified exit code
        code = report_failure(exc, idempotent=idempotent)  # while the JVM is up (Spark errors ask it)
        spark.stop()
        return code
    spark.stop()
    print_summary(summary)
    return 0
