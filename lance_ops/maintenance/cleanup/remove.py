"""Removing: run the cleanup plan (manifests first, then files, re-checking for versions committed
meanwhile) and count what went. :func:`cleanup_old_versions` is the entry point."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Sequence

from lance_ops.errors import LanceOpsError
from lance_ops.io.base import ObjectStore
from lance_ops.table.manifest import naming
from lance_ops.table.tags import tagged_versions

from lance_ops.maintenance.cleanup.listing import (
    Candidate,
    ListedFile,
    Refs,
    check_protected_data,
    list_area,
    load_versions,
    protected_refs,
)
from lance_ops.maintenance.cleanup.plan import (
    AREAS,
    DEFAULT_OLDER_THAN,
    UNVERIFIED_THRESHOLD,
    Planner,
    check_args,
    check_pylance_args,
    resolve_min_superseded_age,
    select_removed,
)
from lance_ops.maintenance.cleanup.staged import carry_forward_ledger, staged_lifecycle

#: paths per ``store.delete_many`` call
DELETE_BATCH_SIZE = 1000


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


# --- deleting ---------------------------------------------------------------------------------
def _delete(store: ObjectStore, files: list[ListedFile], tick: Callable[[int], None] | None = None,
            rate_limit: int | None = None) -> tuple[list[ListedFile], list[ListedFile]]:
    """Delete in batches; ``(deleted, failed)``. A failed batch is retried path by path.

    ``tick(n)`` (optional) is told how many paths were handled after each batch; with
    ``rate_limit`` (pylance's ``delete_rate_limit``) at most that many paths go per second.
    """
    done: list[ListedFile] = []
    failed: list[ListedFile] = []
    size = min(DELETE_BATCH_SIZE, rate_limit) if rate_limit else DELETE_BATCH_SIZE
    started = time.monotonic()
    for i in range(0, len(files), size):
        if rate_limit:  # the i paths sent so far may not take less than i / rate_limit seconds
            wait = started + i / rate_limit - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        batch = files[i : i + size]
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


def _tally(stats: CleanupStats, items: Iterable[tuple[str, ListedFile]]) -> None:
    for kind, f in items:
        setattr(stats, _COUNTERS[kind], getattr(stats, _COUNTERS[kind]) + 1)
        stats.bytes_removed += f.size


# --- entry point ------------------------------------------------------------------------------
def cleanup_old_versions(
    ds: Any,
    older_than: timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    min_superseded_age: timedelta | None = None,
    versions: Sequence[int] | None = None,
    delete_rate_limit: int | None = None,
    delete_concurrency: int | None = None,
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
        versions: pylance's ``versions=``: only these versions may be removed (the policy,
            the current version and tags still apply); alone, no age cutoff is implied.
        delete_rate_limit: at most this many deletes per second (pylance's argument).
        delete_concurrency: pylance's bound on concurrent deletes; checked, and always met
            (lance-ops deletes one batch at a time).
        min_superseded_age: keep every version that stopped being the latest less than this
            long ago, whatever ``older_than`` says (None: ``$LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS``
            or 5 minutes). ``timedelta(0)`` turns the rule off.

    Returns:
        :class:`CleanupStats`. Failed deletes are counted in ``failed_deletes``, not raised.

    See the module docstring for the exact rules, the order of deletes and why.
    """
    check_args(older_than, retain_versions)
    check_pylance_args(versions, delete_rate_limit, delete_concurrency)
    min_age = resolve_min_superseded_age(min_superseded_age)
    if older_than is None and retain_versions is None and versions is None:
        older_than = DEFAULT_OLDER_THAN
    store, base = ds.store, ds.base
    now = datetime.now(timezone.utc)
    cutoff = now - older_than if older_than is not None else None
    threshold = max(UNVERIFIED_THRESHOLD, older_than or timedelta(0))
    young_after = None if delete_unverified else now - threshold

    only = None if versions is None else {int(v) for v in versions}
    loaded = load_versions(store, base)
    if not loaded:
        raise LanceOpsError(f"{ds.uri}: no versions found under {naming.VERSIONS_DIR}/")
    latest = max(loaded)
    protect_from = latest
    current = getattr(ds, "version", None)
    if isinstance(current, int) and current in loaded:
        protect_from = min(protect_from, current)

    kept, pinned = protected_refs(store, base)
    removed_versions = select_removed(
        loaded,
        cutoff,
        retain_versions,
        protect_from,
        pinned,
        tagged_versions(store, base),
        error_if_tagged_old_versions,
        now - min_age if min_age > timedelta(0) else None,
        only,
    )
    removed = Refs()
    for v, info in loaded.items():
        (removed if v in removed_versions else kept).add(info.manifest, v)
    if not dry_run:  # before any manifest goes: every keyed version's key is in the ledger
        carry_forward_ledger(store, base, loaded)
    pinned_data, stage_files = staged_lifecycle(store, base, kept.data | removed.data, young_after)
    kept.data |= pinned_data

    planner = Planner(kept, removed, removed_versions, latest, young_after)
    candidates: list[Candidate] = []
    for area in AREAS:
        listed = list(list_area(store, base, area))
        if area == naming.DATA_DIR:
            planner.owner_times = {f.rel[len(area) + 1:]: f.last_modified for f in listed if f.rel.endswith(".lance")}
            check_protected_data(store, loaded, protect_from, {f.rel[len(area) + 1:] for f in listed})
        elif area == naming.DELETIONS_DIR:
            check_protected_data(store, loaded, protect_from, {f.rel[len(area) + 1:] for f in listed}, deletions=True)
        for f in listed:
            c = planner.classify(f)
            if c is not None:
                candidates.append(c)
    staged = [Candidate(f, "staging", True) for f in stage_files]
    manifest_files: list[tuple[ListedFile, int]] = []
    for v in sorted(removed_versions):
        for loc in loaded[v].locations:
            manifest_files.append((ListedFile(loc.path, "", loc.size, loc.last_modified), v))

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
    done, failed = _delete(store, [f for f, _ in manifest_files], tick if total else None, delete_rate_limit)
    stats.failed_deletes += len(failed)
    failed_paths = {f.path for f in failed}
    still_there = {v for f, v in manifest_files if f.path in failed_paths}
    for v in still_there:
        kept.add(loaded[v].manifest, v)  # still readable: keep everything it names
    stats.old_versions = len(removed_versions - still_there)
    stats.bytes_removed += sum(f.size for f in done)

    # 2. versions, detached commits and branches created while we worked: what they name stays
    for v, info in load_versions(store, base, skip=loaded).items():
        kept.add(info.manifest, v)
    kept.update(protected_refs(store, base)[0])
    owner_times = planner.owner_times
    planner = Planner(kept, removed, removed_versions, latest, young_after)
    planner.owner_times = owner_times
    files = [c for c in candidates if c.kind == "staging" or planner.classify(c.file) is not None]
    if total and len(files) < len(candidates):
        tick(len(candidates) - len(files))

    # 3. the files
    kind_of = {c.file.path: c.kind for c in files}
    done, failed = _delete(store, [c.file for c in files], tick if total else None, delete_rate_limit)
    stats.failed_deletes += len(failed)
    _tally(stats, [(kind_of[f.path], f) for f in done])
    return stats
