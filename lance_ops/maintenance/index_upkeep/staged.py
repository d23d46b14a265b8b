"""Staged index upkeep: the hand-off between a distributed ``optimize_indices`` and its one commit.

The Spark job (:mod:`lance_ops.spark.optimize_indices`, ADR 0031) writes the new segments, then
stages *what* it wrote as a ``create_index`` result under ``_staging/{key}.json``: the new
segments' and the folded segments' ``IndexMetadata`` (base64 protobuf) and the per-index report.
:func:`commit_staged_upkeep` (called by ``staged_commit.commit_result``) commits it as ONE
CreateIndex carrying the key, exactly as the local ``optimize_indices`` commits:

* every file a new segment lists must exist with its recorded size (else StagedResultError);
* the commit is read at the stage's read version; when that version is gone (cleaned up) the stage
  cannot be checked against what happened since and is refused;
* a definite conflict (a concurrent compaction or index change, lost races) discards the stage
  and its index directories, so a re-run with the same key plans again from the latest version;
  an unknown outcome keeps everything (the key ledger answers the re-run).
"""
from __future__ import annotations

import base64
import logging
from typing import Any, Sequence

from lance_ops._proto import table_pb2
from lance_ops.errors import CommitConflictError, DatasetNotFoundError, ObjectNotFoundError, StagedResultError
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.compaction.remap import discard_index_dirs
from lance_ops.maintenance.index_upkeep.optimize import IndexUpkeep, commit_segments
from lance_ops.table.commit.staging import StagedResult, staged_path
from lance_ops.table.dataset import open_manifest
from lance_ops.table.index_files import listed_files
from lance_ops.table.indices import segment_uuid

log = logging.getLogger(__name__)

#: the staged operation of index upkeep (also the key ledger's kind)
OPERATION = "create_index"


def _b64(index: table_pb2.IndexMetadata) -> str:
    return base64.b64encode(index.SerializeToString(deterministic=True)).decode()


def _from_b64(text: str) -> table_pb2.IndexMetadata:
    index = table_pb2.IndexMetadata()
    index.ParseFromString(base64.b64decode(text))
    return index


def staged_indices(new_indices: Sequence[table_pb2.IndexMetadata], removed: Sequence[table_pb2.IndexMetadata],
                   infos: Sequence[IndexUpkeep]) -> dict[str, Any]:
    """The ``indices`` document of a staged ``create_index`` result."""
    return {"new": [_b64(i) for i in new_indices], "removed": [_b64(i) for i in removed],
            "upkeep": [vars(i).copy() for i in infos]}


def _index_dirs(store: ObjectStore, base: str, indices: Sequence[table_pb2.IndexMetadata]) -> list[str]:
    return [f"{base}/_indices/{segment_uuid(i)}" for i in indices]


def _check_files(store: ObjectStore, base: str, key: str, indices: Sequence[table_pb2.IndexMetadata]) -> None:
    for index in indices:
        folder = f"{base}/_indices/{segment_uuid(index)}"
        for name, size in listed_files(index):
            try:
                found = store.size(f"{folder}/{name}")
            except (ObjectNotFoundError, FileNotFoundError):
                found = None
            if found is None or (size and found != size):
                what = "is missing" if found is None else f"has {found} bytes, the stage recorded {size}"
                raise StagedResultError(
                    f"{store.uri(folder + '/' + name)}: index file of the result staged under key {key!r} {what}; "
                    "nothing was committed. Re-run the optimize_indices job (with this key it plans again)")


def discard_stage(store: ObjectStore, base: str, result: StagedResult) -> None:
    """Remove a stage that can never commit and the index directories it names (best effort)."""
    new = [_from_b64(t) for t in result.indices.get("new", [])]
    discard_index_dirs(store, _index_dirs(store, base, new))
    try:
        store.delete(staged_path(store, base, result.key))
    except Exception:  # noqa: BLE001 - cleanup removes abandoned stages later
        log.warning("could not remove the stage %s", result.key, exc_info=True)


def commit_staged_upkeep(uri: str, store: ObjectStore, base: str, result: StagedResult) -> int:
    """Commit a staged ``create_index`` result once (module docstring); returns the new version."""
    new = [_from_b64(t) for t in result.indices.get("new", [])]
    removed = [_from_b64(t) for t in result.indices.get("removed", [])]
    if not new:
        raise StagedResultError(f"{uri}: the create_index result staged under key {result.key!r} has no new index")
    try:
        read = open_manifest(store, base, result.read_version, uri)
    except DatasetNotFoundError as exc:
        discard_stage(store, base, result)
        raise StagedResultError(
            f"{uri}: version {result.read_version}, which the index upkeep staged under key {result.key!r} was "
            "planned on, no longer exists; its stage was discarded and nothing was committed. Re-run the "
            "optimize_indices job: it plans again from the latest version") from exc
    _check_files(store, base, result.key, new)
    try:
        mf = commit_segments(store, base, read, new, removed, idempotency_key=result.key or None)
    except CommitConflictError:
        log.warning("%s: the staged index upkeep %s conflicts with a later commit; discarding it (a re-run "
                    "plans again)", uri, result.key)
        discard_stage(store, base, result)
        raise
    log.info("%s: committed staged index upkeep %s as version %d", uri, result.key, mf.version)
    return int(mf.version)
