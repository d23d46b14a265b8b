"""Parsing of dataset/file URIs into (kind of store, bucket, path inside the store).

Accepted: plain local paths, ``file://`` URIs, ``s3://`` (and ``s3a://``, as Spark writes them) and
``s3+ddb://bucket/key?ddbTableName=...`` (S3 data, DynamoDB commits). S3 keys are kept verbatim (no
percent-decoding, '?' and '#' are legal key characters) except for the ``s3+ddb`` query string.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlparse

from lance_ops.errors import StorageError, UnsupportedError

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://(.*)$", re.DOTALL)
_S3_SCHEMES = frozenset({"s3", "s3a"})
_DDB_SCHEME = "s3+ddb"
SUPPORTED = "local paths, file://, s3:// (s3a://) and s3+ddb://"


@dataclass(frozen=True)
class ParsedUri:
    """A URI split into its parts; ``path`` is what store methods take."""

    kind: str  # "local" or "s3"
    path: str  # absolute local path, or S3 key without leading/trailing "/"
    bucket: str | None = None
    ddb_table_name: str | None = None


def parse_uri(uri: str | os.PathLike[str]) -> ParsedUri:
    """Split ``uri``; raises UnsupportedError for unknown schemes, StorageError for bad S3 URIs."""
    text = os.fspath(uri)
    if not isinstance(text, str):
        raise TypeError(f"URI must be a str or path-like, got {type(uri).__name__}")
    match = _SCHEME_RE.match(text)
    if match is None:
        if text[:5].lower() == "file:":  # file:/abs/path (no authority)
            return ParsedUri("local", _file_uri_path(text))
        return ParsedUri("local", os.path.abspath(os.path.expanduser(text)))  # "~/x" as pylance
    scheme = match.group(1).lower()
    rest = match.group(2)
    if scheme == "file":
        return ParsedUri("local", _file_uri_path(text))
    if scheme in _S3_SCHEMES:
        bucket, key = _split_bucket(rest, text)
        return ParsedUri("s3", key, bucket)
    if scheme == _DDB_SCHEME:
        rest, _, query = rest.partition("?")
        tables = parse_qs(query).get("ddbTableName")
        if not tables or not tables[0]:
            raise StorageError(f"{text!r}: s3+ddb:// URIs need a ?ddbTableName=<table> query")
        bucket, key = _split_bucket(rest, text)
        return ParsedUri("s3", key, bucket, ddb_table_name=tables[0])
    raise UnsupportedError(
        f"unsupported URI scheme {scheme + '://'!r} in {text!r}; lance_ops supports {SUPPORTED}"
    )


def _split_bucket(rest: str, uri: str) -> tuple[str, str]:
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise StorageError(f"{uri!r}: S3 URI has no bucket name")
    return bucket, key.strip("/")


def _file_uri_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.netloc not in ("", "localhost"):
        raise UnsupportedError(f"{uri!r}: file:// URIs with a remote host are not supported")
    path = unquote(parsed.path)
    if not path:
        raise StorageError(f"{uri!r}: file URI has no path")
    return os.path.abspath(path)
