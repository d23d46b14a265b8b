"""URI parsing, open_store dispatch, storage options and path helpers."""
from __future__ import annotations

import os

import pytest

from lance_ops.errors import StorageError, UnsupportedError
from lance_ops.io import LocalStore, S3Store, open_store, parse_uri
from lance_ops.io.s3.client import get_client, normalize_options


def test_local_paths(tmp_path):
    store, path = open_store(str(tmp_path / "ds.lance"))
    assert isinstance(store, LocalStore)
    assert path == str(tmp_path / "ds.lance")
    assert store.uri(path) == path
    assert open_store(f"file://{tmp_path}/ds.lance")[1] == path
    assert open_store(tmp_path / "ds.lance")[1] == path  # PathLike
    assert open_store("rel/dir")[1] == os.path.abspath("rel/dir")
    expected = os.path.join(path, "_versions", "1.manifest")
    assert store.join(path, "_versions", "/1.manifest") == expected


def test_file_uri_percent_decoded(tmp_path):
    assert open_store("file:///tmp/a%20b")[1] == "/tmp/a b"


@pytest.mark.parametrize(
    "uri,bucket,key",
    [
        ("s3://bkt/path/to/ds.lance", "bkt", "path/to/ds.lance"),
        ("s3://bkt/path/to/ds.lance/", "bkt", "path/to/ds.lance"),
        ("s3://bkt", "bkt", ""),
        ("s3a://bkt/x", "bkt", "x"),
        ("S3://bkt/x?y#z", "bkt", "x?y#z"),
    ],
)
def test_s3_uris(uri, bucket, key):
    store, path = open_store(uri, {"region": "us-east-1"})
    assert isinstance(store, S3Store)
    assert (store.bucket, path, store.ddb_table_name) == (bucket, key, None)
    assert store.uri(path) == (f"s3://{bucket}/{key}" if key else f"s3://{bucket}")
    assert store.join(path, "data", "f.lance") == "/".join(p for p in (key, "data", "f.lance") if p)


def test_s3_ddb_uri_keeps_table_name():
    store, path = open_store("s3+ddb://bkt/ds.lance?ddbTableName=commits", {"region": "us-east-1"})
    assert isinstance(store, S3Store)
    assert (store.bucket, path, store.ddb_table_name) == ("bkt", "ds.lance", "commits")
    assert store.uri(path) == "s3://bkt/ds.lance"
    with pytest.raises(StorageError, match="ddbTableName"):
        parse_uri("s3+ddb://bkt/ds.lance")


@pytest.mark.parametrize("uri", ["gs://bkt/x", "az://c/x", "abfss://c@a/x", "memory:///x", "hdfs://nn/x"])
def test_unknown_scheme_unsupported(uri):
    with pytest.raises(UnsupportedError) as info:
        open_store(uri)
    assert uri.split("://")[0] in str(info.value)
    assert "s3://" in str(info.value)


def test_s3_without_bucket():
    with pytest.raises(StorageError):
        parse_uri("s3:///key")


def test_storage_option_aliases():
    opts = normalize_options(
        {
            "AWS_REGION": "eu-west-1",
            "aws_endpoint": "http://h:1",
            "allow_http": True,
            "aws_access_key_id": "k",
            "aws_secret_access_key": "s",
            "aws_session_token": None,
            "aws_virtual_hosted_style_request": "false",
            "timeout": "30s",
        }
    )
    assert opts == {
        "region": "eu-west-1",
        "endpoint": "http://h:1",
        "allow_http": "true",
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "aws_virtual_hosted_style_request": "false",
    }
    assert normalize_options({"endpoint_url": "http://x"}) == {"endpoint": "http://x"}


def test_clients_cached_per_options():
    a = get_client({"region": "us-east-1", "endpoint": "http://127.0.0.1:1"})
    b = get_client({"aws_region": "us-east-1", "endpoint_url": "http://127.0.0.1:1"})
    c = get_client({"region": "us-west-2", "endpoint": "http://127.0.0.1:1"})
    assert a is b
    assert a is not c
    assert a.meta.endpoint_url == "http://127.0.0.1:1"
    assert a.meta.region_name == "us-east-1"


def test_unreachable_endpoint_is_storage_error():
    options = {
        "endpoint": "http://127.0.0.1:9",  # discard port: connection refused at once
        "aws_access_key_id": "a",
        "aws_secret_access_key": "b",
        "region": "us-east-1",
    }
    store, path = open_store("s3://bkt/x", options)
    with pytest.raises(StorageError) as info:
        store.read(path)
    assert "s3://bkt/x" in str(info.value)
    assert "read" in str(info.value)


def test_other_client_errors_name_operation_and_uri(moto_server, s3_bucket):
    store, root = open_store(s3_bucket, moto_server.storage_options)
    path = store.join(root, "self")
    store.put(path, b"x")
    with pytest.raises(StorageError) as info:
        store.copy(path, path)  # S3 refuses copying an object onto itself unchanged
    assert not isinstance(info.value, FileNotFoundError)
    assert "copy" in str(info.value) and store.uri(path) in str(info.value)


def test_missing_bucket_is_not_found(moto_server):
    store, path = open_store("s3://no-such-bucket-here/k", moto_server.storage_options)
    with pytest.raises(FileNotFoundError) as info:
        store.read(path)
    assert "s3://no-such-bucket-here/k" in str(info.value)
    with pytest.raises(FileNotFoundError, match="bucket not found"):
        list(store.list(path))  # a missing bucket is an error, unlike a missing prefix
