"""Streaming S3 upload: buffers one part, switches to a multipart upload when it fills.

Objects smaller than one part cost a single ``put_object``; larger ones are uploaded part by
part, so memory stays bounded by one part. Any failure aborts the multipart upload, leaving
nothing behind at the key.

The writer is given what it uses (a boto3 client, bucket, key, the object's URI for error
messages and the store's metrics), not the store itself, so this module does not import
:mod:`lance_ops.io.s3.store` back.
"""
from __future__ import annotations

import contextlib
from typing import Any

from lance_ops.errors import StorageError
from lance_ops.io.base import ObjectWriter
from lance_ops.io.metrics import StoreMetrics
from lance_ops.io.s3.client import CLIENT_ERRORS, map_error

DEFAULT_PART_SIZE = 8 * 1024 * 1024  # S3 needs >= 5 MiB for every part but the last


class S3Writer(ObjectWriter):
    """Writer returned by ``S3Store.open_output``: uploads to ``key`` in ``bucket`` via ``client``.

    ``uri`` names the object in error messages; every request is counted in ``metrics``.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        *,
        uri: str,
        metrics: StoreMetrics,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> None:
        super().__init__()
        self._client = client
        self._bucket = bucket
        self._key = key
        self._uri = uri
        self._metrics = metrics
        self._part_size = part_size
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    def _write(self, view: memoryview) -> None:
        pos = 0
        while pos < len(view):
            take = min(self._part_size - len(self._buffer), len(view) - pos)
            self._buffer += view[pos : pos + take]
            pos += take
            if len(self._buffer) >= self._part_size:
                self._upload_part()

    def _call(self, op: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, method)(Bucket=self._bucket, Key=self._key, **kwargs)
        except CLIENT_ERRORS as e:
            raise map_error(e, op, self._uri) from e

    def _upload_part(self) -> None:
        if self._upload_id is None:
            resp = self._call("open_output", "create_multipart_upload")
            self._upload_id = resp["UploadId"]
        number = len(self._parts) + 1
        body = bytes(self._buffer)
        resp = self._call(
            "upload_part", "upload_part", UploadId=self._upload_id, PartNumber=number, Body=body
        )
        self._parts.append({"ETag": resp["ETag"], "PartNumber": number})
        self._metrics.add(put_requests=1, bytes_written=len(body))
        self._buffer = bytearray()

    def _finish(self) -> None:
        if self._upload_id is None:
            body = bytes(self._buffer)
            self._call("put", "put_object", Body=body)
            self._metrics.add(put_requests=1, bytes_written=len(body))
            self._buffer = bytearray()
            return
        if self._buffer:
            self._upload_part()
        self._call(
            "complete_multipart_upload",
            "complete_multipart_upload",
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )
        self._metrics.add(put_requests=1)

    def _discard(self) -> None:
        self._buffer = bytearray()
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            with contextlib.suppress(StorageError):  # best effort: S3 expires abandoned uploads
                self._call("abort", "abort_multipart_upload", UploadId=upload_id)
                self._metrics.add(delete_requests=1)
