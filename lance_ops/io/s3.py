"""Object store on Amazon S3 (or any S3-compatible endpoint) through boto3.

Paths are keys inside one bucket. Ranged reads use HTTP Range headers (suffix ranges for file
tails), merged reads run concurrently on a small thread pool, put-if-absent is a conditional
``PutObject`` with ``If-None-Match: *``.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timezone
from typing import Any, Iterable, Iterator, Mapping

from botocore.exceptions import BotoCoreError, ClientError

from lance_ops.errors import (
    AlreadyExistsError,
    CorruptFileError,
    ObjectNotFoundError,
    StorageError,
)
from lance_ops.io import redact
from lance_ops.io.base import ObjectInfo, ObjectStore, ObjectWriter
from lance_ops.io.s3_client import error_code, get_client, http_status, map_error
from lance_ops.io.s3_writer import DEFAULT_PART_SIZE, S3Writer

_BOTO_ERRORS = (ClientError, BotoCoreError)
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
MAX_CONCURRENT_READS = 8
DELETE_BATCH = 1000  # the S3 DeleteObjects limit


def _dir_prefix(prefix: str) -> str:
    """Listing prefixes are directories: "a/b" lists "a/b/...", never "a/bc"."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def _as_body(data: bytes | bytearray | memoryview) -> bytes | bytearray:
    return data if isinstance(data, (bytes, bytearray)) else bytes(data)


def _info(obj: Mapping[str, Any]) -> ObjectInfo:
    return ObjectInfo(obj["Key"], int(obj["Size"]), obj["LastModified"].astimezone(timezone.utc))


class S3Store(ObjectStore):
    """One S3 bucket; paths are keys without a leading slash."""

    scheme = "s3"

    def __init__(
        self,
        bucket: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        ddb_table_name: str | None = None,
        coalesce_gap: int = 1024 * 1024,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> None:
        super().__init__()
        self.bucket = bucket
        self.storage_options = redact.RedactedOptions(storage_options or {})
        self.ddb_table_name = ddb_table_name
        self.coalesce_gap = coalesce_gap
        self.part_size = part_size
        self.delete_batch_size = DELETE_BATCH
        self.client = get_client(storage_options)

    def uri(self, path: str) -> str:
        key = path.lstrip("/")
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def _call(self, op: str, path: str, method: str, **kwargs: Any) -> Any:
        """Call a client method on ``path``'s key, mapping botocore errors."""
        try:
            return getattr(self.client, method)(Bucket=self.bucket, Key=path, **kwargs)
        except _BOTO_ERRORS as e:
            raise map_error(e, op, self.uri(path)) from e

    # --- reads -----------------------------------------------------------------------------
    def size(self, path: str) -> int:
        resp = self._call("size", path, "head_object")
        self.metrics.add(head_requests=1)
        return int(resp["ContentLength"])

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
        except ObjectNotFoundError:
            return False
        return True

    def _get(self, op: str, path: str, **kwargs: Any) -> tuple[dict[str, Any], bytes]:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=path, **kwargs)
            data = resp["Body"].read()
        except _BOTO_ERRORS as e:
            raise map_error(e, op, self.uri(path)) from e
        self.metrics.add(get_requests=1, bytes_read=len(data))
        return resp, data

    def read(self, path: str) -> bytes:
        return self._get("read", path)[1]

    def read_range(self, path: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"read_range: start and length must be >= 0, got {start}, {length}")
        if length == 0:
            return b""
        return self._read_span(path, start, start + length)

    def _read_span(self, path: str, start: int, end: int) -> bytes:
        try:
            _, data = self._get("read_range", path, Range=f"bytes={start}-{end - 1}")
        except StorageError as e:
            if isinstance(e.__cause__, ClientError) and http_status(e.__cause__) == 416:
                data = b""
            else:
                raise
        if len(data) != end - start:
            raise CorruptFileError(
                self.uri(path), f"range {start}..{end} is past the end of the object"
            )
        return data

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        if n < 0:
            raise ValueError(f"read_tail: n must be >= 0, got {n}")
        if n == 0:
            return b"", self.size(path)
        try:
            resp, data = self._get("read_tail", path, Range=f"bytes=-{n}")
        except StorageError as e:
            cause = e.__cause__
            if isinstance(cause, ClientError) and http_status(cause) == 416:
                return b"", self.size(path)  # empty object: no suffix is satisfiable
            raise
        content_range = resp.get("ContentRange") or ""
        if "/" in content_range:
            return data, int(content_range.rsplit("/", 1)[1])
        return data, int(resp.get("ContentLength", len(data)))  # 200: whole object

    def _read_spans(self, path: str, spans: list[tuple[int, int]]) -> list[bytes]:
        if len(spans) == 1:
            return [self._read_span(path, *spans[0])]
        workers = min(MAX_CONCURRENT_READS, len(spans))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="s3-read") as pool:
            return list(pool.map(lambda span: self._read_span(path, *span), spans))

    # --- writes ----------------------------------------------------------------------------
    def put(self, path: str, data: bytes) -> None:
        data = _as_body(data)
        self._call("put", path, "put_object", Body=data)
        self.metrics.add(put_requests=1, bytes_written=len(data))

    def put_if_absent(self, path: str, data: bytes) -> None:
        data = _as_body(data)
        try:
            self.client.put_object(Bucket=self.bucket, Key=path, Body=data, IfNoneMatch="*")
        except ClientError as e:
            self.metrics.add(put_requests=1)
            if error_code(e) in _CONFLICT_CODES or http_status(e) in (409, 412):
                raise AlreadyExistsError(
                    f"put_if_absent: {self.uri(path)} already exists ({error_code(e)})"
                ) from e
            raise map_error(e, "put_if_absent", self.uri(path)) from e
        except BotoCoreError as e:
            raise map_error(e, "put_if_absent", self.uri(path)) from e
        self.metrics.add(put_requests=1, bytes_written=len(data))

    def open_output(self, path: str) -> ObjectWriter:
        return S3Writer(self, path, self.part_size)

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy (single CopyObject, so objects up to 5 GiB)."""
        source = {"Bucket": self.bucket, "Key": src}
        try:
            self.client.copy_object(Bucket=self.bucket, Key=dst, CopySource=source)
        except _BOTO_ERRORS as e:
            raise map_error(e, "copy", f"{self.uri(src)} -> {self.uri(dst)}") from e
        self.metrics.add(put_requests=1)

    # --- listing and deletes ---------------------------------------------------------------
    def _pages(self, op: str, prefix: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, **kwargs):
                self.metrics.add(list_requests=1)
                yield page
        except _BOTO_ERRORS as e:
            raise map_error(e, op, self.uri(prefix)) from e

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for page in self._pages("list", _dir_prefix(prefix)):
            for obj in page.get("Contents", ()):
                if not obj["Key"].endswith("/"):  # skip "directory marker" objects
                    yield _info(obj)

    def list_dir(self, prefix: str) -> Iterator[ObjectInfo]:
        for page in self._pages("list_dir", _dir_prefix(prefix), Delimiter="/"):
            for obj in page.get("Contents", ()):
                if not obj["Key"].endswith("/"):
                    yield _info(obj)

    def delete(self, path: str) -> None:
        self._call("delete", path, "delete_object")
        self.metrics.add(delete_requests=1)

    def delete_many(self, paths: Iterable[str]) -> None:
        batch: list[str] = []
        for path in paths:
            batch.append(path)
            if len(batch) >= self.delete_batch_size:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        request = {"Objects": [{"Key": k} for k in keys], "Quiet": True}
        try:
            resp = self.client.delete_objects(Bucket=self.bucket, Delete=request)
        except _BOTO_ERRORS as e:
            raise map_error(e, "delete_many", self.uri(keys[0])) from e
        self.metrics.add(delete_requests=1)
        errors = [e for e in resp.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
        if errors:
            shown = ", ".join(f"{self.uri(e['Key'])}: {e.get('Code')}" for e in errors[:5])
            raise StorageError(f"S3 delete_many failed for {len(errors)} objects: {shown}")
