"""Commit a staged result exactly once: the small, retry-safe step after a distributed write.

A Spark job (``lance_ops.spark.ingest`` / ``lance_ops.spark.compact``) writes data files on its
executors and stages *what* it wrote under ``_staging/{key}.json`` (see
:mod:`lance_ops.table.staging`). :func:`commit_staged` turns that into one new dataset version:

* ``append``    -> an Append transaction (creates the dataset when it is missing and the staged
  result carries a schema);
* ``overwrite`` -> an Overwrite transaction (creates the dataset when it is missing);
* ``rewrite``   -> the compaction commit (:func:`lance_ops.maintenance.compaction.commit_compaction`).

The key is recorded in the transaction properties (``lance_ops.idempotency_key``); before
committing, recent versions are searched for it, so committing the same key twice (an Airflow
retry of the commit step, or a re-run Spark job that finds its own earlier stage) is a no-op that
returns the version committed the first time.

    from lance_ops.maintenance.staged_commit import commit_staged
    commit_staged("s3://bkt/events.lance", "dag.run.task.0", storage_options={...})
    # {"version": 7, "operation": "append", "already_committed": False, "metrics": {...}}
"""
from __future__ import annotations

import base64
import logging
from typing import Any, Mapping

from lance_ops._proto import file_pb2, transaction_pb2
from lance_ops.errors import DatasetNotFoundError, LanceOpsError
from lance_ops.io import open_store
from lance_ops.table import naming, versions
from lance_ops.table.commit import (
    IDEMPOTENCY_KEY,
    CommitContext,
    CommitOptions,
    commit_transaction,
    find_idempotent_commit,
)
from lance_ops.table.dataset import open_manifest
from lance_ops.table.manifest import ManifestFile
from lance_ops.table.staging import StagedResult, read_staged, sanitize_key
from lance_ops.table.transaction_file import load_transaction

log = logging.getLogger(__name__)

#: how many recent versions are searched for an earlier commit of the same key
IDEMPOTENCY_LOOKBACK = 1000

__all__ = ["commit_staged", "commit_result", "fields_to_b64", "fields_from_b64", "IDEMPOTENCY_LOOKBACK"]


def fields_to_b64(fields) -> list[str]:
    """Lance field protos as base64 strings (the ``schema_fields`` of a StagedResult)."""
    return [base64.b64encode(f.SerializeToString(deterministic=True)).decode() for f in fields]


def fields_from_b64(texts) -> list[file_pb2.Field]:
    out = []
    for text in texts:
        f = file_pb2.Field()
        f.ParseFromString(base64.b64decode(text))
        out.append(f)
    return out


def _latest(store, base: str, uri: str) -> ManifestFile | None:
    try:
        return open_manifest(store, base, None, uri)
    except DatasetNotFoundError:
        return None


def _read_manifest_at(store, base: str, uri: str, version: int, fallback: ManifestFile) -> ManifestFile:
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
    current = _latest(store, base, uri)
    if current is not None and key:
        earlier = find_idempotent_commit(store, base, key, latest=current.version, lookback=IDEMPOTENCY_LOOKBACK)
        if earlier is not None:
            log.info("%s: key %s was already committed as version %d", uri, key, earlier.version)
            return _result(earlier.version, result.operation, True, _staged_metrics(result))

    op = result.operation
    if op == "rewrite":
        return _commit_rewrite(uri, result, storage_options)
    if op not in ("append", "overwrite"):
        raise LanceOpsError(f"{uri}: staged result {key!r} has unknown operation {op!r}")

    props = dict(transaction_properties or {})
    if key:
        props[IDEMPOTENCY_KEY] = key
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
    txn.transaction_properties.update(props)
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
    mf = commit_transaction(store, base, txn, CommitContext(read), options)
    landed = load_transaction(store, base, mf)
    already = bool(key) and landed is not None and landed.uuid != txn.uuid
    metrics = _staged_metrics(result)
    if create:
        metrics["created"] = True
    log.info("%s: committed staged %s %s as version %d", uri, op, key, mf.version)
    return _result(mf.version, op, already, metrics)


def _commit_rewrite(uri: str, result: StagedResult, storage_options) -> dict:
    from lance_ops.maintenance import compaction

    rewrite_results = [compaction.RewriteResult.from_json(_group_json(g)) for g in result.rewrite_groups]
    metrics = dict(compaction.commit_compaction(uri, rewrite_results, storage_options=storage_options,
                                                idempotency_key=result.key or None))
    version = metrics.pop("version", None)
    already = bool(metrics.pop("already_committed", False))
    if version is None:  # nothing to rewrite: no new version
        store, base = open_store(uri, storage_options)
        current = _latest(store, base, uri)
        version = current.version if current is not None else 0
    merged = dict(result.metrics)
    merged.update(metrics)
    return _result(version, "rewrite", already, merged)


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
    current = _latest(store, base, uri)
    if current is not None:
        earlier = find_idempotent_commit(store, base, key, latest=current.version, lookback=IDEMPOTENCY_LOOKBACK)
        if earlier is not None:
            try:
                staged = read_staged(store, base, key)
                op, metrics = staged.operation, _staged_metrics(staged)
            except LanceOpsError:
                op, metrics = _operation_of(store, base, earlier), {}
            log.info("%s: key %s was already committed as version %d", uri, key, earlier.version)
            return _result(earlier.version, op, True, metrics)
    staged = read_staged(store, base, key)
    if staged.key != key:
        raise LanceOpsError(f"{uri}: _staging/{key}.json holds a result for key {staged.key!r}")
    return commit_result(uri, staged, storage_options=storage_options)


def _operation_of(store, base: str, mf: ManifestFile) -> str:
    txn = load_transaction(store, base, mf)
    return (txn.WhichOneof("operation") or "unknown") if txn is not None else "unknown"
