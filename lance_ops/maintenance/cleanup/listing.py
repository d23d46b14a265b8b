"""What a cleanup run finds: the files in the known areas, every version's manifest, and what
the manifests that must survive (detached commits, branches) name. See the package docstring."""
from __future__ import annotations

import json
import re
import uuid as _uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Iterator
from urllib.parse import unquote

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, ObjectNotFoundError
from lance_ops.io.base import ObjectStore
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import ManifestFile, read_manifest
from lance_ops.table.paths import resolve_inside

#: lance_ops extension area: per-data-file statistics, ``_stats/<data-file-stem>...``
STATS_DIR = "_stats"
#: lance_ops extension area: persisted row-id indices, ``_rowid_index/<version>-...``
ROWID_INDEX_DIR = "_rowid_index"
#: staged, not yet committed results of distributed writes (lance_ops.table.commit.staging)
STAGING_DIR = "_staging"
BRANCHES_DIR = "_refs/branches"
TREE_DIR = "tree"
#: concurrent manifest reads
_READERS = 8

_DETACHED_RE = re.compile(r"^d(\d+)\.manifest$")
_UPLOAD_STAGING_RE = re.compile(r"#\d+$")


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


# --- references ------------------------------------------------------------------------------
_EXTERNAL_FILES = ("external_row_ids", "external_last_updated_at_versions", "external_created_at_versions")


@dataclass
class Refs:
    """Names a set of manifests refers to, keyed the way the listing is classified."""

    data: set[str] = field(default_factory=set)  # paths relative to data/
    deletions: set[str] = field(default_factory=set)  # paths relative to the dataset root
    transactions: set[str] = field(default_factory=set)  # names relative to _transactions/
    indices: set[str] = field(default_factory=set)  # canonical uuid strings
    versions: set[int] = field(default_factory=set)  # versions (for _rowid_index)
    paths: set[str] = field(default_factory=set)  # any other root-relative path
    #: the encoded fragments already added: consecutive versions share most of their fragments,
    #: and a fragment added once names nothing new (the sets only grow)
    fragments_seen: set[bytes] = field(default_factory=set, repr=False, compare=False)

    def add(self, mf: ManifestFile, version: int | None = None) -> None:
        """Add what ``mf`` names (and ``version`` itself, for the row-id index area)."""
        m = mf.manifest
        if version is not None:
            self.versions.add(version)
        # (runs over every fragment of every version: locals instead of attribute lookups)
        data_add, deletions_add, paths_add = self.data.add, self.deletions.add, self.paths.add
        deletion_path = naming.deletion_file_path
        seen, seen_add = self.fragments_seen, self.fragments_seen.add
        for frag in m.fragments:
            encoded = frag.SerializeToString()
            if encoded in seen:
                continue
            seen_add(encoded)
            for df in frag.files:
                data_add(df.path.lstrip("/"))
            has = frag.HasField
            if has("deletion_file"):
                try:
                    deletions_add(deletion_path(frag.id, frag.deletion_file))
                except ValueError as exc:  # an unknown file type: a damaged manifest
                    raise CorruptFileError(mf.path or "<manifest>", f"fragment {frag.id}: {exc}") from None
            for name in _EXTERNAL_FILES:
                if has(name):
                    paths_add(getattr(frag, name).path.lstrip("/"))
        if m.transaction_file:
            self.transactions.add(m.transaction_file)
        if mf.index_section is not None:
            for index in mf.index_section.indices:
                uid = uuid_str(index.uuid.uuid)
                if uid is not None:
                    self.indices.add(uid)

    def update(self, other: "Refs") -> None:
        """Add everything ``other`` names."""
        self.data |= other.data
        self.deletions |= other.deletions
        self.transactions |= other.transactions
        self.indices |= other.indices
        self.versions |= other.versions
        self.paths |= other.paths


def uuid_str(raw: Any) -> str | None:
    """Canonical text of a uuid given as 16 bytes or text; None when it is not one."""
    try:
        if isinstance(raw, (bytes, bytearray)):
            return str(_uuid.UUID(bytes=bytes(raw))) if len(raw) == 16 else None
        return str(_uuid.UUID(str(raw)))
    except ValueError:
        return None


# --- the listing ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ListedFile:
    """One listed object: store path, root-relative path, size and modification time."""

    path: str  # store path
    rel: str  # path relative to the dataset root, "/"-separated
    size: int
    last_modified: datetime


@dataclass
class Candidate:
    """A listed file cleanup may delete: its kind (the stats counter) and whether a removed
    manifest named it (verified garbage) or it only passed the age rule."""

    file: ListedFile
    kind: str  # a key of _COUNTERS
    verified: bool


def _rel(prefix: str, path: str) -> str:
    """``path`` below ``prefix`` ("/"-separated, no leading slash)."""
    p = path.replace("\\", "/")
    pre = prefix.replace("\\", "/").rstrip("/")
    if pre and p.startswith(pre + "/"):
        return p[len(pre) + 1 :]
    return p.lstrip("/") if not pre else p


def list_area(store: ObjectStore, base: str, area: str) -> Iterator[ListedFile]:
    """Every object below ``base/area`` (recursively), as :class:`ListedFile`."""
    prefix = store.join(base, area)
    for info in store.list(prefix):
        yield ListedFile(info.path, f"{area}/{_rel(prefix, info.path)}", info.size, info.last_modified)


def is_temp_name(name: str) -> bool:
    """Temporary files of an interrupted write (never referenced by any manifest)."""
    return (
        name.startswith(".tmp")
        or (name.startswith(".") and name.endswith(".tmp"))
        or bool(_UPLOAD_STAGING_RE.search(name))
    )


# --- manifests --------------------------------------------------------------------------------
@dataclass
class VersionInfo:
    """One committed version: its manifest location(s), decoded manifest and commit time."""

    version: int
    locations: list  # list[naming.ManifestLocation] (two if both naming schemes are present)
    manifest: ManifestFile
    timestamp: datetime


def _manifest_time(mf: ManifestFile, fallback: datetime) -> datetime:
    ts = mf.manifest.timestamp
    if ts.seconds or ts.nanos:
        return datetime.fromtimestamp(ts.seconds, tz=timezone.utc) + timedelta(
            microseconds=ts.nanos // 1000
        )
    return fallback


def _read_all(store: ObjectStore, paths: list[str]) -> dict[str, ManifestFile | None]:
    """Read manifests concurrently; a manifest deleted meanwhile maps to None."""

    def one(path: str) -> ManifestFile | None:
        try:
            return read_manifest(store, path)
        except (ObjectNotFoundError, FileNotFoundError):
            return None

    # local reads are fast and hold the GIL while parsing: threads would only add overhead
    if len(paths) <= 1 or getattr(store, "scheme", "") == "file":
        return {p: one(p) for p in paths}
    with ThreadPoolExecutor(max_workers=min(_READERS, len(paths))) as pool:
        return dict(zip(paths, pool.map(one, paths)))


def check_protected_data(store: ObjectStore, versions: dict[int, VersionInfo], protect_from: int, listed: set[str],
                         *, deletions: bool = False) -> None:
    """Refuse (CorruptFileError naming the manifest) when a version cleanup must keep names a data
    file (``deletions``: a deletion file) that is not there: its manifest is damaged or the
    dataset already lost data, and the files it really needs would otherwise look unreferenced
    and be deleted. ``listed`` holds the paths listed under the area, relative to it."""
    for v, info in versions.items():
        if v < protect_from:
            continue  # an older version may lose its files to a concurrent cleanup
        m = info.manifest.manifest
        for frag in m.fragments:
            for path, what in (_deletion_refs(frag) if deletions else _data_refs(frag)):
                if path not in listed:
                    where = info.manifest.path
                    raise CorruptFileError(
                        store.uri(where) if where else f"version {v}",
                        f"names {what} {path!r} (fragment {frag.id}), which does not exist; "
                        "cleanup refuses to run on a dataset whose kept versions are incomplete")


def _data_refs(frag: table_pb2.DataFragment) -> list[tuple[str, str]]:
    # a file stored under another base path (base_id) is not in this listing
    return [(df.path.lstrip("/"), "data file") for df in frag.files if not df.HasField("base_id")]


def _deletion_refs(frag: table_pb2.DataFragment) -> list[tuple[str, str]]:
    if not frag.HasField("deletion_file") or frag.deletion_file.HasField("base_id"):
        return []
    try:
        rel = naming.deletion_file_path(frag.id, frag.deletion_file)
    except ValueError:
        return []  # an unknown file type: Refs.add refuses it, naming the manifest
    return [(rel[len(naming.DELETIONS_DIR) + 1:], "deletion file")]


def load_versions(store: ObjectStore, base: str, skip: Iterable[int] = ()) -> dict[int, VersionInfo]:
    """Every committed version (except those in ``skip``) with its decoded manifest."""
    skip = set(skip)
    by_version: dict[int, list] = {}
    for loc in naming.list_versions(store, base):
        if loc.version not in skip:
            by_version.setdefault(loc.version, []).append(loc)
    manifests = _read_all(store, [loc.path for locs in by_version.values() for loc in locs])
    out: dict[int, VersionInfo] = {}
    for version, locs in by_version.items():
        mf = next((manifests[loc.path] for loc in locs if manifests[loc.path] is not None), None)
        if mf is None:  # removed by someone else while we listed
            continue
        locs = [loc for loc in locs if manifests[loc.path] is not None]
        out[version] = VersionInfo(version, locs, mf, _manifest_time(mf, locs[0].last_modified))
    return out


def _detached_manifest_paths(store: ObjectStore, base: str) -> list[str]:
    return [
        info.path
        for info in store.list_dir(store.join(base, naming.VERSIONS_DIR))
        if _DETACHED_RE.match(_basename(info.path))
    ]


def _branches(store: ObjectStore, base: str) -> tuple[list[str], set[int]]:
    """Roots of all branches (``tree/<name>``) and the main versions branches were made from."""
    roots: list[str] = []
    parents: set[int] = set()
    for info in store.list(store.join(base, BRANCHES_DIR)):
        name = _basename(info.path)
        if not name.endswith(".json") or name.startswith("."):
            continue
        roots.append(resolve_inside(store, base, unquote(name[: -len(".json")]), under=(TREE_DIR,),
                                    what="branch name", where=store.uri(info.path)))
        try:
            doc = json.loads(store.read(info.path))
        except (ObjectNotFoundError, FileNotFoundError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        version = doc.get("parentVersion")
        if doc.get("parentBranch") is None and isinstance(version, int):
            parents.add(version)
    return roots, parents


def protected_refs(store: ObjectStore, base: str) -> tuple[Refs, set[int]]:
    """What must survive whatever the policy says.

    Everything named by detached manifests and by every version of every branch (branches
    read their parent's files through base paths), and the main versions that branches were
    created from (kept like tagged versions, but silently, as pylance does).
    """
    refs = Refs()
    paths = _detached_manifest_paths(store, base)
    roots, parents = _branches(store, base)
    for root in roots:
        paths.extend(loc.path for loc in naming.list_versions(store, root))
        paths.extend(_detached_manifest_paths(store, root))
    for mf in _read_all(store, paths).values():
        if mf is not None:
            refs.add(mf)
    return refs, parents
