"""Commit a staged result exactly once: the small, retry-safe step after a distributed write.

A Spark job (``lance_ops.spark.ingest`` / ``lance_ops.spark.compact``) writes data files on its
executors and stages *what* it wrote under ``_staging/{key}.json`` (see
:mod:`lance_ops.table.commit.staging`). :func:`commit_staged` turns that into one new dataset version:

* ``append``    -> an Append transaction (creates the dataset when it is missing and the staged
  result carries a schema);
* ``overwrite`` -> an Overwrite transaction (creates the dataset when it is missing);
* ``rewrite``   -> the compaction commit (:func:`lance_ops.maintenance.compaction.commit_compaction`);
* ``create_index`` -> index upkeep's CreateIndex
  (:func:`lance_ops.maintenance.index_upkeep.staged.commit_staged_upkeep`);
* ``update``    -> the Update transaction of a merge-insert staged by ``lance_ops.spark.merge``
  (:func:`lance_ops.table.rewrite_rows.commit_staged_update`; a preempted one is not re-planned
  here: RetryableCommitConflictError, the merge job plans it again).

The key is recorded in the transaction properties (``lance_ops.idempotency_key``) and in the
dataset's key ledger (:mod:`lance_ops.table.commit.idempotency`), which cleanup carries forward; before
committing the ledger is consulted, so committing the same key twice (an Airflow retry of the
commit step, a cleared old run, or a re-run Spark job that finds its own earlier stage) is a
no-op that returns the version committed the first time - also after compaction and cleanup
removed that version. Keys are scoped by kind: ``write`` (append/overwrite) or ``rewrite``.

Before committing, every data file the stage references is checked to exist with its recorded
size (else :class:`~lance_ops.errors.StagedResultError`, nothing committed); after committing the
stage is marked with the version (``committed_version``). :func:`pending_stages` lists the stages
still waiting for their commit (``lance-ops inspect`` shows them).

    from lance_ops.maintenance.staged_commit import commit_staged
    commit_staged("s3://bkt/events.lance", "dag.run.task.0", storage_options={...})
    # {"version": 7, "operation": "append", "already_committed": False, "metrics": {...}}
"""
from __future__ import annotations

import base64
import logging
from typing import Any, Mapping

from lance_ops._proto import file_pb2, transaction_pb2
from lance_ops.errors import DatasetNotFoundError, LanceOpsError, ObjectNotFoundError
from lance_ops.io.base import ObjectStore
from lance_ops.io import open_store
from lance_ops.table import versions
from lance_ops.table.commit import idempotency
from lance_ops.table.manifest import naming
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.commit.loop import (
    CommitContext,
    CommitOptions,
    commit_transaction,
)
from lance_ops.table.dataset import open_manifest
from lance_ops.table.manifest.codec import ManifestFile
from lance_ops.table.commit.staging import (
    StagedResult,
    check_staged_files,
    list_staged,
    mark_committed,
    read_staged,
    sanitize_key,
)
from lance_ops.table.commit.transaction_file import load_transaction

log = logging.getLogger(__name__)

__all__ = ["commit_staged", "commit_result", "fields_to_b64", "fields_from_b64", "pending_stages", "stage_kind"]


def stage_kind(operation: str) -> str:
    """The idempotency-key kind a staged operation commits under."""
    return idempotency.kind_of_operation(operation)


def fields_to_b64(fields: Any) -> list[str]:
    """Lance field protos as base64 strings (the ``schema_fields`` of a StagedResult)."""
    return [base64.b64encode(f.SerializeToString(deterministic=True)).decode() for f in fields]


def fields_from_b64(texts: Any) -> list[file_pb2.Field]:
    """Lance field protos from :func:`fields_to_b64`'s strings."""
    out = []
    for text in texts:
        f = file_pb2.Field()
        f.ParseFromString(base64.b64decode(text))
        out.append(f)
    return out


def _latest(store: ObjectStore, base: str, uri: str) -> ManifestFile | None:
    try:
        return open_manifest(store, base, None, uri)
    except DatasetNotFoundError:
        return None


def _read_manifest_at(store: ObjectStore, base: str, uri: str, version: int, fallback: ManifestFile) -> ManifestFile:
    """The manifest the staged write was planned against (the latest one if it is gone)."""
    if version <= 0 or version == fallback.version:
        return fallback
    try:
        return open_manifest(store, base, version, uri)
    except DatasetNotFoundError:
        log.warning("%s: read version %d of the staged result no longer exists; committing against %d",
                    uri, version, fallback.version)
        return fallback


def _staged_metrics(result: StagedResult) -> dict[str, Any]:
    metrics = dict(result.metrics)
    if result.operation in ("append", "overwrite"):
        metrics.setdefault("num_fragments", len(result.fragments))
        metrics.setdefault("num_rows", sum(f.physical_rows for f in result.fragments))
    return metrics


def _result(version: int, operation: str, already: bool, metrics: Mapping[str, Any]) -> dict:
    return {"version": int(version), "operation": operation, "already_committed": already,
            "metrics": dict(metrics)}


def commit_result(uri: str, result: StagedResult, *, storage_options: Mapping[str, Any] | None = None,
                  transaction_properties: Mapping[str, str] | None = None) -> dict:
    """Commit ``result`` (already in memory) once under its key; see :func:`commit_staged`."""
    uri = str(uri)
    store, base = open_store(uri, storage_options)
    key = result.key
    op = result.operation
    if op not in ("append", "overwrite", "rewrite", "create_index", "update"):
        raise LanceOpsError(f"{uri}: staged result {key!r} has unknown operation {op!r}")
    current = _latest(store, base, uri)
    if current is not None and key:
        earlier = idempotency.lookup(store, base, key, stage_kind(op), since=max(0, result.read_version))
        if earlier is not None:
            log.info("%s: key %s was already committed as version %d", uri, key, earlier.version)
            _mark(store, base, key, earlier.version)
            return _result(earlier.version, op, True, _replayed(result, earlier))
    if result.committed_version is not None:
        return _result(result.committed_version, op, True, _staged_metrics(result))
    check_staged_files(store, base, result)

    if op == "rewrite":
        return _commit_rewrite(uri, result, storage_options)
    if op == "create_index":
        from lance_ops.maintenance.index_upkeep.staged import commit_staged_upkeep

        index_version = commit_staged_upkeep(uri, store, base, result)
        _mark(store, base, key, index_version)
        return _result(index_version, op, False, _staged_metrics(result))
    if op == "update":
        return _commit_update(store, base, uri, result)

    properties = CommitProperties.from_keywords(stage_kind(op), idempotency_key=key,
                                                transaction_properties=transaction_properties)
    create = current is None
    if create and not result.schema_fields:
        raise DatasetNotFoundError(
            f"Dataset at path {uri} was not found and the staged {op} {key!r} carries no schema to create it"
        )
    overwrite = op == "overwrite" or create
    version = versions.normalize(result.data_storage_version or None)
    if current is not None and op == "append":
        version = versions.normalize(current.manifest.data_format.version or None)
    versions.require_writable(version, uri)

    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid())
    if overwrite:
        txn.overwrite.fragments.extend(result.fragments)
        txn.overwrite.schema.extend(fields_from_b64(result.schema_fields))
        for k, v in result.schema_metadata.items():
            txn.overwrite.schema_metadata[k] = v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v
    else:
        txn.append.fragments.extend(result.fragments)

    if current is None:
        read = None
        txn.read_version = 0
    else:
        read = _read_manifest_at(store, base, uri, result.read_version, current)
        txn.read_version = read.version
    options = CommitOptions(data_storage_version=version)
    mf = commit_transaction(store, base, txn, CommitContext(read), options, properties=properties)
    landed = load_transaction(store, base, mf)
    already = bool(key) and landed is not None and landed.uuid != txn.uuid
    if key:
        idempotency.remember(store, base, mf)
        _mark(store, base, key, mf.version)
    metrics = _staged_metrics(result)
    if create:
        metrics["created"] = True
    log.info("%s: committed staged %s %s as version %d", uri, op, key, mf.version)
    return _result(mf.version, op, already, metrics)


def _commit_rewrite(uri: str, result: StagedResult, storage_options: Any) -> dict:
    from lance_ops.maintenance import compaction

    rewrite_results = [compaction.RewriteResult.from_json(_group_json(g)) for g in result.rewrite_groups]
    metrics = dict(compaction.commit_compaction(uri, rewrite_results, storage_options=storage_options,
                                                idempotency_key=result.key or None))
    version = metrics.pop("version", None)
    already = bool(metrics.pop("already_committed", False))
    store, base = open_store(uri, storage_options)
    if version is None:  # nothing to rewrite: no new version
        current = _latest(store, base, uri)
        version = current.version if current is not None else 0
    elif result.key:
        _mark(store, base, result.key, version)
    merged = dict(result.metrics)
    merged.update(metrics)
    return _result(version, "rewrite", already, merged)


def _commit_update(store: ObjectStore, base: str, uri: str, result: StagedResult) -> dict:
    from lance_ops.table.rewrite_rows import commit_staged_update

    counts = {k: int(result.metrics.get(k, 0)) for k in UPDATE_COUNTS}
    mf, already = commit_staged_update(store, base, uri, result, counts)
    if result.key:
        _mark(store, base, result.key, mf.version)
    log.info("%s: committed staged update %s as version %d", uri, result.key, mf.version)
    return _result(mf.version, "update", already, _staged_metrics(result))


#: pylance's merge_insert result counts, kept in an update stage's metrics
UPDATE_COUNTS = ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")


def _group_json(group: Any) -> str:
    """A rewrite group as staged by the compaction job: ``{"result": <RewriteResult JSON>}``."""
    import json

    if isinstance(group, str):
        return group
    if isinstance(group, dict) and "result" in group:
        inner = group["result"]
        return inner if isinstance(inner, str) else json.dumps(inner)
    return json.dumps(group)


def commit_staged(uri: str, key: str, *, storage_options: Mapping[str, Any] | None = None) -> dict:
    """Commit the result staged under ``_staging/{key}.json`` of ``uri``, once.

    Returns ``{"version", "operation", "already_committed", "metrics"}``. A second call with the
    same key commits nothing and returns the version of the first commit with
    ``already_committed=True``. Raises ObjectNotFoundError when nothing is staged under ``key``
    (and the key was never committed).
    """
    uri = str(uri)
    key = sanitize_key(key)
    store, base = open_store(uri, storage_options)
    try:
        staged = read_staged(store, base, key)
    except ObjectNotFoundError:
        staged = None
    if staged is None:
        # the stage may be gone because it was committed and cleanup removed it: ask the ledger
        if _latest(store, base, uri) is not None:
            earlier = idempotency.lookup(store, base, key, ("write", "rewrite", "create_index", "update"))
            if earlier is not None:
                log.info("%s: key %s was already committed as version %d", uri, key, earlier.version)
                return _result(earlier.version, earlier.operation, True, _replayed(None, earlier))
        staged = read_staged(store, base, key)  # raises ObjectNotFoundError naming the key
    if staged.key != key:
        raise LanceOpsError(f"{uri}: _staging/{key}.json holds a result for key {staged.key!r}")
    return commit_result(uri, staged, storage_options=storage_options)


def _mark(store: ObjectStore, base: str, key: str, version: int) -> None:
    """Mark the stage committed, best effort: the commit landed and the key ledger answers re-runs."""
    try:
        mark_committed(store, base, key, version)
    except Exception as exc:  # noqa: BLE001 - never turn a landed commit into a failure
        log.warning("%s: committed %s as version %d but could not mark its stage (%s); cleanup removes it "
                    "once the key ledger has it", store.uri(base), key, version, exc)


def _replayed(result: StagedResult | None, rec: idempotency.KeyRecord) -> dict[str, Any]:
    """Metrics of a replay: the stage's when it is still there, else what the ledger kept."""
    if result is not None:
        metrics = _staged_metrics(result)
    else:
        metrics = {}
    import json

    for prop in ("lance_ops.compaction.metrics", "lance_ops.rewrite_rows.result"):
        raw = rec.properties.get(prop)
        if raw:
            try:
                metrics.update(json.loads(raw))
            except ValueError:
                pass
    return metrics


def pending_stages(uri: str, *, storage_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Staged results still waiting for their commit step (not marked, key not in the ledger):
    ``[{"key", "operation", "read_version", "rows", "fragments", "files", "bytes", "staged_at"}]``."""
    store, base = open_store(str(uri), storage_options)
    out = []
    for info in list_staged(store, base):
        res = info.result
        if res is not None and res.committed_version is not None:
            continue
        if res is not None and res.key:
            try:
                if idempotency.read_record(store, base, stage_kind(res.operation), res.key) is not None:
                    continue
            except LanceOpsError:
                pass
        entry: dict[str, Any] = {"key": info.key, "staged_at": info.last_modified.isoformat()}
        if res is None:
            entry["error"] = "not a valid staged result"
        else:
            from lance_ops.table.commit.staging import staged_fragments

            frags = staged_fragments(res)
            entry.update(operation=res.operation, read_version=res.read_version,
                         rows=sum(f.physical_rows for f in frags), fragments=len(frags),
                         files=sum(len(f.files) for f in frags),
                         bytes=sum(df.file_size_bytes for f in frags for df in f.files))
        out.append(entry)
    return sorted(out, key=lambda e: e["staged_at"])
