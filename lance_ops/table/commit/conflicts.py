"""Can our transaction still commit after others committed since our read version?

``check(ours, theirs)`` applies the compatibility matrix of the Lance table format (the view of
the transaction being committed against one already committed) and returns a verdict:

* ``OK``        - independent changes; the manifest is simply rebuilt on the newer version
                  (an Append's fragment ids and row ids are re-assigned at that point);
* ``REBASE``    - both touched the same fragment's deletions on disjoint rows: merge the deletion
                  vectors, then commit (done by :mod:`lance_ops.table.commit.loop`);
* ``RETRYABLE`` - preempted: re-read the dataset and redo the operation;
* ``INCOMPATIBLE`` - the other change invalidates ours (e.g. an Overwrite); retrying won't help.

A missing or unknown committed transaction counts as RETRYABLE: we never guess.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from lance_ops._proto import transaction_pb2


class Verdict(enum.IntEnum):
    """What the conflict check decides for our transaction against one committed concurrently."""

    OK = 0
    REBASE = 1
    RETRYABLE = 2
    INCOMPATIBLE = 3


@dataclass
class Outcome:
    """A :class:`Verdict` with the reason given to the user and, for REBASE, the fragments whose
    deletion vectors the commit loop must merge."""

    verdict: Verdict
    reason: str = ""
    #: fragment ids whose deletion vectors must be merged (REBASE)
    rebase_fragments: set[int] = field(default_factory=set)


_KNOWN = {
    "append", "delete", "overwrite", "create_index", "rewrite", "merge", "restore",
    "reserve_fragments", "update", "project", "update_config", "data_replacement", "clone",
    "update_bases",
}


def touched_fragments(txn: transaction_pb2.Transaction) -> set[int]:
    """Ids of existing fragments whose rows or files a transaction changed or removed."""
    op = txn.WhichOneof("operation")
    if op == "delete":
        return {f.id for f in txn.delete.updated_fragments} | set(txn.delete.deleted_fragment_ids)
    if op == "update":
        return {f.id for f in txn.update.updated_fragments} | set(txn.update.removed_fragment_ids)
    if op == "rewrite":
        ids = {f.id for g in txn.rewrite.groups for f in g.old_fragments}
        return ids | {f.id for f in txn.rewrite.old_fragments}
    if op == "data_replacement":
        return {r.fragment_id for r in txn.data_replacement.replacements}
    return set()


def _index_names(txn: transaction_pb2.Transaction) -> set[str]:
    """Names of the indices a CreateIndex adds or removes segments of."""
    ci = txn.create_index
    return {i.name for i in ci.new_indices} | {i.name for i in ci.removed_indices}


def _config_keys(txn: transaction_pb2.Transaction) -> set[str]:
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        return set(txn.overwrite.config_upsert_values)
    if op == "update_config":
        uc = txn.update_config
        keys = set(uc.upsert_values) | set(uc.delete_keys)
        keys |= {e.key for e in uc.config_updates.update_entries}
        if uc.config_updates.replace:
            keys.add("*")
        return keys
    return set()


def _keys_overlap(a: set[str], b: set[str]) -> bool:
    return bool(a & b) or ("*" in a and bool(b)) or ("*" in b and bool(a))


def check(
    ours: transaction_pb2.Transaction,
    theirs: transaction_pb2.Transaction | None,
    *,
    our_deleted: dict[int, np.ndarray] | None = None,
    their_deleted: dict[int, np.ndarray] | None = None,
) -> Outcome:
    """Verdict for committing ``ours`` after ``theirs`` was committed.

    ``our_deleted`` / ``their_deleted`` map fragment id -> the row offsets each Delete newly
    deleted there (the "affected rows"); with them, two Deletes on disjoint rows of one fragment
    REBASE instead of RETRYABLE. Without ``their_deleted`` an overlap is treated as RETRYABLE.
    """
    if theirs is None:
        return Outcome(Verdict.RETRYABLE, "the transaction of a concurrent version could not be read")
    mine, other = ours.WhichOneof("operation"), theirs.WhichOneof("operation")
    if other not in _KNOWN:
        return Outcome(Verdict.RETRYABLE, f"unknown concurrent operation {other!r}")
    label = f"{mine} vs concurrent {other}"

    if mine == "restore" or other in ("clone",):
        return Outcome(Verdict.OK)
    if mine == "clone":
        return Outcome(Verdict.INCOMPATIBLE, "a clone must be the first operation of a dataset")

    if other in ("overwrite", "restore"):
        if mine == "overwrite":
            if other == "overwrite":
                return Outcome(Verdict.RETRYABLE, f"{label}: another overwrite committed first")
            return Outcome(Verdict.OK)
        if mine == "update_config" and other == "restore":
            return Outcome(Verdict.OK)
        if mine == "update_config" and not _keys_overlap(_config_keys(ours), _config_keys(theirs)):
            return Outcome(Verdict.OK)
        return Outcome(Verdict.INCOMPATIBLE, f"{label}: the dataset was replaced concurrently")

    if mine == "overwrite":
        if other == "update_config" and _keys_overlap(_config_keys(ours), _config_keys(theirs)):
            return Outcome(Verdict.RETRYABLE, f"{label}: both change the same config keys")
        return Outcome(Verdict.OK)

    if mine in ("append", "reserve_fragments", "create_index", "update_bases"):
        if mine == "create_index" and other in ("rewrite", "data_replacement"):
            return Outcome(Verdict.RETRYABLE, f"{label}: indexed fragments were rewritten")
        if mine == "create_index" and other == "create_index" and _index_names(ours) & _index_names(theirs):
            return Outcome(Verdict.RETRYABLE, f"{label}: indices {sorted(_index_names(ours) & _index_names(theirs))} "
                                              "were changed concurrently")
        return Outcome(Verdict.OK)

    if mine == "update_config":
        if other == "update_config" and _keys_overlap(_config_keys(ours), _config_keys(theirs)):
            return Outcome(Verdict.INCOMPATIBLE, f"{label}: both change the same config keys")
        return Outcome(Verdict.OK)

    if mine == "project":
        if other in ("merge", "project"):
            return Outcome(Verdict.RETRYABLE, f"{label}: the schema changed concurrently")
        return Outcome(Verdict.OK)

    if mine == "merge":
        if other in ("update", "append", "delete", "rewrite", "merge", "data_replacement"):
            return Outcome(Verdict.RETRYABLE, f"{label}: fragments changed concurrently")
        if other == "project":
            return Outcome(Verdict.INCOMPATIBLE, f"{label}: the schema was changed concurrently")
        return Outcome(Verdict.OK)

    mine_touched, other_touched = touched_fragments(ours), touched_fragments(theirs)
    overlap = mine_touched & other_touched

    if mine == "rewrite":
        if other == "create_index":
            return Outcome(Verdict.RETRYABLE, f"{label}: an index was created over the fragments being rewritten")
        if other == "merge":
            return Outcome(Verdict.RETRYABLE, f"{label}: the fragments were merged concurrently")
        if other in ("delete", "update", "rewrite", "data_replacement") and overlap:
            return Outcome(
                Verdict.RETRYABLE,
                f"{label}: fragments {sorted(overlap)[:10]} were changed concurrently; re-plan the compaction",
            )
        return Outcome(Verdict.OK)

    if mine in ("delete", "update"):
        if other == "merge":
            return Outcome(Verdict.RETRYABLE, f"{label}: the fragments were merged concurrently")
        if other in ("rewrite", "data_replacement") and overlap:
            return Outcome(Verdict.RETRYABLE, f"{label}: fragments {sorted(overlap)[:10]} were rewritten")
        if other in ("delete", "update") and overlap:
            if mine != "delete" or other != "delete" or our_deleted is None or their_deleted is None:
                return Outcome(Verdict.RETRYABLE, f"{label}: both changed fragments {sorted(overlap)[:10]}")
            removed = set(theirs.delete.deleted_fragment_ids) | set(ours.delete.deleted_fragment_ids)
            if overlap & removed:
                return Outcome(Verdict.RETRYABLE, f"{label}: fragments {sorted(overlap & removed)[:10]} were removed")
            for frag_id in overlap:
                a = our_deleted.get(frag_id)
                b = their_deleted.get(frag_id)
                if a is None or b is None or np.intersect1d(a, b, assume_unique=False).size:
                    return Outcome(Verdict.RETRYABLE, f"{label}: both deleted the same rows of fragment {frag_id}")
            return Outcome(Verdict.REBASE, f"{label}: disjoint deletions", rebase_fragments=overlap)
        return Outcome(Verdict.OK)

    return Outcome(Verdict.RETRYABLE, f"{label}: no compatibility rule, refusing to guess")
