"""BTREE remap: map the row addresses of ``page_data.lance``, drop deleted rows, rebuild the lookup.

A pylance 14.0.2 BTREE segment is two Lance files under ``_indices/<uuid>/``:

* ``page_data.lance``: ``values`` (the indexed column's type) and ``ids`` (uint64 row addresses),
  sorted by value, read in pages of ``batch_size`` rows;
* ``page_lookup.lance``: one row per page, ``min`` / ``max`` (the page's first and last value),
  ``null_count`` (uint32), ``page_idx`` (uint32); schema metadata ``batch_size`` and
  ``range_partitioned``.

The remap keeps the value order, maps every ``id`` through the
:class:`~lance_ops.maintenance.index_remap.AddressMap` (ids of fragments not rewritten stay),
drops the rows whose address did not survive, cuts pages of at most ``batch_size`` rows again and
recomputes the lookup, copying both files' schemas and metadata. The files are written in the Lance
file version pylance writes index files in (the dataset's data storage version; 2.0 datasets get
2.0 files). On a stable-row-id dataset pylance's BTREE (index_version 1) still stores row
addresses, so it is remapped the same way; an index_version-0 BTREE there stores row ids, which
survive a rewrite: it keeps its files ("keep").
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from lance_ops.errors import UnsupportedError
from lance_ops.format.registry import LanceFileWriter, open_file_reader
from lance_ops.format.version import FileVersion
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap import codecs
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest

DATA_FILE = "page_data.lance"
LOOKUP_FILE = "page_lookup.lance"
DEFAULT_BATCH_SIZE = 4096


def _read(request: RemapRequest, name: str) -> tuple[pa.Table, pa.Schema, FileVersion]:
    """A file of the old segment: its table, its schema (with metadata) and its file version."""
    return read_file(request.store, request.old_dir, name)


def read_file(store: ObjectStore, folder: str, name: str) -> tuple[pa.Table, pa.Schema, FileVersion]:
    """``<folder>/<name>`` (a BTREE file) whole: its table, its schema (with metadata) and its file version."""
    reader = open_file_reader(store.join(folder, name), store=store)
    table = reader.read_all()
    return table, reader.schema, reader.version


def read_header(store: ObjectStore, folder: str, name: str) -> tuple[pa.Schema, FileVersion]:
    """``<folder>/<name>``'s schema (with metadata) and file version, without reading its rows."""
    reader = open_file_reader(store.join(folder, name), store=store)
    return reader.schema, reader.version


def _write(request: RemapRequest, name: str, table: pa.Table, schema: pa.Schema, version: FileVersion,
           batch_rows: int | None = None) -> tuple[str, int]:
    """Write ``_indices/<new uuid>/<name>`` with ``schema``'s fields and metadata; (name, size)."""
    options = getattr(request.dataset, "storage_options", None) or None
    return write_file(request.store, request.new_dir, name, table, schema, version, options, batch_rows)


def write_file(store: ObjectStore, folder: str, name: str, table: pa.Table, schema: pa.Schema,
               version: FileVersion, storage_options: Mapping[str, Any] | None = None,
               batch_rows: int | None = None) -> tuple[str, int]:
    """Write ``<folder>/<name>`` (a BTREE file) with ``schema``'s fields and metadata, handing
    the writer ``batch_rows`` rows at a time (pylance writes ``page_data`` in lookup pages; the
    writer cuts its Lance pages by size, at a multiple of ``batch_rows``); (name, size)."""
    path = store.join(folder, name)
    writer = LanceFileWriter(store.uri(path), schema.remove_metadata(), version=version,
                             storage_options=dict(storage_options) if storage_options else None)
    try:
        for key, value in (schema.metadata or {}).items():
            writer.add_schema_metadata(key.decode(), value.decode())
        table = table.cast(schema.remove_metadata())
        if table.num_rows:
            for batch in table.to_batches(max_chunksize=batch_rows or table.num_rows):
                writer.write_batch(batch)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return name, store.size(path)


def page_lookup(values: pa.Array, batch_size: int, schema: pa.Schema) -> pa.Table:
    """The lookup of ``values`` (sorted, nulls first as pylance sorts them) cut into pages of
    ``batch_size`` rows: each page's first and last value (pylance's ``min`` / ``max``: null when
    the page starts / ends with nulls), its null count and its index."""
    n = len(values)
    starts = np.arange(0, n, batch_size, dtype=np.int64)
    ends = np.minimum(starts + batch_size, n)
    value_type = schema.field("min").type
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool) if n else np.ones(0, bool)
    nulls_before = np.concatenate([[0], np.cumsum(~valid)])
    return pa.table({
        "min": values.take(pa.array(starts)).cast(value_type),
        "max": values.take(pa.array(ends - 1)).cast(value_type),
        "null_count": pa.array((nulls_before[ends] - nulls_before[starts]).astype(np.uint32)),
        "page_idx": pa.array(np.arange(len(starts), dtype=np.uint32)),
    })


def remap_btree(request: RemapRequest) -> RemapOutcome:
    """Remap one BTREE segment (see the module docstring)."""
    if request.stable_row_ids and request.index.index_version < 1:
        return RemapOutcome("keep")
    data, data_schema, old_version = _read(request, DATA_FILE)
    _, lookup_schema, _ = _read(request, LOOKUP_FILE)
    if "ids" not in data.column_names and "row_ids" in data.column_names:
        # the layout of older pylance versions (v0.1 files, ``row_ids``, no lookup metadata):
        # pylance 14.0.2 remaps it into today's layout, so do we
        data = data.rename_columns(["ids" if c == "row_ids" else c for c in data.column_names])
        data_schema = pa.schema([data_schema.field("values"), pa.field("ids", pa.uint64(), nullable=False)])
        lookup_schema = lookup_schema.with_metadata(
            {b"range_partitioned": b"false", b"batch_size": str(DEFAULT_BATCH_SIZE).encode(),
             **(lookup_schema.metadata or {})})
    meta = {k.decode(): v.decode() for k, v in (lookup_schema.metadata or {}).items()}
    if meta.get("range_partitioned", "false").lower() != "false":
        raise UnsupportedError(
            f"{request.store.uri(request.old_dir)}: BTREE index {request.index.name!r} is range-partitioned, "
            "which lance_ops cannot remap yet; nothing was committed")
    batch_size = int(meta.get("batch_size", DEFAULT_BATCH_SIZE))
    ids = data.column("ids").to_numpy()
    mapped, keep = request.addresses.apply(ids)
    values = data.column("values").combine_chunks().filter(pa.array(keep))
    new_data = pa.table({"values": values, "ids": pa.array(mapped[keep], pa.uint64())})
    lookup = page_lookup(values, batch_size, lookup_schema)
    version = codecs.index_file_version(request.dataset, old_version)
    files = [
        _write(request, DATA_FILE, new_data, data_schema, version, batch_size),
        _write(request, LOOKUP_FILE, lookup, lookup_schema, version),
    ]
    return RemapOutcome("remap", sorted(files))


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`remap_btree` does, for dry runs (pylance 14.0.2's BTREE stores addresses)."""
    return "remap"


setattr(remap_btree, "plan_action", plan_action)

