"""``LanceDataset``: one version of a Lance dataset, with scans, takes, deletes, tags and history.

The API mirrors pylance's ``lance.LanceDataset`` so users can switch. A dataset object is a
snapshot: writes return a new object for the new version (``delete`` updates this one in place,
as pylance does).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import (
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OutOfRangeError,
    RetryableCommitConflictError,
    TagError,
)
from lance_ops.io import ObjectStore, open_store
from lance_ops.io.redact import RedactedOptions
from lance_ops.table import blobs as blobs_mod
from lance_ops.table import deletion as deletion_mod
from lance_ops.table import scan
from lance_ops.table import tags as tags_mod
from lance_ops.table import versions as versions_mod
from lance_ops.table.manifest import feature_flags
from lance_ops.table.manifest import naming
from lance_ops.table.commit import locate
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.filters import Filter, compile_filter
from lance_ops.table.scan import ROW_ADDR, ROW_ID
from lance_ops.table.snapshot import BlobSelection
from lance_ops.table.fragment import LanceFragment, load_deletions
from lance_ops.table.fragment_counts import DELETED_ROWS_RECORDED, PHYSICAL_ROWS, LazyFragments, live_counts
from lance_ops.table.columns import ColumnPlan, restore_extension_types, with_extension_types
from lance_ops.table.extension_types import view_schema
from lance_ops.table.manifest.codec import (ManifestFile, check_fragments, manifest_schema, read_manifest,
                                            read_manifest_bytes)
from lance_ops.table.manifest.summary import VersionSummarizer

_DELETED_ROWS = "lance_ops.num_deleted_rows"
#: fragments whose deletion vectors a take reads at once
_TAKE_WORKERS = 4
#: ``to_batches`` reads a fragment in pieces of about this many bytes of its data files (bounded memory)
STREAM_READ_BYTES = 64 * 1024 * 1024
_STREAM_MIN_ROWS = 8192


def _stream_rows(fragment: table_pb2.DataFragment) -> int:
    """Physical rows per streamed piece of ``fragment`` (from its data files' sizes; 0: do not split)."""
    size = sum(int(df.file_size_bytes) for df in fragment.files)
    rows = int(fragment.physical_rows)
    if not size or not rows or size <= STREAM_READ_BYTES:
        return 0
    return max(_STREAM_MIN_ROWS, STREAM_READ_BYTES * rows // size)


def open_manifest(store: ObjectStore, base: str, version: int | str | None, uri: str) -> ManifestFile:
    """The ManifestFile of ``version`` (int, tag name, or None for the latest)."""
    if isinstance(version, str):
        version = tags_mod.resolve_tag_version(store, base, version)
    if version is None:
        loc = locate.latest_version(store, base)
        if loc is None:
            raise DatasetNotFoundError(f"Dataset at path {uri} was not found: no versions under _versions/")
    else:
        loc = locate.find_version(store, base, int(version))
        if loc is None:
            raise DatasetNotFoundError(f"{uri}: version {version} does not exist")
    mf = read_manifest(store, loc.path)
    feature_flags.check_reader_flags(mf.manifest.reader_feature_flags, store.uri(loc.path))
    check_fragments(mf, store.uri(loc.path), bool(mf.manifest.reader_feature_flags & feature_flags.FLAG_STABLE_ROW_IDS))
    return mf


#: pylance's tag reference: a version, a tag name, or ``(branch, version)``
TagReference = Union[int, str, Tuple[Optional[str], Optional[int]], None]


class Tags:
    """``ds.tags``: create, delete, update and list tags (``_refs/tags/*.json``)."""

    def __init__(self, dataset: "LanceDataset") -> None:
        self._ds = dataset

    def create(self, tag: str, reference: TagReference = None, *, version: int | None = None) -> None:
        """Tag a version as ``tag`` (which must not exist yet); ``reference`` as pylance's (see
        :meth:`resolve_reference`). ``version=`` is the earlier lance-ops keyword (deprecated)."""
        tags_mod.create_tag(self._ds.store, self._ds.base, tag, self._version(reference, version, "create"))

    def delete(self, tag: str) -> None:
        """Remove tag ``tag``."""
        tags_mod.delete_tag(self._ds.store, self._ds.base, tag)

    def update(self, tag: str, reference: TagReference = None, *, version: int | None = None) -> None:
        """Point the existing tag ``tag`` at another version (``reference`` as in :meth:`create`)."""
        tags_mod.get_tag(self._ds.store, self._ds.base, tag)  # a missing tag is named first, as pylance
        tags_mod.update_tag(self._ds.store, self._ds.base, tag, self._version(reference, version, "update"))

    def get_version(self, tag: str) -> int:
        """The version ``tag`` points at (TagNotFoundError, a ValueError, if there is none)."""
        return tags_mod.resolve_tag_version(self._ds.store, self._ds.base, tag)

    def replace_metadata(self, tag: str, metadata: dict[str, str]) -> None:
        """Replace ``tag``'s metadata map (its version and ``updated_at`` stay)."""
        tags_mod.replace_tag_metadata(self._ds.store, self._ds.base, tag, metadata)

    def _version(self, reference: TagReference, version: int | None, verb: str) -> int:
        if version is not None:
            import warnings

            warnings.warn(f"tags.{verb}(tag, version=...) is deprecated: pass the version as pylance's "
                          "`reference` (second positional argument)", DeprecationWarning, stacklevel=3)
            reference = version
        return self.resolve_reference(reference)

    def resolve_reference(self, reference: TagReference) -> int:
        """The version pylance's tag ``reference`` names: None -> this dataset's version; an int ->
        that version; a str -> the version of that tag; ``(branch, version)`` with branch None or
        ``"main"`` -> that version (None: the latest). Other branches do not exist here."""
        if reference is None:
            return self._ds.version
        if isinstance(reference, bool):
            raise TagError("Version must be an int, a str or a (int, str) tuple.")
        if isinstance(reference, int):
            return reference
        if isinstance(reference, str):
            return tags_mod.resolve_tag_version(self._ds.store, self._ds.base, reference)
        if isinstance(reference, tuple) and len(reference) == 2:
            branch, number = reference
            if branch not in (None, "main"):
                raise DatasetNotFoundError(f"{self._ds.uri}: version {branch}:{number} does not exist "
                                           "(lance-ops datasets have only the main branch)")
            if number is None:
                return self._ds.latest_version
            if isinstance(number, int) and not isinstance(number, bool):
                return number
        raise TagError("Version must be an int, a str or a (int, str) tuple.")

    def list(self) -> dict[str, dict]:
        """Every tag with its version, by name."""
        return tags_mod.list_tags(self._ds.store, self._ds.base)

    def list_ordered(self, order: str | None = None) -> List[Tuple[str, dict]]:
        """``(name, tag)`` pairs by version: newest first (``order=None`` or ``"desc"``) or ``"asc"``."""
        if order not in (None, "asc", "desc"):
            raise InvalidArgumentError(f"tags.list_ordered(order={order!r}): order must be 'asc', 'desc' or None")
        items = sorted(self.list().items(), key=lambda kv: (kv[1]["version"], kv[0]))
        return items if order == "asc" else items[::-1]


class LanceDataset:
    """A Lance dataset at one version."""

    def __init__(self, uri: str, version: int | str | None = None, storage_options: Mapping[str, Any] | None = None,
                 *, _manifest_file: ManifestFile | None = None, _store: tuple[ObjectStore, str] | None = None) -> None:
        self.uri = str(uri)
        self.storage_options = RedactedOptions(storage_options or {})  # repr() masks credentials
        if _store is None:
            self._store, self._base = open_store(self.uri, self.storage_options)
        else:
            self._store, self._base = _store
        self._manifest_file = _manifest_file or open_manifest(self._store, self._base, version, self.uri)
        self._caches: dict[str, dict] = {}

    # --- metadata ----------------------------------------------------------------------------
    @property
    def manifest(self) -> table_pb2.Manifest:
        """The manifest of this version (schema, fragments, feature flags)."""
        return self._manifest_file.manifest

    @property
    def manifest_file(self) -> ManifestFile:
        """The decoded manifest file of this version (with its index and transaction sections)."""
        return self._manifest_file

    @property
    def store(self) -> ObjectStore:
        """The object store holding the dataset's files (local directory or S3 bucket)."""
        return self._store

    @property
    def base(self) -> str:
        """The dataset root inside :attr:`store`: the path its ``_versions/``, ``data/`` ... are joined to."""
        return self._base

    def cache(self, name: str) -> dict:
        """This dataset object's cache called ``name`` (created empty on first use), for readers,
        deletion vectors, statistics and indexes that are costly to load and never change; it lives
        as long as the object and is kept when the object moves to a newer version."""
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches.setdefault(name, {})  # atomic: concurrent first uses share one dict
        return cache

    @property
    def version(self) -> int:
        """The version number this object reads."""
        return self.manifest.version

    @property
    def latest_version(self) -> int:
        """The newest version in the store now (one listing; this object stays at its version)."""
        loc = locate.latest_version(self._store, self._base)
        return loc.version if loc else self.version

    @cached_property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version as pylance shows it: extension types (tensors, uuids,
        bfloat16, ``arrow.json``, at any depth) as their types, not as stored (ADR 0030)."""
        return view_schema(self.storage_schema)

    @cached_property
    def storage_schema(self) -> pa.Schema:
        """The Arrow schema of this version as stored (extension types as their storage type named
        in the field metadata, JSON as ``lance.json`` JSONB): what reads and filters work on."""
        return manifest_schema(self._manifest_file, self._store)

    @property
    def top_field_ids(self) -> Mapping[str, int]:
        """Field id of each top-level column, by name (in schema order); do not modify."""
        return self._top_field_ids

    @cached_property
    def _top_field_ids(self) -> dict[str, int]:
        return {f.name: f.id for f in self.manifest.fields if f.parent_id < 0}

    @property
    def descendant_field_ids(self) -> Mapping[int, set[int]]:
        """Each top-level field id with the ids of itself and all its nested fields; do not modify."""
        return self._descendants

    @cached_property
    def _descendants(self) -> dict[int, set[int]]:
        children: dict[int, list[int]] = {}
        for f in self.manifest.fields:
            children.setdefault(f.parent_id, []).append(f.id)

        def collect(fid: int) -> set[int]:
            out = {fid}
            for c in children.get(fid, []):
                out |= collect(c)
            return out

        return {fid: collect(fid) for fid in self._top_field_ids.values()}

    @property
    def data_storage_version(self) -> str:
        """The data file format version the manifest records (e.g. ``"2.0"``, ``"2.1"``)."""
        return self.manifest.data_format.version or versions_mod.UNRECORDED.value

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether ``_rowid`` values are stable row ids (else they are row addresses)."""
        return bool(self.manifest.reader_feature_flags & feature_flags.FLAG_STABLE_ROW_IDS)

    @property
    def tags(self) -> Tags:
        """The dataset's tags (named versions)."""
        return Tags(self)

    @property
    def transaction(self) -> transaction_pb2.Transaction | None:
        """The transaction that made this version, None if it was not recorded."""
        from lance_ops.table.commit.transaction_file import load_transaction

        return load_transaction(self._store, self._base, self._manifest_file)

    def versions(self) -> list[dict]:
        """Every version with its timestamp and summary metadata (as pylance)."""
        out = []
        summarizer = VersionSummarizer()  # fragments repeated from the version before are not decoded again
        for loc in naming.list_versions(self._store, self._base):
            got = summarizer.summarize(read_manifest_bytes(self._store, loc.path), self._store.uri(loc.path))
            out.append({
                "version": got.manifest.version,
                "timestamp": _local_timestamp(got.manifest),
                "metadata": got.metadata(),
            })
        return out

    def checkout_version(self, version: int | str) -> "LanceDataset":
        """A new object for ``version`` (a number or a tag name), sharing this one's store."""
        return type(self)(self.uri, version, self.storage_options, _store=(self._store, self._base))

    def reopen_latest(self) -> "LanceDataset":
        """A new object for the latest version of this dataset, sharing this one's store."""
        return type(self)(self.uri, None, self.storage_options, _store=(self._store, self._base))

    def get_fragments(self, filter: Any = None) -> list[LanceFragment]:
        """The fragments of this version, in manifest order (``filter``: pylance 14 refuses any)."""
        if filter is not None:
            raise InvalidArgumentError("get_fragments() does not support filter yet")
        return [LanceFragment(self, f) for f in self.manifest.fragments]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """The fragment with id ``fragment_id``, None if this version has none."""
        for f in self.manifest.fragments:
            if f.id == fragment_id:
                return LanceFragment(self, f)
        return None

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version}, fragments={len(self.manifest.fragments)})"

    # --- scanning ------------------------------------------------------------------------------
    def _fragment_tables(self, columns: Sequence[str] | None, filter: str | pc.Expression | Filter | None,
                         with_row_id: bool, with_row_address: bool, fragment_ids: set[int] | None = None,
                         blobs: str = "blobs_descriptions", bounded: bool = False) -> Iterator[pa.Table]:
        """One table per planned fragment (the scan planner prunes by statistics), in order;
        ``bounded`` (streaming): large fragments in pieces of about ``STREAM_READ_BYTES`` each.
        Fragments are read side by side and filters evaluated per group (``scan.execute_many``)."""
        tasks: Iterator[scan.FragmentScanTask] = scan.iter_plan(
            self, columns, filter, fragments=fragment_ids, with_row_id=with_row_id,
            with_row_address=with_row_address, blob_handling=blobs)
        if bounded:
            tasks = (piece for task in tasks for piece in task.split(_stream_rows(task.fragment)))
        yield from scan.execute_many(self, tasks)

    def to_batches(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                   filter: str | pc.Expression | None = None, *, with_row_id: bool = False,
                   with_row_address: bool = False, batch_size: int | None = None,
                   blob_handling: str | None = None, fragments: FragmentSelection = None,
                   strict_batch_size: bool = False, **tuning: Any) -> Iterator[pa.RecordBatch]:
        """Stream the matching rows fragment by fragment (memory bounded by one fragment's columns).

        Blob columns come as their descriptions, or as bytes with ``blob_handling="all_binary"``
        (as pylance). ``strict_batch_size``: every batch but the last has ``batch_size`` rows
        (batches otherwise end at fragment boundaries). pylance's executor knobs
        (:data:`TUNING_OPTIONS`) are accepted and change nothing."""
        check_tuning(tuning)
        blobs = blobs_mod.check_blob_handling(blob_handling)
        plan = ColumnPlan(self, columns)
        metadata = self.storage_schema.metadata

        def tables() -> Iterator[pa.Table]:
            for table in self._fragment_tables(plan.read, filter, with_row_id, with_row_address or plan.needs_address,
                                               _ids(fragments), blobs=blobs, bounded=True):
                table = plan.apply(table, with_row_id, with_row_address)
                if table.num_columns and not plan.computed:
                    table = table.replace_schema_metadata(metadata)
                yield table

        if strict_batch_size and batch_size:
            yield from _strict_batches(tables(), batch_size)
            return
        for table in tables():
            yield from table.to_batches(max_chunksize=batch_size)

    def to_table(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,
                 offset: int | None = None, *, with_row_id: bool = False, with_row_address: bool = False,
                 blob_handling: str | None = None, fragments: FragmentSelection = None, **tuning: Any) -> pa.Table:
        """The matching rows; blob columns as descriptions, or bytes with ``blob_handling="all_binary"``.

        ``columns`` may map output names to SQL expressions (``{"a": "b * 100"}``), as pylance's
        computed projections; ``offset`` and ``limit`` must not be negative."""
        _check_offset_limit(offset, limit)
        check_tuning(tuning)
        blobs = blobs_mod.check_blob_handling(blob_handling)
        plan = ColumnPlan(self, columns)
        schema = plan.schema(with_row_id, with_row_address, blobs)
        tables = [plan.apply(t, with_row_id, with_row_address)
                  for t in self._fragment_tables(plan.read, filter, with_row_id, with_row_address or plan.needs_address,
                                                 _ids(fragments), blobs=blobs)]
        if len(schema) == 0:
            # no columns: only the row count matters (concat_tables and replace_schema_metadata
            # would both reset it to 0 on column-less tables)
            rows = sum(t.num_rows for t in tables)
            result = pa.table({"_": pa.nulls(rows)}).drop_columns(["_"])
        else:
            # (concat_tables ignores schema metadata: the result's is set once, not per fragment)
            result = (pa.concat_tables(tables).replace_schema_metadata(schema.metadata) if tables
                      else schema.empty_table())
        if offset or limit is not None:
            result = result.slice(offset or 0, limit)
        return result.combine_chunks() if result.num_rows else result

    def count_rows(self, filter: str | pc.Expression | None = None, *,
                   fragment_ids: Sequence[int] | None = None) -> int:
        """Live rows of this version (matching ``filter``; of the fragments ``fragment_ids`` only, when given).

        Without a filter this reads only the manifest and deletion counts; with one, a single
        column is scanned (the planner prunes fragments by statistics)."""
        # (no filter: no schema needed, so none is built)
        filt = None if filter is None else compile_filter(filter, self.storage_schema)
        wanted = None if fragment_ids is None else set(fragment_ids)
        if (filt is None or filt.constant is True) and wanted is None:
            return int(live_counts(LazyFragments(self)).sum())  # from the version's fragment facts
        protos = self.manifest.fragments if wanted is None else [f for f in self.manifest.fragments if f.id in wanted]
        if filt is None or filt.constant is True:
            # the manifest's counts (no fragment objects: thousands of fragments are common); a
            # deletion file without a recorded count (very old writers) is read and counted
            deleted = list(map(DELETED_ROWS_RECORDED, protos))  # 0 without a deletion file
            total = sum(map(PHYSICAL_ROWS, protos)) - sum(deleted)
            if 0 in deleted:
                total += sum(LanceFragment(self, f).count_rows() - int(f.physical_rows)
                             for f, n in zip(protos, deleted) if not n and not deletion_mod.deletion_count_known(f))
            return int(total)
        if filt.constant is False:
            return 0
        cols = [c for c in filt.columns if c in self._top_field_ids][:1]
        return sum(t.num_rows for t in self._fragment_tables(cols, filt, False, False, {int(f.id) for f in protos}))

    def scanner(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None, *, with_row_id: bool = False, with_row_address: bool = False,
                batch_size: int | None = None, blob_handling: str | None = None,
                fragments: FragmentSelection = None, strict_batch_size: bool = False, **tuning: Any) -> "Scanner":
        """A scan to run later (``to_table`` / ``to_batches`` / ``count_rows``), as pylance's;
        ``fragments`` (fragments or ids) restricts it to those fragments (in manifest order:
        ``scan_in_order`` is one of the accepted :data:`TUNING_OPTIONS`)."""
        blobs_mod.check_blob_handling(blob_handling)
        _check_offset_limit(offset, limit)
        check_tuning(tuning)
        return Scanner(self, columns, filter, limit, offset, with_row_id, with_row_address, batch_size, blob_handling,
                       fragments, strict_batch_size)

    # --- takes -----------------------------------------------------------------------------------
    def take(self, indices: Sequence[int] | np.ndarray | pa.Array, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows at positions ``indices`` among the live rows, in the order given (duplicates allowed)."""
        idx = np.asarray(indices.to_numpy() if isinstance(indices, pa.Array) else indices, dtype=np.int64)
        frags = LazyFragments(self)  # fragment objects only for the fragments the rows are in
        which, starts = self._locate_live(frags, idx)
        return self._take_physical(frags, which, lambda f, pos: f.live_offsets()[pos] if f.num_deletions else pos.astype(np.uint64),
                                   idx - starts[which], columns)

    def _locate_live(self, frags: Sequence[LanceFragment], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fragment of each live-row position in ``idx`` and each fragment's first position (OutOfRangeError if out of range)."""
        live = live_counts(frags)
        starts = np.concatenate([[0], np.cumsum(live)])
        total = int(starts[-1])
        if idx.size and (idx.min() < 0 or idx.max() >= total):
            # the counts come from the manifest: make sure it is not damaged (reading the
            # deletion vectors checks them against it)
            load_deletions(list(frags))
            bad = int(idx[(idx < 0) | (idx >= total)][0])
            raise OutOfRangeError(f"{self.uri}: take index {bad} out of range for {total} rows "
                                  f"(valid positions are 0..{total - 1})")
        return np.searchsorted(starts, idx, side="right") - 1, starts

    def _take_physical(self, frags: Sequence[LanceFragment], which: np.ndarray,
                       to_offsets: Callable[[LanceFragment, np.ndarray], np.ndarray], positions: np.ndarray,
                       columns: Sequence[str] | None) -> pa.Table:
        out_columns = scan.resolve_columns(self, columns)
        schema = scan.output_schema(self, out_columns, False, False)
        if positions.size == 0:
            return with_extension_types(schema).empty_table()
        if len(schema) == 0:  # nothing to read; concat_tables would lose the row count
            return pa.table({"_": pa.nulls(int(positions.size))}).drop_columns(["_"])
        order = np.argsort(which, kind="stable")
        placed = [order[which[order] == frag_pos] for frag_pos in np.unique(which)]
        chosen = [frags[int(which[sel[0]])] for sel in placed]

        def task_of(frag: LanceFragment, sel: np.ndarray) -> scan.FragmentScanTask:
            offs = np.asarray(to_offsets(frag, positions[sel]), dtype=np.uint64)
            return scan.fragment_task(self, frag, out_columns, offsets=offs)

        load_deletions(chosen)  # the deletion vectors (to_offsets) read together
        # ... and the fragments' rows side by side
        if len(chosen) > 1:
            with ThreadPoolExecutor(max_workers=min(_TAKE_WORKERS, len(chosen)),
                                    thread_name_prefix="lance-ops-take") as pool:
                tasks = list(pool.map(task_of, chosen, placed))
        else:
            tasks = [task_of(f, sel) for f, sel in zip(chosen, placed)]
        pieces = [t.replace_schema_metadata(schema.metadata) for t in scan.execute_many(self, tasks)]
        table = pa.concat_tables(pieces)
        inverse = np.empty(positions.size, dtype=np.int64)
        inverse[np.concatenate(placed)] = np.arange(positions.size)
        table = table.take(pa.array(inverse)).combine_chunks()
        return restore_extension_types(table, with_extension_types(table.schema))  # as pylance's takes

    def take_fragment_rows(self, fragment: LanceFragment, indices: Sequence[int] | np.ndarray | pa.Array,
                           columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows at positions ``indices`` among ``fragment``'s live rows (``LanceFragment.take``)."""
        idx = np.asarray(indices.to_numpy() if isinstance(indices, pa.Array) else indices, dtype=np.int64)
        live = fragment.count_rows()
        if idx.size and (idx.min() < 0 or idx.max() >= live):
            bad = int(idx[(idx < 0) | (idx >= live)][0])
            raise OutOfRangeError(f"{self.uri}: fragment {fragment.fragment_id}: take index {bad} out of range "
                                  f"for {live} rows")
        which = np.zeros(idx.size, dtype=np.int64)
        return self._take_physical([fragment], which, lambda f, pos: f.live_offsets()[pos] if f.num_deletions
                                   else pos.astype(np.uint64), idx, columns if columns is None else list(columns))

    def __len__(self) -> int:
        """Live rows of this version (pylance's ``len(ds)``)."""
        return self.count_rows()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as (uri, version, storage options): reopened where it is unpickled (Spark, Ray workers)."""
        return (type(self), (self.uri, self.version, dict(self.storage_options)))

    def take_blobs(self, blob_column: str, ids: BlobSelection | None = None, addresses: BlobSelection | None = None,
                   indices: BlobSelection | None = None, *,
                   buffer_size: int = blobs_mod.DEFAULT_BUFFER_SIZE) -> list:
        """File-like :class:`~lance_ops.table.blobs.BlobFile` objects (``None`` for nulls) for the
        rows chosen by exactly one of ``ids`` (``_rowid``), ``addresses`` (``_rowaddr``) or
        ``indices`` (positions among live rows), in that order; nothing is read until asked."""
        return blobs_mod.take_blobs(self, blob_column, ids, addresses, indices, buffer_size=buffer_size)

    def select_rows(self, kind: str, values: np.ndarray) -> tuple[list[LanceFragment], np.ndarray, np.ndarray]:
        """Where the rows chosen by ``values`` live: ``(fragments, position in fragments per row,
        physical offset per row)``; ``kind`` is ``"ids"`` (``_rowid``), ``"addresses"`` or
        ``"indices"`` (positions among live rows). As pylance's ``take_blobs``, deleted or missing
        rows are an error (not skipped)."""
        from lance_ops.errors import UnsupportedError
        from lance_ops.table import addresses as addr_mod

        frags = self.get_fragments()
        if kind == "indices":
            idx = values.astype(np.int64)
            which, starts = self._locate_live(frags, idx)
            offs = np.zeros(idx.size, dtype=np.uint64)
            for f in np.unique(which).tolist():
                sel = np.flatnonzero(which == f)
                pos = idx[sel] - starts[f]
                frag = frags[f]
                offs[sel] = frag.live_offsets()[pos] if frag.num_deletions else pos.astype(np.uint64)
            return frags, which, offs
        vals = values.astype(np.uint64)
        if kind == "ids" and self.has_stable_row_ids:
            from lance_ops.table.rowid_lookup import locate_row_ids

            which, offs = locate_row_ids(self, frags, vals)
        else:  # row addresses (also the ids of datasets without stable row ids)
            frag_ids, offs = addr_mod.split_row_addresses(vals)
            pos_of = {f.fragment_id: i for i, f in enumerate(frags)}
            uniq, inverse = np.unique(frag_ids, return_inverse=True)
            which = np.array([pos_of.get(x, -2) for x in uniq.tolist()], dtype=np.int64)[inverse.reshape(-1)]
            if (which == -2).any():
                bad = int(vals[which == -2][0])
                raise OutOfRangeError(f"{self.uri}: row address {bad} belongs to non-existent fragment {bad >> 32}")
            for f in np.unique(which).tolist():
                sel = np.flatnonzero(which == f)
                frag = frags[f]
                o = offs[sel].astype(np.int64)
                if (o >= frag.physical_rows).any():
                    raise OutOfRangeError(f"{self.uri}: row address offset {int(o.max())} is beyond the "
                                     f"{frag.physical_rows} rows of fragment {frag.fragment_id}")
                mask = frag.live_mask()
                if mask is not None:
                    which[sel[~mask[o]]] = -1
        if (which < 0).any():
            bad = vals[which < 0][:10].tolist()
            raise UnsupportedError(f"{self.uri}: take_blobs cannot take deleted or missing rows {bad}")
        return frags, which, np.asarray(offs, dtype=np.uint64)

    def take_by_row_id(self, row_ids: Sequence[int] | np.ndarray | pa.Array,
                       columns: Sequence[str] | None = None) -> pa.Table:
        """Rows by ``_rowid`` (stable ids if enabled, else row addresses), in the order given.

        As pylance: ids of deleted rows (and, with stable row ids, ids that do not exist) are
        skipped; a row address pointing outside every fragment of this version raises KeyError.
        """
        ids = np.asarray(row_ids.to_numpy() if isinstance(row_ids, pa.Array) else row_ids, dtype=np.uint64)
        frags = self.get_fragments()
        from lance_ops.table.rowid_lookup import locate_row_ids

        which, offsets = locate_row_ids(self, frags, ids)
        live = which >= 0
        return self._take_physical(frags, which[live], lambda f, pos: pos, offsets[live], columns)

    # --- writes ------------------------------------------------------------------------------------
    def _commit(self, txn: transaction_pb2.Transaction, ctx: CommitContext | None = None,
                options: CommitOptions | None = None, properties: CommitProperties | None = None) -> ManifestFile:
        txn.read_version = self.version
        # refuse, before committing, to write into a dataset with writer features we do not know
        feature_flags.check_writer_flags(self.manifest.writer_feature_flags, self.uri)
        return commit_transaction(self._store, self._base, txn, ctx or CommitContext(self._manifest_file),
                                  options or CommitOptions(data_storage_version=self.data_storage_version),
                                  properties=properties)

    def move_to(self, mf: ManifestFile) -> None:
        """Make this object the snapshot of ``mf``, a version just committed to this dataset
        (the in-place writers ``delete``, ``restore`` and ``ds.optimize`` do, as in pylance)."""
        self._manifest_file = mf
        for attr in ("schema", "storage_schema", "_top_field_ids", "_descendants"):
            self.__dict__.pop(attr, None)

    def delete(self, predicate: str | pc.Expression, *, conflict_retries: int = 10,
               retry_timeout: timedelta = timedelta(seconds=30),
               transaction_properties: dict | None = None,
               idempotency_key: str | None = None) -> dict:
        """Delete the rows matching ``predicate``; returns ``{"num_deleted_rows": n}``.

        As pylance's: a conflicting commit is retried up to ``conflict_retries`` times while less
        than ``retry_timeout`` has passed (the first attempt always runs).

        With ``idempotency_key``, a delete already committed under that key (e.g. by an Airflow
        try that failed after committing) is not applied again: the earlier result is returned.
        """
        from lance_ops.table.commit import idempotency
        from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY
        from lance_ops.table.delete import plan_delete

        properties = CommitProperties.from_keywords("delete", idempotency_key=idempotency_key,
                                                    transaction_properties=transaction_properties)
        if idempotency_key:
            # the key ledger knows keys of versions cleanup removed (table/commit/idempotency.py)
            earlier = idempotency.lookup(self._store, self._base, idempotency_key, "delete")
            if earlier is not None:
                mf = idempotency.manifest_of(self._store, self._base, earlier)
                self.move_to(mf if mf is not None else self.reopen_latest().manifest_file)
                return {"num_deleted_rows": int(earlier.properties.get(_DELETED_ROWS, 0))}
        if not isinstance(retry_timeout, timedelta):
            raise InvalidArgumentTypeError(f"argument 'retry_timeout': {type(retry_timeout).__name__!r} object "
                                           "is not an instance of 'timedelta'")
        deadline = time.monotonic() + retry_timeout.total_seconds()
        ds = self
        for attempt in range(conflict_retries + 1):
            feature_flags.check_writer_flags(ds.manifest.writer_feature_flags, ds.uri)
            try:
                # (planning too: the version being scanned may be removed by cleanup meanwhile)
                txn, ctx, count = plan_delete(ds, predicate)
                if transaction_properties:
                    txn.transaction_properties.update(transaction_properties)
                if idempotency_key:
                    txn.transaction_properties[IDEMPOTENCY_KEY] = idempotency_key
                    txn.transaction_properties[_DELETED_ROWS] = str(count)
                mf = ds._commit(txn, ctx, properties=properties)
            except RetryableCommitConflictError:
                if attempt == conflict_retries or time.monotonic() >= deadline:
                    raise
                ds = ds.reopen_latest()
                continue
            self.move_to(mf)
            if idempotency_key:
                idempotency.remember(self._store, self._base, mf)
                if mf.transaction is not None and mf.transaction.uuid != txn.uuid:  # a concurrent try won
                    count = int(mf.transaction.transaction_properties.get(_DELETED_ROWS, 0))
            return {"num_deleted_rows": count}
        raise AssertionError("unreachable")

    def restore(self) -> "LanceDataset":
        """Make this (older) version the latest, as a new version."""
        txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid())
        txn.restore.version = self.version
        latest = self.reopen_latest()
        mf = latest._commit(txn)
        self.move_to(mf)
        return self


class Scanner:
    """A scan of a dataset with fixed options (``LanceDataset.scanner``)."""

    def __init__(self, ds: LanceDataset, columns: Sequence[str] | Mapping[str, str] | None,
                 filter: str | pc.Expression | None, limit: int | None, offset: int | None, with_row_id: bool,
                 with_row_address: bool, batch_size: int | None, blob_handling: str | None,
                 fragments: FragmentSelection = None, strict_batch_size: bool = False) -> None:
        self.dataset = ds
        self._strict = strict_batch_size
        self._args: dict[str, Any] = dict(columns=columns, filter=filter, with_row_id=with_row_id,
                          with_row_address=with_row_address, blob_handling=blob_handling, fragments=fragments)
        self._limit, self._offset, self._batch_size = limit, offset, batch_size

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the scan's output (projection, computed columns, row id/address columns)."""
        ds, a = self.dataset, self._args
        return ColumnPlan(ds, a["columns"]).schema(a["with_row_id"], a["with_row_address"],
                                                    blobs_mod.check_blob_handling(a["blob_handling"]))

    @property
    def dataset_schema(self) -> pa.Schema:
        """The schema of the scanned dataset (pylance's ``Scanner.dataset_schema``)."""
        return self.dataset.schema

    def to_table(self) -> pa.Table:
        """Run the scan: every matching row (after offset and limit) as one table."""
        return self.dataset.to_table(limit=self._limit, offset=self._offset, **self._args)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Run the scan as a stream of batches (streamed per fragment unless offset/limit need the whole table)."""
        if self._limit is None and not self._offset:
            return self.dataset.to_batches(batch_size=self._batch_size, strict_batch_size=self._strict, **self._args)
        return iter(self.to_table().to_batches(max_chunksize=self._batch_size))

    def head(self, num_rows: int) -> pa.Table:
        """The scan's first ``num_rows`` rows (pylance's ``LanceScanner.head``)."""
        limit = num_rows if self._limit is None else min(num_rows, self._limit)
        return self.dataset.to_table(limit=limit, offset=self._offset, **self._args)

    def to_reader(self) -> pa.RecordBatchReader:
        """The scan as an Arrow ``RecordBatchReader`` (what pylance's scanners hand to other engines)."""
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        """Rows the scan yields (without reading columns when there is no offset or limit)."""
        if self._limit is not None or self._offset is not None:
            raise InvalidArgumentError("Invalid user input: Cannot use limit/offset with aggregate. "
                                       "Apply limit to the result instead.")
        ids = _ids(self._args["fragments"])
        return self.dataset.count_rows(self._args["filter"], fragment_ids=None if ids is None else sorted(ids))


#: which fragments a scan reads: fragments or fragment ids; None for all
FragmentSelection = Optional[Sequence[Union[LanceFragment, int]]]


def _ids(fragments: Sequence[LanceFragment | int] | None) -> set[int] | None:
    """The ids of a scan's ``fragments`` argument (None: every fragment)."""
    if fragments is None:
        return None
    return {f.fragment_id if isinstance(f, LanceFragment) else int(f) for f in fragments}


#: pylance scan arguments that tune its executor (read-ahead, late materialisation, ordering of a
#: parallel scan, I/O buffers, index use); lance_ops scans fragments in order with no such knobs,
#: so these are accepted and change nothing
TUNING_OPTIONS = frozenset({"batch_readahead", "fragment_readahead", "late_materialization", "scan_in_order",
                            "io_buffer_size", "use_scalar_index", "batch_size_bytes", "use_stats", "fast_search",
                            "prefilter"})


def check_tuning(tuning: Mapping[str, Any]) -> None:
    """TypeError for a keyword that is not one of :data:`TUNING_OPTIONS` (as Python's own)."""
    unknown = sorted(set(tuning) - TUNING_OPTIONS)
    if unknown:
        raise TypeError(f"scan got an unexpected keyword argument {unknown[0]!r}")


def _strict_batches(tables: Iterator[pa.Table], size: int) -> Iterator[pa.RecordBatch]:
    """Batches of exactly ``size`` rows (the last may be shorter) across table boundaries."""
    pending: list[pa.Table] = []
    held = 0
    for table in tables:
        pending.append(table)
        held += table.num_rows
        if held >= size:
            merged = pa.concat_tables(pending)
            full = (held // size) * size
            yield from merged.slice(0, full).combine_chunks().to_batches(max_chunksize=size)
            pending, held = [merged.slice(full)], held - full
    if held:
        yield from pa.concat_tables(pending).combine_chunks().to_batches(max_chunksize=size)


def _check_offset_limit(offset: object, limit: object) -> None:
    """pylance's rule: offset and limit, when given, are integers >= 0."""
    for name, value in (("Offset", offset), ("Limit", limit)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
        if value < 0:
            raise InvalidArgumentError(f"{name} must be non-negative (got {value})")


def _local_timestamp(m: table_pb2.Manifest) -> datetime:
    """The commit time as pylance reports it: a naive local datetime.

    pylance gets the time as integer nanoseconds and splits it into whole seconds and
    microseconds in float arithmetic, so the microseconds can be off by one from the exact
    value; the same arithmetic is done here so that both libraries report equal timestamps.
    """
    ns = float(m.timestamp.ToNanoseconds())
    return datetime.fromtimestamp(ns // 1e9) + timedelta(microseconds=(ns % 1e9) // 1e3)
