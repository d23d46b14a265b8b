"""lance-ops: read, write and maintain Lance datasets from Python, Spark and Airflow.

    import lance_ops
    ds = lance_ops.write_dataset(table, "/data/events.lance")
    ds = lance_ops.dataset("s3://bucket/events.lance", storage_options={...})

Heavy submodules load lazily so ``import lance_ops`` stays cheap (Airflow imports DAG files often).
"""
from __future__ import annotations

from lance_ops._version import __version__

__all__ = ["__version__", "dataset", "write_dataset", "LanceDataset"]


def __getattr__(name: str):
    if name in ("dataset", "write_dataset", "LanceDataset"):
        from lance_ops import api

        return getattr(api, name)
    raise AttributeError(f"module 'lance_ops' has no attribute {name!r}")
