"""Executor-side work of the ``optimize_indices`` Spark job: encode one slice of the new rows.

Defined in an importable module (not the job script, which runs as ``__main__``) so that Spark
pickles the callable by reference. The task reads only and writes nothing: a failed, retried or
speculative attempt leaves nothing behind.
"""
from __future__ import annotations

from typing import Any, Mapping


class EncodeSliceTask:
    """RDD ``map`` function: a slice document (JSON) in, ``(attempt number, encoded slice)`` out."""

    def __init__(self, uri: str, version: int, storage_options: Mapping[str, Any] | None) -> None:
        self.uri = uri
        self.version = int(version)
        self.storage_options = dict(storage_options or {})

    def __call__(self, task_json: str) -> tuple[int, bytes]:
        from lance_ops.maintenance.index_upkeep import distributed
        from lance_ops.spark._tasks import task_context

        data = distributed.encode_slice(task_json, uri=self.uri, version=self.version,
                                        storage_options=self.storage_options or None)
        ctx = task_context()
        return (ctx.attemptNumber() if ctx is not None else 0), data
