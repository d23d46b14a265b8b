"""``open_store``: from a URI and storage options to a store plus the path inside it."""
from __future__ import annotations

import os
from typing import Any, Mapping

from lance_ops.io.base import ObjectStore
from lance_ops.io.local import LocalStore
from lance_ops.io.s3 import S3Store
from lance_ops.io.uri import parse_uri


def open_store(
    uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> tuple[ObjectStore, str]:
    """The store holding ``uri`` and the location of ``uri`` inside it.

    Local paths and ``file://`` URIs give a LocalStore and an absolute path; ``s3://``,
    ``s3a://`` and ``s3+ddb://`` give an S3Store for the bucket and the key (no leading slash).
    ``storage_options`` are pylance-style S3 options (ignored for local paths).
    """
    parsed = parse_uri(uri)
    if parsed.kind == "local":
        return LocalStore(), parsed.path
    store = S3Store(parsed.bucket or "", storage_options, ddb_table_name=parsed.ddb_table_name)
    return store, parsed.path
