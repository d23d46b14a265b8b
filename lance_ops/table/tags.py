"""Tags: ``_refs/tags/{name}.json``.

A tag file is pretty-printed (2-space) camelCase JSON, keys in this order, as pylance 14 writes it::

    {
      "branch": null,
      "version": 3,
      "createdAt": "2026-11-22T05:31:46.360993963Z",
      "updatedAt": "2026-11-22T05:31:46.360993963Z",
      "manifestSize": 419,
      "metadata": {}
    }

(no trailing newline). ``manifestSize`` is the size in bytes of the tagged version's manifest.
Names are percent-encoded in the file name (``é`` -> ``%C3%A9.json``).

Name rules (upstream ``check_valid_ref``): not empty; only alphanumeric characters (Unicode),
``.``, ``-`` and ``_``; must not start or end with ``.``; must not end with ``.lock``; no ``..``.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, unquote

from lance_ops.errors import (
    AlreadyExistsError,
    CorruptFileError,
    DatasetNotFoundError,
    ObjectNotFoundError,
    TagError,
    TagExistsError,
    TagNotFoundError,
)
from lance_ops.io.base import ObjectStore
from lance_ops.table.manifest import naming
from lance_ops.table.commit import locate

TAG_SUFFIX = ".json"


@dataclass
class Tag:
    """The contents of one tag file."""

    name: str
    version: int
    manifest_size: int
    branch: str | None = None
    #: RFC 3339 strings as stored (kept verbatim so nanoseconds survive a rewrite)
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """The tag file's bytes, laid out exactly as pylance writes them (see the module doc)."""
        doc: dict[str, Any] = {"branch": self.branch, "version": int(self.version)}
        if self.created_at is not None:
            doc["createdAt"] = self.created_at
        if self.updated_at is not None:
            doc["updatedAt"] = self.updated_at
        doc["manifestSize"] = int(self.manifest_size)
        doc["metadata"] = dict(self.metadata)
        return json.dumps(doc, indent=2, ensure_ascii=False).encode("utf-8")

    def to_dict(self) -> dict[str, Any]:
        """The value pylance's ``ds.tags.list()`` gives for this tag."""
        return {
            "branch": self.branch,
            "version": int(self.version),
            "created_at": parse_timestamp(self.created_at),
            "updated_at": parse_timestamp(self.updated_at),
            "manifest_size": int(self.manifest_size),
            "metadata": dict(self.metadata),
        }


# --- names and timestamps --------------------------------------------------------------------
def validate_tag_name(name: str) -> str:
    """Return ``name`` if it is a valid tag name, else raise TagError saying why."""
    if not isinstance(name, str):
        raise TagError(f"tag name must be a string, got {type(name).__name__}")

    def bad(why: str) -> TagError:
        return TagError(f"invalid tag name {name!r}: {why}")

    if not name:
        raise bad("a tag name cannot be empty")
    if not all(c.isalnum() or c in ".-_" for c in name):
        raise bad("characters must be alphanumeric, '.', '-' or '_'")
    if name.startswith("."):
        raise bad("cannot begin with a dot")
    if name.endswith("."):
        raise bad("cannot end with a dot")
    if name.endswith(".lock"):
        raise bad("cannot end with .lock")
    if ".." in name:
        raise bad("cannot contain two consecutive dots")
    return name


def tag_file_name(name: str) -> str:
    """The file name of tag ``name`` (validated, percent-encoded, ``.json``)."""
    return quote(validate_tag_name(name), safe="") + TAG_SUFFIX


def tag_path(store: ObjectStore, base: str, name: str) -> str:
    """The store path of tag ``name``'s file under ``_refs/tags`` of the dataset at ``base``."""
    return store.join(base, naming.TAGS_DIR, tag_file_name(name))


def format_timestamp(ns: int | None = None) -> str:
    """RFC 3339 UTC with the shortest of 0/3/6/9 fraction digits that is exact, like chrono."""
    if ns is None:
        ns = time.time_ns()
    secs, frac = divmod(int(ns), 1_000_000_000)
    base = datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if frac == 0:
        return base + "Z"
    if frac % 1_000_000 == 0:
        return f"{base}.{frac // 1_000_000:03d}Z"
    if frac % 1_000 == 0:
        return f"{base}.{frac // 1_000:06d}Z"
    return f"{base}.{frac:09d}Z"


_TS_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:\d{2})$"
)


def parse_timestamp(value: str | None) -> datetime | None:
    """An RFC 3339 string as an aware datetime (sub-microsecond digits are dropped)."""
    if value is None:
        return None
    m = _TS_RE.match(value)
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    date, clock, frac, tz = m.groups()
    frac = ((frac or "") + "000000")[:6]
    tz = "+00:00" if tz in ("Z", "z") else tz
    return datetime.fromisoformat(f"{date}T{clock}.{frac}{tz}").astimezone(timezone.utc)


# --- reading ---------------------------------------------------------------------------------
def decode_tag(data: bytes, name: str, path: str = "<tag>") -> Tag:
    """Parse a tag file's bytes into a :class:`Tag`; CorruptFileError (naming ``path``) if it is
    not valid JSON with integer ``version`` and ``manifestSize``."""
    try:
        doc = json.loads(data)
        version = doc["version"]
        manifest_size = doc["manifestSize"]
        if not isinstance(version, int) or not isinstance(manifest_size, int):
            raise TypeError("version and manifestSize must be integers")
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise TypeError("metadata must be an object")
        return Tag(
            name=name,
            version=version,
            manifest_size=manifest_size,
            branch=doc.get("branch"),
            created_at=doc.get("createdAt"),
            updated_at=doc.get("updatedAt"),
            metadata={str(k): str(v) for k, v in metadata.items()},
        )
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptFileError(path, f"not a valid tag file: {e}") from e


def get_tag(store: ObjectStore, base: str, name: str) -> Tag:
    """The tag ``name``; TagNotFoundError if there is none."""
    path = tag_path(store, base, name)
    try:
        data = store.read(path)
    except (ObjectNotFoundError, FileNotFoundError):
        raise TagNotFoundError(f"tag {name!r} does not exist") from None
    return decode_tag(data, name, path)


def list_tags(store: ObjectStore, base: str) -> dict[str, dict[str, Any]]:
    """``{name: {"branch", "version", "created_at", "updated_at", "manifest_size", "metadata"}}``
    like pylance's ``ds.tags.list()``."""
    out: dict[str, dict[str, Any]] = {}
    for tag in iter_tags(store, base):
        out[tag.name] = tag.to_dict()
    return out


def iter_tags(store: ObjectStore, base: str) -> list[Tag]:
    """Every tag of the dataset as :class:`Tag` objects (sorted by name)."""
    tags: list[Tag] = []
    for info in store.list_dir(store.join(base, naming.TAGS_DIR)):
        fname = naming.basename(info.path)
        if not fname.endswith(TAG_SUFFIX) or fname.startswith("."):
            continue
        name = unquote(fname[: -len(TAG_SUFFIX)])
        try:
            data = store.read(info.path)
        except (ObjectNotFoundError, FileNotFoundError):  # deleted while we listed
            continue
        tags.append(decode_tag(data, name, info.path))
    tags.sort(key=lambda t: t.name)
    return tags


def resolve_tag_version(store: ObjectStore, base: str, name: str) -> int:
    """The version a tag points at."""
    return get_tag(store, base, name).version


# --- writing ---------------------------------------------------------------------------------
def _locate_version(store: ObjectStore, base: str, version: int) -> naming.ManifestLocation:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise TagError(f"tag version must be a non-negative integer, got {version!r}")
    loc = locate.find_version(store, base, version)
    if loc is None:
        raise DatasetNotFoundError(f"version {version} of {store.uri(base)} does not exist")
    return loc


def create_tag(
    store: ObjectStore, base: str, name: str, version: int, *, metadata: dict[str, str] | None = None
) -> Tag:
    """Create tag ``name`` pointing at ``version`` (which must exist).

    TagExistsError if the name is taken (the write is a put-if-absent, so two concurrent
    creators cannot both win).
    """
    path = tag_path(store, base, name)
    loc = _locate_version(store, base, version)
    now = format_timestamp()
    tag = Tag(
        name=name,
        version=version,
        manifest_size=loc.size,
        created_at=now,
        updated_at=now,
        metadata=dict(metadata or {}),
    )
    try:
        store.put_if_absent(path, tag.to_json())
    except (AlreadyExistsError, FileExistsError):
        raise TagExistsError(f"tag {name!r} already exists") from None
    return tag


def update_tag(store: ObjectStore, base: str, name: str, version: int) -> Tag:
    """Point an existing tag at another version (keeps createdAt and metadata)."""
    old = get_tag(store, base, name)
    loc = _locate_version(store, base, version)
    tag = Tag(
        name=name,
        version=version,
        manifest_size=loc.size,
        branch=old.branch,
        created_at=old.created_at,
        updated_at=format_timestamp(),
        metadata=old.metadata,
    )
    store.put(tag_path(store, base, name), tag.to_json())
    return tag


def replace_tag_metadata(store: ObjectStore, base: str, name: str, metadata: dict[str, str]) -> Tag:
    """Replace tag ``name``'s metadata map; its version and timestamps stay (as pylance)."""
    old = get_tag(store, base, name)
    tag = Tag(name=name, version=old.version, manifest_size=old.manifest_size, branch=old.branch,
              created_at=old.created_at, updated_at=old.updated_at,
              metadata={str(k): str(v) for k, v in dict(metadata).items()})
    store.put(tag_path(store, base, name), tag.to_json())
    return tag


def delete_tag(store: ObjectStore, base: str, name: str) -> None:
    """Delete tag ``name``; TagNotFoundError if it does not exist."""
    path = tag_path(store, base, name)
    if not store.exists(path):
        raise TagNotFoundError(f"tag {name!r} does not exist")
    store.delete(path)


def tagged_versions(store: ObjectStore, base: str) -> dict[int, list[str]]:
    """``{version: [tag names]}`` for the main branch (cleanup keeps these versions)."""
    out: dict[int, list[str]] = {}
    for tag in iter_tags(store, base):
        if tag.branch is None:
            out.setdefault(tag.version, []).append(tag.name)
    return out
