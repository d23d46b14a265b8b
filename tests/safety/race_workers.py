"""Processes of the race test (tests/safety/test_race.py); module-level so 'spawn' can import them.

Every worker loops until ``deadline`` (a ``time.time()`` value, or a shared ``multiprocessing.Value``
holding one, which the test may move later while the workers run) and writes one JSON line per
operation to its own log: ``{"op", "status": "ok" | "rejected" | "unknown" | "bug", ...}``.
"ok" means acknowledged; "rejected" a LanceOpsError other than CommitOutcomeUnknownError
(nothing may have been committed); "unknown" a CommitOutcomeUnknownError; "bug" anything else.
"""
from __future__ import annotations

import json
import os
import random
import time
import traceback
from datetime import timedelta

import numpy as np
import pyarrow as pa

BASE_ROWS = 2_000
BASE_FILE_ROWS = 250
APPEND_ROWS = 50
#: appender ``w`` writes ids from ``APPEND_ID0 * (w + 1)`` on
APPEND_ID0 = 10_000_000
#: base rows are deleted in chunks of this many (chunk ``c``: ids ``[c * n, (c + 1) * n)``)
BASE_DELETE_CHUNK = 5


def rows(ids: np.ndarray, tag: str) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "tag": pa.array([tag] * len(ids)), "value": ids.astype(np.float64) * 0.25})


def append_ids(writer: int, seq: int) -> np.ndarray:
    start = APPEND_ID0 * (writer + 1) + seq * APPEND_ROWS
    return np.arange(start, start + APPEND_ROWS, dtype=np.int64)


def _classify(exc: BaseException) -> str:
    from lance_ops.errors import CommitOutcomeUnknownError, LanceOpsError

    if isinstance(exc, CommitOutcomeUnknownError):
        return "unknown"
    return "rejected" if isinstance(exc, LanceOpsError) else "bug"


class _Log:
    def __init__(self, path: str):
        self._f = open(path, "a", encoding="utf-8")

    def write(self, **entry) -> None:
        self._f.write(json.dumps(entry) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())


def _deadline(deadline) -> float:
    """The current deadline: a float, or the value of a shared ``multiprocessing.Value``."""
    return float(deadline.value) if hasattr(deadline, "value") else float(deadline)


def _run(log_path: str, deadline, one) -> None:
    log = _Log(log_path)
    i = 0
    while time.time() < _deadline(deadline):
        try:
            entry = one(i)
        except Exception as exc:  # noqa: BLE001 - classified and logged
            entry = {"status": _classify(exc), "error": f"{type(exc).__name__}: {exc}",
                     "trace": traceback.format_exc()[-3000:]}
            entry.update(getattr(exc, "_race_entry", {}))
        if entry is not None:
            log.write(i=i, **entry)
        i += 1


def _tagged(exc: BaseException, **entry) -> BaseException:
    exc._race_entry = entry  # type: ignore[attr-defined]
    return exc


def appender(uri, storage_options, writer: int, deadline: float, log_path: str) -> None:
    import lance_ops

    def one(seq):
        ids = append_ids(writer, seq)
        try:
            ds = lance_ops.write_dataset(rows(ids, f"w{writer}"), uri, mode="append",
                                         storage_options=storage_options)
        except Exception as exc:
            raise _tagged(exc, op="append", writer=writer, seq=seq)
        return {"op": "append", "writer": writer, "seq": seq, "status": "ok", "version": ds.version}

    _run(log_path, deadline, one)


def _acked_appends(log_dir: str) -> list[tuple[int, int]]:
    out = []
    for name in os.listdir(log_dir):
        if not name.startswith("append"):
            continue
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if e.get("status") == "ok":
                    out.append((e["writer"], e["seq"]))
    return out


def deleter(uri, storage_options, seed: int, deadline: float, log_path: str, log_dir: str) -> None:
    """Deletes base chunks and whole acknowledged append batches, each target at most once."""
    import lance_ops

    rnd = random.Random(seed)
    chunks = list(range(BASE_ROWS // BASE_DELETE_CHUNK))
    rnd.shuffle(chunks)
    done_batches: set[tuple[int, int]] = set()

    def one(i):
        if i % 2 == 0 and chunks:
            c = chunks.pop()
            lo, hi = c * BASE_DELETE_CHUNK, (c + 1) * BASE_DELETE_CHUNK
            target = {"kind": "base", "chunk": c}
        else:
            candidates = [b for b in _acked_appends(log_dir) if b not in done_batches]
            if not candidates:
                time.sleep(0.05)
                return None
            b = rnd.choice(candidates)
            done_batches.add(b)
            ids = append_ids(*b)
            lo, hi = int(ids[0]), int(ids[-1]) + 1
            target = {"kind": "batch", "writer": b[0], "seq": b[1]}
        try:
            ds = lance_ops.dataset(uri, storage_options=storage_options)
            out = ds.delete(f"id >= {lo} AND id < {hi}")
        except Exception as exc:
            raise _tagged(exc, op="delete", target=target, lo=lo, hi=hi)
        return {"op": "delete", "target": target, "lo": lo, "hi": hi, "status": "ok", "version": ds.version,
                "deleted": out["num_deleted_rows"]}

    _run(log_path, deadline, one)


def compactor(uri, storage_options, deadline: float, log_path: str) -> None:
    import lance_ops

    def one(i):
        try:
            ds = lance_ops.dataset(uri, storage_options=storage_options)
            # bounded work per run: a compaction must finish within cleanup's minimum age
            metrics = ds.optimize.compact_files(target_rows_per_fragment=1_000, max_source_fragments=16,
                                                conflict_retries=10)
        except Exception as exc:
            raise _tagged(exc, op="compact")
        time.sleep(0.2)
        return {"op": "compact", "status": "ok", "version": metrics.get("version"),
                "fragments_removed": metrics.get("fragments_removed")}

    _run(log_path, deadline, one)


def cleaner(uri, storage_options, deadline: float, log_path: str, min_age: float) -> None:
    import lance_ops
    from lance_ops.maintenance.cleanup import cleanup_old_versions

    def one(i):
        try:
            ds = lance_ops.dataset(uri, storage_options=storage_options)
            stats = cleanup_old_versions(ds, timedelta(0), min_superseded_age=timedelta(seconds=min_age))
        except Exception as exc:
            raise _tagged(exc, op="cleanup")
        time.sleep(0.1)
        return {"op": "cleanup", "status": "ok", "old_versions": stats.old_versions,
                "failed_deletes": stats.failed_deletes}

    _run(log_path, deadline, one)
