"""The ``write_batch`` argument rule shared by the file writers (pylance's ``batch=`` keyword)."""
from __future__ import annotations

import warnings
from typing import TypeVar

T = TypeVar("T")


def batch_argument(batch: T | None, data: T | None) -> T:
    """``batch`` (pylance's keyword), or the earlier lance_ops keyword ``data`` with a DeprecationWarning."""
    if data is not None:
        warnings.warn("write_batch(data=...) is deprecated: pass batch= (pylance's keyword)", DeprecationWarning,
                      stacklevel=3)
        batch = data
    if batch is None:
        raise TypeError("write_batch() missing required argument: 'batch'")
    return batch
