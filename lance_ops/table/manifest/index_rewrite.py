"""What a Rewrite (compaction) does to the index section (pylance 14.0.2's manifest build).

Per rewrite group, a fragment bitmap naming **all** of the group's old fragments gets them replaced
by the group's new fragment ids; naming **some** of them is an invalid plan (refused); naming none
leaves it unchanged (:func:`recalculate_fragment_bitmap`).

* Every segment listed in the Rewrite's ``rewritten_indices`` gets the recalculated bitmap, the new
  uuid and the new file list; name, fields, dataset_version, created_at, details and index_version
  stay from the old entry (pylance copies neither ``new_index_details`` nor ``new_index_version``).
  An entry whose ``old_id`` no longer exists is skipped.
* Without stable row ids every other segment is carried unchanged (a segment of a kind that cannot
  be remapped keeps its stale bitmap and so covers nothing live).
* With stable row ids the other segments store row ids, which survive the rewrite: their bitmaps
  are recalculated, except address-domain kinds (ZONEMAP, BLOOMFILTER: their results are row
  addresses), whose rewritten fragments are dropped from the bitmap instead.
"""
from __future__ import annotations

from typing import Iterable

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import CommitError, RetryableCommitConflictError
from lance_ops.table.manifest.builder import rewrite_groups
from lance_ops.table.index_files import REWRITTEN_FILES_FIELD, details_name, listed_files, set_index_files

#: index_details message names (lower case) whose stored entries are row addresses even on a
#: stable-row-id dataset and which nobody remaps (pylance's ``results_are_row_addrs`` kinds)
ADDRESS_DOMAIN_DETAILS = frozenset({
    "lance.table.zonemapindexdetails", "lance.index.pb.bloomfilterindexdetails",
    "lance.table.bloomfilterindexdetails",
})


def _bitmap_ids(index: table_pb2.IndexMetadata) -> set[int]:
    from pyroaring import BitMap

    return {int(i) for i in BitMap.deserialize(bytes(index.fragment_bitmap))}


def _set_bitmap(index: table_pb2.IndexMetadata, ids: Iterable[int]) -> None:
    from pyroaring import BitMap

    index.fragment_bitmap = BitMap(sorted(ids)).serialize()


def recalculate_fragment_bitmap(ids: set[int], groups: Iterable[transaction_pb2.Transaction.RewriteGroup],
                                name: str = "?") -> set[int]:
    """``ids`` after the rewrite ``groups`` (the rule in the module docstring)."""
    out = set(ids)
    for group in groups:
        old = [f.id for f in group.old_fragments]
        inside = [i for i in old if i in ids]
        if not inside:
            continue
        if len(inside) != len(old):
            raise CommitError(
                f"index {name!r}: a rewrite group over fragments {old} splits indexed {inside} and unindexed "
                "data (an invalid compaction plan); nothing was committed")
        new = [f.id for f in group.new_fragments]
        if 0 in new:
            raise CommitError(
                f"index {name!r}: the rewrite of its fragments {old} carries new fragments without reserved "
                "ids; nothing was committed")
        out.difference_update(old)
        out.update(new)
    return out


def apply_rewrite(section: table_pb2.IndexSection | None, txn: transaction_pb2.Transaction,
                  groups: list[transaction_pb2.Transaction.RewriteGroup] | None = None, *,
                  stable_row_ids: bool) -> table_pb2.IndexSection | None:
    """The index section after the Rewrite ``txn`` (a copy; ``section`` is not changed).

    ``groups``: the rewrite groups with their final new fragment ids (as the manifest build
    assigned them); default: the transaction's own.
    """
    rewritten = list(txn.rewrite.rewritten_indices)
    if section is None or (not rewritten and not stable_row_ids):
        return section
    groups = rewrite_groups(txn) if groups is None else groups
    seen: set[bytes] = set()
    by_old: dict[bytes, transaction_pb2.Transaction.RewrittenIndex] = {}
    for entry in rewritten:
        key = bytes(entry.old_id.uuid)
        if key in seen:
            raise CommitError(f"the rewrite lists index segment {key.hex()} twice; nothing was committed")
        seen.add(key)
        by_old[key] = entry
    out = table_pb2.IndexSection()
    out.CopyFrom(section)
    for index in out.indices:
        entry = by_old.get(bytes(index.uuid.uuid))
        if entry is not None:
            if not index.fragment_bitmap:
                raise CommitError(f"cannot rewrite index {index.name!r}: it stores no fragment bitmap")
            _set_bitmap(index, recalculate_fragment_bitmap(_bitmap_ids(index), groups, index.name))
            index.uuid.uuid = bytes(entry.new_id.uuid)
            set_index_files(index, listed_files(entry, REWRITTEN_FILES_FIELD))
        elif stable_row_ids and index.fragment_bitmap:
            ids = _bitmap_ids(index)
            if details_name(index.index_details.type_url if index.HasField("index_details") else "") in ADDRESS_DOMAIN_DETAILS:
                new_ids = ids - {f.id for g in groups for f in g.old_fragments}
            else:
                new_ids = recalculate_fragment_bitmap(ids, groups, index.name)
            if new_ids != ids:  # an untouched bitmap keeps its bytes
                _set_bitmap(index, new_ids)
    return out


def apply_create_index(section: table_pb2.IndexSection | None,
                       txn: transaction_pb2.Transaction) -> table_pb2.IndexSection | None:
    """The index section after the CreateIndex ``txn`` (a copy), as pylance 14.0.2 builds it: the
    segments named in ``removed_indices`` (by uuid) go, the ``new_indices`` are appended in
    transaction order; other segments of the same name stay (delta segments). A removed segment
    that is no longer there means a concurrent writer changed the index: refused (retry)."""
    ci = txn.create_index
    present = {bytes(i.uuid.uuid) for i in (section.indices if section is not None else [])}
    removed = {bytes(i.uuid.uuid) for i in ci.removed_indices}
    gone = removed - present
    if gone:
        raise RetryableCommitConflictError(
            f"index segments {sorted(u.hex() for u in gone)} this CreateIndex replaces were removed concurrently; "
            "re-read the dataset and retry")
    out = table_pb2.IndexSection()
    if section is not None:
        out.indices.extend(i for i in section.indices if bytes(i.uuid.uuid) not in removed)
    out.indices.extend(ci.new_indices)
    return out
