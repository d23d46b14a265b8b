"""Apply a transaction to the previous manifest, giving the manifest of the next version.

This is pure bookkeeping (no I/O, except that a Restore is handed the manifest it restores): it
assigns fragment ids from the ``max_fragment_id`` high-water mark, hands out stable row ids from
``next_row_id``, records version sequences, and recomputes feature flags, as upstream does when
it builds a manifest. It is run again on every commit retry, on top of the newest manifest.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, MutableMapping

import numpy as np
from google.protobuf import unknown_fields

from lance_ops._version import __version__
from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import RetryableCommitConflictError, UnsupportedError
from lance_ops.table import rowids, versions
from lance_ops.table.manifest import feature_flags
from lance_ops.table.manifest.facts import FragmentFacts

WRITER_LIBRARY = "lance-ops"


def _next_fragment_id(manifest: table_pb2.Manifest | None, ids: np.ndarray | None = None) -> int:
    if manifest is None:
        return 0
    high = manifest.max_fragment_id if manifest.HasField("max_fragment_id") else -1
    if ids is None:
        ids = _fragment_ids(manifest)
    return max(high, int(ids.max())) + 1 if ids.size else (high + 1 if high >= 0 else 0)


def _fragment_ids(manifest: table_pb2.Manifest) -> np.ndarray:
    """The fragment ids of ``manifest`` in order (uint64, as stored; one pass: thousands of fragments are common)."""
    frags = manifest.fragments
    return np.fromiter((f.id for f in frags), dtype=np.uint64, count=len(frags))


def _assign_row_ids(fragment: table_pb2.DataFragment, next_row_id: int, version: int) -> int:
    """Give a new fragment ids ``next_row_id..`` and version sequences; returns the new counter."""
    n = fragment.physical_rows
    if fragment.WhichOneof("row_id_sequence") is None:
        fragment.inline_row_ids = rowids.RowIdSequence.from_range(next_row_id, next_row_id + n).to_bytes()
        next_row_id += n
    if fragment.WhichOneof("created_at_version_sequence") is None:
        fragment.inline_created_at_versions = rowids.uniform_version_sequence(n, version)
    if fragment.WhichOneof("last_updated_at_version_sequence") is None:
        fragment.inline_last_updated_at_versions = rowids.uniform_version_sequence(n, version)
    return next_row_id


def _add_new_fragments(
    out: table_pb2.Manifest, fragments: Iterable[table_pb2.DataFragment], start_id: int, stable: bool,
    version: int,
) -> int:
    """Append copies of ``fragments`` with ids from ``start_id``; returns the next free id."""
    next_id = start_id
    for frag in fragments:
        new = out.fragments.add()
        new.CopyFrom(frag)
        new.id = next_id
        next_id += 1
        if stable:
            out.next_row_id = _assign_row_ids(new, out.next_row_id, version)
    return next_id


def _replace_groups(
    out: table_pb2.Manifest,
    groups: Iterable[transaction_pb2.Transaction.RewriteGroup],
    next_id: int,
    stable: bool,
    version: int,
) -> int:
    """Rewrite: each group's old fragments are replaced by its new fragments (the manifest is
    ordered by fragment id afterwards, as pylance orders it)."""
    position_of = {f.id: i for i, f in enumerate(out.fragments)}
    replacement: dict[int, list[table_pb2.DataFragment]] = {}
    removed: set[int] = set()
    for group in groups:
        old_ids = [f.id for f in group.old_fragments]
        missing = [i for i in old_ids if i not in position_of]
        if missing:
            raise RetryableCommitConflictError(
                f"compaction rewrote fragments {missing} that no longer exist in the dataset"
            )
        first = min(old_ids, key=position_of.__getitem__)
        news = []
        for frag in group.new_fragments:
            copy = table_pb2.DataFragment()
            copy.CopyFrom(frag)
            # Reserved ids are always > 0 (a dataset being compacted already has fragment 0),
            # so id 0 means "unassigned".
            if copy.id == 0:
                copy.id = next_id
                next_id += 1
            news.append(copy)
        replacement[first] = news
        removed.update(old_ids)
    kept = []
    for frag in out.fragments:
        if frag.id in replacement:
            kept.extend(replacement[frag.id])
        elif frag.id not in removed:
            kept.append(frag)
    del out.fragments[:]
    out.fragments.extend(kept)
    return next_id


def _created_at(manifest: table_pb2.Manifest, fragment_ids: set[int], row_ids: np.ndarray, version: int) -> np.ndarray:
    """The created-at versions of ``row_ids``, looked up in the inline sequences of ``fragment_ids``
    (the fragments an Update took its rewritten rows from; sequences kept in side files are not
    read, this module does no I/O: such rows count as created at ``version``)."""
    ids, born = [], []
    for frag in manifest.fragments:
        if frag.id in fragment_ids and frag.HasField("inline_row_ids") and frag.HasField("inline_created_at_versions"):
            a = rowids.decode_row_ids(frag.inline_row_ids)
            b = rowids.decode_version_sequence(frag.inline_created_at_versions)
            if len(a) == len(b):
                ids.append(a)
                born.append(b)
    out = np.full(len(row_ids), version, dtype=np.uint64)
    if not ids or not len(row_ids):
        return out
    all_ids, all_born = np.concatenate(ids), np.concatenate(born)
    order = np.argsort(all_ids, kind="stable")
    all_ids, all_born = all_ids[order], all_born[order]
    pos = np.minimum(np.searchsorted(all_ids, row_ids), len(all_ids) - 1)
    hit = all_ids[pos] == row_ids
    out[hit] = all_born[pos[hit]]
    return out


def _apply_update(out: table_pb2.Manifest, update: transaction_pb2.Transaction.Update, next_id: int,
                  stable: bool, version: int) -> int:
    """An Update (rows rewritten): its updated fragments replace theirs (new deletion vectors), its
    removed fragments go, its new fragments are added. With stable row ids a new fragment keeps the
    row ids its transaction lists for its first rows (the rewritten rows, as pylance keeps them) and
    its other rows get fresh ids; kept rows keep their created-at version."""
    updated = {f.id: f for f in update.updated_fragments}
    gone = set(update.removed_fragment_ids)
    present = {f.id for f in out.fragments}
    missing = sorted((set(updated) | gone) - present)
    if missing:
        raise RetryableCommitConflictError(f"an update changed fragments {missing[:10]} that no longer exist")
    sources = set(updated) | gone
    previous = table_pb2.Manifest()
    if stable:
        previous.fragments.extend(out.fragments)
    kept = [updated.get(f.id, f) for f in out.fragments if f.id not in gone]
    del out.fragments[:]
    out.fragments.extend(kept)
    for frag in update.new_fragments:
        new = out.fragments.add()
        new.CopyFrom(frag)
        new.id = next_id
        next_id += 1
        if not stable:
            continue
        n = new.physical_rows
        ids = rowids.decode_row_ids(new.inline_row_ids) if new.HasField("inline_row_ids") else np.zeros(0, np.uint64)
        fresh = n - len(ids)
        if fresh > 0 or not new.HasField("inline_row_ids"):
            tail = np.arange(out.next_row_id, out.next_row_id + fresh, dtype=np.uint64)
            new.inline_row_ids = rowids.encode_row_ids(np.concatenate([ids.astype(np.uint64), tail]))
            out.next_row_id += fresh
        if new.WhichOneof("created_at_version_sequence") is None:
            born = np.concatenate([_created_at(previous, sources, ids.astype(np.uint64), version),
                                   np.full(max(fresh, 0), version, dtype=np.uint64)])
            new.inline_created_at_versions = rowids.encode_version_sequence(born)
        if new.WhichOneof("last_updated_at_version_sequence") is None:
            new.inline_last_updated_at_versions = rowids.uniform_version_sequence(n, version)
    return next_id


def _apply_update_map(target: MutableMapping[str, str], update: transaction_pb2.Transaction.UpdateMap) -> None:
    if update.replace:
        target.clear()
    for entry in update.update_entries:
        if entry.HasField("value"):
            target[entry.key] = entry.value
        else:
            target.pop(entry.key, None)


def build_manifest(
    previous: table_pb2.Manifest | None,
    transaction: transaction_pb2.Transaction,
    *,
    version: int,
    transaction_file: str,
    data_storage_version: str = versions.DEFAULT,
    enable_stable_row_ids: bool = False,
    restored: table_pb2.Manifest | None = None,
    previous_facts: FragmentFacts | None = None,
) -> table_pb2.Manifest:
    """The manifest for ``version`` after applying ``transaction`` on top of ``previous``.

    ``previous`` is None for a new dataset. ``restored`` is the manifest a Restore brings back.
    ``enable_stable_row_ids`` only matters when the dataset is created (it cannot be turned on later).
    ``previous_facts``: :func:`~lance_ops.table.manifest.facts.fragment_facts` of ``previous``'s
    fragments, when the caller has them (an Append then walks no fragment list again).
    """
    op = transaction.WhichOneof("operation")
    facts = previous_facts if previous is not None and op == "append" else None
    if previous is not None and op not in ("overwrite", "restore") and not (facts is not None and versions.one_known_version(facts.version_pairs)):
        versions.refuse_mixed(previous)
    out = table_pb2.Manifest()
    if op == "restore":
        if restored is None:
            raise ValueError("a Restore needs the manifest of the version it restores")
        out.CopyFrom(restored)
        if previous is not None:
            out.max_fragment_id = max(_next_fragment_id(previous), _next_fragment_id(restored)) - 1
            out.next_row_id = max(previous.next_row_id, restored.next_row_id)
    elif previous is not None:
        out.CopyFrom(previous)
    stable = bool(
        (previous is not None and previous.reader_feature_flags & feature_flags.FLAG_STABLE_ROW_IDS)
        or (previous is None and enable_stable_row_ids)
    )
    next_id = _next_fragment_id(out if previous is not None else None, facts.ids if facts is not None else None)
    first_new = next_id

    if op == "append":
        next_id = _add_new_fragments(out, transaction.append.fragments, next_id, stable, version)
    elif op == "overwrite":
        ow = transaction.overwrite
        del out.fragments[:]
        del out.fields[:]
        out.fields.extend(ow.schema)
        out.schema_metadata.clear()
        out.schema_metadata.update(ow.schema_metadata)
        for k, v in ow.config_upsert_values.items():
            out.config[k] = v
        # The new fragments are written in the requested storage version, which may differ
        # from the overwritten dataset's (an explicit data_storage_version on overwrite).
        out.data_format.file_format = "lance"
        out.data_format.version = data_storage_version
        # Fragment ids continue from the high-water mark (pylance 14 does not restart at 0 on
        # an Overwrite of an existing dataset; a new dataset starts at 0).
        next_id = _add_new_fragments(out, ow.fragments, next_id, stable, version)
    elif op == "delete":
        d = transaction.delete
        updated = {f.id: f for f in d.updated_fragments}
        gone = set(d.deleted_fragment_ids)
        kept = [updated.get(f.id, f) for f in out.fragments if f.id not in gone]
        del out.fragments[:]
        out.fragments.extend(kept)
    elif op == "rewrite":
        next_id = _replace_groups(out, rewrite_groups(transaction), next_id, stable, version)
    elif op == "update":
        next_id = _apply_update(out, transaction.update, next_id, stable, version)
    elif op == "reserve_fragments":
        next_id += transaction.reserve_fragments.num_fragments
    elif op == "create_index":
        pass  # only the index section changes (lance_ops.table.manifest.index_rewrite.apply_create_index)
    elif op == "merge":
        m = transaction.merge
        del out.fragments[:]
        out.fragments.extend(m.fragments)
        del out.fields[:]
        out.fields.extend(m.schema)
        out.schema_metadata.clear()
        out.schema_metadata.update(m.schema_metadata)
    elif op == "project":
        del out.fields[:]
        out.fields.extend(transaction.project.schema)
    elif op == "update_config":
        uc = transaction.update_config
        for k, v in uc.upsert_values.items():
            out.config[k] = v
        for k in uc.delete_keys:
            out.config.pop(k, None)
        if uc.HasField("config_updates"):
            _apply_update_map(out.config, uc.config_updates)
        if uc.HasField("table_metadata_updates"):
            _apply_update_map(out.table_metadata, uc.table_metadata_updates)
        if uc.HasField("schema_metadata_updates"):
            updates = transaction_pb2.Transaction.UpdateMap()
            updates.CopyFrom(uc.schema_metadata_updates)
            current = {k: v.decode(errors="replace") for k, v in out.schema_metadata.items()}
            _apply_update_map(current, updates)
            out.schema_metadata.clear()
            out.schema_metadata.update({k: v.encode() for k, v in current.items()})
    elif op == "restore":
        pass
    else:
        raise UnsupportedError(f"lance-ops cannot commit a {op!r} transaction")

    out.version = version
    out.timestamp.FromNanoseconds(time.time_ns())
    out.transaction_file = transaction_file
    out.tag = ""
    out.writer_version.Clear()
    out.writer_version.library = WRITER_LIBRARY
    out.writer_version.version = __version__
    if not out.HasField("data_format") or not out.data_format.version:
        out.data_format.file_format = "lance"
        out.data_format.version = data_storage_version
    versions.repair_legacy_version(out)
    # pylance keeps fragments ordered by id in every manifest it builds (its row-id lookups rely on
    # it: with a rewrite placed "in place" it misses rows of fragments listed out of order), and so
    # do we; this also repairs manifests older lance-ops compactions left out of order.
    if facts is not None:  # the previous ids, then the new ones (ascending, above all previous ids)
        ids = np.concatenate([facts.ids, np.arange(first_new, next_id, dtype=np.uint64)])
    else:
        ids = _fragment_ids(out)
    if ids.size > 1 and bool((ids[1:] < ids[:-1]).any()):
        ordered = sorted(out.fragments, key=lambda f: f.id)
        del out.fragments[:]
        out.fragments.extend(ordered)
    if out.fragments or out.HasField("max_fragment_id") or next_id > 0:
        high = max(next_id - 1, int(ids.max()) if ids.size else -1)
        if high >= 0:
            out.max_fragment_id = high
    out.ClearField("index_section")
    out.ClearField("transaction_section")
    out.ClearField("transaction_section_v1")
    out.version_aux_data = 0
    feature_flags.apply_flags(out, stable_row_ids=stable)
    _drop_retired_field_attributes(out)
    return out


#: Field attributes older Lance wrote that pylance 14 no longer knows and so drops on commit
#: (11: ``storage_class``, which Lance 0.20 wrote as "default")
_RETIRED_FIELD_NUMBERS = {11}


def _drop_retired_field_attributes(manifest: table_pb2.Manifest) -> None:
    for f in manifest.fields:
        unknown = {u.field_number for u in unknown_fields.UnknownFieldSet(f)}
        if unknown and unknown <= _RETIRED_FIELD_NUMBERS:
            f.DiscardUnknownFields()


def rewrite_groups(txn: transaction_pb2.Transaction) -> list[transaction_pb2.Transaction.RewriteGroup]:
    """A Rewrite's groups; a Rewrite written before groups existed (old_fragments / new_fragments
    only) counts as one group."""
    groups = list(txn.rewrite.groups)
    if not groups and txn.rewrite.old_fragments:
        legacy = transaction_pb2.Transaction.RewriteGroup()
        legacy.old_fragments.extend(txn.rewrite.old_fragments)
        legacy.new_fragments.extend(txn.rewrite.new_fragments)
        groups = [legacy]
    return groups
