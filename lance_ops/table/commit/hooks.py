"""Hooks the table layer calls and a higher layer installs, declared here (ADR 0006).

The table layer may not import the maintenance layer, so behaviour that lives there is plugged in
explicitly by whoever composes the layers (the public face ``lance_ops/api.py``), never as a side
effect of importing a module. Today there is one hook: the persisted row-id index
(``lance_ops.maintenance.rowid_index.lookup``), which ``take_by_row_id`` asks first.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

#: ``fn(dataset, fragments, row_ids) -> (positions in fragments, offsets) | None`` (None: fall back)
RowIdLookup = Callable[[Any, Sequence[Any], np.ndarray], Optional[Tuple[np.ndarray, np.ndarray]]]

_row_id_index: RowIdLookup | None = None


def register_row_id_index(fn: RowIdLookup | None) -> RowIdLookup | None:
    """Install ``fn`` as the row-id index lookup (None removes it); returns the previous one."""
    global _row_id_index
    previous, _row_id_index = _row_id_index, fn
    return previous


def row_id_index() -> RowIdLookup | None:
    """The installed row-id index lookup, or None when none is installed."""
    return _row_id_index


def lookup_index(dataset: Any, fragments: Sequence[Any], row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Answer from the persisted index when one matches this version, else None."""
    return None if _row_id_index is None else _row_id_index(dataset, fragments, row_ids)
