"""``write_dataset``: stream data into new fragments and commit them as one version.

Input may be a Table, a RecordBatch, a list/iterator of batches, a RecordBatchReader or a pandas
DataFrame; it is consumed batch by batch and cut into data files of at most ``max_rows_per_file``
rows (or ``max_bytes_per_file`` bytes), so memory stays bounded by the file writer's page buffers.
Data files are written first and published by a single commit: a crash before the commit leaves
only orphan files (removed later by cleanup), never a half-visible write.

Dictionary columns of legacy (v0.1) datasets: their values are part of the schema, kept in the
manifest file and in every data file. As pylance does, a new dataset takes them from the first
batch (no data: refused) and an append's first batch must carry exactly the dataset's values
(refused otherwise). Later batches are re-keyed onto those values by the file writer; a value the
dictionary lacks is refused (pylance would silently mis-key it).
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Iterable, Iterator, Mapping

import pyarrow as pa

from lance_ops._proto import file_pb2, table_pb2, transaction_pb2
from lance_ops.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    UnsupportedError,
)
from lance_ops.format import blob_v2
from lance_ops.format.version import FileVersion
from lance_ops.format.writer import V2FileWriter
from lance_ops.format.legacy.writer import DEFAULT_MAX_ROWS_PER_GROUP, LegacyFileWriter
from lance_ops.io import ObjectStore, open_store
from lance_ops.schema import FieldNode, check_metadata_utf8, field_tree, from_lance_fields, to_lance_fields
from lance_ops.table import extension_types, versions
from lance_ops.table.manifest import feature_flags
from lance_ops.table.manifest import naming
from lance_ops.table.commit import idempotency
from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.dataset import LanceDataset, open_manifest
from lance_ops.table.manifest.codec import ManifestFile

log = logging.getLogger(__name__)

MAX_BYTES_PER_FILE = 90 * 1024**3


def to_reader(data: Any, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """A RecordBatchReader over any supported input (streams iterators, never materialises them).

    pylance's inputs: tables, batches, readers, pandas DataFrames, a dict of columns, a list of
    dicts, a Lance dataset or scanner (scanned), pyarrow datasets and scanners; ``schema`` casts
    the input to it. Iterables of batches may also come without ``schema`` (the first batch's is
    used; pylance asks for one).
    """
    if isinstance(data, pa.RecordBatchReader):
        return data if schema is None or data.schema.equals(schema) else _cast_reader(data, schema)
    if isinstance(data, dict):
        batch = pa.RecordBatch.from_pydict(data, schema=schema)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    if isinstance(data, list) and data and isinstance(data[0], dict):
        batch = pa.RecordBatch.from_pylist(data, schema=schema)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    if isinstance(data, LanceDataset):
        return to_reader(data.scanner().to_reader(), schema)
    if hasattr(data, "to_reader") and callable(data.to_reader) and hasattr(data, "projected_schema"):
        return to_reader(data.to_reader(), schema)  # a Lance or pyarrow scanner
    if type(data).__module__.startswith("pyarrow._dataset") and hasattr(data, "scanner"):
        return to_reader(data.scanner().to_reader(), schema)  # a pyarrow dataset
    if isinstance(data, pa.Table):
        table = data if schema is None else data.cast(schema)
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    if isinstance(data, pa.RecordBatch):
        batch = data if schema is None else pa.Table.from_batches([data]).cast(schema).to_batches()[0]
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    if type(data).__module__.startswith("pandas"):
        table = pa.Table.from_pandas(data, schema=schema)  # as pylance: an index other than a RangeIndex is a column
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


#: extension types lance_ops writes as storage + field metadata, checked readable by pylance 14
STORABLE_EXTENSIONS = extension_types.STORABLE_EXTENSIONS


def as_storage_types(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """``reader`` with extension columns (tensors, uuids, bfloat16, ``arrow.json``; top-level or
    inside structs and lists) as their storage arrays and the extension named in the field
    metadata, JSON as JSONB (as pylance stores them); readers restore the types from it."""
    schema = extension_types.storage_schema(reader.schema)
    if schema is reader.schema:
        return reader  # other extension types (blob v2) are the writers' own business
    convert = [f.type != g.type for f, g in zip(reader.schema, schema)]

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:  # one rebuild per batch: the storage arrays are shared, not copied
            arrays = [extension_types.to_storage(col, f.type, f.name) if c else col
                      for col, f, c in zip(batch.columns, schema, convert)]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _cast_reader(reader: pa.RecordBatchReader, schema: pa.Schema) -> pa.RecordBatchReader:
    """``reader``'s batches cast to ``schema`` as they stream."""
    def cast() -> Iterator[pa.RecordBatch]:
        for batch in reader:  # one cast per batch
            yield pa.Table.from_batches([batch]).cast(schema).combine_chunks().to_batches()[0] if batch.num_rows \
                else pa.RecordBatch.from_pylist([], schema=schema)

    return pa.RecordBatchReader.from_batches(schema, cast())


def check_append_schema(dataset_schema: pa.Schema, data_schema: pa.Schema, uri: str) -> None:
    """Refuse data whose columns or types differ from the dataset's; name every offending field."""
    check_metadata_utf8(data_schema, uri)
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
        if blob_v2.is_blob_v2(want[name]) and _blob_input(have[name]):
            continue
        if want[name].type != have[name].type:
            problems.append(f"field {name!r} has type {have[name].type}, the dataset has {want[name].type}")
    if problems:
        raise SchemaMismatchError(f"{uri}: appended data does not match the dataset schema: " + "; ".join(problems))


def _blob_input(field: pa.Field) -> bool:
    """Data a blob v2 column takes: bytes, a lance.blob.v2 extension array or its storage."""
    t = field.type
    if isinstance(t, pa.ExtensionType):
        return t.extension_name == blob_v2.BLOB_V2_EXTENSION
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or
            (pa.types.is_struct(t) and [f.name for f in t][:2] == ["data", "uri"]))


def blob_v2_schema(schema: pa.Schema, version: str, uri: str) -> pa.Schema:
    """The schema a new dataset of ``version`` stores for ``schema``: at 2.2+ every top-level
    blob field (``large_binary`` + ``lance-encoding:blob``, or ``lance.blob.v2``) becomes a blob
    v2 field, as pylance does; ``lance.blob.v2`` before 2.2 is refused."""
    at_2_2 = FileVersion.parse(version) >= FileVersion.V2_2
    fields = []
    for f in schema:
        if blob_v2.is_blob_v2(f) and not at_2_2:
            raise UnsupportedError(
                f"{uri}: column {f.name!r} is a lance.blob.v2 blob, which needs data_storage_version 2.2 or later "
                f"(the dataset is {version}); give large_binary with lance-encoding:blob for the older layout")
        if at_2_2 and (blob_v2.is_blob_v2(f) or blob_v2.is_legacy_blob(f)):
            f = blob_v2.logical_field(f)
        elif at_2_2 and blob_v2.has_blobs(f):
            raise UnsupportedError(
                f"{uri}: column {f.name!r} holds a blob field below the top level; {version} datasets store blobs "
                "as lance.blob.v2 columns, which lance_ops writes only at the top level")
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def conform_blob_columns(batch: pa.RecordBatch, schema: pa.Schema, allow_external_uris: bool,
                         uri: str = "") -> pa.RecordBatch:
    """``batch`` with the columns of ``schema``'s blob v2 fields in their logical struct form
    (bytes and extension arrays converted); external URIs checked (see
    ``v2_1.blob_v2.check_external_uris``)."""
    from lance_ops.format.v2_1.blob_v2 import check_external_uris

    names = [f.name for f in schema if blob_v2.is_blob_v2(f)]
    if not names:
        return batch
    arrays, fields = [], []
    for f, col in zip(batch.schema, batch.columns):
        if f.name in names:
            want = schema.field(f.name)
            col = blob_v2.to_logical(col, want)
            check_external_uris(col, want, allow_external_uris)
            f = want
        arrays.append(col)
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=batch.schema.metadata))


def _all_field_ids(fields: Iterable[file_pb2.Field]) -> list[int]:
    return [f.id for f in fields]


def _leaf_field_ids(fields: Iterable[file_pb2.Field]) -> list[int]:
    # [v2.1 writer] pre-order ids of the fields with a column in a 2.1+ data file
    from lance_ops.format.v2_1.fields import leaf_field_ids

    return leaf_field_ids(fields)


# --- dictionary columns ---------------------------------------------------------------------------
def mark_dictionary_fields(lance_fields: Iterable[file_pb2.Field]) -> None:
    """Give dictionary fields the empty ``dictionary`` message pylance writes in every schema."""
    for f in lance_fields:
        if f.logical_type.startswith("dict:"):
            f.dictionary.SetInParent()


def _dictionary_paths(lance_fields: Iterable[file_pb2.Field]) -> list[tuple[int, str, tuple]]:
    """``(field id, dotted name, path)`` of every dictionary field; ``path`` leads to its array
    from the top-level column: child indices of structs, ``"items"`` through lists."""
    out = []

    def walk(node: FieldNode, name: str, path: tuple) -> None:
        dt = node.arrow.type
        if pa.types.is_dictionary(dt):
            out.append((node.id, name, path))
        elif pa.types.is_struct(dt):
            for i, c in enumerate(node.children):
                walk(c, f"{name}.{c.proto.name}", path + (i,))
        elif node.children:  # (large) list: its items
            walk(node.children[0], f"{name}.{node.children[0].proto.name}", path + ("items",))

    for top in field_tree(list(lance_fields)):
        walk(top, top.proto.name, (top.proto.name,))
    return out


def _array_at(batch: pa.RecordBatch, path: tuple) -> pa.Array:
    arr = batch.column(path[0])
    for step in path[1:]:
        arr = arr.values if step == "items" else arr.field(step)
    return arr


def legacy_dictionaries(reader: pa.RecordBatchReader, lance_fields: Iterable[file_pb2.Field],
                        expected: Mapping[int, pa.Array] | None,
                        uri: str) -> tuple[pa.RecordBatchReader, dict[int, pa.Array]]:
    """The dictionary values of a legacy (v0.1) write, and ``reader`` (its first batch peeked).

    ``expected`` None (a new schema): the values are the first batch's, as pylance takes them;
    without any batch they are unknown and the write is refused. Otherwise (an append) the first
    batch must hold exactly ``expected``'s values (pylance's rule), else SchemaMismatchError.
    Nothing has been written when this raises.
    """
    paths = _dictionary_paths(lance_fields)
    if not paths:
        return reader, {}
    it = iter(reader)
    first = next(it, None)
    if first is not None:
        def chain() -> Iterable[pa.RecordBatch]:
            yield first
            yield from it

        reader = pa.RecordBatchReader.from_batches(reader.schema, chain())
    names = [name for _, name, _ in paths]
    if expected is None:
        if first is None:
            raise UnsupportedError(
                f"{uri}: a legacy (v0.1) dataset takes the values of its dictionary columns {names} from "
                "the first batch written, and there is no data; nothing was written")
        return reader, {fid: _array_at(first, path).dictionary for fid, _, path in paths}
    values = {}
    for fid, name, path in paths:
        want = expected.get(fid)
        if want is None:
            raise UnsupportedError(f"{uri}: the dataset manifest carries no dictionary values for field "
                                   f"{name!r} (id {fid}); nothing was written")
        if first is not None:
            got = _array_at(first, path).dictionary
            if not got.equals(want):
                raise SchemaMismatchError(
                    f"{uri}: Append with different schema: dictionary for `{name}` did not match expected "
                    f"dictionary (a legacy dataset's dictionary values are fixed: {want.to_pylist()[:10]}); "
                    "nothing was written")
        values[fid] = want
    return reader, values


class FragmentWriter:
    """Writes a stream of batches into fragments of at most ``max_rows_per_file`` rows each.

    Legacy (``version="0.1"``) files are cut into groups of ``max_rows_per_group`` rows and store
    ``dictionaries`` (field id -> values) for their dictionary fields.
    """

    def __init__(self, store: ObjectStore, base: str, schema: pa.Schema, lance_fields: list[file_pb2.Field], *,
                 storage_options: Mapping[str, Any] | None, max_rows_per_file: int,
                 max_bytes_per_file: int = MAX_BYTES_PER_FILE, version: str | FileVersion = versions.DEFAULT,
                 max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
                 dictionaries: Mapping[int, pa.Array] | None = None) -> None:
        if max_rows_per_file <= 0:
            raise ValueError("max_rows_per_file must be positive")
        self._store, self._base = store, base
        self._schema = schema
        self._lance_fields = lance_fields
        self._options = storage_options
        self._max_rows = max_rows_per_file
        self._max_bytes = max_bytes_per_file
        self._version = FileVersion.parse(version)
        self._max_rows_per_group = max_rows_per_group
        self._dictionaries = dict(dictionaries) if dictionaries else None
        self._writer: V2FileWriter | LegacyFileWriter | None = None
        self._name = ""
        self.fragments: list[table_pb2.DataFragment] = []
        self.rows_written = 0

    def _open(self) -> None:
        self._name = naming.new_data_file_name()
        path = self._store.uri(self._store.join(self._base, naming.DATA_DIR, self._name))
        if self._version is FileVersion.LEGACY:
            self._writer = LegacyFileWriter(path, self._schema, storage_options=self._options,
                                            lance_fields=self._lance_fields, dictionaries=self._dictionaries,
                                            max_rows_per_group=self._max_rows_per_group)
            return
        self._writer = V2FileWriter(path, self._schema, version=self._version,
                                    storage_options=self._options, lance_fields=self._lance_fields)
        # lance_ops statistics hook: closing the writer also writes _stats/<stem>.stats.lance
        # (legacy v0.1 files carry their own statistics page table, returned above)
        from lance_ops.table.stats.collect import track_statistics

        self._writer = track_statistics(self._writer, self._store, self._base, self._name, self._options)

    def _close(self) -> None:
        if self._writer is None:
            return
        rows = self._writer.close()
        size = self._writer.tell()
        frag = table_pb2.DataFragment(physical_rows=rows)
        if self._version is FileVersion.LEGACY:
            # [legacy v0.1 writer] owner: lance_ops/format/legacy/writer.py -- as pylance records a
            # legacy file: every field id, no column indices, version (0, 2) (the footer's numbers)
            from lance_ops.format.legacy.writer import LEGACY_DATA_FILE_VERSION

            frag.files.add(path=self._name, fields=_all_field_ids(self._lance_fields), column_indices=[],
                           file_major_version=LEGACY_DATA_FILE_VERSION[0],
                           file_minor_version=LEGACY_DATA_FILE_VERSION[1], file_size_bytes=size)
            self.fragments.append(frag)
            self._writer = None
            return
        major, minor = self._version.manifest_numbers
        frag.files.add(
            path=self._name,
            # [v2.1 writer] 2.0 files list every field id; 2.1+ files only the leaf fields that own a column
            fields=_all_field_ids(self._lance_fields) if self._version is FileVersion.V2_0 else _leaf_field_ids(self._lance_fields),
            column_indices=list(range(self._writer.num_columns)),
            file_major_version=major,
            file_minor_version=minor,
            file_size_bytes=size,
        )
        self.fragments.append(frag)
        self._writer = None

    def write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch``, opening a new data file whenever the current one reaches its row or byte limit."""
        start = 0
        while start < batch.num_rows:
            if self._writer is None:
                self._open()
            writer = self._writer
            assert writer is not None  # (_open sets it)
            room = self._max_rows - writer.rows_written
            piece = batch.slice(start, room)
            writer.write_batch(piece)
            start += piece.num_rows
            self.rows_written += piece.num_rows
            # (2.1+ writers answer ``reached`` without waiting for pages still being encoded)
            reached = getattr(writer, "reached", None)
            full = reached(self._max_bytes) if reached is not None else writer.tell() >= self._max_bytes
            if writer.rows_written >= self._max_rows or full:
                self._close()

    def finish(self) -> list[table_pb2.DataFragment]:
        """Close the open data file; the fragments written (one data file each), not yet committed."""
        self._close()
        return self.fragments

    def abort(self) -> None:
        """Abandon the open data file (best effort); files already closed stay as orphans for cleanup."""
        if self._writer is not None:
            try:
                self._writer.abort()
            except Exception:  # noqa: BLE001 - best effort; orphans are removed by cleanup
                pass
            self._writer = None


def write_fragments(reader: pa.RecordBatchReader, store: ObjectStore, base: str, lance_fields: list[file_pb2.Field], *,
                    storage_options: Mapping[str, Any] | None = None,
                    max_rows_per_file: int = 1024 * 1024, max_bytes_per_file: int = MAX_BYTES_PER_FILE,
                    version: str | FileVersion = versions.DEFAULT, max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
                    dictionaries: Mapping[int, pa.Array] | None = None,
                    allow_external_blob_outside_bases: bool = True) -> list[table_pb2.DataFragment]:
    """Write all batches of ``reader`` as new (uncommitted) fragments with id 0.

    Blob v2 columns (2.2+) take bytes, ``lance.blob.v2`` arrays or their storage structs; the
    values go inline, to side files or stay external URIs (``v2_1.blob_v2``). External
    URIs are refused unless ``allow_external_blob_outside_bases`` (``write_dataset`` passes its
    argument; maintenance passes True, the URIs being already in the dataset).

    Legacy (0.1) only: ``max_rows_per_group`` rows per group, and ``dictionaries`` (field id ->
    values; the dataset's, see :func:`legacy_dictionaries`) is required for dictionary fields.
    """
    schema = from_lance_fields(lance_fields, dict(reader.schema.metadata or {}))
    has_blob_v2 = any(blob_v2.is_blob_v2(f) for f in schema)
    if has_blob_v2 and FileVersion.parse(version) < FileVersion.V2_2:
        raise UnsupportedError(f"{store.uri(base)}: lance.blob.v2 columns need data_storage_version 2.2+, not {version}")
    writer = FragmentWriter(store, base, schema, lance_fields, storage_options=storage_options,
                            max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
                            version=version, max_rows_per_group=max_rows_per_group, dictionaries=dictionaries)
    try:
        for batch in reader:
            if has_blob_v2:  # (every writing path: appends, Spark tasks, compaction)
                batch = conform_blob_columns(batch, schema, allow_external_blob_outside_bases, store.uri(base))
            if batch.schema != schema:
                batch = pa.RecordBatch.from_arrays(
                    [batch.column(f.name) for f in schema], schema=schema
                ) if set(batch.schema.names) == set(schema.names) else batch
            writer.write(batch)
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


def _refuse_legacy_blob_append_at_2_2(dataset_schema: pa.Schema, version: str, uri: str) -> None:
    """Refuse appends to 2.2+ datasets whose blob fields use the legacy layout (written by
    pylance's file API or older lance_ops), before writing: pylance's next commit to such a
    dataset relabels the field as ``lance.blob.v2`` and can no longer read the old fragments."""
    if FileVersion.parse(version) < FileVersion.V2_2:
        return
    names = [f.name for f in dataset_schema if blob_v2.has_blobs(f) and not blob_v2.has_blob_v2(f)]
    if names:
        raise UnsupportedError(
            f"{uri}: blob column(s) {names} of this {version} dataset use the legacy blob layout "
            "(lance-encoding:blob); pylance stores blobs of 2.2+ datasets as lance.blob.v2 and its next commit "
            "to a dataset with the older layout makes the existing fragments unreadable, so lance_ops does not "
            "append to it. Rewrite the dataset (mode='overwrite') to convert the column to lance.blob.v2.")


#: listings of ``_versions/`` that must all come back empty before a dataset counts as absent
ABSENCE_LISTINGS = 3


def _open_or_absent(store: ObjectStore, base: str, uri: str) -> ManifestFile | None:
    """The latest ManifestFile, or None if the dataset does not exist.

    Absence is concluded only after :data:`ABSENCE_LISTINGS` empty listings, and
    ``naming.latest_version`` raises StorageError instead of None when other evidence (version
    hint, manifests or transaction files found by name) says the dataset exists: an append (or a
    create) must never start a new version 1 under an existing dataset because one listing came
    back empty (cleanup may have removed the real version 1, so put-if-absent would not stop it).
    """
    for attempt in range(ABSENCE_LISTINGS):
        try:
            return open_manifest(store, base, None, uri)
        except DatasetNotFoundError:
            if attempt + 1 < ABSENCE_LISTINGS and getattr(store, "scheme", "") != "file":
                time.sleep(0.02 * (attempt + 1))
    return None


def write_dataset(
    data: Any,
    uri: "str | LanceDataset",
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
    allow_external_blob_outside_bases: bool = False,
) -> LanceDataset:
    """Create, append to or overwrite a dataset; returns it at the new version.

    ``idempotency_key`` (also accepted as ``transaction_properties["lance_ops.idempotency_key"]``)
    makes a retried call a no-op: if a recent version was committed with the same key, that
    version is returned and nothing is written.

    Blob columns at 2.2+ are stored as ``lance.blob.v2`` as pylance does; values given as
    external URIs are kept as references only with ``allow_external_blob_outside_bases=True``.
    ``uri`` may be a dataset object (its URI and storage options are used, as pylance does).
    """
    if mode not in ("create", "append", "overwrite"):
        raise InvalidArgumentError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    if isinstance(uri, LanceDataset):
        storage_options = uri.storage_options if storage_options is None else storage_options
        uri = uri.uri
    uri = os.fspath(uri) if isinstance(uri, os.PathLike) else uri
    if not isinstance(uri, str):
        raise InvalidArgumentError(f"write_dataset needs a URI, a path or a dataset, not {type(uri).__name__}")
    store, base = open_store(uri, storage_options)
    key = idempotency_key or (transaction_properties or {}).get(IDEMPOTENCY_KEY)  # either way counts
    properties = CommitProperties.from_keywords("write", idempotency_key=key,
                                                transaction_properties=transaction_properties,
                                                commit_message=commit_message)

    current = _open_or_absent(store, base, uri)
    if current is not None and key:
        # before the mode="create" check: a retried create whose first try committed is a no-op too
        # (the key ledger remembers keys of versions cleanup removed since; see table/commit/idempotency.py)
        earlier = idempotency.lookup(store, base, key, "write")
        if earlier is not None:
            log.info("idempotency key %s already committed as version %d; nothing written", key, earlier.version)
            if idempotency.manifest_of(store, base, earlier) is None:  # cleaned up since: the latest
                log.info("version %d was cleaned up; returning the latest version %d", earlier.version,
                         current.version)
                return LanceDataset(uri, current.version, storage_options, _manifest_file=current,
                                    _store=(store, base))
            return LanceDataset(uri, earlier.version, storage_options, _store=(store, base))
    if current is not None and mode == "create":
        raise DatasetExistsError(f"Dataset already exists: {uri}")
    if current is None and mode != "create":
        log.warning("dataset %s does not exist; mode=%r creates it", uri, mode)

    reader = as_storage_types(to_reader(data, schema))
    appending = current is not None and mode == "append"
    if current is not None and appending:  # (spelled out for the type checker)
        manifest = current.manifest
        feature_flags.check_writer_flags(manifest.writer_feature_flags, uri)
        version = versions.normalize(manifest.data_format.version or None)
        versions.require_writable(version, uri)
        lance_fields = list(manifest.fields)
        dataset_schema = from_lance_fields(lance_fields, dict(manifest.schema_metadata))
        check_append_schema(dataset_schema, reader.schema, uri)
        _refuse_legacy_blob_append_at_2_2(dataset_schema, version, uri)
    else:
        if current is not None:
            feature_flags.check_writer_flags(current.manifest.writer_feature_flags, uri)
        default = current.manifest.data_format.version if current is not None and data_storage_version is None else None
        version = versions.normalize(data_storage_version if default is None else default)
        versions.require_writable(version, uri)
        data_schema = blob_v2_schema(reader.schema, version, uri)
        lance_fields = to_lance_fields(data_schema)
        if version is FileVersion.LEGACY:
            # (pylance marks them in 2.x schemas too; left to the 2.x writers' owners)
            mark_dictionary_fields(lance_fields)

    dictionaries: dict[int, pa.Array] = {}
    if version is FileVersion.LEGACY:
        expected = current.dictionaries if current is not None and appending else None
        reader, dictionaries = legacy_dictionaries(reader, lance_fields, expected, uri)
    with store.deferred_sync():  # the data files become durable with the manifest (ADR 0036)
        fragments = write_fragments(reader, store, base, lance_fields, storage_options=storage_options,
                                    max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
                                    version=version, max_rows_per_group=max_rows_per_group,
                                    dictionaries=dictionaries,
                                    allow_external_blob_outside_bases=allow_external_blob_outside_bases)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(),
                                      read_version=current.version if current is not None else 0)
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
        mf = commit_transaction(store, base, txn, CommitContext(current, dictionaries=dictionaries or None), options,
                                properties=properties)
    except RetryableCommitConflictError as exc:
        if current is None and mode == "create":
            raise DatasetExistsError(f"Dataset already exists: {uri} (created concurrently)") from exc
        raise
    if key:
        idempotency.remember(store, base, mf)
    return LanceDataset(uri, mf.version, storage_options, _manifest_file=mf, _store=(store, base))
