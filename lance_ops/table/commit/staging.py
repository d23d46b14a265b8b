"""Staged results: the hand-off between a distributed write step and its single commit step.

A Spark job (or any worker) writes data files, then records *what* it wrote — new fragments, or
compaction rewrite groups — in ``_staging/{key}.json`` under the dataset, keyed by an idempotency
key (e.g. built from Airflow's dag_id/run_id/task_id/map_index). The commit step reads it and
commits it once: committing the same key again finds the earlier version (the key is recorded in
the transaction properties) and writes nothing. Staged files are written with put-if-absent, so
a re-run of the write step with the same key cannot silently replace what a first run staged;
it is told the key is taken and may use ``overwrite=True`` only when it knows the first run's
result was never committed.

Lifecycle: staging records the size of every data file the result references; the commit step
checks each one still exists with that size (:func:`check_staged_files`) and refuses otherwise;
after committing it marks the result (``committed_version``). Cleanup removes committed results
once the key ledger knows them, and abandoned ones (never committed, older than the unverified-
file guard) together with their data files. ``{key}.plan.json`` files next to them are
compaction plans stored by the Airflow operators, not staged results.
"""
from __future__ import annotations

import base64
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from lance_ops._proto import table_pb2
from lance_ops.errors import AlreadyExistsError, LanceOpsError, ObjectNotFoundError, StagedResultError
from lance_ops.table import versions
from lance_ops.table.manifest import naming
from lance_ops.table.paths import resolve_inside

if TYPE_CHECKING:
    from lance_ops.io import ObjectStore

STAGING_DIR = "_staging"
_KEY_RE = re.compile(r"^[A-Za-z0-9._=+-]{1,200}$")


def sanitize_key(raw: str) -> str:
    """A file-name-safe idempotency key (other characters become ``_``; long keys are hashed)."""
    import hashlib

    cleaned = re.sub(r"[^A-Za-z0-9._=+-]", "_", raw)
    if len(cleaned) > 200:
        cleaned = cleaned[:150] + "-" + hashlib.sha256(raw.encode()).hexdigest()[:40]
    return cleaned


def staged_path(store: ObjectStore, base: str, key: str) -> str:
    """``base/_staging/{key}.json``; LanceOpsError unless ``key`` is already file-name safe
    (see :func:`sanitize_key`), so a key can never lead outside ``_staging/``."""
    if not _KEY_RE.match(key):
        raise LanceOpsError(f"invalid staging key {key!r}: use sanitize_key() first")
    return store.join(base, STAGING_DIR, f"{key}.json")


def fragment_to_b64(fragment: table_pb2.DataFragment) -> str:
    """A fragment as base64 text of its deterministic protobuf bytes (how staged JSON holds it)."""
    return base64.b64encode(fragment.SerializeToString(deterministic=True)).decode()


def fragment_from_b64(text: str) -> table_pb2.DataFragment:
    """The fragment :func:`fragment_to_b64` wrote."""
    frag = table_pb2.DataFragment()
    frag.ParseFromString(base64.b64decode(text))
    return frag


@dataclass
class StagedResult:
    """What one write step produced, ready to be committed by a separate step."""

    key: str
    #: "append" | "overwrite" | "rewrite" | "create_index" | "update" (a merge-insert: ``fragments``
    #: are its new ones)
    operation: str
    read_version: int
    fragments: list[table_pb2.DataFragment] = field(default_factory=list)
    #: for "rewrite": list of {"old_fragment_ids": [...], "new_fragments": [b64...]}
    rewrite_groups: list[dict[str, Any]] = field(default_factory=list)
    #: lance field protos (b64 of lance.file.Field) for "overwrite" / new datasets
    schema_fields: list[str] = field(default_factory=list)
    schema_metadata: dict[str, str] = field(default_factory=dict)
    #: the version the fragments were written in (write_fragments' default unless given)
    data_storage_version: str = versions.DEFAULT
    metrics: dict[str, Any] = field(default_factory=dict)
    #: for "create_index": {"new": [b64 IndexMetadata], "removed": [...], "upkeep": [...]}
    indices: dict[str, Any] = field(default_factory=dict)
    #: set by the commit step once the result is committed (the version it landed in)
    committed_version: int | None = None
    #: for "update": fragments of the read version with their new deletion files, and the ids of
    #: fragments left without live rows
    updated_fragments: list[table_pb2.DataFragment] = field(default_factory=list)
    removed_fragment_ids: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        """The staged file's content: sorted-key JSON, fragments as base64 protobuf;
        ``committed_version`` only once the result is committed."""
        extra: dict[str, Any] = {} if self.committed_version is None else {
            "committed_version": int(self.committed_version)}
        if self.indices:
            extra["indices"] = self.indices
        if self.operation == "update":
            extra["updated_fragments"] = [fragment_to_b64(f) for f in self.updated_fragments]
            extra["removed_fragment_ids"] = [int(i) for i in self.removed_fragment_ids]
        return json.dumps({
            **extra,
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
        """Parse what :meth:`to_json` wrote; LanceOpsError naming ``where`` if it is not a staged result."""
        try:
            raw = json.loads(text)
            return cls(
                key=raw["key"], operation=raw["operation"], read_version=int(raw["read_version"]),
                fragments=[fragment_from_b64(f) for f in raw.get("fragments", [])],
                rewrite_groups=list(raw.get("rewrite_groups", [])),
                schema_fields=list(raw.get("schema_fields", [])),
                schema_metadata=dict(raw.get("schema_metadata", {})),
                data_storage_version=raw.get("data_storage_version", versions.UNRECORDED),  # (always written now)
                metrics=dict(raw.get("metrics", {})),
                indices=dict(raw.get("indices", {})),
                committed_version=(int(raw["committed_version"]) if raw.get("committed_version") is not None
                                   else None),
                updated_fragments=[fragment_from_b64(f) for f in raw.get("updated_fragments", [])],
                removed_fragment_ids=[int(i) for i in raw.get("removed_fragment_ids", [])],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LanceOpsError(f"{where}: not a valid staged result: {exc}") from exc


def staged_fragments(result: StagedResult) -> list[table_pb2.DataFragment]:
    """Every new fragment ``result`` would commit (appended/overwritten or rewrite groups' new ones)."""
    out = list(result.fragments)
    for group in result.rewrite_groups:
        texts = group.get("new_fragments") if isinstance(group, dict) else None
        if texts is None and isinstance(group, dict) and "result" in group:
            inner = group["result"]
            try:
                texts = (json.loads(inner) if isinstance(inner, str) else inner).get("new_fragments", [])
            except (ValueError, AttributeError):
                texts = []
        out.extend(fragment_from_b64(t) for t in texts or [])
    return out


_T = TypeVar("_T")
_R = TypeVar("_R")


def _parallel(store: ObjectStore, fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
    if len(items) <= 4 or getattr(store, "scheme", "") == "file":
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(8, len(items)), thread_name_prefix="lance-ops-stage") as pool:
        return list(pool.map(fn, items))


def _data_file(store: ObjectStore, base: str, result: StagedResult, df: table_pb2.DataFile) -> str:
    """The store path of a staged data file; UnsafePathError if it would lead outside the dataset."""
    return resolve_inside(store, base, df.path, under=(naming.DATA_DIR,), what="data file path",
                          where=store.uri(staged_path(store, base, result.key)))


def record_file_sizes(store: ObjectStore, base: str, result: StagedResult) -> None:
    """Fill in ``file_size_bytes`` of data files staged without it (read from the store)."""
    missing = [df for frag in result.fragments for df in frag.files if not df.file_size_bytes]
    paths = [_data_file(store, base, result, df) for df in missing]
    sizes = _parallel(store, store.size, paths)
    for df, size in zip(missing, sizes):
        df.file_size_bytes = size


def check_staged_files(store: ObjectStore, base: str, result: StagedResult) -> int:
    """Refuse (StagedResultError, naming the first missing or resized file) a result whose data
    files are not all there with their recorded sizes; returns the number of files checked."""
    files = [df for frag in staged_fragments(result) for df in frag.files]
    paths = [_data_file(store, base, result, df) for df in files]  # unsafe paths refused before any probe

    def probe(path: str) -> int | None:
        try:
            return store.size(path)
        except (ObjectNotFoundError, FileNotFoundError):
            return None

    for df, path, size in zip(files, paths, _parallel(store, probe, paths)):
        where = store.uri(path)
        if size is None:
            raise StagedResultError(
                f"{where}: data file of the result staged under key {result.key!r} is missing (removed by "
                "cleanup as abandoned, or never fully written); nothing was committed. Re-run the write step "
                "that staged it (its staged result is replaced) or discard the stage")
        if df.file_size_bytes and size != df.file_size_bytes:
            raise StagedResultError(
                f"{where}: data file of the result staged under key {result.key!r} has {size} bytes, the "
                f"stage recorded {df.file_size_bytes}; nothing was committed. Re-run the write step that staged it")
    return len(files)


def write_staged(store: ObjectStore, base: str, result: StagedResult, *, overwrite: bool = False) -> str:
    """Store ``result`` under its key (recording its data files' sizes); AlreadyExistsError if
    the key was staged before."""
    path = staged_path(store, base, result.key)
    record_file_sizes(store, base, result)
    data = result.to_json().encode()
    if overwrite:
        store.put(path, data)
    else:
        try:
            store.put_if_absent(path, data)
        except AlreadyExistsError as exc:
            raise AlreadyExistsError(f"{store.uri(path)}: a result is already staged under key {result.key!r}") from exc
    return path


def read_staged(store: ObjectStore, base: str, key: str) -> StagedResult:
    """The result staged under ``key``; ObjectNotFoundError if nothing is, LanceOpsError if the
    file does not parse."""
    path = staged_path(store, base, key)
    try:
        data = store.read(path)
    except ObjectNotFoundError as exc:
        raise ObjectNotFoundError(f"{store.uri(path)}: nothing is staged under key {key!r}") from exc
    return StagedResult.from_json(data, store.uri(path))


def mark_committed(store: ObjectStore, base: str, key: str, version: int) -> bool:
    """Mark the result staged under ``key`` as committed at ``version`` (no-op if it is gone or
    already marked); True when a mark was written."""
    try:
        staged = read_staged(store, base, key)
    except (ObjectNotFoundError, LanceOpsError):
        return False
    if staged.committed_version is not None:
        return False
    staged.committed_version = int(version)
    store.put(staged_path(store, base, key), staged.to_json().encode())
    return True


@dataclass
class StageInfo:
    """One ``_staging/{key}.json`` as listed (``result`` None when it does not parse)."""

    key: str
    path: str
    size: int
    last_modified: datetime
    result: StagedResult | None


def list_staged(store: ObjectStore, base: str) -> list[StageInfo]:
    """Every staged result under ``_staging/`` (compaction plans ``*.plan.json`` excluded)."""
    out = []
    for info in store.list_dir(store.join(base, STAGING_DIR)):
        name = info.path.replace("\\", "/").rsplit("/", 1)[-1]
        if not name.endswith(".json") or name.endswith(".plan.json") or name.startswith("."):
            continue
        key = name[: -len(".json")]
        try:
            result = StagedResult.from_json(store.read(info.path), store.uri(info.path))
        except (ObjectNotFoundError, FileNotFoundError):
            continue
        except LanceOpsError:
            result = None
        out.append(StageInfo(key, info.path, info.size, info.last_modified, result))
    return out
