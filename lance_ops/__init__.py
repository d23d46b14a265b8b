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
    from lance_ops.table.dataset import Scanner as LanceScanner
    from lance_ops.table.fragment import LanceFragment
    from lance_ops.table.fragment_meta import FragmentMetadata

__all__ = ["__version__", "dataset", "write_dataset", "LanceDataset", "BlobColumn", "LanceFragment",
           "FragmentMetadata", "LanceScanner"]

#: pylance's top-level names that live below the face: name -> (module, attribute)
_BELOW = {"LanceFragment": ("lance_ops.table.fragment", "LanceFragment"),
          "FragmentMetadata": ("lance_ops.table.fragment_meta", "FragmentMetadata"),
          "LanceScanner": ("lance_ops.table.dataset", "Scanner")}


def __getattr__(name: str) -> object:
    """Load ``dataset``, ``write_dataset``, ``LanceDataset`` and ``BlobColumn`` from :mod:`lance_ops.api`
    (and pylance's ``LanceFragment``, ``FragmentMetadata``, ``LanceScanner``) on first use.

    PEP 562 hook: keeps ``import lance_ops`` from importing pyarrow and the table layer.
    """
    if name in ("dataset", "write_dataset", "LanceDataset", "BlobColumn"):
        from lance_ops import api

        return getattr(api, name)
    if name in _BELOW:
        import importlib

        module, attr = _BELOW[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'lance_ops' has no attribute {name!r}")
