"""Request counters kept by every object store.

Tests (and benchmarks) use them to prove that a reader skipped pages or that ranged reads were
coalesced; they are cheap, thread-safe and can be reset between measurements.
"""
from __future__ import annotations

import threading

_COUNTERS = (
    "get_requests",
    "bytes_read",
    "head_requests",
    "put_requests",
    "bytes_written",
    "list_requests",
    "delete_requests",
    "retries",  # read attempts repeated after a transient failure (S3)
)


class StoreMetrics:
    """Thread-safe request/byte counters of one store object."""

    __slots__ = ("_lock",) + _COUNTERS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            for name in _COUNTERS:
                setattr(self, name, 0)

    def add(self, **deltas: int) -> None:
        """Add to one or more counters atomically, e.g. ``add(get_requests=1, bytes_read=n)``."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, int]:
        """The current counter values as a plain dict."""
        with self._lock:
            return {name: getattr(self, name) for name in _COUNTERS}

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.snapshot().items())
        return f"StoreMetrics({inner})"
