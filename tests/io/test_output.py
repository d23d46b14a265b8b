"""open_output: streaming writes (multipart on S3), abort, and context-manager behaviour."""
from __future__ import annotations

import os

import pytest

CHUNK = 1024 * 1024


def test_small_output(sr):
    path = sr.p("small", "f.lance")
    with sr.store.open_output(path) as out:
        assert out.write(b"hello ") == 6
        out.write(memoryview(b"world"))
        assert out.tell() == 11
        assert not sr.store.exists(path)  # nothing visible before close
    assert out.closed
    assert sr.store.read(path) == b"hello world"


def test_empty_output(sr):
    path = sr.p("empty.lance")
    with sr.store.open_output(path):
        pass
    assert sr.store.read(path) == b""


def test_large_streaming_output(sr):
    """20 MiB in 1 MiB writes: three 8 MiB parts on S3, read back identical."""
    path = sr.p("big.lance")
    seed = os.urandom(CHUNK)
    chunks = [bytes([i]) + seed[1:] for i in range(20)]
    sr.store.metrics.reset()
    with sr.store.open_output(path) as out:
        for c in chunks:
            out.write(c)
        # one oversized write crossing several part boundaries
        out.write(b"".join(chunks[:9]))
    expected = b"".join(chunks) + b"".join(chunks[:9])
    assert out.tell() == len(expected)
    assert sr.store.size(path) == len(expected)
    assert sr.store.read(path) == expected
    if sr.store.scheme == "s3":
        # 29 MiB / 8 MiB -> 4 parts + the completion request
        assert sr.store.metrics.put_requests == 5
    assert sr.store.metrics.bytes_written == len(expected)


def test_small_output_on_s3_is_single_put(moto_server, s3_bucket):
    from lance_ops.io import open_store

    store, root = open_store(s3_bucket, moto_server.storage_options)
    with store.open_output(store.join(root, "x")) as out:
        out.write(b"z" * 1000)
    assert store.metrics.put_requests == 1
    uploads = moto_server.client().list_multipart_uploads(Bucket=store.bucket)
    assert not uploads.get("Uploads")


@pytest.mark.parametrize("size", [100, 9 * CHUNK])
def test_abort_leaves_nothing(sr, size):
    path = sr.p("aborted.lance")
    out = sr.store.open_output(path)
    out.write(b"a" * size)
    out.abort()
    out.abort()  # idempotent
    assert not sr.store.exists(path)
    assert list(sr.store.list(sr.root)) == []
    with pytest.raises(ValueError):
        out.write(b"more")
    _assert_no_multipart_uploads(sr)


def test_exception_in_with_block_aborts(sr):
    path = sr.p("boom.lance")
    with pytest.raises(RuntimeError):
        with sr.store.open_output(path) as out:
            out.write(b"b" * (9 * CHUNK))
            raise RuntimeError("writer failed")
    assert not sr.store.exists(path)
    assert list(sr.store.list(sr.root)) == []
    _assert_no_multipart_uploads(sr)


def test_abort_keeps_previous_object(sr):
    path = sr.p("keep.lance")
    sr.store.put(path, b"old")
    out = sr.store.open_output(path)
    out.write(b"new")
    out.abort()
    assert sr.store.read(path) == b"old"


def _assert_no_multipart_uploads(sr):
    if sr.store.scheme == "s3":
        uploads = sr.store.client.list_multipart_uploads(Bucket=sr.store.bucket)
        assert not uploads.get("Uploads")
