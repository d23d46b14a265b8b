"""``cleanup_old_versions``: delete old versions of a Lance table and the files only they used.

What is kept
    Every version that is the latest (or at/after the version the dataset object is checked out
    at), every tagged version, and every version that does not match the policy: a version is
    *removable* iff its manifest timestamp is older than ``now - older_than`` (when given) and it
    is not among the newest ``retain_versions`` (when given). With neither given,
    ``older_than = 14 days`` (pylance 14 default). Whatever the policy, a version that stopped
    being the latest less than ``min_superseded_age`` ago is kept (default
    :data:`DEFAULT_MIN_SUPERSEDED_AGE`, 5 minutes; environment variable
    ``LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS`` overrides the default): a commit in progress
    catches up through the versions committed since it read the dataset and must find them
    there, and a just-superseded version may still be read. "Stopped being the latest" is when
    the next existing version was committed (its manifest timestamp or its object's
    modification time, whichever is later). Give ``min_superseded_age=timedelta(0)`` (tests, or
    no concurrent writers or readers) to remove versions superseded a moment ago. Detached manifests (``_versions/d*.manifest``)
    and the manifests of branches (``tree/<branch>/``, found through ``_refs/branches/``) are
    never removed here and everything they name counts as referenced; the main versions that
    branches were created from (``parentVersion``) are kept like tagged ones, silently.

What is deleted
    1. The manifests of removed versions.
    2. Files in the known Lance areas that no kept manifest names:

       ========================  ====================================================
       area                      referenced iff
       ========================  ====================================================
       ``data/*.lance``          a kept manifest has a ``DataFile`` with that path
       ``data/<stem>/*.blob``    ``data/<stem>.lance`` is referenced (blob v2 side files
                                 belong to their data file; pylance's rule); verified
                                 only if not newer than that (removed) data file
       ``_deletions/*``          a kept manifest has that ``DeletionFile``
       ``_transactions/*.txn``   it is a kept manifest's ``transaction_file``
       ``_indices/<uuid>/...``   a kept manifest's index section has that uuid
       ``_stats/<stem>...``      ``data/<stem>.lance`` is referenced (see below)
       ``_rowid_index/<v>-...``  version ``v`` is kept (see below)
       ========================  ====================================================

       An unreferenced file is *verified* garbage when a removed manifest named it; it is then
       deleted at once. Otherwise it is *unverified* (abandoned writes, lost commit races,
       crashed commits, or a write still in flight!) and deleted only when its last
       modification is older than ``max(7 days, older_than)``, or when ``delete_unverified``
       is set (only safe with no concurrent writers).
    3. Temporary files in those areas (``_versions/.tmp*``, staged ``*.manifest-<uuid>`` of a
       version that was committed, local ``.<name>.<hex>.tmp`` and ``<name>#<n>`` upload
       staging files), under the same age rule as unverified files.

    Staged results (``_staging/<key>.json`` of :mod:`lance_ops.table.staging`) have a lifecycle:
    a committed one (marked by its commit step, its key in the key ledger, or - older stages -
    some listed manifest naming one of its files) is removed once the ledger records its key (a
    re-run asks the ledger); a pending one pins its data files while it is younger than the
    unverified-file guard; an older one is *abandoned*: its JSON is deleted and its files are
    left to the unverified-file rule (so they go in the same run). ``*.plan.json`` files are
    left alone.

    The idempotency-key ledger (``_lance_ops/keys/``, :mod:`lance_ops.table.idempotency`) is
    carried forward before any manifest is deleted: every keyed version gets its record and the
    coverage mark moves to the newest version. If that fails nothing is deleted. Nothing in
    ``_lance_ops/`` is ever deleted here except superseded coverage marks.

    Nothing outside those areas is ever listed or deleted: user files in the dataset directory,
    ``_refs/``, ``tree/`` (branches) and ``_versions/latest_version_hint.json`` are left alone.

Conventions for our own extension areas (other lance_ops modules must name their files so):
    * ``_stats/<data-file-stem>[.<anything>]`` or ``_stats/<data-file-stem>/...``: statistics of
      the data file ``data/<data-file-stem>.lance``; they live exactly as long as that data file.
    * ``_rowid_index/<version>-<anything>`` (file or directory): the persisted row-id index of
      ``version``; it lives exactly as long as that version's manifest.

Difference from upstream (lance #8705/#8516/#8708/#8942, reported against pylance 10): upstream
listed only files modified before the earliest retained manifest, so a tag on an old version
froze that cutoff and every file of later, removed versions (and every abandoned write newer
than the tag) leaked forever.
Here every file in the known areas is considered; in-flight writes are protected by the age
rule for unverified files instead.

Delete order and crash safety: manifests of removed versions are deleted *first*, files after.
A crash (or a failed delete) part-way therefore never leaves a manifest whose files are partly
gone: a version is either fully readable or has no manifest. The price is that files of a
removed version whose manifest is already gone become "unverified" for a later run and wait for
the age rule, which only delays reclaiming space. If deleting a manifest fails, that version
is treated as kept for the rest of the run, so none of its files are deleted. Just before the
files are deleted, ``_versions/`` is listed again and anything named by a version committed in
the meantime is taken off the delete list (this narrows, but cannot close, the window for a
concurrent ``restore`` of a version being removed - run cleanup with a sane ``older_than``).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import uuid as _uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Iterator
from urllib.parse import unquote

from google.protobuf.message import DecodeError

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, LanceOpsError, ObjectNotFoundError, TagError
from lance_ops.format.blob_v2 import parse_side_file
from lance_ops.table import idempotency, naming
from lance_ops.table.manifest import ManifestFile, read_manifest
from lance_ops.table.staging import StagedResult
from lance_ops.table.paths import resolve_inside
from lance_ops.table.tags import tagged_versions

__all__ = [
    "CleanupStats",
    "cleanup_old_versions",
    "DEFAULT_OLDER_THAN",
    "DEFAULT_MIN_SUPERSEDED_AGE",
    "UNVERIFIED_THRESHOLD",
    "STATS_DIR",
    "ROWID_INDEX_DIR",
]

#: pylance 14's default ``older_than`` when neither ``older_than`` nor ``retain_versions`` is given
DEFAULT_OLDER_THAN = timedelta(days=14)
#: versions superseded less than this long ago are kept whatever the policy (module doc)
DEFAULT_MIN_SUPERSEDED_AGE = timedelta(minutes=5)
#: environment variable overriding DEFAULT_MIN_SUPERSEDED_AGE (seconds, >= 0)
MIN_SUPERSEDED_AGE_ENV = "LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS"
#: unreferenced files nobody ever committed are only deleted once they are this old
UNVERIFIED_THRESHOLD = timedelta(days=7)
#: lance_ops extension area: per-data-file statistics, ``_stats/<data-file-stem>...``
STATS_DIR = "_stats"
#: lance_ops extension area: persisted row-id indices, ``_rowid_index/<version>-...``
ROWID_INDEX_DIR = "_rowid_index"
#: staged, not yet committed results of distributed writes (lance_ops.table.staging)
STAGING_DIR = "_staging"
BRANCHES_DIR = "_refs/branches"
TREE_DIR = "tree"
#: paths per ``store.delete_many`` call
DELETE_BATCH_SIZE = 1000
#: concurrent manifest reads
_READERS = 8

_DETACHED_RE = re.compile(r"^d(\d+)\.manifest$")
_STAGED_MANIFEST_RE = re.compile(r"^(\d+\.manifest)-[0-9A-Za-z-]+$")
_UPLOAD_STAGING_RE = re.compile(r"#\d+$")
_ROWID_INDEX_RE = re.compile(r"^(\d+)-")
_B64_RE = re.compile(r"^[A-Za-z0-9+/]{16,}={0,2}$")

log = logging.getLogger(__name__)

# kinds of deletable files -> the CleanupStats counter they add to
_COUNTERS = {
    "data": "data_files_removed",
    "transaction": "transaction_files_removed",
    "index": "index_files_removed",
    "deletion": "deletion_files_removed",
    "stats": "statistics_files_removed",
    "rowid_index": "rowid_index_files_removed",
    "temporary": "temporary_files_removed",
    "staging": "staged_results_removed",
}


@dataclass
class CleanupStats:
    """What a cleanup removed (or, with ``dry_run``, would remove).

    ``old_versions`` counts removed versions; ``bytes_removed`` sums the sizes of every deleted
    file (manifests included); ``failed_deletes`` counts files whose delete failed (they stay
    and are not in the other counters). ``planned`` lists the store paths a dry run would
    delete (empty for a real run).
    """

    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    deletion_files_removed: int = 0
    statistics_files_removed: int = 0
    rowid_index_files_removed: int = 0
    temporary_files_removed: int = 0
    #: ``_staging/<key>.json`` of committed (ledger-known) or abandoned staged results
    staged_results_removed: int = 0
    failed_deletes: int = 0
    planned: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain dict (for XCom / logs); ``planned`` is included only when non-empty."""
        out = asdict(self)
        if not out["planned"]:
            del out["planned"]
        return out


# --- references ------------------------------------------------------------------------------
_EXTERNAL_FILES = ("external_row_ids", "external_last_updated_at_versions", "external_created_at_versions")


@dataclass
class _Refs:
    """Names a set of manifests refers to, keyed the way the listing is classified."""

    data: set[str] = field(default_factory=set)  # paths relative to data/
    deletions: set[str] = field(default_factory=set)  # paths relative to the dataset root
    transactions: set[str] = field(default_factory=set)  # names relative to _transactions/
    indices: set[str] = field(default_factory=set)  # canonical uuid strings
    versions: set[int] = field(default_factory=set)  # versions (for _rowid_index)
    paths: set[str] = field(default_factory=set)  # any other root-relative path

    def add(self, mf: ManifestFile, version: int | None = None) -> None:
        m = mf.manifest
        if version is not None:
            self.versions.add(version)
        # (runs over every fragment of every version: locals instead of attribute lookups)
        data_add, deletions_add, paths_add = self.data.add, self.deletions.add, self.paths.add
        deletion_path = naming.deletion_file_path
        for frag in m.fragments:
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
                uid = _uuid_str(index.uuid.uuid)
                if uid is not None:
                    self.indices.add(uid)

    def update(self, other: "_Refs") -> None:
        self.data |= other.data
        self.deletions |= other.deletions
        self.transactions |= other.transactions
        self.indices |= other.indices
        self.versions |= other.versions
        self.paths |= other.paths


def _uuid_str(raw) -> str | None:
    try:
        if isinstance(raw, (bytes, bytearray)):
            return str(_uuid.UUID(bytes=bytes(raw))) if len(raw) == 16 else None
        return str(_uuid.UUID(str(raw)))
    except ValueError:
        return None


# --- the listing ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _File:
    path: str  # store path
    rel: str  # path relative to the dataset root, "/"-separated
    size: int
    last_modified: datetime


@dataclass
class _Candidate:
    file: _File
    kind: str  # a key of _COUNTERS
    verified: bool


def _rel(prefix: str, path: str) -> str:
    """``path`` below ``prefix`` ("/"-separated, no leading slash)."""
    p = path.replace("\\", "/")
    pre = prefix.replace("\\", "/").rstrip("/")
    if pre and p.startswith(pre + "/"):
        return p[len(pre) + 1 :]
    return p.lstrip("/") if not pre else p


def _list_area(store, base: str, area: str) -> Iterator[_File]:
    prefix = store.join(base, area)
    for info in store.list(prefix):
        yield _File(info.path, f"{area}/{_rel(prefix, info.path)}", info.size, info.last_modified)


def _is_temp_name(name: str) -> bool:
    """Temporary files of an interrupted write (never referenced by any manifest)."""
    return (
        name.startswith(".tmp")
        or (name.startswith(".") and name.endswith(".tmp"))
        or bool(_UPLOAD_STAGING_RE.search(name))
    )


# --- manifests --------------------------------------------------------------------------------
@dataclass
class _Version:
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


def _read_all(store, paths: list[str]) -> dict[str, ManifestFile | None]:
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


def _check_protected_data(store, versions: dict[int, "_Version"], protect_from: int, listed: set[str]) -> None:
    """Refuse (CorruptFileError naming the manifest) when a version cleanup must keep names a data
    file that is not there: its manifest is damaged or the dataset already lost data, and the
    files it really needs would otherwise look unreferenced and be deleted."""
    for v, info in versions.items():
        if v < protect_from:
            continue  # an older version may lose its files to a concurrent cleanup
        m = info.manifest.manifest
        for frag in m.fragments:
            for df in frag.files:
                if df.HasField("base_id"):
                    continue  # stored under another base path: not in this listing
                if df.path.lstrip("/") not in listed:
                    where = info.manifest.path
                    raise CorruptFileError(
                        store.uri(where) if where else f"version {v}",
                        f"names data file {df.path!r} (fragment {frag.id}), which does not exist; "
                        "cleanup refuses to run on a dataset whose kept versions are incomplete")


def _load_versions(store, base: str, skip: Iterable[int] = ()) -> dict[int, _Version]:
    """Every committed version (except those in ``skip``) with its decoded manifest."""
    skip = set(skip)
    by_version: dict[int, list] = {}
    for loc in naming.list_versions(store, base):
        if loc.version not in skip:
            by_version.setdefault(loc.version, []).append(loc)
    manifests = _read_all(store, [loc.path for locs in by_version.values() for loc in locs])
    out: dict[int, _Version] = {}
    for version, locs in by_version.items():
        mf = next((manifests[loc.path] for loc in locs if manifests[loc.path] is not None), None)
        if mf is None:  # removed by someone else while we listed
            continue
        locs = [loc for loc in locs if manifests[loc.path] is not None]
        out[version] = _Version(version, locs, mf, _manifest_time(mf, locs[0].last_modified))
    return out


def _detached_manifest_paths(store, base: str) -> list[str]:
    return [
        info.path
        for info in store.list_dir(store.join(base, naming.VERSIONS_DIR))
        if _DETACHED_RE.match(naming._basename(info.path))
    ]


def _branches(store, base: str) -> tuple[list[str], set[int]]:
    """Roots of all branches (``tree/<name>``) and the main versions branches were made from."""
    roots: list[str] = []
    parents: set[int] = set()
    for info in store.list(store.join(base, BRANCHES_DIR)):
        name = naming._basename(info.path)
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


def _protected(store, base: str) -> tuple[_Refs, set[int]]:
    """What must survive whatever the policy says.

    Everything named by detached manifests and by every version of every branch (branches
    read their parent's files through base paths), and the main versions that branches were
    created from (kept like tagged versions, but silently, as pylance does).
    """
    refs = _Refs()
    paths = _detached_manifest_paths(store, base)
    roots, parents = _branches(store, base)
    for root in roots:
        paths.extend(loc.path for loc in naming.list_versions(store, root))
        paths.extend(_detached_manifest_paths(store, root))
    for mf in _read_all(store, paths).values():
        if mf is not None:
            refs.add(mf)
    return refs, parents


def _staged_data_files(doc) -> set[str]:
    """Data file names (relative to data/) a staged result names, whatever its layout.

    Walks the JSON: a string ending in ``.lance`` names a data file; a base64 string that
    decodes to a ``DataFragment`` names that fragment's files.
    """
    out: set[str] = set()
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if item.endswith(".lance"):
                out.add(item.replace("\\", "/").rsplit("/", 1)[-1])
            elif _B64_RE.match(item):
                frag = table_pb2.DataFragment()
                try:
                    frag.ParseFromString(base64.b64decode(item, validate=True))
                except (ValueError, DecodeError):  # not base64 / not a fragment
                    continue
                out.update(df.path for df in frag.files if df.path.endswith(".lance"))
    return out


def _staged_lifecycle(store, base: str, named: set[str], young_after: datetime | None) -> tuple[set[str], list[_File]]:
    """``(data files to pin, stage JSONs to delete)``; see the module docstring.

    ``named``: data files some listed manifest names (file names are random, so a stage whose
    file is named was committed). Call after the key ledger was carried forward.
    """
    pinned: set[str] = set()
    drop: list[_File] = []
    for info in store.list_dir(store.join(base, STAGING_DIR)):
        name = info.path.replace("\\", "/").rsplit("/", 1)[-1]
        if not name.endswith(".json") or name.endswith(".plan.json") or name.startswith("."):
            continue
        try:
            raw = store.read(info.path)
            doc = json.loads(raw)
        except (ObjectNotFoundError, FileNotFoundError):
            continue
        except ValueError:
            log.warning("cleanup: %s is not JSON; the files it may stage are not pinned",
                        store.uri(info.path))
            continue
        files = _staged_data_files(doc)
        try:
            result = StagedResult.from_json(raw, store.uri(info.path))
        except LanceOpsError:
            result = None
        known = None
        if result is not None and result.key:
            try:
                known = idempotency.read_record(store, base, idempotency.kind_of_operation(result.operation),
                                                result.key)
            except LanceOpsError:
                known = None
        f = _File(info.path, f"{STAGING_DIR}/{name}", info.size, info.last_modified)
        committed = known is not None or (result is not None and result.committed_version is not None) or bool(
            files & named)
        if committed:
            if known is not None:  # a re-run is answered by the ledger
                drop.append(f)
            continue
        if young_after is not None and info.last_modified >= young_after:
            pinned |= files  # pending: its commit step may still come
            continue
        log.info("cleanup: removing abandoned staged result %s (never committed)", store.uri(info.path))
        drop.append(f)
    return pinned, drop


# --- policy -----------------------------------------------------------------------------------
def _superseded_times(versions: dict[int, _Version]) -> dict[int, datetime]:
    """Version -> when it stopped being the latest: the commit time of the next existing version
    (the later of its manifest timestamp and its object's modification time); the latest maps
    to the end of time (never superseded)."""
    out: dict[int, datetime] = {}
    following = datetime.max.replace(tzinfo=timezone.utc)
    for v in sorted(versions, reverse=True):
        out[v] = following
        info = versions[v]
        times = [info.timestamp] + [loc.last_modified for loc in info.locations]
        following = max(t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc) for t in times)
    return out


def _min_superseded_age(value: timedelta | None) -> timedelta:
    if value is None:
        raw = os.environ.get(MIN_SUPERSEDED_AGE_ENV)
        if raw is None or raw.strip() == "":
            return DEFAULT_MIN_SUPERSEDED_AGE
        try:
            value = timedelta(seconds=float(raw))
        except ValueError:
            raise ValueError(f"{MIN_SUPERSEDED_AGE_ENV} must be a number of seconds, got {raw!r}") from None
    if not isinstance(value, timedelta):
        raise TypeError(f"min_superseded_age must be a datetime.timedelta, got {type(value).__name__}")
    if value < timedelta(0):
        raise ValueError(f"min_superseded_age must not be negative, got {value}")
    return value


def _tagged_error(hits: dict[str, int]) -> TagError:
    listing = json.dumps(dict(sorted(hits.items())))
    return TagError(
        f"{len(hits)} tagged version(s) have been marked for cleanup. Either set "
        f"`error_if_tagged_old_versions=false` or delete the following tag(s) to enable "
        f"cleanup: {listing}"
    )


def _select_removed(
    versions: dict[int, _Version],
    cutoff: datetime | None,
    retain_versions: int | None,
    protect_from: int,
    pinned: set[int],
    tags: dict[int, list[str]],
    error_if_tagged_old_versions: bool,
    superseded_after: datetime | None = None,
) -> set[int]:
    newest = set(sorted(versions, reverse=True)[:retain_versions]) if retain_versions else set()
    superseded = _superseded_times(versions) if superseded_after is not None else {}
    removed: set[int] = set()
    tag_hits: dict[str, int] = {}
    for v, info in versions.items():
        if v >= protect_from or v in newest or v in pinned:
            continue
        if superseded_after is not None and not superseded[v] < superseded_after:
            continue  # stopped being the latest too recently
        if cutoff is not None and not info.timestamp < cutoff:
            continue
        if v in tags:
            for name in tags[v]:
                tag_hits[name] = v
            continue
        removed.add(v)
    if tag_hits and error_if_tagged_old_versions:
        raise _tagged_error(tag_hits)
    return removed


# --- classification --------------------------------------------------------------------------
class _Planner:
    def __init__(self, kept: _Refs, removed: _Refs, removed_versions: set[int], latest: int,
                 young_after: datetime | None):
        self.kept = kept
        self.removed = removed
        self.removed_versions = removed_versions
        self.latest = latest
        #: unverified files modified after this are kept (None: delete_unverified)
        self.young_after = young_after
        #: data file name (below data/) -> last modified, for judging blob v2 side files
        self.owner_times: dict[str, datetime] = {}

    def _old_enough(self, f: _File) -> bool:
        return self.young_after is None or f.last_modified < self.young_after

    def _decide(self, f: _File, kind: str, referenced: bool, verified: bool) -> _Candidate | None:
        if referenced or f.rel in self.kept.paths:
            return None
        if verified or self._old_enough(f):
            return _Candidate(f, kind, verified)
        return None

    def classify(self, f: _File) -> _Candidate | None:
        area, _, rest = f.rel.partition("/")
        name = rest.rsplit("/", 1)[-1]
        if area == naming.VERSIONS_DIR:
            return self._versions_file(f, rest)
        if _is_temp_name(name):
            return _Candidate(f, "temporary", False) if self._old_enough(f) else None
        if area == naming.DATA_DIR:
            owner = parse_side_file(rest)
            if owner is not None:  # blob v2 side file: lives as long as its data file
                # verified garbage only if written no later than its (removed) data file, as the
                # file's real side files are; a later stray waits for the age rule (pylance keeps it)
                t = self.owner_times.get(owner)
                verified = owner in self.removed.data and (t is None or f.last_modified <= t)
                return self._decide(f, "data", owner in self.kept.data, verified)
            if not name.endswith(".lance"):
                return None  # not ours: leave alone
            return self._decide(f, "data", rest in self.kept.data, rest in self.removed.data)
        if area == naming.DELETIONS_DIR:
            if naming.parse_deletion_file_name(name) is None or "/" in rest:
                return None
            return self._decide(
                f, "deletion", f.rel in self.kept.deletions, f.rel in self.removed.deletions
            )
        if area == naming.TRANSACTIONS_DIR:
            if not name.endswith(".txn") or "/" in rest:
                return None
            return self._decide(
                f, "transaction", rest in self.kept.transactions, rest in self.removed.transactions
            )
        if area == naming.INDICES_DIR:
            head, sep, _ = rest.partition("/")
            uid = _uuid_str(head) if sep else None
            if uid is None:
                return None
            return self._decide(f, "index", uid in self.kept.indices, uid in self.removed.indices)
        if area == STATS_DIR:
            stem = rest.split("/", 1)[0].split(".", 1)[0]
            if not stem:
                return None
            data_name = f"{stem}.lance"
            return self._decide(
                f, "stats", data_name in self.kept.data, data_name in self.removed.data
            )
        if area == ROWID_INDEX_DIR:
            m = _ROWID_INDEX_RE.match(rest.split("/", 1)[0])
            if m is None:
                return None
            v = int(m.group(1))
            return self._decide(
                f, "rowid_index", v in self.kept.versions, v in self.removed_versions
            )
        return None

    def _versions_file(self, f: _File, rest: str) -> _Candidate | None:
        if "/" in rest:
            return None
        if rest.startswith(".tmp") or (rest.startswith(".") and rest.endswith(".tmp")):
            return _Candidate(f, "temporary", False) if self._old_enough(f) else None
        m = _STAGED_MANIFEST_RE.match(rest)
        if m is not None:
            # A staged manifest of a version nobody has finalised yet may be the only copy of
            # a committed version (external manifest stores): keep it whatever its age.
            parsed = naming.parse_manifest_name(m.group(1))
            if parsed is None or parsed[0] > self.latest:
                return None
            return _Candidate(f, "temporary", False) if self._old_enough(f) else None
        return None  # committed manifests are handled per version; hint & detached stay


_AREAS = (
    naming.VERSIONS_DIR,
    naming.DATA_DIR,
    naming.DELETIONS_DIR,
    naming.TRANSACTIONS_DIR,
    naming.INDICES_DIR,
    STATS_DIR,
    ROWID_INDEX_DIR,
)


# --- deleting ---------------------------------------------------------------------------------
def _delete(store, files: list[_File], tick=None) -> tuple[list[_File], list[_File]]:
    """Delete in batches; ``(deleted, failed)``. A failed batch is retried path by path.

    ``tick(n)`` (optional) is told how many paths were handled after each batch.
    """
    done: list[_File] = []
    failed: list[_File] = []
    for i in range(0, len(files), DELETE_BATCH_SIZE):
        batch = files[i : i + DELETE_BATCH_SIZE]
        try:
            store.delete_many([f.path for f in batch])
            done.extend(batch)
            if tick is not None:
                tick(len(batch))
            continue
        except Exception:  # noqa: BLE001 - find out which ones failed
            pass
        for f in batch:
            try:
                store.delete(f.path)
                done.append(f)
            except Exception:  # noqa: BLE001 - counted in failed_deletes, never raised
                failed.append(f)
        if tick is not None:
            tick(len(batch))
    return done, failed


def _tally(stats: CleanupStats, items: Iterable[tuple[str, _File]]) -> None:
    for kind, f in items:
        setattr(stats, _COUNTERS[kind], getattr(stats, _COUNTERS[kind]) + 1)
        stats.bytes_removed += f.size


def _check_args(older_than, retain_versions) -> None:
    if older_than is not None:
        if not isinstance(older_than, timedelta):
            raise TypeError(
                f"older_than must be a datetime.timedelta, got {type(older_than).__name__}"
            )
        if older_than < timedelta(0):
            raise ValueError(f"older_than must not be negative, got {older_than}")
    if retain_versions is not None:
        if isinstance(retain_versions, bool) or not isinstance(retain_versions, int):
            raise TypeError("retain_versions must be an int")
        if retain_versions < 1:
            raise ValueError(f"retain_versions must be at least 1, got {retain_versions}")


# --- entry point ------------------------------------------------------------------------------
def cleanup_old_versions(
    ds,
    older_than: timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    min_superseded_age: timedelta | None = None,
) -> CleanupStats:
    """Delete old versions of ``ds`` and every file that only they referenced.

    Args:
        ds: the dataset; only ``ds.store``, ``ds.base`` and ``ds.uri`` are needed (if it
            has a ``version``, that version and every newer one are kept too).
        older_than: remove versions whose manifest is older than ``now - older_than``.
        retain_versions: always keep the newest ``retain_versions`` versions. With neither
            argument, ``older_than`` defaults to 14 days; with only this one, age is ignored.
        delete_unverified: also delete unreferenced files that no manifest ever named, and
            temporary files, however young they are. Only safe with no concurrent writers.
        error_if_tagged_old_versions: raise :class:`~lance_ops.errors.TagError` (deleting
            nothing) if a tagged version would otherwise be removed; with False such versions
            are silently kept.
        dry_run: plan only; the returned stats count what would be removed and ``planned``
            lists the store paths that would be deleted.
        progress: optional ``progress(done, total)``, called as the planned deletes (manifests
            and files) are carried out; not called by a dry run or when nothing is deleted.
        min_superseded_age: keep every version that stopped being the latest less than this
            long ago, whatever ``older_than`` says (None: ``$LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS``
            or 5 minutes). ``timedelta(0)`` turns the rule off.

    Returns:
        :class:`CleanupStats`. Failed deletes are counted in ``failed_deletes``, not raised.

    See the module docstring for the exact rules, the order of deletes and why.
    """
    _check_args(older_than, retain_versions)
    min_age = _min_superseded_age(min_superseded_age)
    if older_than is None and retain_versions is None:
        older_than = DEFAULT_OLDER_THAN
    store, base = ds.store, ds.base
    now = datetime.now(timezone.utc)
    cutoff = now - older_than if older_than is not None else None
    threshold = max(UNVERIFIED_THRESHOLD, older_than or timedelta(0))
    young_after = None if delete_unverified else now - threshold

    versions = _load_versions(store, base)
    if not versions:
        raise LanceOpsError(f"{ds.uri}: no versions found under {naming.VERSIONS_DIR}/")
    latest = max(versions)
    protect_from = latest
    current = getattr(ds, "version", None)
    if isinstance(current, int) and current in versions:
        protect_from = min(protect_from, current)

    kept, pinned = _protected(store, base)
    removed_versions = _select_removed(
        versions,
        cutoff,
        retain_versions,
        protect_from,
        pinned,
        tagged_versions(store, base),
        error_if_tagged_old_versions,
        now - min_age if min_age > timedelta(0) else None,
    )
    removed = _Refs()
    for v, info in versions.items():
        (removed if v in removed_versions else kept).add(info.manifest, v)
    if not dry_run:  # before any manifest goes: every keyed version's key is in the ledger
        idempotency.carry_forward(store, base, {v: info.manifest for v, info in versions.items()})
    pinned_data, stage_files = _staged_lifecycle(store, base, kept.data | removed.data, young_after)
    kept.data |= pinned_data

    planner = _Planner(kept, removed, removed_versions, latest, young_after)
    candidates: list[_Candidate] = []
    for area in _AREAS:
        listed = list(_list_area(store, base, area))
        if area == naming.DATA_DIR:
            planner.owner_times = {f.rel[len(area) + 1:]: f.last_modified for f in listed if f.rel.endswith(".lance")}
            _check_protected_data(store, versions, protect_from, {f.rel[len(area) + 1:] for f in listed})
        for f in listed:
            c = planner.classify(f)
            if c is not None:
                candidates.append(c)
    staged = [_Candidate(f, "staging", True) for f in stage_files]
    manifest_files: list[tuple[_File, int]] = []
    for v in sorted(removed_versions):
        for loc in versions[v].locations:
            manifest_files.append((_File(loc.path, "", loc.size, loc.last_modified), v))

    stats = CleanupStats()
    if dry_run:
        stats.old_versions = len(removed_versions)
        stats.bytes_removed = sum(f.size for f, _ in manifest_files)
        candidates += staged
        _tally(stats, [(c.kind, c.file) for c in candidates])
        stats.planned = [f.path for f, _ in manifest_files] + [c.file.path for c in candidates]
        return stats
    candidates += staged

    # progress: over every planned delete (files dropped in step 2 count as done at once)
    total = len(manifest_files) + len(candidates)
    handled = [0]

    def tick(n: int) -> None:
        handled[0] += n
        if progress is not None:
            progress(min(handled[0], total), total)

    # 1. manifests first (see the module docstring): a version disappears as a whole
    done, failed = _delete(store, [f for f, _ in manifest_files], tick if total else None)
    stats.failed_deletes += len(failed)
    failed_paths = {f.path for f in failed}
    still_there = {v for f, v in manifest_files if f.path in failed_paths}
    for v in still_there:
        kept.add(versions[v].manifest, v)  # still readable: keep everything it names
    stats.old_versions = len(removed_versions - still_there)
    stats.bytes_removed += sum(f.size for f in done)

    # 2. versions, detached commits and branches created while we worked: what they name stays
    for v, info in _load_versions(store, base, skip=versions).items():
        kept.add(info.manifest, v)
    kept.update(_protected(store, base)[0])
    owner_times = planner.owner_times
    planner = _Planner(kept, removed, removed_versions, latest, young_after)
    planner.owner_times = owner_times
    files = [c for c in candidates if c.kind == "staging" or planner.classify(c.file) is not None]
    if total and len(files) < len(candidates):
        tick(len(candidates) - len(files))

    # 3. the files
    kind_of = {c.file.path: c.kind for c in files}
    done, failed = _delete(store, [c.file for c in files], tick if total else None)
    stats.failed_deletes += len(failed)
    _tally(stats, [(kind_of[f.path], f) for f in done])
    return stats
