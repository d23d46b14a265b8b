"""Reading one fragment: its data files, deletion vector and row ids.

A fragment's columns may be spread over several data files (after ``add_columns``/``merge``): each
``DataFile`` lists the field ids it stores. Columns no file stores read as nulls. Deleted rows keep
their physical slot (row addresses are physical), so readers work on physical offsets and drop
deleted ones at the end.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Hashable, Iterator, Mapping, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.format.version import FileVersion
from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, InvalidArgumentError, ObjectNotFoundError
from lance_ops.format import blob_v2
from lance_ops.format.registry import open_file_reader
from lance_ops.format.v2_0.reader import LanceFileReader
from lance_ops.table import addresses, blobs, deletion, rowids
from lance_ops.table.fragment_meta import DataFile, FragmentMetadata
from lance_ops.table.manifest import naming
from lance_ops.table.paths import dataset_where, resolve_inside

if TYPE_CHECKING:  # pragma: no cover
    from lance_ops.format.legacy.reader import LegacyFileReader
    from lance_ops.format.v2_1.reader import LanceFileReaderV21
    from lance_ops.table.snapshot import DatasetSnapshot

#: a reader of one data file, of the file's version (what ``open_file_reader`` returns)
DataFileReader = Union[LanceFileReader, "LanceFileReaderV21", "LegacyFileReader"]


#: per-dataset caches (``LanceDataset.cache``): open file readers and decoded deletion vectors,
#: keyed by immutable file names; bounded, oldest entries dropped first
_READERS_CACHE = "lance_ops.file_readers"
#: the dataset cache in which readers of its files share parsed metadata (format/v2_0/memo.py)
_FORMAT_MEMO = "lance_ops.format_memo"
_DELETIONS_CACHE = "lance_ops.deletion_offsets"
_READER_CACHE_LIMIT = 1024
_DELETION_CACHE_LIMIT = 4096


def _remember(cache: dict, key: Hashable, value: object, limit: int) -> None:
    if len(cache) >= limit:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread
            pass
    cache[key] = value


class LanceFragment:
    """One fragment of a dataset version (mirrors ``lance.LanceFragment`` where it matters)."""

    def __init__(self, dataset: "DatasetSnapshot", fragment_id: table_pb2.DataFragment | int | None = None, *,
                 fragment: table_pb2.DataFragment | None = None) -> None:
        """``LanceFragment(dataset, proto)`` (lance_ops' layers) or pylance's
        ``LanceFragment(dataset, fragment_id)`` / ``LanceFragment(dataset, None, fragment=...)``."""
        proto = fragment if fragment is not None else fragment_id
        if proto is None:
            raise InvalidArgumentError("Either fragment or fragment_id must be specified")
        if isinstance(proto, int):
            found = [f for f in dataset.manifest.fragments if f.id == proto]
            if not found:
                raise InvalidArgumentError(f"Fragment id does not exist: {proto}")
            proto = found[0]
        self._dataset = dataset
        #: the manifest's ``DataFragment`` record (what lance_ops' own layers read and copy)
        self.proto = proto
        self._readers: dict[int, DataFileReader] = {}

    # --- identity and counts ---------------------------------------------------------------
    @property
    def fragment_id(self) -> int:
        """The fragment's id (the high 32 bits of its rows' addresses)."""
        return self.proto.id

    @property
    def physical_rows(self) -> int:
        """Rows stored in the fragment's data files, deleted ones included."""
        return self.proto.physical_rows

    @property
    def num_deletions(self) -> int:
        """Rows of the fragment marked deleted by its deletion file. The manifest's count is used
        when it is recorded; a count of 0 beside a deletion file means "unknown" (very old writers
        left it unset, and pylance then reads the file), so the file is read and counted."""
        if not self.proto.HasField("deletion_file"):
            return 0
        recorded = int(self.proto.deletion_file.num_deleted_rows)
        return recorded if recorded else int(self.deleted_offsets.size)

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Live rows of the fragment (matching ``filter`` when given)."""
        if filter is None:
            return self.physical_rows - self.num_deletions
        return self._dataset.count_rows(filter, fragment_ids=[self.fragment_id])

    @property
    def metadata(self) -> FragmentMetadata:
        """The manifest record in pylance's shape (``files``, ``deletion_file``, ``physical_rows``,
        ``num_deletions``, ``row_id_meta``); the proto itself is :attr:`proto`."""
        return FragmentMetadata.from_proto(self.proto)

    @property
    def schema(self) -> pa.Schema:
        """The fragment's schema as pylance shows it (the dataset's, extension types restored)."""
        return self._dataset.schema

    def data_files(self) -> list[DataFile]:
        """The fragment's data files, as pylance's ``DataFile`` records."""
        return [DataFile.from_proto(f) for f in self.proto.files]

    def deletion_file(self) -> str | None:
        """The deletion file's path relative to the dataset (``_deletions/...``), None without deletions."""
        if not self.proto.HasField("deletion_file"):
            return None
        return naming.deletion_file_path(self.fragment_id, self.proto.deletion_file)

    # --- pylance's reads of one fragment (the dataset's scan, restricted to this fragment) ------------
    def to_table(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,
                 offset: int | None = None, **kwargs: Any) -> pa.Table:
        """The fragment's live rows (matching ``filter``), as ``LanceDataset.to_table`` with ``fragments=[self]``."""
        return self._dataset.to_table(columns, filter, limit, offset, fragments=[self], **kwargs)

    def to_batches(self, *, columns: Sequence[str] | Mapping[str, str] | None = None,
                   filter: str | pc.Expression | None = None, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        """The fragment's live rows as batches (``LanceDataset.to_batches`` with ``fragments=[self]``)."""
        return self._dataset.scanner(columns, filter, fragments=[self], **kwargs).to_batches()

    def scanner(self, *, columns: Sequence[str] | Mapping[str, str] | None = None,
                filter: str | pc.Expression | None = None, **kwargs: Any) -> Any:
        """A scan of this fragment only (``LanceDataset.scanner`` with ``fragments=[self]``)."""
        return self._dataset.scanner(columns, filter, fragments=[self], **kwargs)

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` live rows."""
        return self.to_table(limit=num_rows)

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array,
             columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows at positions ``indices`` among the fragment's live rows, in the order given."""
        return self._dataset.take_fragment_rows(self, indices, columns)

    def __reduce__(self) -> tuple[Any, tuple[Any, int]]:
        """Pickled as (dataset, fragment id): Spark and Ray ship fragments to workers."""
        return (fragment_of, (self._dataset, self.fragment_id))

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, physical_rows={self.physical_rows}, deleted={self.num_deletions})"

    # --- deletions and row ids -------------------------------------------------------------
    @property
    def deleted_offsets(self) -> np.ndarray:
        """Sorted uint32 physical offsets of deleted rows (read-only; shared per dataset).

        Computed once per fragment object; not a ``functools.cached_property``, whose class-wide
        lock (Python < 3.12) made the scan threads read deletion files one at a time."""
        got = self.__dict__.get("_deleted_offsets")
        if got is None:
            got = self.__dict__["_deleted_offsets"] = self._read_deleted_offsets()
        return got

    def _read_deleted_offsets(self) -> np.ndarray:
        if not self.proto.HasField("deletion_file"):
            return deletion.read_deletion_offsets(self._dataset.store, self._dataset.base, self.fragment_id, None)
        df = self.proto.deletion_file
        # deletion files are immutable (a new one is written for every change): cache by name
        key = self._deletion_key()
        cache = self._dataset.cache(_DELETIONS_CACHE)
        offsets = cache.get(key)
        if offsets is None:
            offsets = deletion.read_deletion_offsets(self._dataset.store, self._dataset.base, self.fragment_id, df,
                                                     self.physical_rows, dataset_where(self._dataset))
            offsets.flags.writeable = False
            _remember(cache, key, offsets, _DELETION_CACHE_LIMIT)
        return offsets

    def _deletion_key(self) -> tuple[int, int, int, int]:
        df = self.proto.deletion_file
        return (self.fragment_id, int(df.file_type), int(df.read_version), int(df.id))

    def live_mask(self) -> np.ndarray | None:
        """Boolean mask over physical rows (None when nothing is deleted)."""
        if not self.proto.HasField("deletion_file") or not self.num_deletions:
            return None
        mask = np.ones(self.physical_rows, dtype=bool)
        mask[self.deleted_offsets] = False
        return mask

    def live_offsets(self) -> np.ndarray:
        """Physical offsets (uint64, ascending) of the rows not deleted."""
        mask = self.live_mask()
        if mask is None:
            return np.arange(self.physical_rows, dtype=np.uint64)
        return np.flatnonzero(mask).astype(np.uint64)

    def live_offsets_in(self, ranges: np.ndarray) -> np.ndarray:
        """Physical offsets (uint64, ascending) of the live rows within ``ranges``, an ``(n, 2)``
        array of sorted, disjoint ``[start, end)`` physical row ranges."""
        ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        starts, ends = ranges[:, 0], ranges[:, 1]
        lengths = ends - starts
        total = int(lengths.sum())
        offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(total)
        offsets = offsets.astype(np.uint64)
        mask = self.live_mask()
        if mask is not None:
            offsets = offsets[mask[offsets.astype(np.int64)]]
        return offsets

    def row_addresses(self, offsets: np.ndarray | None = None) -> np.ndarray:
        """``_rowaddr`` values (fragment id << 32 | offset) of all physical rows or of ``offsets``."""
        offs = np.arange(self.physical_rows, dtype=np.uint64) if offsets is None else offsets.astype(np.uint64)
        return addresses.row_addresses(np.full(offs.size, self.fragment_id, dtype=np.uint64), offs)

    @property
    def stable_row_ids(self) -> np.ndarray | None:
        """Per physical row stable ids, None when the dataset has none (computed once per
        fragment object, without ``cached_property``'s class-wide lock)."""
        d = self.__dict__
        if "_stable_row_ids" not in d:
            d["_stable_row_ids"] = rowids.read_fragment_row_ids(
                self._dataset.store, self._dataset.base, self.proto, manifest_path=dataset_where(self._dataset))
        got: np.ndarray | None = d["_stable_row_ids"]
        return got

    def row_ids(self, offsets: np.ndarray | None = None) -> np.ndarray:
        """``_rowid`` values: stable ids when enabled, else row addresses."""
        ids = self.stable_row_ids
        if ids is None:
            return self.row_addresses(offsets)
        return ids if offsets is None else ids[offsets.astype(np.int64)]

    # --- data ------------------------------------------------------------------------------
    def data_file_reader(self, file_index: int, *, check: bool = True) -> DataFileReader:
        """The (cached) reader of data file ``file_index`` of this fragment, of its file version.

        A newly opened file is checked against the manifest (row count, field ids) unless
        ``check=False`` (for ``verify``, which reports each disagreement itself)."""
        return self._reader(file_index, check)

    def _reader(self, file_index: int, check: bool = True) -> DataFileReader:
        reader = self._readers.get(file_index)
        if reader is None:
            df = self.proto.files[file_index]
            ds = self._dataset
            legacy = _is_legacy_file(df, ds.manifest)
            # data files never change: every fragment object of this dataset shares one reader per
            # file (legacy readers also depend on the version's schema and dictionaries)
            key: tuple = (df.path, ds.version) if legacy else (df.path,)
            cache = ds.cache(_READERS_CACHE)
            cached: DataFileReader | None = cache.get(key)
            if cached is not None:
                self._readers[file_index] = cached
                return cached
            path = resolve_inside(ds.store, ds.base, df.path, under=(naming.DATA_DIR,),
                                  what=f"data file path of fragment {self.proto.id}", where=dataset_where(ds))
            try:
                # --- legacy v0.1 dispatch (owner: legacy reader, lance_ops/format/legacy/reader.py) ---
                if legacy:
                    from lance_ops.format.legacy.reader import LegacyFileReader

                    # dictionary values: the version's (decoded from its manifest file, as pylance
                    # reads them), else the manifest file itself for the reader to look up
                    mf = ds.manifest_file
                    reader = LegacyFileReader(
                        path, store=ds.store, schema_fields=ds.manifest.fields, field_ids=list(df.fields),
                        dictionaries=mf.dictionaries or mf.path or None, schema_metadata=dict(ds.manifest.schema_metadata),
                    )
                else:
                    reader = open_file_reader(path, store=ds.store, memo=ds.cache(_FORMAT_MEMO))
                # --- end legacy dispatch ---
            except ObjectNotFoundError as exc:
                # a missing file is a damaged manifest as often as a removed file: name both
                raise ObjectNotFoundError(
                    f"{exc} (data file {df.path!r} of fragment {self.fragment_id} in manifest "
                    f"{dataset_where(ds)})") from exc
            if check:
                _check_data_file(reader, df, self.proto, ds, legacy)
            self._readers[file_index] = reader
            _remember(cache, key, reader, _READER_CACHE_LIMIT)
        return reader

    def locate_fields(self, field_ids: Sequence[int]) -> dict[int, tuple[int, str]]:
        """Top-level field id -> (index of the data file storing it, column name inside that
        file), for the ``field_ids`` some data file of this fragment stores."""
        wanted = set(field_ids)
        descendants = self._dataset.descendant_field_ids
        found: dict[int, tuple[int, str]] = {}
        for i, df in enumerate(self.proto.files):
            stored = set(df.fields)
            hits = [fid for fid in wanted if fid not in found and descendants.get(fid, {fid}) & stored]
            if not hits:
                continue
            name_of = _top_level_names(self._reader(i))
            for fid in hits:
                if fid in name_of:
                    found[fid] = (i, name_of[fid])
        return found

    def read(self, fields: Sequence[pa.Field], field_ids: Sequence[int], offsets: np.ndarray | None = None,
             *, blob_handling: str = "all_binary") -> pa.Table:
        """Physical rows (all, or ``offsets`` in that order) of the given top-level fields.

        ``"logical"`` (what compaction copies) returns blob v2 columns in their written form
        (``struct<data, uri[, position, size]>``): bytes, external URIs left as references.

        Blob columns come as bytes (``"all_binary"``, what compaction copies) or, with
        ``"descriptions"``, as the descriptions pylance's datasets return (the fields' types
        are then :func:`~lance_ops.format.blob_v2.described_field` of the given ones).
        """
        n = self.physical_rows if offsets is None else len(offsets)
        logical = blob_handling == "logical"  # blob v2 as written: bytes, or external URIs kept
        describe = blob_handling not in ("all_binary", "logical")
        out_fields = [f if logical and blob_v2.is_blob_v2(f) else
                      blob_v2.described_field(f) if describe else blob_v2.binary_field(f) for f in fields]
        blob_ids = {fid for f, fid in zip(fields, field_ids) if blob_v2.has_blobs(f)}
        v2_ids = {fid for f, fid in zip(fields, field_ids) if blob_v2.is_blob_v2(f)}
        located = self.locate_fields(field_ids)
        by_file: dict[int, list[tuple[int, str]]] = {}
        for fid, (file_index, name) in located.items():
            by_file.setdefault(file_index, []).append((fid, name))
        columns: dict[int, pa.ChunkedArray] = {}
        for file_index, entries in by_file.items():
            reader = self._reader(file_index)
            names = [name for _, name in entries]
            kwargs: dict[str, Any] = (
                {"blob_descriptions": True} if describe and any(fid in blob_ids for fid, _ in entries) else {})
            if offsets is None:
                table = reader.read_all(columns=names, **kwargs)
            else:
                table = reader.take_rows(offsets, columns=names, **kwargs)
            for fid, name in entries:
                col = table.column(name)
                if fid in v2_ids and logical:
                    field = fields[list(field_ids).index(fid)]
                    col = pa.chunked_array([self._v2_logical(col, file_index, field)], field.type)
                elif fid in v2_ids:
                    col = self._v2_column(col, file_index, describe)
                columns[fid] = col
        arrays = []
        fields = out_fields
        for field, fid in zip(fields, field_ids):
            col = columns.get(fid)
            if col is None:
                col = pa.chunked_array([pa.nulls(n, field.type)], field.type)
            elif col.type != field.type:
                col = col.cast(field.type)
            arrays.append(col)
        if not arrays:  # no columns asked for (e.g. only _rowid): keep the row count
            return _empty_columns(n)
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


    def _v2_logical(self, col: pa.ChunkedArray, file_index: int, field: pa.Field) -> pa.Array:
        """A blob v2 column in its written form (see :meth:`read`)."""
        if col.type == blob_v2.DESCRIPTION_TYPE:  # a legacy-layout file below a blob v2 field
            col = pa.chunked_array([blobs.descriptors_from_legacy(col)], blob_v2.DESCRIPTOR_TYPE)
        if pa.types.is_large_binary(col.type):
            return blob_v2.to_logical(col, field)
        return blobs.v2_logical(self._dataset, self.proto.files[file_index], col, field)

    def _v2_column(self, col: pa.ChunkedArray, file_index: int, describe: bool) -> pa.ChunkedArray:
        """A blob v2 column as read from a data file, made what the read asked for: descriptors
        as they are, or (bytes) resolved. A file that still holds the legacy layout (pylance
        relabels legacy blob fields as blob v2 when it commits to such a 2.2 dataset) reads as
        inline descriptors / its bytes."""
        if pa.types.is_large_binary(col.type):  # legacy column, bytes already
            return col
        if col.type == blob_v2.DESCRIPTION_TYPE:  # legacy column, descriptions
            return pa.chunked_array([blobs.descriptors_from_legacy(col)], blob_v2.DESCRIPTOR_TYPE)
        if describe:
            return col
        return pa.chunked_array([blobs.v2_bytes(self._dataset, self.proto.files[file_index], col)],
                                pa.large_binary())


def load_deletions(fragments: Sequence[LanceFragment]) -> None:
    """Read the deletion vectors of ``fragments`` (fragments of one dataset) not read yet, all at
    once (:func:`lance_ops.table.deletion.read_deletion_vectors`: one directory check, one
    decode per file length, a thread pool on remote stores), as ``deleted_offsets`` would one
    by one; they land in the dataset's cache and on the fragment objects."""
    todo = [f for f in fragments if "_deleted_offsets" not in f.__dict__ and f.proto.HasField("deletion_file")]
    if not todo:
        return
    ds = todo[0]._dataset
    cache = ds.cache(_DELETIONS_CACHE)
    missing = []
    for f in todo:
        got = cache.get(f._deletion_key())
        if got is None:
            missing.append(f)
        else:
            f.__dict__["_deleted_offsets"] = got
    if len(missing) < 2:  # one file: the usual path
        for f in missing:
            f.deleted_offsets  # noqa: B018
        return
    vectors = deletion.read_deletion_vectors(ds.store, ds.base, [f.proto for f in missing], dataset_where(ds))
    for f, offsets in zip(missing, vectors):
        offsets.flags.writeable = False
        _remember(cache, f._deletion_key(), offsets, _DELETION_CACHE_LIMIT)
        f.__dict__["_deleted_offsets"] = offsets


def fragment_of(dataset: Any, fragment_id: int) -> "LanceFragment":
    """Fragment ``fragment_id`` of ``dataset`` (how a pickled fragment is rebuilt)."""
    frag = dataset.get_fragment(fragment_id)
    if frag is None:
        raise ValueError(f"{dataset.uri}: version {dataset.version} has no fragment {fragment_id}")
    return frag


def forget_readers(dataset: Any, fragment: table_pb2.DataFragment) -> None:
    """Drop the readers of ``fragment``'s data files from ``dataset``'s reader cache (added for
    compaction, which reads each file once: a cached small-file reader holds its file whole)."""
    cache = dataset.cache(_READERS_CACHE)
    for df in fragment.files:
        cache.pop((df.path,), None)
        cache.pop((df.path, dataset.version), None)


def _check_data_file(reader: DataFileReader, df: table_pb2.DataFile, frag: table_pb2.DataFragment,
                     ds: "DatasetSnapshot", legacy: bool) -> None:
    """The manifest's record of a data file must agree with the file's own footer: its row count
    with ``physical_rows`` and its field ids with ``DataFile.fields`` (each id once, each one
    stored in the file, every top-level field of the file covered). Costs no I/O: the footer
    was read to open the file. CorruptFileError naming the manifest and the data file otherwise.
    """
    problem = None
    if reader.num_rows != frag.physical_rows:
        problem = (f"fragment {frag.id} records {frag.physical_rows} physical rows but its data file holds "
                   f"{reader.num_rows}")
    elif not legacy:
        ids = list(df.fields)
        stored = {f.id: f.parent_id for f in reader.lance_fields}
        live = [fid for fid in ids if fid >= 0]  # negative ids: dropped columns (tombstones)
        listed = set(live)
        if len(listed) != len(live) or not listed <= stored.keys():
            problem = f"fragment {frag.id} lists field ids {ids} but its data file stores {sorted(stored)}"
        elif len(live) == len(ids):
            covered = set()
            for fid in listed:  # walk up to the top-level field of each listed id
                while stored.get(fid, -1) >= 0 and fid not in covered:
                    covered.add(fid)
                    fid = stored[fid]
                covered.add(fid)
            missing = [fid for fid, parent in stored.items() if parent < 0 <= fid and fid not in covered]
            if missing:
                problem = (f"fragment {frag.id} lists field ids {ids}, which leave the data file's top-level "
                           f"field(s) {missing} out")
    if problem is not None:
        raise CorruptFileError(dataset_where(ds), f"{problem} ({reader.path})")


def _empty_columns(num_rows: int) -> pa.Table:
    """A table with ``num_rows`` rows and no columns."""
    return pa.table({"_": pa.nulls(num_rows)}).drop_columns(["_"])


#: top-level field names per open data-file reader (readers are cached by the dataset and reused)
_TOP_LEVEL_NAMES: "weakref.WeakKeyDictionary[Any, dict[int, str]]" = weakref.WeakKeyDictionary()


def _top_level_names(reader: DataFileReader) -> dict[int, str]:
    """Field id -> name of the top-level fields stored in a data file (computed once per reader)."""
    try:
        return _TOP_LEVEL_NAMES[reader]
    except KeyError:
        pass
    except TypeError:  # a reader that cannot be weakly referenced: no cache
        return {f.id: f.name for f in reader.lance_fields if f.parent_id < 0}
    names = {f.id: f.name for f in reader.lance_fields if f.parent_id < 0}
    _TOP_LEVEL_NAMES[reader] = names
    return names


# --- legacy v0.1 dispatch (owner: legacy reader, lance_ops/format/legacy/reader.py) ---------------
def _is_legacy_file(df: table_pb2.DataFile, manifest: table_pb2.Manifest) -> bool:
    """A v0.1 data file: DataFile version 0.1/0.2, or (0, 0) in a manifest whose format is legacy."""
    if df.file_major_version != 0:
        return False
    if df.file_minor_version in (1, 2):
        return True
    return df.file_minor_version == 0 and FileVersion.is_legacy_manifest_text(manifest.data_format.version)
