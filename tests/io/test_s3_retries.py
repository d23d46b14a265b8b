"""Retry policy of S3 reads: configuration, bounds, which failures are (not) retried; listing errors raise."""
from __future__ import annotations

import os
import time
import uuid

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, NoCredentialsError, ResponseStreamingError

from lance_ops.errors import CorruptFileError, IncompleteResponseError, ObjectNotFoundError, StorageError
from lance_ops.io import S3Store, open_store
from lance_ops.io.retry import RetryPolicy
from lance_ops.io.s3.client import is_transient
from tests.fixtures.faultproxy import fault_proxy  # noqa: F401 - fixture

DATA = bytes(range(256)) * 64


@pytest.fixture
def bucket(moto_server) -> str:
    name = f"retries-{uuid.uuid4().hex[:16]}"
    moto_server.client().create_bucket(Bucket=name)
    moto_server.client().put_object(Bucket=name, Key="k", Body=DATA)
    moto_server.client().put_object(Bucket=name, Key="empty", Body=b"")
    return name


def _store(bucket, moto_server, proxy, **options) -> S3Store:
    opts = dict(proxy.storage_options(moto_server.storage_options), **options)
    store, _ = open_store(f"s3://{bucket}/", opts)
    assert isinstance(store, S3Store)
    return store


def test_policy_defaults_and_storage_options():
    assert RetryPolicy.from_options(None) == RetryPolicy(attempts=5, timeout=60.0)
    policy = RetryPolicy.from_options({"client_max_retries": "2", "CLIENT_RETRY_TIMEOUT": "7s"})
    assert (policy.attempts, policy.timeout) == (3, 7.0)
    assert RetryPolicy.from_options({"client_max_retries": 0}).attempts == 1


@pytest.mark.parametrize("options, message", [
    ({"client_max_retries": "many"}, "client_max_retries: expected a number, got 'many'"),
    ({"client_max_retries": "-1"}, "client_max_retries: must be >= 0"),
    ({"client_retry_timeout": "soon"}, "client_retry_timeout: expected a number"),
    ({"client_max_retries": "1000"}, "retry attempts must be between 1 and 100, got 1001"),
])
def test_bad_retry_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy.from_options(options)


def test_backoff_grows_and_is_capped():
    policy = RetryPolicy(base_delay=0.1, max_delay=0.5)
    waits = [policy.delay(k) for k in range(1, 7)]
    assert 0.05 <= waits[0] <= 0.1 and 0.1 <= waits[1] <= 0.2 and 0.2 <= waits[2] <= 0.4
    assert all(0.25 <= w <= 0.5 for w in waits[3:])


def test_classification():
    def client_error(status, code):
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    assert is_transient(client_error(500, "InternalError"))
    assert is_transient(client_error(503, "SlowDown"))
    assert is_transient(client_error(400, "RequestTimeout"))
    assert not is_transient(client_error(404, "NoSuchKey"))
    assert not is_transient(client_error(403, "AccessDenied"))
    assert is_transient(ConnectionClosedError(endpoint_url="http://x"))
    assert is_transient(ResponseStreamingError(error="cut"))
    assert is_transient(ConnectionResetError())
    assert is_transient(IncompleteResponseError("short"))
    assert not is_transient(NoCredentialsError())
    assert not is_transient(CorruptFileError("x", "bad"))
    assert not is_transient(StorageError("permission denied"))


def test_client_max_retries_bounds_the_attempts(bucket, moto_server, fault_proxy):
    store = _store(bucket, moto_server, fault_proxy, client_max_retries="2")
    fault_proxy.inject("truncate", times=10, method="GET")
    with pytest.raises(StorageError, match=rf"S3 read s3://{bucket}/k failed: .*gave up after 3 attempts"):
        store.read("k")
    assert fault_proxy.stats()["requests"] == 3 and store.metrics.retries == 2


def test_retry_timeout_bounds_the_waiting(bucket, moto_server, fault_proxy):
    store = _store(bucket, moto_server, fault_proxy, client_retry_timeout="0")
    fault_proxy.inject("error_before", times=10, method="HEAD")
    began = time.monotonic()
    with pytest.raises(StorageError, match=f"S3 size s3://{bucket}/k failed: 503"):
        store.size("k")
    assert time.monotonic() - began < 2
    assert fault_proxy.stats()["requests"] == 1


def test_writes_keep_botocores_own_retries(bucket, moto_server, fault_proxy):
    store = _store(bucket, moto_server, fault_proxy)
    fault_proxy.inject("error_before", times=2, method="PUT")
    store.put("w", b"payload")
    assert moto_server.client().get_object(Bucket=bucket, Key="w")["Body"].read() == b"payload"
    assert fault_proxy.stats()["faults"] == {"error_before": 2}


def test_definite_answers_are_not_retried(bucket, moto_server, fault_proxy):
    store = _store(bucket, moto_server, fault_proxy)
    with pytest.raises(ObjectNotFoundError, match=f"read: object not found: s3://{bucket}/missing"):
        store.read("missing")
    assert not store.exists("missing")
    with pytest.raises(CorruptFileError, match="range 16000..17000 is past the end of the object"):
        store.read_range("k", 16_000, 1_000)  # the object has 16,384 bytes
    with pytest.raises(CorruptFileError, match="past the end"):
        store.read_range("k", 20_000, 10)  # 416 from the server
    assert store.read_tail("empty", 10) == (b"", 0)
    assert store.metrics.retries == 0
    assert fault_proxy.stats()["fault_total"] == 0


def test_server_ignoring_range_still_gives_the_asked_bytes(bucket, moto_server, fault_proxy):
    """A 200 with the whole object to a ranged GET is valid HTTP: the range is cut out locally."""
    store = _store(bucket, moto_server, fault_proxy)
    fault_proxy.inject("ignore_range", times=3)
    assert store.read_range("k", 100, 50) == DATA[100:150]
    assert store.read_tail("k", 10) == (DATA[-10:], len(DATA))
    assert store.read_ranges("k", [(5, 5), (9_000, 3)]) == [DATA[5:10], DATA[9_000:9_003]]
    assert fault_proxy.stats()["faults"] == {"ignore_range": 3}
    assert store.metrics.retries == 0 and store.metrics.bytes_read == 3 * len(DATA)


def test_a_local_listing_error_is_raised_not_skipped(tmp_path):
    """os.walk skips directories it cannot read; the local store raises instead (here: a
    directory whose path is longer than the OS allows, which even root cannot list)."""
    store, root = open_store(str(tmp_path / "deep"))
    store.put(store.join(root, "top.txt"), b"x")
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(24):  # 24 * 201 characters > PATH_MAX (4096)
            os.mkdir("d" * 200, dir_fd=fd)
            child = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    with pytest.raises(StorageError, match=f"list {root} failed: .*File name too long"):
        list(store.list(root))
