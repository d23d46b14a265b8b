"""Executor-side work of the Spark jobs: write a partition's fragments, run a compaction task.

These run inside Spark's Python workers. They only write new files and return metadata; they
never commit. A failed or speculative attempt therefore leaves at most unreferenced files
(orphans that ``cleanup_old_versions(delete_unverified=True)`` removes after its safety age),
and the driver, which receives exactly one result per partition, commits once.

The callables are classes defined in an importable module, so Spark pickles them by reference
plus a small state (URI, storage options, field protos as base64), not by value.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import pyarrow as pa

if TYPE_CHECKING:  # PySpark and the protos load only where the tasks run
    from pyspark import TaskContext

    from lance_ops._proto import table_pb2

#: Columns of the rows a write task returns to the driver.
FRAGMENT_ROWS_DDL = "partition int, seq int, attempt int, num_rows long, fragment string"
FRAGMENT_ROWS_SCHEMA = pa.schema([
    ("partition", pa.int32()), ("seq", pa.int32()), ("attempt", pa.int32()),
    ("num_rows", pa.int64()), ("fragment", pa.string()),
])


def task_context() -> TaskContext | None:
    """The running Spark task's ``TaskContext`` (None outside a Spark task or without pyspark)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - only inside Spark
        return None
    return TaskContext.get()


def write_partition(batches: Iterable[pa.RecordBatch], *, uri: str, storage_options: Mapping[str, Any] | None,
                    fields_b64: list[str], schema_metadata: Mapping[str, str], max_rows_per_file: int,
                    data_storage_version: str) -> list[table_pb2.DataFragment]:
    """Write ``batches`` as new uncommitted fragments of the dataset at ``uri``; returns the protos.

    Batches are cast (by column name) to the dataset schema given by ``fields_b64`` so that every
    task writes the same field ids and types.
    """
    from lance_ops.io import open_store
    from lance_ops.maintenance.staged_commit import fields_from_b64
    from lance_ops.schema import from_lance_fields
    from lance_ops.spark._common import cast_batches
    from lance_ops.table.write import write_fragments

    lance_fields = fields_from_b64(fields_b64)
    metadata = {k: v.encode("utf-8", "surrogateescape") for k, v in (schema_metadata or {}).items()}
    schema = from_lance_fields(lance_fields, metadata)
    store, base = open_store(uri, storage_options)
    reader = cast_batches(batches, schema)
    return write_fragments(reader, store, base, lance_fields, storage_options=storage_options,
                           max_rows_per_file=max_rows_per_file, version=data_storage_version)


class WriteFragmentsTask:
    """``mapInArrow`` function: one partition in, its fragment metadata out (one row per fragment)."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None, fields_b64: list[str],
                 schema_metadata: Mapping[str, str], max_rows_per_file: int, data_storage_version: str) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self.fields_b64 = list(fields_b64)
        self.schema_metadata = dict(schema_metadata or {})
        self.max_rows_per_file = int(max_rows_per_file)
        self.data_storage_version = data_storage_version

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lance_ops.table.commit.staging import fragment_to_b64

        ctx = task_context()
        fragments = write_partition(
            batches, uri=self.uri, storage_options=self.storage_options, fields_b64=self.fields_b64,
            schema_metadata=self.schema_metadata, max_rows_per_file=self.max_rows_per_file,
            data_storage_version=self.data_storage_version,
        )
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        n = len(fragments)
        yield pa.RecordBatch.from_arrays([
            pa.array([partition] * n, pa.int32()),
            pa.array(list(range(n)), pa.int32()),
            pa.array([attempt] * n, pa.int32()),
            pa.array([f.physical_rows for f in fragments], pa.int64()),
            pa.array([fragment_to_b64(f) for f in fragments], pa.string()),
        ], schema=FRAGMENT_ROWS_SCHEMA)


class CompactionTaskRunner:
    """RDD ``map`` function: a CompactionTask as JSON in, its RewriteResult as JSON out."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})

    def __call__(self, task_json: str) -> str:
        from lance_ops.maintenance.compaction import CompactionTask

        task = CompactionTask.from_json(task_json)
        return task.execute(self.uri, self.storage_options or None).to_json()
