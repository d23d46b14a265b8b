"""Planning what a cleanup run removes: the version policy (age, retained count, tags, recently
superseded) and the classification of every listed file as kept or deletable."""
from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from typing import Sequence

from lance_ops.errors import InvalidInputError, TagError
from lance_ops.format.blob_v2 import parse_side_file
from lance_ops.table.manifest import naming

from lance_ops.maintenance.cleanup.listing import (
    ROWID_INDEX_DIR,
    STATS_DIR,
    Candidate,
    ListedFile,
    Refs,
    VersionInfo,
    is_temp_name,
    uuid_str,
)

#: pylance 14's default ``older_than`` when neither ``older_than`` nor ``retain_versions`` is given
DEFAULT_OLDER_THAN = timedelta(days=14)
#: versions superseded less than this long ago are kept whatever the policy (module doc)
DEFAULT_MIN_SUPERSEDED_AGE = timedelta(minutes=5)
#: environment variable overriding DEFAULT_MIN_SUPERSEDED_AGE (seconds, >= 0)
MIN_SUPERSEDED_AGE_ENV = "LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS"
#: unreferenced files nobody ever committed are only deleted once they are this old
UNVERIFIED_THRESHOLD = timedelta(days=7)

_STAGED_MANIFEST_RE = re.compile(r"^(\d+\.manifest)-[0-9A-Za-z-]+$")
_ROWID_INDEX_RE = re.compile(r"^(\d+)-")


# --- policy -----------------------------------------------------------------------------------
def superseded_times(versions: dict[int, VersionInfo]) -> dict[int, datetime]:
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


def resolve_min_superseded_age(value: timedelta | None) -> timedelta:
    """``value``, or (None) the environment override, or the default; validated."""
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


def select_removed(
    versions: dict[int, VersionInfo],
    cutoff: datetime | None,
    retain_versions: int | None,
    protect_from: int,
    pinned: set[int],
    tags: dict[int, list[str]],
    error_if_tagged_old_versions: bool,
    superseded_after: datetime | None = None,
    only: set[int] | None = None,
) -> set[int]:
    """The versions the policy removes (module docstring); raises TagError for tagged ones
    when ``error_if_tagged_old_versions``. With ``only`` (pylance's ``versions=``), no version
    outside it is removed."""
    newest = set(sorted(versions, reverse=True)[:retain_versions]) if retain_versions else set()
    superseded = superseded_times(versions) if superseded_after is not None else {}
    removed: set[int] = set()
    tag_hits: dict[str, int] = {}
    for v, info in versions.items():
        if v >= protect_from or v in newest or v in pinned or (only is not None and v not in only):
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


def check_pylance_args(versions: Sequence[int] | None, delete_rate_limit: int | None,
                       delete_concurrency: int | None) -> None:
    """Refuse pylance's ``versions`` / ``delete_rate_limit`` / ``delete_concurrency`` where
    pylance does (InvalidInputError, an OSError as pylance's), before anything is listed."""
    if versions is not None and len(versions) == 0:
        raise InvalidInputError("Invalid user input: versions must not be empty when specified")
    if delete_rate_limit is not None and delete_rate_limit <= 0:
        raise InvalidInputError(f"Cleanup error: delete_rate_limit must be greater than 0, got {delete_rate_limit}")
    if delete_concurrency is not None and not 1 <= delete_concurrency <= 2**61 - 1:
        raise InvalidInputError("Invalid user input: delete_concurrency must be between 1 and "
                                f"{2**61 - 1}, got {delete_concurrency}")


def check_args(older_than: timedelta | None, retain_versions: int | None) -> None:
    """Validate cleanup's policy arguments (TypeError / ValueError, as pylance)."""
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


# --- classification --------------------------------------------------------------------------
class Planner:
    """Classifies listed files: kept (None) or a :class:`Candidate` for deletion, given what the
    kept and the removed manifests name and the age rule for unverified files."""

    def __init__(self, kept: Refs, removed: Refs, removed_versions: set[int], latest: int,
                 young_after: datetime | None) -> None:
        self.kept = kept
        self.removed = removed
        self.removed_versions = removed_versions
        self.latest = latest
        #: unverified files modified after this are kept (None: delete_unverified)
        self.young_after = young_after
        #: data file name (below data/) -> last modified, for judging blob v2 side files
        self.owner_times: dict[str, datetime] = {}

    def _old_enough(self, f: ListedFile) -> bool:
        return self.young_after is None or f.last_modified < self.young_after

    def _decide(self, f: ListedFile, kind: str, referenced: bool, verified: bool) -> Candidate | None:
        if referenced or f.rel in self.kept.paths:
            return None
        if verified or self._old_enough(f):
            return Candidate(f, kind, verified)
        return None

    def classify(self, f: ListedFile) -> Candidate | None:
        """None to keep ``f`` (or leave it alone), else why it may be deleted."""
        area, _, rest = f.rel.partition("/")
        name = rest.rsplit("/", 1)[-1]
        if area == naming.VERSIONS_DIR:
            return self._versions_file(f, rest)
        if is_temp_name(name):
            return Candidate(f, "temporary", False) if self._old_enough(f) else None
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
            uid = uuid_str(head) if sep else None
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

    def _versions_file(self, f: ListedFile, rest: str) -> Candidate | None:
        if "/" in rest:
            return None
        if rest.startswith(".tmp") or (rest.startswith(".") and rest.endswith(".tmp")):
            return Candidate(f, "temporary", False) if self._old_enough(f) else None
        m = _STAGED_MANIFEST_RE.match(rest)
        if m is not None:
            # A staged manifest of a version nobody has finalised yet may be the only copy of
            # a committed version (external manifest stores): keep it whatever its age.
            parsed = naming.parse_manifest_name(m.group(1))
            if parsed is None or parsed[0] > self.latest:
                return None
            return Candidate(f, "temporary", False) if self._old_enough(f) else None
        return None  # committed manifests are handled per version; hint & detached stay


AREAS = (
    naming.VERSIONS_DIR,
    naming.DATA_DIR,
    naming.DELETIONS_DIR,
    naming.TRANSACTIONS_DIR,
    naming.INDICES_DIR,
    STATS_DIR,
    ROWID_INDEX_DIR,
)
