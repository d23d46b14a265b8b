"""Values kept for the life of a process and made afresh in a forked child.

Thread pools (their threads do not survive a fork) and process-wide bookkeeping such as the
files awaiting the durability barrier (a child must not fsync or refuse on its parent's behalf)
are made on first use in each process: :class:`PerProcess` holds one per process id.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generic, Optional, TypeVar

__all__ = ["PerProcess", "kept_pool"]

_T = TypeVar("_T")


class PerProcess(Generic[_T]):
    """The value ``make()`` returns, made once per process (again in a forked child)."""

    def __init__(self, make: Callable[[], _T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._pid: Optional[int] = None
        self._value: Optional[_T] = None

    def get(self) -> _T:
        """This process' value, made on first use (one per process even when threads race)."""
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    self._value = self._make()
                    self._pid = pid
        return self._value  # type: ignore[return-value]


def kept_pool(workers: int, name: str) -> PerProcess[ThreadPoolExecutor]:
    """A thread pool kept between calls (starting threads per call costs more than small jobs)."""
    return PerProcess(lambda: ThreadPoolExecutor(workers, thread_name_prefix=name))
