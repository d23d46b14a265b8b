"""lance-ops: read, write and maintain Lance datasets from Python, Spark and Airflow.

    import lance_ops
    ds = lance_ops.write_dataset(table, "/data/events.lance")
    ds = lance_ops.dataset("s3://bucket/events.lance", storage_options={...})

Heavy submodules load lazily so ``import lance_ops`` stays cheap (Airflow imports DAG files often).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lance_ops._version import __version__

if TYPE_CHECKING:  # what __getattr__ below hands out, for type checkers
    from lance_ops.api import BlobColumn, LanceDataset, dataset, write_dataset

__all__ = ["__version__", "dataset", "write_dataset", "LanceDataset", "BlobColumn"]


def __getattr__(name: str) -> object:
    """Load ``dataset``, ``write_dataset``, ``LanceDataset`` and ``BlobColumn`` from :mod:`lance_ops.api` on first use.

    PEP 562 hook: keeps ``import lance_ops`` from importing pyarrow and the table layer.
    """
    if name in ("dataset", "write_dataset", "LanceDataset", "BlobColumn"):
        from lance_ops import api

        return getattr(api, name)
    raise AttributeError(f"module 'lance_ops' has no attribute {name!r}")
