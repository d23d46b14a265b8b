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

    Staged results (``_staging/<key>.json`` of :mod:`lance_ops.table.commit.staging`) have a lifecycle:
    a committed one (marked by its commit step, its key in the key ledger, or - older stages -
    some listed manifest naming one of its files) is removed once the ledger records its key (a
    re-run asks the ledger); a pending one pins its data files while it is younger than the
    unverified-file guard; an older one is *abandoned*: its JSON is deleted and its files are
    left to the unverified-file rule (so they go in the same run). ``*.plan.json`` files are
    left alone.

    The idempotency-key ledger (``_lance_ops/keys/``, :mod:`lance_ops.table.commit.idempotency`) is
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

from lance_ops.maintenance.cleanup.listing import ROWID_INDEX_DIR, STATS_DIR
from lance_ops.maintenance.cleanup.plan import (
    DEFAULT_MIN_SUPERSEDED_AGE,
    DEFAULT_OLDER_THAN,
    UNVERIFIED_THRESHOLD,
)
from lance_ops.maintenance.cleanup.remove import CleanupStats, cleanup_old_versions

__all__ = [
    "CleanupStats",
    "cleanup_old_versions",
    "DEFAULT_OLDER_THAN",
    "DEFAULT_MIN_SUPERSEDED_AGE",
    "UNVERIFIED_THRESHOLD",
    "STATS_DIR",
    "ROWID_INDEX_DIR",
]
