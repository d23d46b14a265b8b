"""The top-level entry points ``lance_ops.dataset`` and ``lance_ops.write_dataset``."""
from __future__ import annotations

from typing import Any, Mapping

from lance_ops.table.dataset import LanceDataset
from lance_ops.table.write import write_dataset


def dataset(uri: str, version: int | str | None = None, storage_options: Mapping[str, Any] | None = None) -> LanceDataset:
    """Open the dataset at ``uri`` at ``version`` (an int, a tag name, or None for the latest)."""
    return LanceDataset(str(uri), version, dict(storage_options or {}))


__all__ = ["LanceDataset", "dataset", "write_dataset"]
