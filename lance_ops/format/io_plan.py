"""I/O plans: generators that yield the byte ranges they need and are sent the bytes back.

Readers describe a column's read as such a generator so that many columns (and the pieces of one
column) can be merged into one round of coalesced ranged reads: :func:`gather_requests` runs plans
side by side, :func:`drive` runs one plan against a fetch function until it returns its result.
Shared by the 2.0 and the legacy readers.
"""
from __future__ import annotations

from typing import Any, Callable, Generator, Sequence, Union

import numpy as np

Requests = np.ndarray  # (k, 2) int64 array of (start, length)
#: the bytes of one round of requests, one entry per range (views into merged reads, or copies)
Fetched = list[Union[bytes, memoryview]]
#: an I/O plan: yields the byte ranges it needs, is sent their bytes, returns its result
Gen = Generator[Requests, Fetched, Any]
NO_REQUESTS = np.zeros((0, 2), dtype=np.int64)


def gather_requests(gens: Sequence[Gen]) -> Gen:
    """Run several I/O plans side by side: one merged request list per round; returns their results."""
    results: list[Any] = [None] * len(gens)
    pending: dict[int, Requests] = {}
    for i, g in enumerate(gens):
        try:
            pending[i] = next(g)
        except StopIteration as stop:
            results[i] = stop.value
    while pending:
        keys = list(pending)
        counts = [len(pending[k]) for k in keys]
        merged = np.concatenate([pending[k] for k in keys]) if keys else NO_REQUESTS
        data = yield merged
        pending = {}
        pos = 0
        for k, c in zip(keys, counts):
            part = data[pos : pos + c]
            pos += c
            try:
                pending[k] = gens[k].send(part)
            except StopIteration as stop:
                results[k] = stop.value
    return results


def drive(gen: Gen, fetch: Callable[[Requests], Fetched]) -> Any:
    """Run one I/O plan to its end, answering each round of requests with ``fetch``; its result."""
    try:
        requests = next(gen)
    except StopIteration as stop:
        return stop.value
    while True:
        data = fetch(requests)
        try:
            requests = gen.send(data)
        except StopIteration as stop:
            return stop.value
