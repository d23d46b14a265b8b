"""Compaction commit: publish executed tasks' results as one Rewrite version.

Commit: one ``Rewrite`` transaction with one ``RewriteGroup`` per task (old fragments exactly as
they were at the read version, new fragments with id 0), committed against the plan's read
version. The commit loop checks every version committed since: an Append never conflicts (the
appended fragments are kept); a Delete, Update or another Rewrite that touched one of the
rewritten fragments makes the commit raise :class:`RetryableCommitConflictError` and leaves the
dataset unchanged. Indices are carried over untouched (no ``rewritten_indices``), which is exactly
what pylance 14.0.2 writes when no rewritten fragment is indexed; a result that rewrites an
indexed fragment is refused (ADR 0011) (the new data files are then orphans for cleanup — :func:`discard_results`
removes them when the caller knows they will never be committed).
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Sequence

from lance_ops._proto import transaction_pb2
from lance_ops.errors import CommitOutcomeUnknownError, LanceOpsError, RetryableCommitConflictError
from lance_ops.io.base import ObjectStore
from lance_ops.table.commit import idempotency
from lance_ops.table.commit import locate
from lance_ops.table.manifest import naming
from lance_ops.table.commit.loop import (
    CommitContext,
    CommitOptions,
    commit_transaction,
)
from lance_ops.table.commit.properties import DEFAULT_MAX_RETRIES, CommitProperties
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table import versions

from lance_ops.maintenance.compaction.indices import index_segments
from lance_ops.maintenance.compaction.remap import PreparedRemap, affected_segments, discard_index_dirs, prepare_remap
from lance_ops.maintenance.compaction.model import (
    METRIC_KEYS,
    RewriteResult,
    same_fragment,
    zero_metrics,
)

log = logging.getLogger(__name__)

#: transaction property holding the compaction metrics (so an idempotent replay can report them)
METRICS_PROPERTY = "lance_ops.compaction.metrics"
OPERATION_PROPERTY = "lance_ops.operation"


def _open(ds_or_uri: Any, storage_options: Any) -> Any:
    from lance_ops.table.dataset import LanceDataset

    if isinstance(ds_or_uri, LanceDataset):
        return ds_or_uri
    return LanceDataset(str(ds_or_uri), None, storage_options)


def sum_metrics(results: Sequence[RewriteResult]) -> dict[str, int]:
    """The metric counters of ``results`` added up."""
    out = zero_metrics()
    for r in results:
        for k in METRIC_KEYS:
            out[k] += int(r.metrics.get(k, 0))
    return out


def rewrite_seconds(results: Sequence[RewriteResult]) -> float:
    """The measured rewrite time of ``results`` added up (seconds; 0 for results that carry none)."""
    return float(sum(float(r.metrics.get("rewrite_seconds", 0.0)) for r in results))


def replayed_metrics(earlier: Any) -> dict[str, Any]:
    """Metrics recorded by an earlier commit with the same idempotency key (a ManifestFile, or
    the key ledger's record when that version was cleaned up)."""
    if isinstance(earlier, idempotency.KeyRecord):
        raw = earlier.properties.get(METRICS_PROPERTY)
    else:
        txn = earlier.transaction
        raw = txn.transaction_properties.get(METRICS_PROPERTY) if txn is not None else None
    out: dict[str, Any] = zero_metrics()
    if raw:
        try:
            out.update({k: int(v) for k, v in json.loads(raw).items() if k in METRIC_KEYS})
        except ValueError:
            pass
    out["version"] = earlier.version
    out["already_committed"] = True
    return out


def find_committed_rewrite(store: ObjectStore, base: str, key: str, since: int = 0) -> Any:
    """``(record, manifest or None)`` of the rewrite committed with ``key``, or None (see
    :func:`lance_ops.table.commit.idempotency.lookup`; ``since``: the plan's read version)."""
    rec = idempotency.lookup(store, base, key, "rewrite", since=since)
    if rec is None:
        return None
    return rec, idempotency.manifest_of(store, base, rec)


def commit_compaction(ds_or_uri: Any, results: Sequence[RewriteResult], *, storage_options: Any = None,
                      idempotency_key: str | None = None, max_retries: int | None = None,
                      _return_manifest: bool = False) -> Any:
    """Commit executed tasks as one Rewrite version; returns the metrics (with ``version``).

    Results may be a subset of a plan's tasks (failed tasks are simply left out). The commit is
    checked against every version since the plan's read version: concurrent appends are kept,
    a concurrent change to a rewritten fragment raises RetryableCommitConflictError (nothing is
    committed; re-plan). With ``idempotency_key``, a key already committed returns that earlier
    version's metrics (``already_committed: True``) and commits nothing.
    """
    t0 = time.perf_counter()
    ds = _open(ds_or_uri, storage_options)
    store, base = ds.store, ds.base
    results = [r for r in results if r.original_fragments]
    metrics: dict[str, Any] = sum_metrics(results)
    metrics["rewrite_seconds"] = rewrite_seconds(results)
    if idempotency_key:
        since = min((r.read_version for r in results), default=0)
        found = find_committed_rewrite(store, base, idempotency_key, since)
        if found is not None:
            rec, earlier = found
            log.info("compaction key %s already committed as version %d", idempotency_key, rec.version)
            out = replayed_metrics(rec)
            out["seconds"] = time.perf_counter() - t0
            return (out, earlier) if _return_manifest else out
    if not results:
        metrics.update(version=None, seconds=time.perf_counter() - t0)
        return (metrics, None) if _return_manifest else metrics

    from lance_ops.table.dataset import LanceDataset, open_manifest
    from lance_ops.errors import DatasetNotFoundError

    read_version = min(r.read_version for r in results)
    try:
        read_mf = ds.manifest_file if ds.version == read_version else open_manifest(store, base, read_version, ds.uri)
    except DatasetNotFoundError as exc:
        raise RetryableCommitConflictError(
            f"{ds.uri}: the compaction was planned at version {read_version}, which no longer exists "
            "(cleaned up); re-plan the compaction"
        ) from exc
    rewritten = [f.id for r in results for f in r.original_fragments]
    read_ds = ds if ds.version == read_version else LanceDataset(ds.uri, read_version, _store=(store, base))
    hits = affected_segments(read_ds, set(rewritten))
    latest_loc = locate.latest_version(store, base)
    if latest_loc is not None and latest_loc.version != read_mf.version:
        # an index built since the plan over a fragment we rewrote: re-plan
        known = {seg.uuid for _, seg in hits} | {s.uuid for s in index_segments(read_mf, ds.uri)}
        now = [s for s in index_segments(read_manifest(store, latest_loc.path), ds.uri)
               if s.fragment_ids & set(rewritten) and s.uuid not in known]
        if now:
            raise RetryableCommitConflictError(
                f"{ds.uri}: index(es) {sorted({s.name for s in now})} built since version {read_version} cover "
                "fragments this compaction rewrote; nothing was committed, re-plan the compaction")

    at_read = {f.id: f for f in read_mf.manifest.fragments}
    seen: set[int] = set()
    for r in results:
        for old in r.original_fragments:
            if old.id in seen:
                raise LanceOpsError(f"{ds.uri}: fragment {old.id} is rewritten by two results")
            seen.add(old.id)
            current = at_read.get(old.id)
            if current is None or not same_fragment(current, old):
                raise RetryableCommitConflictError(
                    f"{ds.uri}: fragment {old.id} at version {read_version} is not the one the "
                    "compaction task rewrote (results from different plans?); re-plan the compaction"
                )
        for new in r.new_fragments:
            if new.id != 0:
                raise LanceOpsError(f"{ds.uri}: new fragments must carry id 0 (got {new.id})")

    prepared: PreparedRemap | None = prepare_remap(read_ds, results, hits) if hits else None
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=read_version)
    for i, r in enumerate(results):
        group = txn.rewrite.groups.add()
        group.old_fragments.extend(r.original_fragments)
        group.new_fragments.extend(prepared.new_fragments[i] if prepared is not None else r.new_fragments)
    if prepared is not None:
        txn.rewrite.rewritten_indices.extend(prepared.rewritten)
    properties = CommitProperties(
        "rewrite", idempotency_key or None,
        extra={OPERATION_PROPERTY: "compaction", METRICS_PROPERTY: json.dumps(sum_metrics(results), sort_keys=True)},
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries)
    options = CommitOptions(data_storage_version=read_mf.manifest.data_format.version or versions.UNRECORDED)
    try:
        mf = commit_transaction(store, base, txn, CommitContext(read_mf), options, properties=properties)
    except CommitOutcomeUnknownError:
        raise  # the Rewrite may have landed: its index files must stay
    except BaseException:
        if prepared is not None:
            discard_index_dirs(store, prepared.written_dirs)
        raise
    if prepared is not None and mf.transaction is not None and mf.transaction.uuid != txn.uuid:
        discard_index_dirs(store, prepared.written_dirs)  # an earlier commit with our key won
    if prepared is not None:
        metrics["indices_remapped"] = len(prepared.rewritten)
        metrics["index_actions"] = dict(prepared.outcomes)
    if idempotency_key:
        idempotency.remember(store, base, mf)
    if idempotency_key and mf.transaction is not None and mf.transaction.uuid != txn.uuid:
        out = replayed_metrics(mf)
        out["seconds"] = time.perf_counter() - t0
        return (out, mf) if _return_manifest else out
    metrics.update(version=mf.version, seconds=time.perf_counter() - t0)
    return (metrics, mf) if _return_manifest else metrics
