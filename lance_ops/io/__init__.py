"""Object stores (local files, S3) with ranged reads, put-if-absent, listing and deletes.

    store, path = open_store("s3://bucket/ds.lance", storage_options)
    footer, size = store.read_tail(store.join(path, "data", "x.lance"), 64 * 1024)
"""
from lance_ops.io.base import ObjectInfo, ObjectStore, ObjectWriter
from lance_ops.io.factory import open_store
from lance_ops.io.local import LocalStore
from lance_ops.io.metrics import StoreMetrics
from lance_ops.io.s3 import S3Store
from lance_ops.io.uri import ParsedUri, parse_uri

__all__ = [
    "ObjectInfo",
    "ObjectStore",
    "ObjectWriter",
    "LocalStore",
    "S3Store",
    "StoreMetrics",
    "ParsedUri",
    "open_store",
    "parse_uri",
]
