"""``verify_dataset``: check that every file a version's manifest references is there and sound.

For each selected version (default: the latest; or one version; or every version listed under
``_versions/``) the manifest is decoded and checked against the files it names:

* data files of every fragment exist, have the size the manifest records (``file_size_bytes``,
  when recorded), their footer and column metadata decode, and their row count equals the
  fragment's ``physical_rows``;
* deletion files exist and decode, hold exactly ``num_deleted_rows`` offsets, all below
  ``physical_rows``;
* stable row ids (inline or external sequence) have one id per physical row, no id appears twice
  across fragments and every id is below the manifest's ``next_row_id``; external row-id and
  version-sequence files exist and are long enough;
* index segments of the index section: their files under ``_indices/<uuid>/`` exist with the
  recorded sizes (or the directory is not empty when no files are listed), their fragment bitmap
  decodes and names only fragment ids the dataset has had (ids up to ``max_fragment_id``:
  pylance keeps ids of deleted or compacted fragments in bitmaps, so an id of a fragment no
  longer present is stale, not damage), their field ids exist in the schema;
* the transaction file named by the manifest exists.

``deep=True`` also decodes every page of every data file, column by column in row chunks (memory
bounded by one chunk of one column), and checks that blob v2 side files referenced by the
descriptors exist and are long enough.

Problems are collected, never raised: the result is a :class:`VerifyReport` naming the version,
fragment, file and what is wrong. Storage failures other than a missing object (network,
permissions) are raised: they say nothing about the dataset.
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_ops.errors import CorruptFileError, DatasetNotFoundError, LanceOpsError, ObjectNotFoundError, StorageError
from lance_ops.io.base import ObjectStore
from lance_ops.table import deletion as deletion_mod
from lance_ops.table import rowids
from lance_ops.table.manifest import naming
from lance_ops.table.paths import unsafe_reason

#: rows decoded per read in deep mode (per column)
DEEP_CHUNK_ROWS = 64 * 1024
#: index names of system indices (no files of their own)
_SYSTEM_INDEX_PREFIX = "__lance"
_EXTERNAL_SEQUENCES = ("external_last_updated_at_versions", "external_created_at_versions")
#: exceptions a damaged file can surface as while decoding (besides our own errors)
_DECODE_ERRORS = (LanceOpsError, ValueError, IndexError, KeyError, TypeError, OverflowError, MemoryError,
                  EOFError, AssertionError, ArithmeticError)


@dataclass
class Problem:
    """One thing wrong with a version: which fragment and file (when it is about one), and what."""

    version: int | None
    fragment: int | None
    file: str | None
    problem: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON output)."""
        return asdict(self)

    def __str__(self) -> str:
        parts = [f"version {self.version}" if self.version is not None else "dataset"]
        if self.fragment is not None:
            parts.append(f"fragment {self.fragment}")
        if self.file:
            parts.append(self.file)
        return ": ".join(parts) + f": {self.problem}"


@dataclass
class VerifyReport:
    """What :func:`verify_dataset` checked and found; ``ok`` when nothing is wrong."""

    uri: str
    versions: list[int]
    deep: bool
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True iff no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON output / XCom)."""
        return {"uri": self.uri, "ok": self.ok, "versions": list(self.versions), "deep": self.deep,
                "counts": dict(self.counts), "problems": [p.to_dict() for p in self.problems]}

    def summary(self) -> str:
        """One line: what was checked and how many problems were found."""
        vs = self.versions
        which = f"version {vs[0]}" if len(vs) == 1 else f"{len(vs)} versions ({vs[0]}..{vs[-1]})" if vs else "no version"
        c = self.counts
        return (f"{self.uri}: {which}, {c.get('fragments', 0)} fragments, {c.get('data_files', 0)} data files, "
                f"{c.get('deletion_files', 0)} deletion files, {c.get('index_files', 0)} index files"
                f"{', deep' if self.deep else ''}: "
                + ("ok" if self.ok else f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"))


_COUNTERS = ("versions", "fragments", "data_files", "data_bytes", "deletion_files", "deleted_rows",
             "row_id_sequences", "indices", "index_files", "stale_index_fragments", "rows_decoded",
             "blob_side_files", "skipped_files")


def _index_files(index: Any) -> list[tuple[str, int]]:
    """``(path, size_bytes)`` of ``IndexMetadata.files`` (field 10), read from the unknown fields
    (our compiled proto predates the field).

    ``IndexFile {string path = 1; uint64 size_bytes = 2}`` has the wire layout of our
    ``ExternalFile {string path = 1; uint64 offset = 2; ...}``, so each entry is parsed as one.
    """
    from google.protobuf import unknown_fields

    from lance_ops._proto import table_pb2

    out = []
    for u in unknown_fields.UnknownFieldSet(index):
        if u.field_number != 10 or u.wire_type != 2:
            continue
        entry = table_pb2.ExternalFile()
        entry.ParseFromString(bytes(u.data))
        out.append((entry.path, int(entry.offset)))
    return out


def _uuid_str(raw: bytes) -> str | None:
    try:
        return str(_uuid.UUID(bytes=bytes(raw))) if len(raw) == 16 else None
    except ValueError:
        return None


def _unsafe(rel: str) -> str | None:
    """Why a path read from a manifest must not be followed (None when it stays inside the
    dataset): the rules of :func:`lance_ops.table.paths.unsafe_reason`, worded for a report line."""
    reason = unsafe_reason(rel)
    if reason is None:
        return None
    if reason == "is empty":
        return "empty path"
    if reason == "is absolute":
        return f"path {rel!r} is absolute, not relative to the dataset"
    if "'..'" in reason:
        return f"path {rel!r} leads outside the dataset"
    return f"path {rel!r} {reason}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, CorruptFileError):
        return exc.problem
    text = " ".join(str(exc).split())
    return text if isinstance(exc, LanceOpsError) else f"{type(exc).__name__}: {text}"


class _Verifier:
    """Checks versions of one dataset; results of files shared by several versions are reused."""

    def __init__(self, store: ObjectStore, base: str, deep: bool, progress: Callable[[int, int], None] | None) -> None:
        self.store, self.base = store, base
        self.deep = deep
        self.progress = progress
        self.counts = {k: 0 for k in _COUNTERS}
        self.problems: list[Problem] = []
        #: data file path -> (problems, rows) of its checks, shared by versions
        self._data_results: dict[str, tuple[list[str], int | None]] = {}
        self._size_cache: dict[str, int | None] = {}
        #: (deletion file, physical rows, recorded count) -> its problems
        self._deletion_results: dict[tuple, list[str]] = {}

    # -- helpers ----------------------------------------------------------------------------------
    def _add(self, version: Any, fragment: Any, rel: Any, problem: str) -> None:
        self.problems.append(Problem(version, fragment, rel, problem))

    def _size(self, path: str) -> int | None:
        """Object size, None if missing (other storage errors propagate)."""
        if path not in self._size_cache:
            try:
                self._size_cache[path] = self.store.size(path)
            except ObjectNotFoundError:
                self._size_cache[path] = None
        return self._size_cache[path]

    def _path(self, *parts: str) -> str:
        return self.store.join(self.base, *parts)

    # -- one version ------------------------------------------------------------------------------
    def check_version(self, vds: Any) -> None:
        m = vds.manifest
        v = int(m.version)
        self.counts["versions"] += 1
        if m.transaction_file:
            rel = f"{naming.TRANSACTIONS_DIR}/{m.transaction_file}"
            if self._size(self._path(rel)) is None:
                self._add(v, None, rel, "transaction file is missing")
        seen: dict[int, int] = {}
        max_id = int(m.max_fragment_id) if m.HasField("max_fragment_id") else None
        stable = vds.has_stable_row_ids
        id_parts: list[np.ndarray] = []
        id_frags: list[int] = []
        frags = vds.get_fragments()
        for n, frag in enumerate(frags):
            fid = int(frag.fragment_id)
            self.counts["fragments"] += 1
            if fid in seen:
                self._add(v, fid, None, "fragment id appears twice in the manifest")
            seen[fid] = n
            if max_id is not None and fid > max_id:
                self._add(v, fid, None, f"fragment id is above the manifest's max_fragment_id {max_id}")
            self._check_data_files(v, frag)
            self._check_deletions(v, frag)
            ids = self._check_row_ids(v, frag, stable, int(m.next_row_id))
            if ids is not None:
                id_parts.append(ids)
                id_frags.append(fid)
            if self.progress is not None:
                self.progress(n + 1, len(frags))
        self._check_duplicate_ids(v, id_parts, id_frags)
        known = max([fid for fid in seen] + ([max_id] if max_id is not None else []), default=-1)
        self._check_indices(v, vds, set(seen), known)

    # -- data files -------------------------------------------------------------------------------
    def _check_data_files(self, v: int, frag: Any) -> None:
        proto = frag.proto
        if not proto.files:
            self._add(v, frag.fragment_id, None, "fragment has no data files")
        for i, df in enumerate(proto.files):
            rel = f"{naming.DATA_DIR}/{df.path}"
            self.counts["data_files"] += 1
            if df.HasField("base_id"):
                self.counts["skipped_files"] += 1  # lives under another base path: not checked
                continue
            cached = self._data_results.get(df.path)
            if cached is None:
                cached = self._data_results[df.path] = self._check_data_file(frag, i, df, rel)
            problems, rows = cached
            for p in problems:
                self._add(v, frag.fragment_id, rel, p)
            if rows is not None and rows != frag.physical_rows:
                self._add(v, frag.fragment_id, rel,
                          f"data file has {rows} rows but the fragment's physical_rows is {frag.physical_rows}")

    def _check_data_file(self, frag: Any, index: int, df: Any, rel: str) -> tuple[list[str], int | None]:
        why = _unsafe(df.path)
        if why:
            return [why], None
        size = self._size(self._path(rel))
        if size is None:
            return ["data file is missing"], None
        self.counts["data_bytes"] += size
        if df.file_size_bytes and size != df.file_size_bytes:
            return [f"data file is {size} bytes but the manifest records {df.file_size_bytes}"], None
        try:
            reader = frag.data_file_reader(index, check=False)
            if hasattr(type(reader), "metadata"):
                reader.metadata  # decode every column's metadata too (the 2.0 reader does it lazily)
            rows = int(reader.num_rows)
        except StorageError as exc:
            if isinstance(exc, ObjectNotFoundError):
                return ["data file is missing"], None
            raise
        except _DECODE_ERRORS as exc:
            return [f"footer or file metadata does not decode: {_describe(exc)}"], None
        problems: list[str] = []
        from lance_ops.format.legacy.reader import LegacyFileReader

        if not isinstance(reader, LegacyFileReader):  # a legacy reader's fields come from the manifest
            stored = {f.id for f in reader.lance_fields}
            lacking = [fid for fid in df.fields if fid >= 0 and fid not in stored]
            if lacking:
                problems.append(f"the manifest lists field ids {lacking[:10]} in this data file but the file "
                                f"does not store them")
        if self.deep:
            problems += self._decode_pages(reader, df, rows)
        return problems, rows

    def _decode_pages(self, reader: Any, df: Any, rows: int) -> list[str]:
        """Read every column of the file in chunks; a failure names the column and rows."""
        from lance_ops.format import blob_v2
        from lance_ops.format.legacy.reader import LegacyFileReader

        # blob columns as descriptors: their bytes are not encoded pages (side files are checked below)
        kwargs = {} if isinstance(reader, LegacyFileReader) else {"blob_descriptions": True}
        problems: list[str] = []
        side_ends: dict[int, int] = {}
        for name in reader.schema.names:
            start = 0
            while start < rows:
                n = min(DEEP_CHUNK_ROWS, rows - start)
                try:
                    table = reader.read_range(start, n, columns=[name], **kwargs)
                    col = table.column(0)
                    if _is_descriptor(col.type):
                        _blob_side_ends(col, side_ends)
                except StorageError as exc:
                    if isinstance(exc, ObjectNotFoundError):
                        return problems + ["data file vanished while being read"]
                    raise
                except _DECODE_ERRORS as exc:
                    problems.append(f"column {name!r} rows {start}..{start + n} do not decode: {_describe(exc)}")
                    break
                self.counts["rows_decoded"] += n
                start += n
        for blob_id, end in sorted(side_ends.items()):
            side_rel = f"{naming.DATA_DIR}/{blob_v2.side_file_path(df.path, blob_id)}"
            self.counts["blob_side_files"] += 1
            size = self._size(self._path(side_rel))
            if size is None:
                problems.append(f"blob side file {side_rel} is missing")
            elif size < end:
                problems.append(f"blob side file {side_rel} is {size} bytes but descriptors reach byte {end}")
        return problems

    # -- deletions --------------------------------------------------------------------------------
    def _check_deletions(self, v: int, frag: Any) -> None:
        proto = frag.proto
        if not proto.HasField("deletion_file"):
            return
        df = proto.deletion_file
        rel = naming.deletion_file_path(frag.fragment_id, df)
        self.counts["deletion_files"] += 1
        self.counts["deleted_rows"] += int(df.num_deleted_rows)
        if df.HasField("base_id"):
            self.counts["skipped_files"] += 1
            return
        key = (rel, int(frag.physical_rows), int(df.num_deleted_rows))
        found = self._deletion_results.get(key)
        if found is None:
            found = self._deletion_results[key] = self._deletion_problems(frag, df, rel)
        for problem in found:
            self._add(v, frag.fragment_id, rel, problem)

    def _deletion_problems(self, frag: Any, df: Any, rel: str) -> list[str]:
        if self._size(self._path(rel)) is None:
            return ["deletion file is missing"]
        try:
            offsets = deletion_mod.read_deletion_offsets(self.store, self.base, frag.fragment_id, df, check=False)
        except StorageError as exc:
            if not isinstance(exc, ObjectNotFoundError):
                raise
            return ["deletion file is missing"]
        except _DECODE_ERRORS as exc:
            return [f"deletion file does not decode: {_describe(exc)}"]
        out = []
        if offsets.size != df.num_deleted_rows:
            out.append(f"deletion file lists {offsets.size} deleted rows but the manifest records "
                       f"num_deleted_rows={df.num_deleted_rows}")
        if offsets.size and int(offsets[-1]) >= frag.physical_rows:
            bad = int((offsets >= frag.physical_rows).sum())
            out.append(f"{bad} deleted offset(s) (largest {int(offsets[-1])}) are not below the fragment's "
                       f"physical_rows {frag.physical_rows}")
        return out

    # -- row ids ----------------------------------------------------------------------------------
    def _check_row_ids(self, v: int, frag: Any, stable: bool, next_row_id: int) -> np.ndarray | None:
        proto = frag.proto
        fid = frag.fragment_id
        for name in _EXTERNAL_SEQUENCES:
            if proto.HasField(name):
                self._check_external(v, fid, getattr(proto, name), "version sequence")
        which = proto.WhichOneof("row_id_sequence")
        if which is None:
            if stable:
                self._add(v, fid, None, "the dataset has stable row ids but the fragment has no row-id sequence")
            return None
        self.counts["row_id_sequences"] += 1
        rel = None
        if which == "external_row_ids":
            rel = proto.external_row_ids.path
            if not self._check_external(v, fid, proto.external_row_ids, "row-id sequence"):
                return None
        try:
            ids = rowids.read_fragment_row_ids(self.store, self.base, proto, check=False)
        except StorageError as exc:
            if not isinstance(exc, ObjectNotFoundError):
                raise
            self._add(v, fid, rel, "row-id sequence file is missing")
            return None
        except _DECODE_ERRORS as exc:
            self._add(v, fid, rel, f"row-id sequence does not decode: {_describe(exc)}")
            return None
        if ids is None:
            return None
        if ids.size != frag.physical_rows:
            self._add(v, fid, rel, f"row-id sequence has {ids.size} ids but the fragment's physical_rows "
                                   f"is {frag.physical_rows}")
        if ids.size and next_row_id and int(ids.max()) >= next_row_id:
            self._add(v, fid, rel, f"row id {int(ids.max())} is not below the manifest's next_row_id {next_row_id}")
        return ids

    def _check_external(self, v: int, fid: int, ext: Any, what: str) -> bool:
        rel = ext.path
        why = _unsafe(rel)
        if why:
            self._add(v, fid, rel, f"{what}: {why}")
            return False
        size = self._size(self._path(rel))
        if size is None:
            self._add(v, fid, rel, f"{what} file is missing")
            return False
        if int(ext.offset) + int(ext.size) > size:
            self._add(v, fid, rel, f"{what} at {ext.offset}+{ext.size} runs past the end of the file ({size} bytes)")
            return False
        return True

    def _check_duplicate_ids(self, v: int, parts: list[np.ndarray], frags: list[int]) -> None:
        if not parts:
            return
        ids = np.concatenate(parts)
        if ids.size < 2:
            return
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
        if not dup.size:
            return
        owner = np.repeat(np.asarray(frags, dtype=np.int64), [p.size for p in parts])
        first = int(dup[0])
        a, b = int(owner[order[first]]), int(owner[order[first + 1]])
        where = f"fragments {a} and {b}" if a != b else f"fragment {a} (twice)"
        self._add(v, b, None, f"{dup.size} stable row id(s) are duplicated; e.g. id {int(sorted_ids[first])} "
                              f"in {where}")

    # -- indices ----------------------------------------------------------------------------------
    def _check_indices(self, v: int, vds: Any, live: set[int], known_max: int) -> None:
        from pyroaring import BitMap

        section = vds.manifest_file.index_section
        if section is None:
            return
        field_ids = {f.id for f in vds.manifest.fields}
        for index in section.indices:
            self.counts["indices"] += 1
            uid = _uuid_str(index.uuid.uuid)
            label = f"index {index.name!r}"
            if uid is None:
                self._add(v, None, None, f"{label} has no valid uuid")
                continue
            where = f"{naming.INDICES_DIR}/{uid}"
            system = index.name.startswith(_SYSTEM_INDEX_PREFIX)
            missing_fields = [fid for fid in index.fields if fid not in field_ids]
            if missing_fields and not system:
                self._add(v, None, where, f"{label} covers field ids {missing_fields} that the schema lacks")
            if index.fragment_bitmap:
                try:
                    bitmap = BitMap.deserialize(bytes(index.fragment_bitmap))
                except Exception as exc:  # pyroaring raises several types on garbage
                    self._add(v, None, where, f"{label}: fragment bitmap does not decode: {type(exc).__name__}")
                    bitmap = None
                if bitmap is not None:
                    ids = list(bitmap)
                    never = [i for i in ids if i > known_max]
                    if never:
                        self._add(v, None, where, f"{label}: fragment bitmap names fragment(s) {never[:10]} that "
                                                  f"never existed (max fragment id {known_max})")
                    self.counts["stale_index_fragments"] += sum(1 for i in ids if i <= known_max and i not in live)
            if system:
                continue
            self._check_index_files(v, index, uid, label, where)

    def _check_index_files(self, v: int, index: Any, uid: str, label: str, where: str) -> None:
        if index.HasField("base_id"):
            self.counts["skipped_files"] += 1
            return
        try:
            files = _index_files(index)
        except (DecodeError, ValueError) as exc:
            self._add(v, None, where, f"{label}: file list does not decode: {exc}")
            return
        if not files:  # older writers list no files: the directory must at least hold something
            if not any(True for _ in self.store.list(self._path(where))):
                self._add(v, None, where, f"{label}: index directory is missing or empty")
            return
        for name, size in files:
            rel = f"{where}/{name}"
            self.counts["index_files"] += 1
            why = _unsafe(name)
            if why:
                self._add(v, None, rel, f"{label}: {why}")
                continue
            actual = self._size(self._path(rel))
            if actual is None:
                self._add(v, None, rel, f"{label}: index file is missing")
            elif size and actual != size:
                self._add(v, None, rel, f"{label}: index file is {actual} bytes but the manifest records {size}")


def _is_descriptor(t: Any) -> bool:
    """A blob v2 descriptor column (compared by field names: readers may differ in field metadata)."""
    from lance_ops.format import blob_v2

    return pa.types.is_struct(t) and [f.name for f in t] == [f.name for f in blob_v2.DESCRIPTOR_TYPE]


def _blob_side_ends(col: Any, ends: dict[int, int]) -> None:
    """Record, per side file (blob id), the furthest byte that packed/dedicated descriptors need."""
    from lance_ops.format import blob_v2

    arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    kind = np.asarray(arr.field("kind").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    side = (kind == blob_v2.KIND_PACKED) | (kind == blob_v2.KIND_DEDICATED)
    if arr.null_count:
        side &= np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))
    if not side.any():
        return
    pos = np.asarray(arr.field("position").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)[side]
    size = np.asarray(arr.field("size").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)[side]
    blob_id = np.asarray(arr.field("blob_id").fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)[side]
    end = pos + size
    for b in np.unique(blob_id).tolist():
        ends[b] = max(ends.get(b, 0), int(end[blob_id == b].max()))


def verify_dataset(
    uri_or_ds: Any,
    *,
    version: int | str | None = None,
    all_versions: bool = False,
    deep: bool = False,
    storage_options: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Check the files of one version (``version``: number or tag; default the latest, or the
    version a given dataset object is at) or of every version (``all_versions``).

    ``deep`` decodes every page of every data file. Returns a :class:`VerifyReport`; damage
    (including a manifest that does not decode) is reported there, not raised. A missing dataset
    or version raises DatasetNotFoundError. ``progress(done, total)`` is called per fragment.
    """
    from lance_ops.io import open_store
    from lance_ops.table.dataset import LanceDataset

    if version is not None and all_versions:
        raise ValueError("give version or all_versions, not both")
    given = None if isinstance(uri_or_ds, str) else uri_or_ds
    uri = str(uri_or_ds) if given is None else given.uri
    options = dict(storage_options or {}) if given is None else dict(given.storage_options or {})
    if given is not None:
        store, base = given.store, given.base
    else:
        store, base = open_store(uri, options)
    verifier = _Verifier(store, base, deep, progress)

    def open_version(v: Any) -> Any:
        if given is not None:
            return given if v is None or v == given.version else given.checkout_version(v)
        return LanceDataset(uri, v, options)

    if all_versions:
        targets: list = [loc.version for loc in naming.list_versions(store, base)]
        if not targets:
            raise DatasetNotFoundError(f"Dataset at path {uri} was not found: no versions under _versions/")
    else:
        targets = [version]
    checked: list[int] = []
    for v in targets:
        vds = _open_checked(lambda v=v: open_version(v))
        if isinstance(vds, Problem):
            vds.version = v if isinstance(v, int) else None
            prefix = store.join(base, "")
            if vds.file and prefix and vds.file.startswith(prefix + "/"):
                vds.file = vds.file[len(prefix) + 1:]
            verifier.problems.append(vds)
            continue
        checked.append(int(vds.version))
        verifier.check_version(vds)
    return VerifyReport(uri, checked, deep, verifier.counts, verifier.problems)


def _open_checked(open_fn: Any) -> Any:
    """The opened dataset version, or a :class:`Problem` when its manifest is damaged."""
    try:
        return open_fn()
    except DatasetNotFoundError:
        raise
    except CorruptFileError as exc:
        return Problem(None, None, exc.path, f"manifest does not decode: {exc.problem}")
