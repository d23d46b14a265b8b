"""Eager index remap at compaction commit (ADR 0011, step 2), as pylance 14.0.2 does by default.

When the results rewrite fragments some index segment covers:

1. a ``ReserveFragments`` version is committed (read version = the plan's) to fix the new
   fragments' ids (``max_fragment_id + 1 ..`` of the manifest it lands on);
2. the reserved ids are given to the new fragments in result order;
3. the old -> new :class:`~lance_ops.maintenance.index_remap.AddressMap` is built from the groups
   (surviving offsets = physical offsets minus the deletion vector at the read version);
4. each affected segment (its bitmap names a rewritten fragment) goes through
   ``REMAPPERS[kind]`` with a fresh uuid; "remap"/"rebuild" outcomes become the Rewrite's
   ``rewritten_indices`` (old id, new id, details and index_version as the old entry has them
   unless the remapper gives new ones, files with sizes). "keep" (stable row ids only) and "drop"
   add nothing: the manifest build recalculates / leaves the bitmap
   (:mod:`lance_ops.table.manifest.index_rewrite`).

If the Rewrite is not committed, :func:`discard_index_dirs` removes the new index directories.
A crash between the reserve and the Rewrite leaves only a ReserveFragments version (it changes no
data) and orphan files for cleanup; a re-run plans again and commits once.
"""
from __future__ import annotations

import logging
import uuid as uuid_mod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import LanceOpsError, UnsupportedError
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.compaction.indices import IndexCoverage, IndexSegment, refuse_indexed_rewrite, remappable
from lance_ops.maintenance.compaction.model import RewriteResult
from lance_ops.maintenance.index_remap import AddressMap, RemapOutcome, RemapRequest
from lance_ops.maintenance.index_remap.base import REWRITE_ACTIONS
from lance_ops.maintenance.index_remap.registry import REMAPPERS
from lance_ops.table import deletion, versions
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.index_files import add_rewritten_files
from lance_ops.table.manifest import naming

log = logging.getLogger(__name__)


@dataclass
class PreparedRemap:
    """What the eager remap produced for one Rewrite: groups with reserved ids, the
    ``rewritten_indices`` entries and the index directories written (to discard on failure)."""

    reserve_version: int
    new_fragments: list[list[table_pb2.DataFragment]]
    rewritten: list[transaction_pb2.Transaction.RewrittenIndex] = field(default_factory=list)
    written_dirs: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)


def affected_segments(read_ds: Any, rewritten_ids: set[int]) -> list[tuple[table_pb2.IndexMetadata, IndexSegment]]:
    """The (metadata, segment) pairs of ``read_ds`` covering a rewritten fragment; UnsupportedError
    (nothing written) when one of them cannot be remapped."""
    section = read_ds.manifest_file.index_section
    if section is None:
        return []
    segments = IndexCoverage.of(read_ds).segments
    hits = [(index, seg) for index, seg in zip(section.indices, segments) if seg.fragment_ids & rewritten_ids]
    blocked = [seg for _, seg in hits if not remappable(seg)]
    if blocked:
        covered = set().union(*(s.fragment_ids & rewritten_ids for s in blocked))
        raise refuse_indexed_rewrite(read_ds.uri, covered, blocked, "this compaction")
    return hits


def check_groups(where: str, results: Sequence[RewriteResult], segments: Sequence[IndexSegment]) -> None:
    """Refuse a result that rewrites part of a segment's fragments together with others it does
    not cover (pylance refuses that commit: "split of indexed and non-indexed data")."""
    for r in results:
        ids = set(r.original_fragment_ids)
        for seg in segments:
            inside = ids & seg.fragment_ids
            if inside and inside != ids:
                raise LanceOpsError(
                    f"{where}: a compaction task rewrites fragments {sorted(ids)} together, but index "
                    f"{seg.label()} covers only {sorted(inside)} of them (the plan must never mix index sets); "
                    "nothing was written")


def reserve_fragment_ids(store: ObjectStore, base: str, read_mf: Any, count: int, data_storage_version: str) -> tuple[int, list[int]]:
    """Commit ReserveFragments{count} against ``read_mf``; returns (its version, the reserved ids)."""
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=read_mf.version)
    txn.reserve_fragments.num_fragments = count
    mf = commit_transaction(store, base, txn, CommitContext(read_mf),
                            CommitOptions(data_storage_version=data_storage_version),
                            properties=CommitProperties("reserve_fragments", extra={"lance_ops.operation": "compaction"}))
    high = int(mf.manifest.max_fragment_id)
    return mf.version, list(range(high - count + 1, high + 1))


def surviving_offsets(store: ObjectStore, base: str, frag: table_pb2.DataFragment) -> np.ndarray:
    """Physical offsets of ``frag``'s rows not deleted at the read version (sorted uint64)."""
    alive = np.ones(int(frag.physical_rows), dtype=bool)
    if frag.HasField("deletion_file"):
        dead = deletion.read_deletion_offsets(store, base, frag.id, frag.deletion_file, int(frag.physical_rows))
        alive[dead.astype(np.int64)] = False
    return np.flatnonzero(alive).astype(np.uint64)


def _copy(frag: table_pb2.DataFragment) -> table_pb2.DataFragment:
    out = table_pb2.DataFragment()
    out.CopyFrom(frag)
    return out


def _rewritten_entry(index: table_pb2.IndexMetadata, new_uuid: str,
                     outcome: RemapOutcome) -> transaction_pb2.Transaction.RewrittenIndex:
    entry = transaction_pb2.Transaction.RewrittenIndex()
    entry.old_id.uuid = bytes(index.uuid.uuid)
    entry.new_id.uuid = uuid_mod.UUID(new_uuid).bytes
    if outcome.new_index_details is not None:
        entry.new_index_details.CopyFrom(outcome.new_index_details)
    elif index.HasField("index_details"):
        entry.new_index_details.CopyFrom(index.index_details)
    version = outcome.new_index_version if outcome.new_index_version is not None else index.index_version
    entry.new_index_version = int(version)
    add_rewritten_files(entry, list(outcome.files))
    return entry


def prepare_remap(read_ds: Any, results: Sequence[RewriteResult],
                  hits: Sequence[tuple[table_pb2.IndexMetadata, IndexSegment]]) -> PreparedRemap:
    """Reserve the new fragment ids, then remap every affected segment (see the module docstring).

    On any failure after an index directory was written, those directories are removed again.
    """
    store, base, where = read_ds.store, read_ds.base, read_ds.uri
    check_groups(where, results, [seg for _, seg in hits])
    count = sum(len(r.new_fragments) for r in results)
    stable = bool(read_ds.has_stable_row_ids)
    version, ids = reserve_fragment_ids(store, base, read_ds.manifest_file, count,
                                        read_ds.manifest.data_format.version or versions.UNRECORDED)
    log.info("%s: reserved fragment ids %s at version %d", where, ids, version)
    next_ids = iter(ids)
    new_groups: list[list[table_pb2.DataFragment]] = []
    groups = []
    for r in results:
        news = [_copy(f) for f in r.new_fragments]
        for f in news:
            f.id = next(next_ids)
        new_groups.append(news)
        olds = [(f.id, surviving_offsets(store, base, f)) for f in r.original_fragments]
        groups.append((olds, [(f.id, int(f.physical_rows)) for f in news]))
    amap = AddressMap.from_groups(groups)
    prepared = PreparedRemap(version, new_groups)
    all_new = [f for g in new_groups for f in g]
    try:
        for index, seg in hits:
            new_uuid = str(uuid_mod.uuid4())
            request = RemapRequest(store=store, base=base, index=index, kind=seg.remap_kind, new_uuid=new_uuid,
                                   addresses=amap, stable_row_ids=stable, dataset=read_ds, new_fragments=all_new)
            new_dir = request.new_dir
            prepared.written_dirs.append(new_dir)
            outcome = REMAPPERS[seg.remap_kind](request)
            if outcome.action == "keep" and not stable:
                raise UnsupportedError(
                    f"{where}: the {seg.remap_kind} remapper kept index {seg.name!r} unchanged on a dataset "
                    "without stable row ids, whose row addresses change; nothing was committed")
            prepared.outcomes[seg.uuid] = outcome.action
            if outcome.action in REWRITE_ACTIONS:
                prepared.rewritten.append(_rewritten_entry(index, new_uuid, outcome))
    except BaseException:
        discard_index_dirs(store, prepared.written_dirs)
        raise
    return prepared


def discard_index_dirs(store: ObjectStore, dirs: Sequence[str]) -> None:
    """Remove index directories written for a Rewrite that was not committed (best effort)."""
    for folder in dirs:
        try:
            paths = [info.path for info in store.list(folder + "/")]
            if paths:
                store.delete_many(paths)
        except Exception:  # noqa: BLE001 - cleanup_old_versions removes orphans later
            log.warning("could not remove uncommitted index directory %s", store.uri(folder), exc_info=True)
