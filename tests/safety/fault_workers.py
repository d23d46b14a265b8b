"""Worker processes of the fault-proxy soak (module level so 'spawn' can import them).

Each worker loops until its deadline (a ``time.time()`` value, or a shared ``multiprocessing.Value``
holding one, which the test may move later while the workers run) and appends one JSON line per finished operation to its
log file: what it did (batch ids, predicate), the outcome ("ok", "error" = failed and known not
committed, "unknown" = CommitOutcomeUnknownError, "crash" = not a LanceOpsError), the version
it reports, how long it took and how many S3 read retries it made. A line is written only
after the call returned, so an "ok" line is an acknowledged operation.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import pyarrow as pa

BATCH_ROWS = 40
BATCH_KEY = "soak.batch"


class _RetryCounter(logging.Handler):
    """Counts the retry records lance_ops.io logs (one per repeated S3 read)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _retry_counter() -> _RetryCounter:
    handler = _RetryCounter()
    logger = logging.getLogger("lance_ops.io.retry")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    return handler


class _Withdrawals(logging.Handler):
    """Counts manifests the commit loop withdrew as orphans (ADR 0024): the soak's lost-append path."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "withdrawing it" in record.getMessage():
            self.count += 1


_WITHDRAWALS = _Withdrawals()
logging.getLogger("lance_ops.table.commit.loop").addHandler(_WITHDRAWALS)


def batch_ids(worker: int, seq: int) -> tuple[int, int]:
    """The id range ``[lo, hi)`` of a worker's seq-th batch (disjoint across workers)."""
    lo = 1_000_000 * (worker + 1) + seq * BATCH_ROWS
    return lo, lo + BATCH_ROWS


def batch_table(worker: int, seq: int) -> pa.Table:
    lo, hi = batch_ids(worker, seq)
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table({"id": ids, "worker": pa.array([worker] * len(ids), pa.int32()),
                     "payload": pa.array([f"w{worker}-{i}" for i in ids.tolist()])})


def _uuid_of(result: Any) -> str | None:
    """The transaction uuid of an acknowledged operation (evidence for a failed soak), if known."""
    if isinstance(result, dict):
        return result.get("uuid")
    try:
        txn = result.transaction  # a dataset returned by write_dataset: the manifest it committed
    except Exception:  # noqa: BLE001 - evidence only; a failed read must not fail the worker
        return None
    return txn.uuid if txn is not None else None


class _Log:
    def __init__(self, path: str, retries: _RetryCounter) -> None:
        self._file = open(path, "a", encoding="utf-8")
        self._retries = retries

    def run(self, entry: dict[str, Any], fn: Callable[[], Any]) -> tuple[str, Any]:
        """Run ``fn``, log the entry with its outcome; returns (outcome, result)."""
        from lance_ops.errors import CommitOutcomeUnknownError, LanceOpsError

        before, began = self._retries.count, time.monotonic()
        entry["_withdrawn"] = _WITHDRAWALS.count
        result: Any = None
        try:
            result = fn()
            outcome = "ok"
        except CommitOutcomeUnknownError as exc:
            outcome, entry["error"] = "unknown", f"{type(exc).__name__}: {exc}"
        except LanceOpsError as exc:
            outcome, entry["error"] = "error", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported, the test fails on it
            outcome, entry["error"] = "crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        withdrawn_before = entry.pop("_withdrawn", 0)
        entry.update(outcome=outcome, seconds=round(time.monotonic() - began, 3),
                     retries=self._retries.count - before, withdrawn=_WITHDRAWALS.count - withdrawn_before)
        if outcome == "ok":
            entry["version"] = result.get("version") if isinstance(result, dict) else getattr(result, "version", None)
            entry["uuid"] = _uuid_of(result)
            entry["result"] = (result if isinstance(result, dict)
                               else dataclasses.asdict(result) if dataclasses.is_dataclass(result) else None)
        self._file.write(json.dumps(entry, default=str) + "\n")
        self._file.flush()
        return outcome, result


def _deadline(deadline: Any) -> float:
    """The current deadline: a float, or the value of a shared ``multiprocessing.Value``."""
    return float(deadline.value) if hasattr(deadline, "value") else float(deadline)


def append_worker(uri: str, options: dict, worker: int, deadline: Any, log_path: str,
                  delete_own: bool = False, pause: float = 0.5) -> None:
    """Append batches until the deadline; with ``delete_own``, then delete the odd ids of each."""
    import lance_ops

    log = _Log(log_path, _retry_counter())
    seq = 0
    while time.time() < _deadline(deadline):
        lo, hi = batch_ids(worker, seq)
        tag = f"w{worker}-{seq}"
        outcome, _ = log.run(
            {"op": "append", "batch": tag, "lo": lo, "hi": hi},
            lambda: lance_ops.write_dataset(batch_table(worker, seq), uri, mode="append",
                                            storage_options=options,
                                            transaction_properties={BATCH_KEY: tag}),
        )
        if delete_own and outcome == "ok" and time.time() < _deadline(deadline):
            predicate = f"id >= {lo} AND id < {hi} AND id % 2 = 1"

            def delete() -> dict:
                ds = lance_ops.dataset(uri, storage_options=options)
                out = ds.delete(predicate)
                return dict(out, version=ds.version, uuid=_uuid_of(ds))

            log.run({"op": "delete", "batch": tag, "lo": lo, "hi": hi, "predicate": predicate}, delete)
        seq += 1
        time.sleep(pause)


def _compact(ds: Any) -> dict:
    metrics = ds.optimize.compact_files(target_rows_per_fragment=400)
    if metrics.get("version") is not None:
        metrics["uuid"] = _uuid_of(ds)  # the dataset moved to the version it committed
    return metrics


def maintenance_worker(uri: str, options: dict, deadline: Any, log_path: str,
                       older_than_s: float) -> None:
    """Compact and clean up old versions in turns until the deadline."""
    import lance_ops

    log = _Log(log_path, _retry_counter())
    turn = 0
    while time.time() < _deadline(deadline):
        if turn % 2 == 0:
            log.run({"op": "compact"},
                    lambda: _compact(lance_ops.dataset(uri, storage_options=options)))
        else:
            log.run({"op": "cleanup"},
                    lambda: lance_ops.dataset(uri, storage_options=options).cleanup_old_versions(
                        older_than=timedelta(seconds=older_than_s)))
        turn += 1
        time.sleep(0.5)
