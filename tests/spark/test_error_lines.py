"""Spark jobs report failures as one cause line first, the trace below, and a classified exit code.

One real spark-submit run (missing input path); the other cases run the jobs' entry points and the
translation of Spark's exceptions in-process (the shared session) to keep JVM starts few.
"""
from __future__ import annotations

import io
import os
import re

import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import CommitOutcomeUnknownError, InputNotFoundError, SchemaMismatchError, StorageError
from lance_ops.spark import _common
from lance_ops.spark._common import EXIT_NOT_RETRYABLE, EXIT_RETRYABLE, report_failure, translate_job_error
from tests.spark._support import have_spark, spark_submit

needs_spark = pytest.mark.skipif(not have_spark(), reason="pyspark and a JVM are needed")
_ERROR_LINE = re.compile(r"error|exception", re.IGNORECASE)


def first_error_line(text: str) -> str:
    return next(line for line in text.splitlines() if _ERROR_LINE.search(line))


@pytest.mark.slow
@needs_spark
def test_missing_input_path_is_one_line_and_not_retryable(tmp_path):
    """Also the failed job of tests/spark/test_submit.py (one JVM start for both): an overwrite whose
    input is missing fails and leaves the dataset at its previous version, with no staging left."""
    import lance

    uri = str(tmp_path / "ds.lance")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(1000), pa.int64())}), uri)
    missing = str(tmp_path / "raw" / "day=2024-01-01")
    proc = spark_submit("ingest.py", ["--path", missing, "--uri", uri, "--mode", "overwrite",
                                      "--idempotency-key", "missing-input-1"])
    assert proc.returncode == EXIT_NOT_RETRYABLE, proc.stdout[-3000:]
    # spark-submit (client mode) carries the Python driver's stderr on its stdout
    driver = proc.stdout
    assert first_error_line(driver) == f"lance-ops: error: InputNotFoundError: input path does not exist: {missing}"
    lines = driver.splitlines()
    at = lines.index(first_error_line(driver))
    assert lines[at + 1].startswith("lance-ops: the job failed; retrying cannot help (exit code 2)")
    assert lines[at + 2] == "Traceback (most recent call last):"  # the trace follows the cause
    # no Java stack trace for a missing path anywhere (Spark's reader never saw it)
    assert "\tat org.apache" not in proc.stderr and "\tat org.apache" not in driver
    assert lance_ops.dataset(uri).version == 1
    ds = lance.dataset(uri)  # pylance: the overwrite never happened
    assert ds.version == 1 and ds.count_rows() == 1000
    assert not os.path.exists(os.path.join(uri, "_staging"))


def test_usage_errors_exit_2_before_spark_starts(capsys):
    from lance_ops.spark import ingest

    with pytest.raises(SystemExit) as info:
        ingest.main(["--path", "/x", "--uri", "/y", "--max-rows-per-file", "many"])
    assert info.value.code == EXIT_NOT_RETRYABLE
    err = capsys.readouterr().err
    assert err.splitlines()[0] == ("lance-ops: error: UsageError: argument --max-rows-per-file: "
                                   "invalid int value: 'many'")


def test_unknown_storage_option_is_refused_before_spark_starts(capsys):
    from lance_ops.spark import compact, ingest

    assert ingest.main(["--path", "/x", "--uri", "s3://b/y.lance", "--storage-option", "aws_regoin=eu-west-1"]) \
        == EXIT_NOT_RETRYABLE
    err = capsys.readouterr().err
    assert err.splitlines()[0] == ("lance-ops: error: UsageError: unknown storage option 'aws_regoin' "
                                   "(did you mean 'region'?)")
    secret = "wJalrXUtnFEMI/K7MDENG"
    assert compact.main(["--uri", "s3://b/y.lance", "--storage-option", f"aws_secret_access_key{secret}"]) \
        == EXIT_NOT_RETRYABLE
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("lance-ops: error: UsageError: --storage-option expects KEY=VALUE")
    assert secret not in err


def test_exit_codes_and_secret_free_kv_errors():
    def code(exc, idempotent=False):
        out = io.StringIO()
        rc = report_failure(exc, idempotent=idempotent, stream=out)
        return rc, out.getvalue().splitlines()[0]

    assert code(StorageError("S3 get x failed: 503")) == (EXIT_RETRYABLE, "lance-ops: error: StorageError: S3 get x failed: 503")
    assert code(SchemaMismatchError("missing ['ts']"))[0] == EXIT_NOT_RETRYABLE
    assert code(FileNotFoundError(2, "No such file or directory", "/plans/p.json")) == (
        EXIT_NOT_RETRYABLE, "lance-ops: error: InputNotFoundError: input path does not exist: /plans/p.json")
    # an unknown commit outcome is retried only when the job has an idempotency key
    assert code(CommitOutcomeUnknownError("v7?"))[0] == EXIT_NOT_RETRYABLE
    assert code(CommitOutcomeUnknownError("v7?"), idempotent=True)[0] == EXIT_RETRYABLE
    with pytest.raises(lance_ops.errors.UsageError) as info:
        _common.parse_kv(["aws_secret_access_keyAKIASECRETVALUE"], "storage_option")
    assert "SECRET" not in str(info.value) and "expects KEY=VALUE" in str(info.value)


@pytest.mark.slow
@needs_spark
def test_spark_exceptions_translate_to_lance_errors(spark, tmp_path):
    from pyspark.errors import AnalysisException

    glob = str(tmp_path / "nothing-here" / "*.parquet")
    with pytest.raises(AnalysisException) as info:
        spark.read.parquet(glob)
    err = translate_job_error(info.value)
    assert isinstance(err, InputNotFoundError) and "nothing-here" in str(err)
    with pytest.raises(AnalysisException) as info:
        spark.table("no_such_db.no_such_table")
    err = translate_job_error(info.value)
    assert isinstance(err, InputNotFoundError) and "no_such_table" in str(err)

    def fail(batches):
        from lance_ops.errors import SchemaMismatchError as Mismatch

        for _ in batches:
            raise Mismatch("/lake/ds.lance: field 'ts' has type string, the dataset has timestamp[us]")
        yield from ()

    with pytest.raises(Exception) as info:
        spark.range(4).mapInArrow(fail, "id long").collect()
    err = translate_job_error(info.value)
    assert type(err) is SchemaMismatchError
    assert str(err) == "/lake/ds.lance: field 'ts' has type string, the dataset has timestamp[us]"
    assert report_failure(info.value, idempotent=True, stream=io.StringIO()) == EXIT_NOT_RETRYABLE
