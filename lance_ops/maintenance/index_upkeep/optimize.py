"""``optimize_indices``: bring every index up to date with the fragments appended since it was built.

pylance 14.0.2's semantics (index-facts.md §4, docs/adr/0026-index-upkeep.md):

* per index name, the *unindexed* fragments are the live fragments no segment's bitmap names;
* ``num_indices_to_merge=0`` writes a delta segment over them (same name, new uuid,
  ``dataset_version`` = the read version; the old segments stay);
* ``num_indices_to_merge=N`` folds the newest ``N`` segments (manifest order) and the new data into
  one segment that keeps the oldest folded segment's ``dataset_version``; the default (None) is 1
  for scalar kinds and 0 (a delta segment) for vector kinds: what pylance does when no partition
  needs splitting or joining (ADR 0020; lance_ops keeps the centroids, it never splits or joins);
* nothing to do for an index (no unindexed fragment and at most one segment to fold) skips it;
  nothing to do at all commits nothing;
* every new segment goes into ONE CreateIndex transaction (``new_indices`` sorted by name,
  ``removed_indices`` = the folded segments), committed with the commit loop: a concurrent append
  is kept (the manifest is rebuilt on top of it; its fragments stay unindexed), a concurrent
  compaction or index change makes the commit fail with RetryableCommitConflictError.

Every kind is checked against ``UPDATERS`` before anything is written: a kind without an updater
is refused with UnsupportedError naming the index. Index directories written for a commit that
definitely failed are removed; when the outcome is unknown they are kept.
"""
from __future__ import annotations

import logging
import time
import uuid as uuid_mod
from dataclasses import dataclass, field
from typing import Any, Sequence

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import CommitOutcomeUnknownError, InvalidArgumentError, UnsupportedError
from lance_ops.maintenance.compaction.remap import discard_index_dirs
from lance_ops.maintenance.index_upkeep.base import UpkeepOutcome, UpkeepRequest
from lance_ops.maintenance.index_upkeep.registry import REFUSALS, UPDATERS
from lance_ops.io.base import ObjectStore
from lance_ops.table.commit import idempotency
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.index_files import set_index_files
from lance_ops.table.indices import SYSTEM_PREFIX, fragment_ids, index_kind
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import ManifestFile
from lance_ops.table import versions

log = logging.getLogger(__name__)

#: the idempotency-key kind (and commit operation) of an index upkeep commit
KIND = "create_index"


@dataclass
class IndexUpkeep:
    """What ``optimize_indices`` did (or would do) for one index name."""

    name: str
    kind: str
    unindexed_fragments: list[int]
    merged_segments: list[str]
    new_segment: str | None = None
    fragment_ids: list[int] = field(default_factory=list)
    skipped: str | None = None  # the reason nothing was written for this index


@dataclass
class UpkeepResult:
    """The outcome of one ``optimize_indices`` call: the committed version (None: nothing to do)."""

    version: int | None
    read_version: int
    indices: list[IndexUpkeep] = field(default_factory=list)

    @property
    def committed(self) -> bool:
        """Whether a CreateIndex version was committed."""
        return self.version is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON output, XCom)."""
        return {"version": self.version, "read_version": self.read_version, "committed": self.committed,
                "indices": [vars(i).copy() for i in self.indices]}


def _is_vector(kind: str) -> bool:
    return kind.startswith("IVF_")


def segments_by_name(ds: Any) -> dict[str, list[table_pb2.IndexMetadata]]:
    """Every user index's segments by name, in manifest order (system indices left out)."""
    section = ds.manifest_file.index_section
    out: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in (section.indices if section is not None else []):
        if not index.name.startswith(SYSTEM_PREFIX):
            out.setdefault(index.name, []).append(index)
    return out


def _select(segments: Sequence[table_pb2.IndexMetadata], kind: str,
            num_indices_to_merge: int | None) -> list[table_pb2.IndexMetadata]:
    """The newest segments to fold in (pylance's policy, see the module docstring)."""
    if num_indices_to_merge is None:
        count = 0 if _is_vector(kind) else 1
    else:
        count = min(int(num_indices_to_merge), len(segments))
    return list(segments[len(segments) - count:]) if count else []


def _unindexed(segments: Sequence[table_pb2.IndexMetadata],
               live: Sequence[table_pb2.DataFragment]) -> list[table_pb2.DataFragment]:
    """The live fragments no segment of an index names."""
    covered = {int(i) for seg in segments for i in fragment_ids(seg)}
    return [f for f in live if int(f.id) not in covered]


def _refusal(request: UpkeepRequest) -> str | None:
    """Why the kind's updater would refuse ``request`` (None: it can write it, or has no check)."""
    check = REFUSALS.get(request.kind)
    return None if check is None else check(request)


@dataclass
class _Planned:
    name: str
    kind: str
    segments: list[table_pb2.IndexMetadata]
    merged: list[table_pb2.IndexMetadata]
    unindexed: list[table_pb2.DataFragment]


def plan_upkeep(ds: Any, index_names: Sequence[str] | None = None,
                num_indices_to_merge: int | None = None) -> list[tuple[IndexUpkeep, _Planned | None]]:
    """Per index name: what would be done; refuses (UnsupportedError / InvalidArgumentError) before
    anything is written when an index is unknown or its kind has no updater."""
    if num_indices_to_merge is not None and int(num_indices_to_merge) < 0:
        raise InvalidArgumentError(f"num_indices_to_merge must be >= 0, got {num_indices_to_merge}")
    by_name = segments_by_name(ds)
    names = list(by_name) if index_names is None else list(index_names)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise InvalidArgumentError(f"{ds.uri}: no index named {missing[0]!r} (indices: {sorted(by_name)})")
    live = list(ds.manifest.fragments)
    plans: list[tuple[IndexUpkeep, _Planned | None]] = []
    refused = []
    for name in names:
        segments = by_name[name]
        kind = index_kind(ds, segments[-1])
        unindexed = _unindexed(segments, live)
        merged = _select(segments, kind, num_indices_to_merge)
        info = IndexUpkeep(name, kind, [int(f.id) for f in unindexed],
                           [str(uuid_mod.UUID(bytes=bytes(s.uuid.uuid))) for s in merged])
        if not unindexed and len(merged) <= 1:
            info.skipped = "every live fragment is indexed"
            info.merged_segments = []
            plans.append((info, None))
            continue
        if kind not in UPDATERS:
            refused.append(f"{name!r} ({kind})")
        plans.append((info, _Planned(name, kind, segments, merged, unindexed)))
    if refused:
        raise UnsupportedError(
            f"{ds.uri}: lance_ops cannot bring these indices up to date yet: {', '.join(refused)} "
            f"(supported kinds: {sorted(UPDATERS)}); pass index_names= to update the others. Nothing was written.")
    return plans


def upkeep_refusals(ds: Any, index_names: Sequence[str] | None = None) -> dict[str, str]:
    """Index name -> why ``optimize_indices`` would refuse it (its kind has no updater, or the
    kind's updater cannot write it), for the indices that have work; nothing is written.

    Lets a scheduled caller update the indices it can and report the others instead of failing.
    """
    by_name = segments_by_name(ds)
    names = [n for n in (by_name if index_names is None else index_names) if n in by_name]
    live = list(ds.manifest.fragments)
    out: dict[str, str] = {}
    for name in names:
        segments = by_name[name]
        kind = index_kind(ds, segments[-1])
        unindexed = _unindexed(segments, live)
        if not unindexed:
            continue
        if kind not in UPDATERS:
            out[name] = f"kind {kind} cannot be brought up to date by lance_ops (supported: {sorted(UPDATERS)})"
            continue
        request = UpkeepRequest(store=ds.store, base=ds.base, dataset=ds, index_name=name, kind=kind,
                                merged=_select(segments, kind, None), template=segments[-1],
                                new_fragments=unindexed, new_uuid=str(uuid_mod.uuid4()))
        why = _refusal(request)
        if why is not None:
            out[name] = why
    return out


def _new_metadata(ds: Any, plan: _Planned, new_uuid: str, outcome: UpkeepOutcome) -> table_pb2.IndexMetadata:
    template = plan.segments[-1]
    meta = table_pb2.IndexMetadata()
    meta.uuid.uuid = uuid_mod.UUID(new_uuid).bytes
    meta.fields.extend(template.fields)
    meta.name = plan.name
    if outcome.dataset_version is not None:
        meta.dataset_version = int(outcome.dataset_version)
    elif plan.merged:
        meta.dataset_version = int(plan.merged[0].dataset_version)  # the oldest folded (pylance)
    else:
        meta.dataset_version = int(ds.version)
    from pyroaring import BitMap

    meta.fragment_bitmap = BitMap(sorted(outcome.fragment_ids)).serialize()
    if outcome.index_details is not None:
        meta.index_details.CopyFrom(outcome.index_details)
    elif template.HasField("index_details"):
        meta.index_details.CopyFrom(template.index_details)
    meta.index_version = int(outcome.index_version if outcome.index_version is not None
                             else template.index_version)
    meta.created_at = int(time.time() * 1000)
    if template.HasField("base_id"):
        meta.base_id = template.base_id
    set_index_files(meta, sorted(outcome.files))
    return meta


@dataclass
class UpkeepWork:
    """One index with work: what is reported, the plan, and the request its updater gets."""

    info: IndexUpkeep
    plan: _Planned
    request: UpkeepRequest


def prepare_upkeep(ds: Any, *, index_names: Sequence[str] | None = None, num_indices_to_merge: int | None = None,
                   retrain: bool = False) -> tuple[UpkeepResult, list[UpkeepWork]]:
    """Plan ``optimize_indices`` and build every request (sorted by name), refusing (before
    anything is written) indices an updater could not write; nothing is written here."""
    plans = plan_upkeep(ds, index_names, num_indices_to_merge)
    result = UpkeepResult(None, int(ds.version), [info for info, _ in plans])
    work = [UpkeepWork(info, plan, UpkeepRequest(
        store=ds.store, base=ds.base, dataset=ds, index_name=plan.name, kind=plan.kind, merged=plan.merged,
        template=plan.segments[-1], new_fragments=plan.unindexed, new_uuid=str(uuid_mod.uuid4()), retrain=retrain))
        for info, plan in sorted(((i, p) for i, p in plans if p is not None), key=lambda p: p[0].name)]
    refusals = [f"{w.request.index_name!r}: {why}" for w in work if (why := _refusal(w.request)) is not None]
    if refusals:
        raise UnsupportedError(f"{ds.uri}: lance_ops cannot bring these indices up to date: "
                               f"{'; '.join(refusals)}. Nothing was written.")
    return result, work


def write_segments(ds: Any, work: Sequence[UpkeepWork], written: list[str]) -> list[table_pb2.IndexMetadata]:
    """Run each updater (its request may carry executors' encodings) and return the new segments'
    metadata; every directory about to be written is appended to ``written`` first."""
    new_indices: list[table_pb2.IndexMetadata] = []
    for w in work:
        written.append(w.request.new_dir)
        outcome = UPDATERS[w.plan.kind](w.request)
        new_indices.append(_new_metadata(ds, w.plan, w.request.new_uuid, outcome))
        w.info.new_segment = w.request.new_uuid
        w.info.fragment_ids = sorted(int(i) for i in outcome.fragment_ids)
    return new_indices


def commit_segments(store: ObjectStore, base: str, read: ManifestFile, new_indices: Sequence[table_pb2.IndexMetadata],
                    removed: Sequence[table_pb2.IndexMetadata], *,
                    idempotency_key: str | None = None) -> ManifestFile:
    """Commit ONE CreateIndex (``new_indices`` + ``removed``) read at ``read``, with the optional
    idempotency key (recorded in the key ledger once it landed)."""
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=int(read.version))
    txn.create_index.new_indices.extend(new_indices)
    txn.create_index.removed_indices.extend(removed)
    version = read.manifest.data_format.version or versions.UNRECORDED
    mf = commit_transaction(store, base, txn, CommitContext(read), CommitOptions(data_storage_version=version),
                            properties=CommitProperties(KIND, idempotency_key=idempotency_key,
                                                        extra={"lance_ops.operation": "optimize_indices"}))
    if idempotency_key:
        idempotency.remember(store, base, mf)
    return mf


def optimize_indices(ds: Any, *, index_names: Sequence[str] | None = None,
                     num_indices_to_merge: int | None = None, retrain: bool = False) -> UpkeepResult:
    """Extend the indices of ``ds`` to the fragments they do not cover (pylance's
    ``ds.optimize.optimize_indices``; see the module docstring). The dataset object moves to the
    committed version."""
    result, work = prepare_upkeep(ds, index_names=index_names, num_indices_to_merge=num_indices_to_merge,
                                  retrain=retrain)
    if not work:
        log.info("%s: every index covers every live fragment; nothing to commit", ds.uri)
        return result
    store, base = ds.store, ds.base
    written: list[str] = []
    try:
        new_indices = write_segments(ds, work, written)
        mf = commit_segments(store, base, ds.manifest_file, new_indices, [m for w in work for m in w.plan.merged])
    except CommitOutcomeUnknownError:
        log.warning("%s: the CreateIndex commit may have landed; keeping index directories %s", ds.uri, written)
        raise
    except BaseException:
        discard_index_dirs(store, written)
        raise
    result.version = int(mf.version)
    ds.move_to(mf)
    log.info("%s: optimize_indices committed version %d (%s)", ds.uri, mf.version,
             ", ".join(f"{w.info.name}: {w.info.fragment_ids}" for w in work))
    return result
