"""boto3 S3 clients built from pylance-style storage options, and botocore error mapping.

Option names follow pylance (``aws_access_key_id``, ``region``, ``endpoint``, ``allow_http`` ...);
anything not given falls back to boto3's usual chain (environment, ``AWS_ENDPOINT_URL``, profiles,
instance metadata). Clients are thread-safe and cached per distinct set of options.
"""
from __future__ import annotations

import http.client
import threading
from typing import Any, Mapping

import boto3
import urllib3.exceptions
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError as BotoConnectionError,
    HTTPClientError,
    IncompleteReadError,
)
from botocore.parsers import ResponseParserError

from lance_ops.errors import IncompleteResponseError, LanceOpsError, ObjectNotFoundError, StorageError
from lance_ops.io.options import STORAGE_OPTION_ALIASES, check_storage_options
from lance_ops.io import redact

_ALIASES = STORAGE_OPTION_ALIASES  # alias -> canonical pylance name
_USED = frozenset(
    {
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "region",
        "endpoint",
        "allow_http",
        "aws_virtual_hosted_style_request",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchBucket"})
_TRANSIENT_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling",
     "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
)
# A body cut short, a reset while streaming, a response cut inside the headers, a body that no
# longer parses: botocore wraps most of these, the others can escape from the raw stream.
_TRANSIENT_TRANSPORT = (
    HTTPClientError,
    BotoConnectionError,
    IncompleteReadError,
    ResponseParserError,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
)

#: every exception a client call can raise for a failed request (mapped by :func:`map_error`)
CLIENT_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError) + _TRANSIENT_TRANSPORT

_clients: dict[tuple[tuple[str, str], ...], Any] = {}
_clients_lock = threading.Lock()


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def normalize_options(storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """Canonical option names (lower-case, aliases resolved); options lance_ops does not use are
    dropped, and ones nobody knows (typos) are logged once, like pylance ignoring them."""
    check_storage_options(storage_options)
    out: dict[str, str] = {}
    for key, value in (storage_options or {}).items():
        if value is None:
            continue
        name = _ALIASES.get(key.lower(), key.lower())
        if name in _USED:
            out[name] = str(value) if not isinstance(value, bool) else str(value).lower()
    return out


def get_client(storage_options: Mapping[str, Any] | None = None, *, retries: bool = True) -> Any:
    """A cached, thread-safe boto3 S3 client for these storage options.

    ``retries=False`` gives a client that makes exactly one attempt per call, for callers that
    retry the whole request-and-read step themselves (see :mod:`lance_ops.io.retry`).
    """
    opts = normalize_options(storage_options)
    key = tuple(sorted(opts.items())) + ((("botocore_retries", "off"),) if not retries else ())
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _build_client(opts, retries)
            _clients[key] = client
        return client


def _build_client(opts: dict[str, str], retries: bool = True) -> Any:
    redact.protect(opts)  # before the first request: botocore's DEBUG logs carry the credentials
    session = boto3.session.Session(
        aws_access_key_id=opts.get("aws_access_key_id"),
        aws_secret_access_key=opts.get("aws_secret_access_key"),
        aws_session_token=opts.get("aws_session_token"),
        region_name=opts.get("region"),
    )
    config_kwargs: dict[str, Any] = {
        "max_pool_connections": 32,
        "retries": {"mode": "standard", "max_attempts": 4} if retries else {"total_max_attempts": 1},
    }
    if "aws_virtual_hosted_style_request" in opts:
        style = "virtual" if _truthy(opts["aws_virtual_hosted_style_request"]) else "path"
        config_kwargs["s3"] = {"addressing_style": style}
    endpoint = opts.get("endpoint")
    if endpoint:
        # S3-compatible servers often reject the newer default CRC checksums of botocore.
        config_kwargs["request_checksum_calculation"] = "when_required"
        config_kwargs["response_checksum_validation"] = "when_required"
    return session.client("s3", endpoint_url=endpoint or None, config=Config(**config_kwargs))


def error_code(err: ClientError) -> str:
    """The S3 error code of a ClientError ("NoSuchKey", "PreconditionFailed", "404", ...)."""
    return str(err.response.get("Error", {}).get("Code", ""))


def http_status(err: ClientError) -> int:
    """The HTTP status of a ClientError (0 when unknown)."""
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_transient(err: BaseException) -> bool:
    """Whether retrying the read that raised ``err`` may succeed (transport faults, 5xx, throttling)."""
    if isinstance(err, IncompleteResponseError):
        return True
    if isinstance(err, LanceOpsError):
        return False
    if isinstance(err, ClientError):
        status = http_status(err)
        return status >= 500 or status == 429 or error_code(err) in _TRANSIENT_CODES
    return isinstance(err, _TRANSIENT_TRANSPORT)


def map_error(err: BaseException, op: str, uri: str) -> LanceOpsError:
    """The lance_ops error for a botocore failure of ``op`` on ``uri``."""
    if isinstance(err, LanceOpsError):
        return err
    if isinstance(err, ClientError):
        code = error_code(err)
        message = err.response.get("Error", {}).get("Message", "") or str(err)
        if code in _NOT_FOUND_CODES or http_status(err) == 404:
            what = "bucket" if code == "NoSuchBucket" else "object"
            return ObjectNotFoundError(f"{op}: {what} not found: {uri}")
        return StorageError(f"S3 {op} {uri} failed: {code or http_status(err)}: {message}")
    if isinstance(err, BotoCoreError):
        return StorageError(f"S3 {op} {uri} failed: {err}")
    return StorageError(f"S3 {op} {uri} failed: {err!r}")
