"""Hook through which a persisted row-id index (lance_ops.maintenance) answers row-id lookups.

Kept tiny and import-free so the table layer does not depend on the maintenance layer: the
maintenance package registers its lookup function here when it is imported.
"""
from __future__ import annotations

from typing import Callable

_lookup: Callable | None = None


def register(fn: Callable) -> None:
    """Install ``fn(dataset, fragments, row_ids) -> (positions, offsets) | None``."""
    global _lookup
    _lookup = fn


def lookup_index(dataset, fragments, row_ids):
    """Answer from the persisted index when one matches this version, else None."""
    return None if _lookup is None else _lookup(dataset, fragments, row_ids)
