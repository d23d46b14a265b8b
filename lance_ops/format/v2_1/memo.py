"""What the 2.1+ readers of one dataset object derive from metadata bytes, kept for each other.

A dataset's small files repeat the same schema message and, often, byte-identical metadata
regions (footer, offset tables, FileDescriptor, column metadata) and page encodings. A memo is a
plain dict the table layer keeps per dataset object (``LanceDataset.cache``) and hands to every
reader it opens; a reader opened on its own gets a fresh one. Nothing here is process-wide, and
every key holds the bytes (and file size) its value is a pure function of: a replaced or changed
file can never be served what another file's bytes gave (ADR 0043).
"""
from __future__ import annotations

from typing import Any, Hashable, MutableMapping, Optional

__all__ = ["Memo", "new_memo", "recall", "remember"]

#: a memo: a dict of per-kind dicts (``LanceDataset.cache(...)`` or :func:`new_memo`)
Memo = MutableMapping[Hashable, Any]

#: entries kept per kind (oldest dropped first)
LIMITS = {"layouts": 64, "files": 1024, "protos": 4096}


def new_memo() -> Memo:
    """An empty memo (for a reader opened outside a dataset)."""
    return {}


def _kind(memo: Memo, kind: str) -> dict:
    got = memo.get(kind)
    if got is None:
        got = memo.setdefault(kind, {})  # atomic: concurrent first uses share one dict
    return got


def recall(memo: Memo, kind: str, key: Hashable) -> Optional[Any]:
    """The value remembered under ``key`` in ``kind``, or None."""
    return _kind(memo, kind).get(key)


def remember(memo: Memo, kind: str, key: Hashable, value: Any) -> Any:
    """Remember ``value`` under ``key`` (bounded by :data:`LIMITS`); returns ``value``."""
    table = _kind(memo, kind)
    if len(table) >= LIMITS.get(kind, 1024):
        try:
            del table[next(iter(table))]
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread
            pass
    table[key] = value
    return value
