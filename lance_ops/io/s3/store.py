"""Object store on Amazon S3 (or any S3-compatible endpoint) through boto3.

Paths are keys inside one bucket. Ranged reads use HTTP Range headers (suffix ranges for file
tails), merged reads run concurrently on a small thread pool, put-if-absent is a conditional
``PutObject`` with ``If-None-Match: *``.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from botocore.exceptions import ClientError

from lance_ops.errors import (
    AlreadyExistsError,
    CorruptFileError,
    IncompleteResponseError,
    ObjectNotFoundError,
    StorageError,
)
from lance_ops.io import redact
from lance_ops.io.base import ObjectInfo, ObjectStore, ObjectWriter
from lance_ops.io.retry import RetryPolicy
from lance_ops.io.s3.client import (
    CLIENT_ERRORS,
    error_code,
    get_client,
    http_status,
    is_transient,
    map_error,
)
from lance_ops.io.s3.writer import DEFAULT_PART_SIZE, S3Writer

_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
MAX_CONCURRENT_READS = 8
DELETE_BATCH = 1000  # the S3 DeleteObjects limit
LIST_PAGE_SIZE = 1000  # the S3 ListObjectsV2 maximum


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Response:
    """One GET answer whose body was read completely (as many bytes as Content-Length said)."""

    status: int
    data: bytes
    content_range: str | None


def _content_range(resp: _Response, uri: str) -> tuple[int, int, int | None]:
    """``(first, last, total)`` of a 206's ``Content-Range: bytes first-last/total`` header.

    A 206 without the header, or with one that does not parse or disagrees with the body
    length, is a transport fault (IncompleteResponseError), never an empty or short object.
    """
    text = (resp.content_range or "").strip()
    if resp.status != 206 or not text:
        raise IncompleteResponseError(
            f"S3 GET {uri}: status {resp.status} without Content-Range to a ranged read"
        )
    try:
        unit, _, rest = text.partition(" ")
        span, _, total_text = rest.partition("/")
        first_text, _, last_text = span.partition("-")
        first, last = int(first_text), int(last_text)
        total = None if total_text.strip() == "*" else int(total_text)
    except ValueError:
        raise IncompleteResponseError(f"S3 GET {uri}: unreadable Content-Range {text!r}") from None
    if unit != "bytes" or last < first or last - first + 1 != len(resp.data) or (
        total is not None and last >= total
    ):
        raise IncompleteResponseError(
            f"S3 GET {uri}: Content-Range {text!r} does not match a {len(resp.data)}-byte body"
        )
    return first, last, total


def _empty_page(page: Mapping[str, Any]) -> bool:
    return not page.get("Contents") and not page.get("CommonPrefixes") and not page.get("IsTruncated")


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
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__()
        self.bucket = bucket
        self.storage_options = redact.RedactedOptions(storage_options or {})
        self.ddb_table_name = ddb_table_name
        self.coalesce_gap = coalesce_gap
        self.part_size = part_size
        self.delete_batch_size = DELETE_BATCH
        self.list_page_size = LIST_PAGE_SIZE
        self.empty_listing_checks = 1
        self.client = get_client(storage_options)
        #: single-attempt client for reads, which retry request and body together
        self.read_client = get_client(storage_options, retries=False)
        self.retry = retry if retry is not None else RetryPolicy.from_options(storage_options)

    def uri(self, path: str) -> str:
        """``s3://bucket/key`` for ``path`` (the bucket URI itself for an empty path)."""
        key = path.lstrip("/")
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def _call(self, op: str, path: str, method: str, **kwargs: Any) -> Any:
        """Call a client method on ``path``'s key, mapping botocore errors."""
        try:
            return getattr(self.client, method)(Bucket=self.bucket, Key=path, **kwargs)
        except CLIENT_ERRORS as e:
            raise map_error(e, op, self.uri(path)) from e

    # --- reads -----------------------------------------------------------------------------
    # Every read runs request, body and validation as one step under ``self.retry`` with the
    # single-attempt client, so a body cut short is retried like a 503 and attempts stay bounded.
    def _retrying(self, op: str, path: str, fn: Callable[[], _T]) -> _T:
        uri = self.uri(path)

        def give_up(err: BaseException, attempts: int) -> BaseException:
            mapped = map_error(err, op, uri)
            if attempts > 1 and type(mapped) in (StorageError, IncompleteResponseError):
                return type(mapped)(f"{mapped} (gave up after {attempts} attempts)")
            return mapped

        return self.retry.run(
            f"S3 {op} {uri}", fn, is_transient, give_up, lambda: self.metrics.add(retries=1)
        )

    def _head(self, path: str) -> dict[str, Any]:
        resp = self.read_client.head_object(Bucket=self.bucket, Key=path)
        self.metrics.add(head_requests=1)
        if "ContentLength" not in resp:  # headers lost (response cut after the status line)
            raise IncompleteResponseError(f"S3 HEAD {self.uri(path)}: answer without Content-Length")
        return resp

    def size(self, path: str) -> int:
        """Content-Length of a HEAD request, retried on transient failures."""
        resp = self._retrying("size", path, lambda: self._head(path))
        return int(resp["ContentLength"])

    def exists(self, path: str) -> bool:
        """HEAD probe: False only on a definite 404; transport failures raise StorageError."""
        try:
            self.size(path)
        except ObjectNotFoundError:
            return False
        return True

    def _get_once(self, path: str, range_header: str | None) -> _Response:
        kwargs = {"Range": range_header} if range_header else {}
        resp = self.read_client.get_object(Bucket=self.bucket, Key=path, **kwargs)
        body = resp["Body"]
        try:
            data = body.read()
        finally:
            body.close()
        self.metrics.add(get_requests=1, bytes_read=len(data))
        status = int(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        length = resp.get("ContentLength")
        if length is None or int(length) != len(data):  # S3 always sends Content-Length
            raise IncompleteResponseError(
                f"S3 GET {self.uri(path)}: got {len(data)} of {length} bytes (status {status})"
            )
        return _Response(status, data, resp.get("ContentRange"))

    def read(self, path: str) -> bytes:
        """The whole object from one GET (retried as a whole); a non-200 answer is an error."""
        def attempt() -> bytes:
            resp = self._get_once(path, None)
            if resp.status != 200:
                raise IncompleteResponseError(
                    f"S3 GET {self.uri(path)}: status {resp.status} to a whole-object read"
                )
            return resp.data

        return self._retrying("read", path, attempt)

    def read_range(self, path: str, start: int, length: int) -> bytes:
        """Exactly ``length`` bytes from ``start`` with an HTTP Range GET.

        CorruptFileError if the object ends before ``start + length``.
        """
        if start < 0 or length < 0:
            raise ValueError(f"read_range: start and length must be >= 0, got {start}, {length}")
        if length == 0:
            return b""
        return self._read_span(path, start, start + length)

    def _read_span(self, path: str, start: int, end: int) -> bytes:
        uri = self.uri(path)

        def attempt() -> bytes:
            try:
                resp = self._get_once(path, f"bytes={start}-{end - 1}")
            except ClientError as e:
                if http_status(e) == 416:
                    raise CorruptFileError(uri, f"range {start}..{end} is past the end of the object") from e
                raise
            if resp.status == 200:  # the server ignored Range and sent the whole object
                data = resp.data[start:end]
            else:
                first, last, total = _content_range(resp, uri)
                if first != start or (last + 1 != end and (total is None or last + 1 != total)):
                    raise IncompleteResponseError(
                        f"S3 GET {uri}: asked for bytes {start}-{end - 1}, "
                        f"got Content-Range {resp.content_range!r}"
                    )
                data = resp.data
            if len(data) != end - start:
                raise CorruptFileError(uri, f"range {start}..{end} is past the end of the object")
            return data

        return self._retrying("read_range", path, attempt)

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        """The last ``n`` bytes and the object size, from one suffix-range GET.

        An empty object (416 to a suffix range) is answered with a HEAD for its size.
        """
        if n < 0:
            raise ValueError(f"read_tail: n must be >= 0, got {n}")
        if n == 0:
            return b"", self.size(path)
        uri = self.uri(path)

        def attempt() -> tuple[bytes, int]:
            try:
                resp = self._get_once(path, f"bytes=-{n}")
            except ClientError as e:
                if http_status(e) == 416:  # empty object: no suffix is satisfiable
                    return b"", -1
                raise
            if resp.status == 200:  # the whole object
                return resp.data[-n:], len(resp.data)
            first, last, total = _content_range(resp, uri)
            if total is None or last != total - 1 or last - first + 1 != min(n, total):
                raise IncompleteResponseError(
                    f"S3 GET {uri}: asked for the last {n} bytes, "
                    f"got Content-Range {resp.content_range!r}"
                )
            return resp.data, total

        data, total = self._retrying("read_tail", path, attempt)
        if total < 0:
            return b"", self.size(path)
        return data, total

    def _read_spans(self, path: str, spans: list[tuple[int, int]]) -> list[bytes]:
        if len(spans) == 1:
            return [self._read_span(path, *spans[0])]
        workers = min(MAX_CONCURRENT_READS, len(spans))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="s3-read") as pool:
            return list(pool.map(lambda span: self._read_span(path, *span), spans))

    # --- writes ----------------------------------------------------------------------------
    def put(self, path: str, data: bytes) -> None:
        """Upload the whole object with one PutObject (S3 puts are atomic)."""
        body = _as_body(data)
        self._call("put", path, "put_object", Body=body)
        self.metrics.add(put_requests=1, bytes_written=len(body))

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Conditional PutObject (``If-None-Match: *``); AlreadyExistsError if the key exists.

        S3 answers a lost race with 412 or 409, both mapped to AlreadyExistsError.
        """
        body = _as_body(data)
        try:
            self.client.put_object(Bucket=self.bucket, Key=path, Body=body, IfNoneMatch="*")
        except ClientError as e:
            self.metrics.add(put_requests=1)
            if error_code(e) in _CONFLICT_CODES or http_status(e) in (409, 412):
                raise AlreadyExistsError(
                    f"put_if_absent: {self.uri(path)} already exists ({error_code(e)})"
                ) from e
            raise map_error(e, "put_if_absent", self.uri(path)) from e
        except CLIENT_ERRORS as e:
            raise map_error(e, "put_if_absent", self.uri(path)) from e
        self.metrics.add(put_requests=1, bytes_written=len(body))

    def open_output(self, path: str) -> ObjectWriter:
        """A multipart-upload writer; the object appears when the upload completes on close."""
        return S3Writer(
            self.client, self.bucket, path,
            uri=self.uri(path), metrics=self.metrics, part_size=self.part_size,
        )

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy (single CopyObject, so objects up to 5 GiB)."""
        source = {"Bucket": self.bucket, "Key": src}
        try:
            self.client.copy_object(Bucket=self.bucket, Key=dst, CopySource=source)
        except CLIENT_ERRORS as e:
            raise map_error(e, "copy", f"{self.uri(src)} -> {self.uri(dst)}") from e
        self.metrics.add(put_requests=1)

    # --- listing and deletes ---------------------------------------------------------------
    def _pages(self, op: str, prefix: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """ListObjectsV2 pages, each retried on its own (a failure never ends a listing early).

        An empty answer is asked again ``empty_listing_checks`` times before it is passed on:
        one faulty hop can answer a listing with a valid but empty body. That only makes a
        false "nothing there" rarer; callers that act on absence must probe (``exists``).
        """
        token: str | None = None
        while True:
            args = dict(kwargs, Bucket=self.bucket, Prefix=prefix, MaxKeys=self.list_page_size)
            if token:
                args["ContinuationToken"] = token
            page = self._retrying(op, prefix, lambda: self._list_once(args))
            checks = self.empty_listing_checks if token is None else 0
            while checks > 0 and _empty_page(page):
                checks -= 1
                page = self._retrying(op, prefix, lambda: self._list_once(args))
            yield page
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                raise StorageError(
                    f"S3 {op} {self.uri(prefix)} failed: truncated listing without a continuation token"
                )

    def _list_once(self, args: dict[str, Any]) -> dict[str, Any]:
        page = self.read_client.list_objects_v2(**args)
        self.metrics.add(list_requests=1)
        if "IsTruncated" not in page:  # an empty or cut body parses to no fields at all
            raise IncompleteResponseError(
                f"S3 list {self.uri(args['Prefix'])}: listing answer without IsTruncated"
            )
        return page

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object below the directory ``prefix``, recursively, page by page.

        Directory-marker keys (ending in "/") are skipped.
        """
        for page in self._pages("list", _dir_prefix(prefix)):
            for obj in page.get("Contents", ()):
                if not obj["Key"].endswith("/"):  # skip "directory marker" objects
                    yield _info(obj)

    def list_dir(self, prefix: str) -> Iterator[ObjectInfo]:
        """The objects directly inside the directory ``prefix`` (a "/"-delimited listing)."""
        for page in self._pages("list_dir", _dir_prefix(prefix), Delimiter="/"):
            for obj in page.get("Contents", ()):
                if not obj["Key"].endswith("/"):
                    yield _info(obj)

    def delete(self, path: str) -> None:
        """DeleteObject on ``path``; S3 does not fail for a missing key."""
        self._call("delete", path, "delete_object")
        self.metrics.add(delete_requests=1)

    def delete_many(self, paths: Iterable[str]) -> None:
        """Delete ``paths`` with DeleteObjects in batches of ``delete_batch_size`` keys.

        Missing keys are ignored; any other per-key failure raises StorageError.
        """
        batch: list[str] = []
        for path in paths:
            batch.append(path)
            if len(batch) >= self.delete_batch_size:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: Sequence[str]) -> None:
        request = {"Objects": [{"Key": k} for k in keys], "Quiet": True}
        try:
            resp = self.client.delete_objects(Bucket=self.bucket, Delete=request)
        except CLIENT_ERRORS as e:
            raise map_error(e, "delete_many", self.uri(keys[0])) from e
        self.metrics.add(delete_requests=1)
        errors = [e for e in resp.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
        if errors:
            shown = ", ".join(f"{self.uri(e['Key'])}: {e.get('Code')}" for e in errors[:5])
            raise StorageError(f"S3 delete_many failed for {len(errors)} objects: {shown}")
