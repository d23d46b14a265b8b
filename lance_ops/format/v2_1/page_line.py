"""Pages of a 2.1+ file encoded in the background and written in order (ADR 0055).

The writer queues each batch's arrays in its field encoders at once (cheap), and a page that is due
becomes a job (``v2_1.encode.PageJob``) run on the shared encode pool. ``write_batch`` returns
without waiting for it: a page of one field that takes long (a string page's FSST compression)
no longer holds up the next batches, the pages of other fields and the final pages encoded at
``close()``, which now all run side by side. Pages are still written in the order the jobs were
given (batch by batch, field by field), so the file's bytes are the same as when every batch
waited for its pages.

Memory stays bounded: once more than a few jobs, or more than ``max_bytes`` of their input, are
waiting, the caller waits for the oldest one and writes it.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

from lance_ops.format.v2_1.encode import EncodedPageV21, PageJob

#: input bytes of waiting jobs above which the caller waits for the oldest one
MAX_PENDING_BYTES = 32 << 20
#: an upper bound of the bytes a job's pages can take in the file per byte of its input, plus a
#: fixed allowance per job (levels, chunk metadata, symbol tables, padding): see :meth:`bound`
_GROWTH = 64
_PER_JOB = 1 << 20


class PageLine:
    """Jobs run on ``pool``; ``write`` gets their pages in submission order, in the caller's thread."""

    def __init__(self, pool: ThreadPoolExecutor, write: Callable[[Sequence[EncodedPageV21]], None],
                 max_jobs: int, max_bytes: int = MAX_PENDING_BYTES) -> None:
        self._pool = pool
        self._write = write
        self._max_jobs = max(1, max_jobs)
        self._max_bytes = max_bytes
        self._pending: deque[tuple[Future, int]] = deque()
        self._bytes = 0

    def submit(self, jobs: Sequence[PageJob]) -> None:
        """Start ``jobs``, write the pages of the jobs already done, and wait for the oldest ones
        while too many are waiting."""
        for job in jobs:
            self._pending.append((self._pool.submit(job.run), job.nbytes))
            self._bytes += job.nbytes
        while self._pending and (self._pending[0][0].done() or len(self._pending) > self._max_jobs
                                 or (len(self._pending) > 1 and self._bytes > self._max_bytes)):
            self._write_oldest()

    def drain(self) -> None:
        """Wait for every job and write its pages (in order); a job's error is raised here."""
        while self._pending:
            self._write_oldest()

    def _write_oldest(self) -> None:
        fut, nbytes = self._pending[0]
        pages = fut.result()  # (a failed job stays pending: cancel() waits for the others)
        self._pending.popleft()
        self._bytes -= nbytes
        self._write(pages)

    def bound(self) -> int:
        """More than the bytes the waiting jobs' pages can add to the file (so that ``tell()``
        comparisons far from the limit need not wait for them)."""
        return self._bytes * _GROWTH + _PER_JOB * len(self._pending)

    def __len__(self) -> int:
        return len(self._pending)

    def cancel(self) -> None:
        """Drop every waiting job; returns once none of them still runs (nothing is written)."""
        pending, self._pending, self._bytes = list(self._pending), deque(), 0
        for fut, _ in pending:
            fut.cancel()
        for fut, _ in pending:
            if not fut.cancelled():
                fut.exception()
