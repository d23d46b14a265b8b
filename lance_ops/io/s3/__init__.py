"""The S3 object store: ``client`` (boto3 client, option names, error mapping), ``writer``
(multipart output), ``store`` (:class:`S3Store`, ranged reads with retries, put-if-absent)."""
from lance_ops.io.s3.store import S3Store

__all__ = ["S3Store"]
