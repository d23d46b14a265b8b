"""Writer processes for the concurrency tests (module-level so 'spawn' can import them)."""
from __future__ import annotations

import traceback

import numpy as np
import pyarrow as pa


def rows(start: int, count: int, writer: str) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"id": ids, "writer": pa.array([writer] * count), "value": ids.astype(np.float64) * 0.5})


def append_worker(uri, storage_options, start, count, name, barrier, results, library="lance_ops"):
    try:
        table = rows(start, count, name)
        barrier.wait(timeout=60)
        if library == "pylance":
            import lance

            ds = lance.write_dataset(table, uri, mode="append", storage_options=storage_options)
            results.put((name, "ok", ds.version, None))
        else:
            import lance_ops

            ds = lance_ops.write_dataset(table, uri, mode="append", storage_options=storage_options)
            results.put((name, "ok", ds.version, None))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        from lance_ops.errors import CommitError

        kind = "conflict" if isinstance(exc, CommitError) else "error"
        results.put((name, kind, None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def delete_worker(uri, storage_options, predicate, name, barrier, results, library="lance_ops"):
    try:
        if library == "pylance":
            import lance

            ds = lance.dataset(uri, storage_options=storage_options)
            barrier.wait(timeout=60)
            out = ds.delete(predicate)
            results.put((name, "ok", ds.version, out))
        else:
            import lance_ops

            ds = lance_ops.dataset(uri, storage_options=storage_options)
            barrier.wait(timeout=60)
            out = ds.delete(predicate)
            results.put((name, "ok", ds.version, out))
    except Exception as exc:  # noqa: BLE001
        from lance_ops.errors import CommitError

        kind = "conflict" if isinstance(exc, CommitError) else "error"
        results.put((name, kind, None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def crash_before_publish(uri, storage_options, start, count):
    """Write data files and the transaction file, then die before the manifest is published."""
    import os

    import lance_ops
    from lance_ops.table.commit import loop as commit

    def die(*args, **kwargs):
        os._exit(17)

    commit._publish = die
    lance_ops.write_dataset(rows(start, count, "crasher"), uri, mode="append", storage_options=storage_options)
