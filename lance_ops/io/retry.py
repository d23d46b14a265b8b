"""Bounded retries with exponential backoff for object-store reads.

botocore retries a request only until the response headers arrive; a body cut short, a reset
while streaming or a partial response that does not match the request surface after that. Reads
therefore run their whole request-and-validate step under a :class:`RetryPolicy`.

Storage options (pylance's names, so one dict serves both libraries):
``client_max_retries`` (retries after the first attempt, default 4, so 5 attempts) and
``client_retry_timeout`` (seconds one read may spend retrying, default 60).
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

T = TypeVar("T")

_log = logging.getLogger("lance_ops.io.retry")

#: the storage options read here (pylance accepts them too)
OPTION_NAMES = frozenset({"client_max_retries", "client_retry_timeout"})
DEFAULT_ATTEMPTS = 5
DEFAULT_TIMEOUT = 60.0
_MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one read is retried.

    ``attempts`` counts every try (the first included); waits grow as ``base_delay * 2**k``
    (capped at ``max_delay``, jittered down to half) and stop when ``timeout`` seconds would be
    exceeded.
    """

    attempts: int = DEFAULT_ATTEMPTS
    base_delay: float = 0.1
    max_delay: float = 2.0
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= _MAX_ATTEMPTS:
            raise ValueError(f"retry attempts must be between 1 and {_MAX_ATTEMPTS}, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0 or self.timeout < 0:
            raise ValueError("retry delays and timeout must be >= 0")

    @classmethod
    def from_options(cls, storage_options: Mapping[str, Any] | None) -> "RetryPolicy":
        """The policy given by ``client_max_retries`` / ``client_retry_timeout`` (defaults otherwise)."""
        opts = {str(k).lower(): v for k, v in (storage_options or {}).items() if v is not None}
        kwargs: dict[str, Any] = {}
        if "client_max_retries" in opts:
            retries = _number(opts["client_max_retries"], "client_max_retries", int)
            kwargs["attempts"] = retries + 1
        if "client_retry_timeout" in opts:
            kwargs["timeout"] = _number(opts["client_retry_timeout"], "client_retry_timeout", float)
        return cls(**kwargs)

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        full = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return full * random.uniform(0.5, 1.0)

    def run(
        self,
        what: str,
        fn: Callable[[], T],
        transient: Callable[[BaseException], bool],
        give_up: Callable[[BaseException, int], BaseException],
        on_retry: Callable[[], None] | None = None,
    ) -> T:
        """``fn()``, retried while it raises errors ``transient`` accepts and the budget lasts.

        When it stops, ``give_up(error, attempts_made)`` gives the exception to raise (chained to
        the last error); non-transient errors go through ``give_up`` at once.
        """
        began = time.monotonic()
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified just below
                if not transient(exc) or attempt >= self.attempts:
                    raise give_up(exc, attempt) from exc
                wait = self.delay(attempt)
                if time.monotonic() - began + wait > self.timeout:
                    raise give_up(exc, attempt) from exc
                _log.info("%s: attempt %d/%d failed (%s: %s); retrying in %.2fs",
                          what, attempt, self.attempts, type(exc).__name__, exc, wait)
                if on_retry is not None:
                    on_retry()
                time.sleep(wait)
                attempt += 1


def _number(value: Any, name: str, kind: type) -> Any:
    try:
        out = kind(str(value).strip().rstrip("s") if kind is float else value)
    except (TypeError, ValueError):
        raise ValueError(f"storage option {name}: expected a number, got {value!r}") from None
    if out < 0:
        raise ValueError(f"storage option {name}: must be >= 0, got {value!r}")
    return out
