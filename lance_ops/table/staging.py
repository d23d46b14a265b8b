"""Staged results: the hand-off between a distributed write step and its single commit step.

A Spark job (or any worker) writes data files, then records *what* it wrote — new fragments, or
compaction rewrite groups — in ``_staging/{key}.json`` under the dataset, keyed by an idempotency
key (e.g. built from Airflow's dag_id/run_id/task_id/map_index). The commit step reads it and
commits it once: committing the same key again finds the earlier version (the key is recorded in
the transaction properties) and writes nothing. Staged files are written with put-if-absent, so
a re-run of the write step with the same key cannot silently replace what a first run staged;
it is told the key is taken and may use ``overwrite=True`` only when it knows the first run's
result was never committed.
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

from lance_ops._proto import table_pb2
from lance_ops.errors import AlreadyExistsError, LanceOpsError, ObjectNotFoundError

STAGING_DIR = "_staging"
_KEY_RE = re.compile(r"^[A-Za-z0-9._=+-]{1,200}$")


def sanitize_key(raw: str) -> str:
    """A file-name-safe idempotency key (other characters become ``_``; long keys are hashed)."""
    import hashlib

    cleaned = re.sub(r"[^A-Za-z0-9._=+-]", "_", raw)
    if len(cleaned) > 200:
        cleaned = cleaned[:150] + "-" + hashlib.sha256(raw.encode()).hexdigest()[:40]
    return cleaned


def staged_path(store, base: str, key: str) -> str:
    if not _KEY_RE.match(key):
        raise LanceOpsError(f"invalid staging key {key!r}: use sanitize_key() first")
    return store.join(base, STAGING_DIR, f"{key}.json")


def fragment_to_b64(fragment: table_pb2.DataFragment) -> str:
    return base64.b64encode(fragment.SerializeToString(deterministic=True)).decode()


def fragment_from_b64(text: str) -> table_pb2.DataFragment:
    frag = table_pb2.DataFragment()
    frag.ParseFromString(base64.b64decode(text))
    return frag


@dataclass
class StagedResult:
    """What one write step produced, ready to be committed by a separate step."""

    key: str
    #: "append" | "overwrite" | "rewrite"
    operation: str
    read_version: int
    fragments: list[table_pb2.DataFragment] = field(default_factory=list)
    #: for "rewrite": list of {"old_fragment_ids": [...], "new_fragments": [b64...]}
    rewrite_groups: list[dict[str, Any]] = field(default_factory=list)
    #: lance field protos (b64 of lance.file.Field) for "overwrite" / new datasets
    schema_fields: list[str] = field(default_factory=list)
    schema_metadata: dict[str, str] = field(default_factory=dict)
    data_storage_version: str = "2.0"
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "key": self.key,
            "operation": self.operation,
            "read_version": self.read_version,
            "fragments": [fragment_to_b64(f) for f in self.fragments],
            "rewrite_groups": self.rewrite_groups,
            "schema_fields": self.schema_fields,
            "schema_metadata": self.schema_metadata,
            "data_storage_version": self.data_storage_version,
            "metrics": self.metrics,
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<staged result>") -> "StagedResult":
        try:
            raw = json.loads(text)
            return cls(
                key=raw["key"], operation=raw["operation"], read_version=int(raw["read_version"]),
                fragments=[fragment_from_b64(f) for f in raw.get("fragments", [])],
                rewrite_groups=list(raw.get("rewrite_groups", [])),
                schema_fields=list(raw.get("schema_fields", [])),
                schema_metadata=dict(raw.get("schema_metadata", {})),
                data_storage_version=raw.get("data_storage_version", "2.0"),
                metrics=dict(raw.get("metrics", {})),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LanceOpsError(f"{where}: not a valid staged result: {exc}") from exc


def write_staged(store, base: str, result: StagedResult, *, overwrite: bool = False) -> str:
    """Store ``result`` under its key; AlreadyExistsError if the key was staged before."""
    path = staged_path(store, base, result.key)
    data = result.to_json().encode()
    if overwrite:
        store.put(path, data)
    else:
        try:
            store.put_if_absent(path, data)
        except AlreadyExistsError as exc:
            raise AlreadyExistsError(f"{store.uri(path)}: a result is already staged under key {result.key!r}") from exc
    return path


def read_staged(store, base: str, key: str) -> StagedResult:
    path = staged_path(store, base, key)
    try:
        data = store.read(path)
    except ObjectNotFoundError as exc:
        raise ObjectNotFoundError(f"{store.uri(path)}: nothing is staged under key {key!r}") from exc
    return StagedResult.from_json(data, store.uri(path))
