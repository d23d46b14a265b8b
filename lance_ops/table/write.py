"""``write_dataset``: stream data into new fragments and commit them as one version.

Input may be a Table, a RecordBatch, a list/iterator of batches, a RecordBatchReader or a pandas
DataFrame; it is consumed batch by batch and cut into data files of at most ``max_rows_per_file``
rows (or ``max_bytes_per_file`` bytes), so memory stays bounded by the file writer's page buffers.
Data files are written first and published by a single commit: a crash before the commit leaves
only orphan files (removed later by cleanup), never a half-visible write.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, Mapping

import pyarrow as pa

from lance_ops._proto import file_pb2, table_pb2, transaction_pb2
from lance_ops.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    RetryableCommitConflictError,
    SchemaMismatchError,
)
from lance_ops.file.format import MANIFEST_VERSIONS
from lance_ops.file.writer import LanceFileWriter
from lance_ops.io import open_store
from lance_ops.schema import from_lance_fields, to_lance_fields
from lance_ops.table import feature_flags, naming, versions
from lance_ops.table.commit import IDEMPOTENCY_KEY, CommitContext, CommitOptions, commit_transaction, find_idempotent_commit
from lance_ops.table.dataset import LanceDataset, open_manifest

log = logging.getLogger(__name__)

MAX_BYTES_PER_FILE = 90 * 1024**3
IDEMPOTENCY_LOOKBACK = 100


def to_reader(data: Any, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """A RecordBatchReader over any supported input (streams iterators, never materialises them)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        table = data if schema is None else data.cast(schema)
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    if isinstance(data, pa.RecordBatch):
        batch = data if schema is None else pa.Table.from_batches([data]).cast(schema).to_batches()[0]
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    if type(data).__module__.startswith("pandas"):
        table = pa.Table.from_pandas(data, schema=schema, preserve_index=False)
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data, schema=schema)
    if isinstance(data, (list, tuple, Iterator)) or hasattr(data, "__iter__"):
        it = iter(data)
        if schema is None:
            first = next(it, None)
            if first is None:
                raise ValueError("cannot infer a schema from empty input; pass schema=")
            schema = first.schema

            def chain() -> Iterable[pa.RecordBatch]:
                yield first
                yield from it

            return pa.RecordBatchReader.from_batches(schema, chain())
        return pa.RecordBatchReader.from_batches(schema, it)
    raise TypeError(f"write_dataset cannot take data of type {type(data).__name__}")


def check_append_schema(dataset_schema: pa.Schema, data_schema: pa.Schema, uri: str) -> None:
    """Refuse data whose columns or types differ from the dataset's; name every offending field."""
    want = {f.name: f for f in dataset_schema}
    have = {f.name: f for f in data_schema}
    problems = []
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    if missing:
        problems.append(f"missing fields {missing}")
    if extra:
        problems.append(f"fields not in the dataset {extra}")
    for name in want.keys() & have.keys():
        if want[name].type != have[name].type:
            problems.append(f"field {name!r} has type {have[name].type}, the dataset has {want[name].type}")
    if problems:
        raise SchemaMismatchError(f"{uri}: appended data does not match the dataset schema: " + "; ".join(problems))


def _all_field_ids(fields: Iterable[file_pb2.Field]) -> list[int]:
    return [f.id for f in fields]


def _leaf_field_ids(fields: Iterable[file_pb2.Field]) -> list[int]:
    # [v2.1 writer] pre-order ids of the fields with a column in a 2.1+ data file
    from lance_ops.encoding.encode_v2_1 import leaf_field_ids

    return leaf_field_ids(fields)


class FragmentWriter:
    """Writes a stream of batches into fragments of at most ``max_rows_per_file`` rows each."""

    def __init__(self, store, base: str, schema: pa.Schema, lance_fields: list[file_pb2.Field], *,
                 storage_options: Mapping[str, Any] | None, max_rows_per_file: int,
                 max_bytes_per_file: int = MAX_BYTES_PER_FILE, version: str = "2.0"):
        if max_rows_per_file <= 0:
            raise ValueError("max_rows_per_file must be positive")
        self._store, self._base = store, base
        self._schema = schema
        self._lance_fields = lance_fields
        self._options = storage_options
        self._max_rows = max_rows_per_file
        self._max_bytes = max_bytes_per_file
        self._version = version
        self._writer: LanceFileWriter | None = None
        self._name = ""
        self.fragments: list[table_pb2.DataFragment] = []
        self.rows_written = 0

    def _open(self) -> None:
        self._name = naming.new_data_file_name()
        path = self._store.uri(self._store.join(self._base, naming.DATA_DIR, self._name))
        self._writer = LanceFileWriter(path, self._schema, version=self._version,
                                       storage_options=self._options, lance_fields=self._lance_fields)
        # lance_ops statistics hook: closing the writer also writes _stats/<stem>.stats.lance
        # (legacy v0.1 files carry their own statistics page table)
        if self._version != "0.1":
            from lance_ops.table.statistics import track_statistics

            self._writer = track_statistics(self._writer, self._store, self._base, self._name, self._options)

    def _close(self) -> None:
        if self._writer is None:
            return
        rows = self._writer.close()
        size = self._writer.tell()
        frag = table_pb2.DataFragment(physical_rows=rows)
        if self._version == "0.1":
            # [legacy v0.1 writer] owner: lance_ops/file/writer_legacy.py -- as pylance records a
            # legacy file: every field id, no column indices, version (0, 2) (the footer's numbers)
            from lance_ops.file.writer_legacy import LEGACY_DATA_FILE_VERSION

            frag.files.add(path=self._name, fields=_all_field_ids(self._lance_fields), column_indices=[],
                           file_major_version=LEGACY_DATA_FILE_VERSION[0],
                           file_minor_version=LEGACY_DATA_FILE_VERSION[1], file_size_bytes=size)
            self.fragments.append(frag)
            self._writer = None
            return
        major, minor = MANIFEST_VERSIONS[self._version]
        frag.files.add(
            path=self._name,
            # [v2.1 writer] 2.0 files list every field id; 2.1+ files only the leaf fields that own a column
            fields=_all_field_ids(self._lance_fields) if self._version == "2.0" else _leaf_field_ids(self._lance_fields),
            column_indices=list(range(self._writer.num_columns)),
            file_major_version=major,
            file_minor_version=minor,
            file_size_bytes=size,
        )
        self.fragments.append(frag)
        self._writer = None

    def write(self, batch: pa.RecordBatch) -> None:
        start = 0
        while start < batch.num_rows:
            if self._writer is None:
                self._open()
            room = self._max_rows - self._writer.rows_written
            piece = batch.slice(start, room)
            self._writer.write_batch(piece)
            start += piece.num_rows
            self.rows_written += piece.num_rows
            if self._writer.rows_written >= self._max_rows or self._writer.tell() >= self._max_bytes:
                self._close()

    def finish(self) -> list[table_pb2.DataFragment]:
        self._close()
        return self.fragments

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.abort()
            except Exception:  # noqa: BLE001 - best effort; orphans are removed by cleanup
                pass
            self._writer = None


def write_fragments(reader: pa.RecordBatchReader, store, base: str, lance_fields, *, storage_options=None,
                    max_rows_per_file: int = 1024 * 1024, max_bytes_per_file: int = MAX_BYTES_PER_FILE,
                    version: str = "2.0") -> list[table_pb2.DataFragment]:
    """Write all batches of ``reader`` as new (uncommitted) fragments with id 0."""
    schema = from_lance_fields(lance_fields, dict(reader.schema.metadata or {}))
    writer = FragmentWriter(store, base, schema, lance_fields, storage_options=storage_options,
                            max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
                            version=version)
    try:
        for batch in reader:
            if batch.schema != schema:
                batch = pa.RecordBatch.from_arrays(
                    [batch.column(f.name) for f in schema], schema=schema
                ) if set(batch.schema.names) == set(schema.names) else batch
            writer.write(batch)
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


def write_dataset(
    data: Any,
    uri: str,
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    max_rows_per_file: int = 1024 * 1024,
    max_rows_per_group: int = 1024,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    data_storage_version: str | None = None,
    enable_stable_row_ids: bool = False,
    enable_v2_manifest_paths: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    transaction_properties: Mapping[str, str] | None = None,
    commit_message: str | None = None,
    idempotency_key: str | None = None,
) -> LanceDataset:
    """Create, append to or overwrite a dataset; returns it at the new version.

    ``idempotency_key`` (also accepted as ``transaction_properties["lance_ops.idempotency_key"]``)
    makes a retried call a no-op: if a recent version was committed with the same key, that
    version is returned and nothing is written.
    """
    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    uri = str(uri)
    store, base = open_store(uri, storage_options)
    props = dict(transaction_properties or {})
    if commit_message:
        props["__lance_commit_message"] = commit_message
    key = idempotency_key or props.get(IDEMPOTENCY_KEY)
    if key:
        props[IDEMPOTENCY_KEY] = key

    try:
        current = open_manifest(store, base, None, uri)
    except DatasetNotFoundError:
        current = None
    if current is not None and key:
        # before the mode="create" check: a retried create whose first try committed is a no-op too
        earlier = find_idempotent_commit(store, base, key, latest=current.version, lookback=IDEMPOTENCY_LOOKBACK)
        if earlier is not None:
            log.info("idempotency key %s already committed as version %d; nothing written", key, earlier.version)
            return LanceDataset(uri, earlier.version, storage_options, _store=(store, base))
    if current is not None and mode == "create":
        raise DatasetExistsError(f"Dataset already exists: {uri}")
    if current is None and mode != "create":
        log.warning("dataset %s does not exist; mode=%r creates it", uri, mode)

    reader = to_reader(data, schema)
    appending = current is not None and mode == "append"
    if appending:
        manifest = current.manifest
        feature_flags.check_writer_flags(manifest.writer_feature_flags, uri)
        version = versions.normalize(manifest.data_format.version or None)
        versions.require_writable(version, uri)
        lance_fields = list(manifest.fields)
        dataset_schema = from_lance_fields(lance_fields, dict(manifest.schema_metadata))
        check_append_schema(dataset_schema, reader.schema, uri)
    else:
        if current is not None:
            feature_flags.check_writer_flags(current.manifest.writer_feature_flags, uri)
        default = current.manifest.data_format.version if current is not None and data_storage_version is None else None
        version = versions.normalize(data_storage_version if default is None else default)
        versions.require_writable(version, uri)
        lance_fields = to_lance_fields(reader.schema)

    fragments = write_fragments(reader, store, base, lance_fields, storage_options=storage_options,
                                max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
                                version=version)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(),
                                      read_version=current.version if current is not None else 0)
    txn.transaction_properties.update(props)
    if appending:
        txn.append.fragments.extend(fragments)
    else:
        txn.overwrite.fragments.extend(fragments)
        txn.overwrite.schema.extend(lance_fields)
        for k, v in (reader.schema.metadata or {}).items():
            txn.overwrite.schema_metadata[k.decode() if isinstance(k, bytes) else k] = v
    options = CommitOptions(
        enable_v2_manifest_paths=enable_v2_manifest_paths,
        data_storage_version=version,
        enable_stable_row_ids=enable_stable_row_ids if current is None else False,
    )
    try:
        mf = commit_transaction(store, base, txn, CommitContext(current), options)
    except RetryableCommitConflictError as exc:
        if current is None and mode == "create":
            raise DatasetExistsError(f"Dataset already exists: {uri} (created concurrently)") from exc
        raise
    return LanceDataset(uri, mf.version, storage_options, _manifest_file=mf, _store=(store, base))
