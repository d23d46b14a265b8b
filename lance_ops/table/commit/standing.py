"""After a manifest put succeeded: is the version we wrote part of the dataset's history?

Put-if-absent at ``N`` cannot tell "nobody has version N yet" from "N was committed, superseded
and removed by a cleanup" (a cleanup whose minimum superseded age is shorter than our request:
the soak's 0 s, or a request slowed down by client retries). The listing right before the put
(:mod:`lance_ops.table.commit.loop`) closes that window up to the put itself; this module closes
the rest: one listing after the put decides.

* Nothing newer than ours is listed: ours is the latest, hence part of the history (the newest
  existing version never goes away and only grows, so had any newer version existed when our
  put landed, one would still be listed).
* Newer versions are listed: either they were built on ours (the normal case: another writer
  was quick) or ours landed after the slot was reused and cleaned (orphaned, invisible). The
  next version decides by content when it exists and its operation copies the fragments it
  does not touch (Append, Delete, Rewrite, ...): if a fragment of ours it did not touch is not
  there as it is, ours is an orphan; if a fragment only ours had (new data or deletion files) is
  there, or among the fragments it rewrote, it was built on ours. A delete that rebased onto ours
  replaces our deletion files with merged ones: if ours only added deletions (and removed
  fragments) and every row we deleted is deleted there too, the history holds all of our
  commit and it is acknowledged (:func:`_deletions_kept`). Otherwise a newer version
  stored strictly before ours means an orphan (a version built on ours is stored after it);
  anything else is UNKNOWN (a commit whose only change is an index or the config, overtaken
  within one request: rare, and never guessed).
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import numpy as np

from lance_ops.errors import ObjectNotFoundError
from lance_ops.table import deletion
from lance_ops.table.commit import conflicts
from lance_ops.table.commit.transaction_file import load_transaction
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.builder import rewrite_groups
from lance_ops.table.manifest.codec import read_manifest

if TYPE_CHECKING:
    from lance_ops._proto import table_pb2
    from lance_ops.io import ObjectStore

#: listings of ``_versions/`` that must show the version we just wrote before one is believed
_LISTINGS = 3
#: operations whose manifest keeps every fragment they do not touch exactly as the previous one
_COPIES_UNTOUCHED = frozenset({
    "append", "delete", "rewrite", "update", "data_replacement", "reserve_fragments", "create_index",
    "update_config", "project", "update_bases",
})


class Standing(enum.Enum):
    """Where the version we just published stands."""

    LATEST = "latest"        # nothing newer: ours is the head of the history
    FOLLOWED = "followed"    # a newer version was built on ours
    ORPHANED = "orphaned"    # the slot had been reused and cleaned: ours is below the latest, unseen
    UNKNOWN = "unknown"      # newer versions exist and nothing tells which


def _key(frag: table_pb2.DataFragment) -> tuple[object, ...]:
    deletion = frag.deletion_file if frag.HasField("deletion_file") else None
    return (frag.id, tuple((f.path, tuple(f.fields)) for f in frag.files),
            None if deletion is None else (deletion.read_version, deletion.id, deletion.num_deleted_rows))


def _by_content(store: ObjectStore, base: str, path: str, ours: table_pb2.Manifest,
                previous: table_pb2.Manifest) -> Standing | None:
    """FOLLOWED / ORPHANED from the next version's manifest at ``path``, or None if it cannot tell."""
    try:
        mf = read_manifest(store, path)
    except ObjectNotFoundError:
        return None  # removed meanwhile
    txn = load_transaction(store, base, mf)
    if txn is None or txn.WhichOneof("operation") not in _COPIES_UNTOUCHED:
        return None
    touched = conflicts.touched_fragments(txn)
    theirs = {_key(f) for f in mf.manifest.fragments}
    if any(_key(f) not in theirs for f in ours.fragments if f.id not in touched):
        return Standing.ORPHANED  # built on ours, it would have kept that fragment as it is
    before = {_key(f) for f in previous.fragments}
    made = [_key(f) for f in ours.fragments if _key(f) not in before]  # new files, new deletion files
    rewritten = {_key(f) for g in rewrite_groups(txn) for f in g.old_fragments} if txn.HasField("rewrite") else set()
    if any(k in theirs or k in rewritten for k in made):
        return Standing.FOLLOWED  # a fragment only our manifest had is there (or was rewritten)
    if _deletions_kept(store, base, ours, previous, mf.manifest):
        return Standing.FOLLOWED
    return None


def _deletions_kept(store: ObjectStore, base: str, ours: table_pb2.Manifest, previous: table_pb2.Manifest,
                    theirs: table_pb2.Manifest) -> bool:
    """Whether ``ours`` only deleted rows (new deletion vectors, removed fragments) and ``theirs``
    (the next version) has every one of those rows deleted too.

    A delete that rebased onto ours writes merged deletion files, so no fragment of ours is left
    as it was; its vectors then contain ours. Were ours an orphan, ``theirs`` would contain our
    rows only if other writers deleted exactly those rows as well: either way every effect of our
    commit is in the history, which is what an acknowledgement promises.
    """
    before = {f.id: f for f in previous.fragments}
    mine = {f.id: f for f in ours.fragments}
    now = {f.id: f for f in theirs.fragments}
    if any(i not in before for i in mine) or any(i in now for i in before if i not in mine):
        return False  # ours added a fragment (data), or a fragment ours removed is still there
    changed = [f for f in ours.fragments if _key(f) != _key(before[f.id])]
    if not changed:
        return False  # nothing of ours to find (its change is elsewhere: index, config, schema)
    for frag in changed:
        old = before[frag.id]
        if [(d.path, list(d.fields)) for d in frag.files] != [(d.path, list(d.fields)) for d in old.files]:
            return False  # not a deletion-only change
        there = now.get(frag.id)
        if there is None:
            continue  # the fragment was removed since: all its rows are deleted
        if [(d.path, list(d.fields)) for d in there.files] != [(d.path, list(d.fields)) for d in frag.files]:
            return False
        try:
            deleted = deletion.read_deletion_offsets(
                store, base, frag.id, frag.deletion_file if frag.HasField("deletion_file") else None)
            kept = deletion.read_deletion_offsets(
                store, base, there.id, there.deletion_file if there.HasField("deletion_file") else None)
        except ObjectNotFoundError:
            return False
        if deleted.size > kept.size or np.setdiff1d(deleted, kept, assume_unique=True).size:
            return False
    return True


def standing(store: ObjectStore, base: str, version: int, ours: table_pb2.Manifest,
             previous: table_pb2.Manifest) -> tuple[Standing, str]:
    """Where ``version`` (whose manifest ``ours`` we just wrote on top of ``previous``) stands, and
    why. Raises StorageError if ``_versions/`` cannot be listed."""
    entries: list[naming.ManifestLocation] = []
    for _ in range(_LISTINGS):
        entries = naming.list_versions_from(store, base, version)
        if any(e.version == version for e in entries):
            break
    mine = [e for e in entries if e.version == version]
    newer = [e for e in entries if e.version > version]
    if not mine:
        return Standing.UNKNOWN, f"the listing of _versions/ does not show version {version} just written"
    if not newer:
        return Standing.LATEST, ""
    nxt = newer[0]
    if nxt.version == version + 1:
        verdict = _by_content(store, base, nxt.path, ours, previous)
        if verdict is not None:
            return verdict, f"version {nxt.version}'s fragments"
    if nxt.last_modified < mine[0].last_modified:  # (a version built on ours is stored after it)
        return Standing.ORPHANED, f"version {nxt.version} was stored before ours"
    return Standing.UNKNOWN, f"version {nxt.version} is newer and cannot be told built on ours or not"
