"""Persisted row-id index: stable row id -> row address, for one version of a dataset.

With stable row ids (``enable_stable_row_ids=True``) a row keeps its ``_rowid`` when compaction
moves it, so ``take_by_row_id`` must find where each id lives now. Without an index that means
decoding every fragment's row-id sequence and sorting them all, per call. The index persists that
sorted mapping:

    _rowid_index/<version>-<uuid>[-k<digest of the idempotency key>].lance

a Lance 2.0 file (written with our LanceFileWriter, ignored by pylance) with the *live* rows of
``version``, sorted by row id:

    ============  ======  ==============================================
    row_id        uint64  stable row id
    fragment_id   uint32  fragment holding the row
    offset        uint32  physical offset of the row in that fragment
    ============  ======  ==============================================

Its schema metadata ``lance_ops.rowid_index`` (JSON) records what it covers: the version and, per
fragment, its id, physical rows, deletion file (type, read version, id, deleted rows) and row-id
sequence (a digest of the inline bytes, or the external file location). It lives exactly as long
as the version's manifest (``cleanup_old_versions`` deletes it with that version).

Using it
    The public face (``lance_ops/api.py``) installs :func:`lookup` as the row-id index hook of
    :mod:`lance_ops.table.commit.hooks`; ``LanceDataset.take_by_row_id`` then asks it first.
    An index answers only when what it covers is *exactly* the dataset version's fragments
    (same ids, physical rows, deletion files and row-id sequences) - normally the index of that
    very version, but an index of another version whose fragments are identical works too. Any
    difference (a compaction, a delete, an append) makes it decline, and the lookup falls back to
    scanning the row-id sequences: a stale index never returns a wrong row.

Refreshing
    :func:`refresh_row_id_index` builds the index of the latest version. Fragments unchanged since
    the newest earlier index (same id, deletion file and row-id sequence) reuse its entries;
    only new or changed fragments are decoded. Datasets without stable row ids need no index
    (a row id *is* the row address): the call returns ``{"skipped": "no stable row ids"}``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import uuid as _uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from lance_ops.errors import LanceOpsError, ObjectNotFoundError
from lance_ops.io.base import ObjectStore

log = logging.getLogger(__name__)

__all__ = ["ROWID_INDEX_DIR", "RowIdIndex", "refresh_row_id_index", "list_indices", "load_index",
           "find_index", "lookup", "fragment_key"]

#: extension area (must equal ``lance_ops.maintenance.cleanup.ROWID_INDEX_DIR``)
ROWID_INDEX_DIR = "_rowid_index"
FORMAT = 1
_META = b"lance_ops.rowid_index"
_CACHE_NAME = "lance_ops.rowid_index"  # this module's LanceDataset.cache
SCHEMA = pa.schema([
    pa.field("row_id", pa.uint64(), nullable=False),
    pa.field("fragment_id", pa.uint32(), nullable=False),
    pa.field("offset", pa.uint32(), nullable=False),
])
_WRITE_ROWS = 1 << 20


# --- what an index covers ----------------------------------------------------------------------
def fragment_key(frag: Any) -> dict:
    """Identity of a fragment's rows and row ids (a ``DataFragment`` proto)."""
    deletion = None
    if frag.HasField("deletion_file"):
        d = frag.deletion_file
        deletion = f"{int(d.file_type)}-{d.read_version}-{d.id}-{d.num_deleted_rows}"
    which = frag.WhichOneof("row_id_sequence")
    if which == "inline_row_ids":
        row_ids = "inline:" + hashlib.sha256(frag.inline_row_ids).hexdigest()
    elif which == "external_row_ids":
        e = frag.external_row_ids
        row_ids = f"external:{e.path}:{e.offset}:{e.size}"
    else:
        row_ids = None
    return {"id": int(frag.id), "physical_rows": int(frag.physical_rows), "deletion": deletion,
            "row_ids": row_ids}


def _coverage_of(frag_protos: Any) -> dict[int, dict]:
    return {int(f.id): fragment_key(f) for f in frag_protos}


@dataclass
class RowIdIndex:
    """A loaded index (arrays sorted by row id)."""

    version: int
    path: str
    coverage: dict[int, dict]
    idempotency_key: str | None
    row_ids: np.ndarray
    fragment_ids: np.ndarray
    offsets: np.ndarray

    def covers(self, frag_protos: Any) -> bool:
        """True iff the index describes exactly these fragments."""
        return _coverage_of(frag_protos) == self.coverage

    def locate(self, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, fragment ids, offsets) for each id."""
        ids = np.asarray(row_ids, dtype=np.uint64)
        if self.row_ids.size == 0:
            z = np.zeros(ids.size, np.uint64)
            return np.zeros(ids.size, bool), z, z
        at = np.searchsorted(self.row_ids, ids)
        at_c = np.minimum(at, self.row_ids.size - 1)
        found = (at < self.row_ids.size) & (self.row_ids[at_c] == ids)
        return found, self.fragment_ids[at_c].astype(np.uint64), self.offsets[at_c].astype(np.uint64)


# --- files --------------------------------------------------------------------------------------
def _dir(store: ObjectStore, base: str) -> str:
    return store.join(base, ROWID_INDEX_DIR)


def list_indices(store: ObjectStore, base: str) -> list[tuple[int, str, datetime]]:
    """``(version, path, last_modified)`` of every index file, newest version first."""
    out: list[tuple[int, str, datetime]] = []
    for info in store.list_dir(_dir(store, base)):
        name = info.path.rsplit("/", 1)[-1]
        head, sep, rest = name.partition("-")
        if not sep or not head.isdigit() or not rest.endswith(".lance"):
            continue
        out.append((int(head), info.path, info.last_modified))
    out.sort(key=lambda t: (t[0], t[2]), reverse=True)
    return out


def _read_meta(reader: Any) -> dict:
    raw = (reader.schema.metadata or {}).get(_META)
    if raw is None:
        raise LanceOpsError(f"{reader.path}: not a lance_ops row-id index (no {_META.decode()} metadata)")
    meta = json.loads(raw)
    if meta.get("format") != FORMAT:
        raise LanceOpsError(f"{reader.path}: unknown row-id index format {meta.get('format')!r}")
    return meta


def _open(store: ObjectStore, path: str) -> Any:
    from lance_ops.format.v2_0.reader import LanceFileReader

    return LanceFileReader(path, store=store)


def _coverage_from_meta(meta: dict) -> dict[int, dict]:
    return {int(f["id"]): dict(f) for f in meta["fragments"]}


def load_index(store: ObjectStore, base: str, path: str, *, expect_coverage: dict[int, dict] | None = None) -> RowIdIndex | None:
    """Load an index file; None if ``expect_coverage`` is given and differs (data not read then)."""
    reader = _open(store, path)
    meta = _read_meta(reader)
    coverage = _coverage_from_meta(meta)
    if expect_coverage is not None and coverage != expect_coverage:
        return None
    table = reader.read_all()
    row_ids = table.column("row_id").to_numpy()
    if row_ids.size > 1 and not np.all(row_ids[1:] > row_ids[:-1]):
        raise LanceOpsError(f"{store.uri(path)}: row ids are not strictly increasing")
    return RowIdIndex(int(meta["version"]), path, coverage, meta.get("idempotency_key"), row_ids,
                      table.column("fragment_id").to_numpy(), table.column("offset").to_numpy())


def _write_index(ds: Any, version: int, coverage: dict[int, dict], row_ids: Any, frag_ids: Any, offsets: Any,
                 idempotency_key: str | None) -> str:
    from lance_ops.format.registry import LanceFileWriter

    meta = {"format": FORMAT, "version": int(version), "idempotency_key": idempotency_key,
            "rows": int(row_ids.size), "fragments": [coverage[k] for k in sorted(coverage)]}
    schema = SCHEMA.with_metadata({_META: json.dumps(meta, sort_keys=True).encode()})
    name = f"{int(version)}-{_uuid.uuid4().hex}{_key_suffix(idempotency_key)}"
    path = ds.store.join(_dir(ds.store, ds.base), name)
    with LanceFileWriter(ds.store.uri(path), schema, storage_options=ds.storage_options) as w:
        for start in range(0, int(row_ids.size), _WRITE_ROWS):
            end = start + _WRITE_ROWS
            w.write_batch(pa.record_batch([
                pa.array(row_ids[start:end], pa.uint64()),
                pa.array(frag_ids[start:end], pa.uint32()),
                pa.array(offsets[start:end], pa.uint32()),
            ], schema=schema))
    return path


def _key_suffix(idempotency_key: str | None) -> str:
    """File-name tail recording the idempotency key (a digest), so a retry finds it by listing."""
    if not idempotency_key:
        return ".lance"
    return f"-k{hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]}.lance"


def _find_keyed(store: ObjectStore, base: str, listing: Any, idempotency_key: str) -> dict | None:
    """Metadata and path of the index written under ``idempotency_key``, if any survives."""
    suffix = _key_suffix(idempotency_key)
    for version, path, _ in listing:
        if not path.endswith(suffix):
            continue
        try:
            meta = _read_meta(_open(store, path))
        except (LanceOpsError, ObjectNotFoundError, pa.ArrowException, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable row-id index %s: %s", store.uri(path), exc)
            continue
        if meta.get("idempotency_key") == idempotency_key:
            return {"meta": meta, "path": path}
    return None


# --- building -------------------------------------------------------------------------------------
def _fragment_rows(frag: Any) -> tuple[np.ndarray, np.ndarray]:
    ids = frag.stable_row_ids
    if ids is None:
        raise LanceOpsError(f"fragment {frag.fragment_id} has no row-id sequence although the dataset "
                            "has stable row ids")
    if ids.size != frag.physical_rows:
        raise LanceOpsError(f"fragment {frag.fragment_id}: {ids.size} row ids for {frag.physical_rows} rows")
    live = frag.live_offsets()
    return ids[live.astype(np.int64)], live.astype(np.uint32)


def refresh_row_id_index(ds: Any, *, idempotency_key: str | None = None,
                         progress: Callable[[int, int], None] | None = None) -> dict:
    """Build (or bring up to date) the row-id index of the latest version of ``ds``.

    Returns ``{"version", "path", "fragments", "reused", "rebuilt", "rows", "up_to_date"}``:
    ``reused``/``rebuilt`` count fragments whose entries were copied from the previous index or
    decoded afresh. ``up_to_date`` is True (and nothing is written) when an index of the latest
    version already covers it - e.g. an Airflow retry; ``idempotency_key`` is recorded in the
    index (metadata and file name): a later call with the same key, even after the dataset moved
    on, returns that index's result with ``already_committed: True`` and writes nothing.
    """
    latest = ds if ds.version == ds.latest_version else ds.reopen_latest()
    if not latest.has_stable_row_ids:
        return {"skipped": "no stable row ids", "version": latest.version}
    store, base = latest.store, latest.base
    frags = latest.get_fragments()
    coverage = _coverage_of(f.proto for f in frags)
    listing = list_indices(store, base)
    result = {"version": latest.version, "fragments": len(frags), "reused": 0, "rebuilt": 0,
              "rows": 0, "up_to_date": False, "path": None, "idempotency_key": idempotency_key}
    if idempotency_key:
        earlier = _find_keyed(store, base, listing, idempotency_key)
        if earlier is not None:
            meta = earlier["meta"]
            covered = _coverage_from_meta(meta)
            result.update(version=int(meta["version"]), fragments=len(covered), rows=int(meta.get("rows", 0)),
                          path=store.uri(earlier["path"]), already_committed=True,
                          up_to_date=int(meta["version"]) == latest.version and covered == coverage)
            return result
    previous: RowIdIndex | None = None
    for version, path, _ in listing:
        if version > latest.version:
            continue
        try:
            if version == latest.version:
                done = load_index(store, base, path, expect_coverage=coverage)
                if done is not None:
                    result.update(up_to_date=True, path=store.uri(path), rows=int(done.row_ids.size),
                                  reused=len(frags), idempotency_key=done.idempotency_key or idempotency_key)
                    return result
            if previous is None:
                previous = load_index(store, base, path)
        except (LanceOpsError, ObjectNotFoundError, pa.ArrowException, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable row-id index %s: %s", store.uri(path), exc)
        if previous is not None and version < latest.version:
            break
    reuse_ids = []
    pieces_ids, pieces_frag, pieces_off = [], [], []
    for n, frag in enumerate(frags, 1):
        key = coverage[frag.fragment_id]
        if previous is not None and previous.coverage.get(frag.fragment_id) == key:
            reuse_ids.append(frag.fragment_id)
            result["reused"] += 1
        else:
            ids, offs = _fragment_rows(frag)
            pieces_ids.append(ids)
            pieces_frag.append(np.full(ids.size, frag.fragment_id, np.uint32))
            pieces_off.append(offs)
            result["rebuilt"] += 1
        if progress is not None:
            progress(n, len(frags))
    if reuse_ids and previous is not None:  # (reused ids come from a previous index)
        keep = np.isin(previous.fragment_ids, np.array(reuse_ids, dtype=previous.fragment_ids.dtype))
        pieces_ids.insert(0, previous.row_ids[keep])
        pieces_frag.insert(0, previous.fragment_ids[keep].astype(np.uint32))
        pieces_off.insert(0, previous.offsets[keep].astype(np.uint32))
    row_ids = np.concatenate(pieces_ids) if pieces_ids else np.empty(0, np.uint64)
    frag_ids = np.concatenate(pieces_frag) if pieces_frag else np.empty(0, np.uint32)
    offsets = np.concatenate(pieces_off) if pieces_off else np.empty(0, np.uint32)
    if result["rebuilt"]:
        order = np.argsort(row_ids, kind="stable")
        row_ids, frag_ids, offsets = row_ids[order], frag_ids[order], offsets[order]
    if row_ids.size > 1 and not np.all(row_ids[1:] > row_ids[:-1]):
        raise LanceOpsError(f"{latest.uri}: version {latest.version} has duplicate stable row ids; "
                            "refusing to build a row-id index")
    path = _write_index(latest, latest.version, coverage, row_ids, frag_ids, offsets, idempotency_key)
    result.update(path=store.uri(path), rows=int(row_ids.size))
    ds.cache(_CACHE_NAME).clear()
    if latest is not ds:
        latest.cache(_CACHE_NAME).clear()
    return result


# --- lookups ------------------------------------------------------------------------------------
#: at most this many index files are opened when looking for one that matches a version
MAX_CANDIDATES = 3


def find_index(ds: Any, frag_protos: Any = None) -> RowIdIndex | None:
    """An index that covers exactly the fragments of ``ds`` (cached on ``ds``), or None."""
    protos = list(ds.manifest.fragments) if frag_protos is None else list(frag_protos)
    coverage = _coverage_of(protos)
    cache = ds.cache(_CACHE_NAME)
    key = (ds.version, json.dumps(coverage, sort_keys=True))
    if key in cache:
        return cache[key]
    found = None
    try:
        listing = list_indices(ds.store, ds.base)
    except Exception as exc:  # noqa: BLE001 - an index is an optimisation only
        log.warning("cannot list row-id indices of %s: %s", ds.uri, exc)
        listing = []
    exact = [t for t in listing if t[0] == ds.version]
    older = [t for t in listing if t[0] < ds.version][:1]
    newer = [t for t in reversed(listing) if t[0] > ds.version][:1]
    for version, path, _ in (exact + older + newer)[:MAX_CANDIDATES]:
        try:
            found = load_index(ds.store, ds.base, path, expect_coverage=coverage)
        except Exception as exc:  # noqa: BLE001
            log.warning("ignoring unreadable row-id index %s: %s", ds.store.uri(path), exc)
            found = None
        if found is not None:
            break
    cache.clear()  # keep one entry: the dataset object may move to a new version (delete)
    cache[key] = found
    return found


def lookup(dataset: Any, fragments: Any, row_ids: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The row-id index hook (lance_ops.table.commit.hooks): (positions in ``fragments``, offsets), or None to fall back."""
    if not dataset.has_stable_row_ids:
        return None
    protos = [f.proto for f in fragments]
    index = find_index(dataset, protos)
    if index is None:
        return None
    found, frag_ids, offsets = index.locate(row_ids)
    pos = np.full(found.size, -1, np.int64)
    if found.any() and fragments:
        ids = np.array([f.fragment_id for f in fragments], dtype=np.uint64)
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], frag_ids), ids.size - 1)
        ok = found & (ids[order][at] == frag_ids)
        pos[ok] = order[at[ok]]
        found = ok
    return pos, np.where(found, offsets, 0).astype(np.uint64)

