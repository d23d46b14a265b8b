"""Plan a delete: find matching rows per fragment and write the new deletion vectors.

Literal ``true`` removes every fragment without scanning; literal ``false`` commits an empty
Delete (a new version, as upstream). Otherwise each fragment's filter columns are scanned, the
matching physical offsets are unioned with the existing deletion vector and written as a new
deletion file (``.arrow`` below 5000 entries, ``.bin`` roaring from there on); a fragment whose
rows are all deleted is dropped instead.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import ObjectNotFoundError, RetryableCommitConflictError
from lance_ops.table import scan
from lance_ops.table import deletion
from lance_ops.table.manifest import naming
from lance_ops.table.commit import locate
from lance_ops.table.commit.loop import CommitContext
from lance_ops.table.filters import Filter, compile_filter
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.snapshot import DatasetSnapshot

#: deletion files written at once
_WRITERS = 8
#: fragments scanned at once
_SCANNERS = max(1, min(4, os.cpu_count() or 1))


class DeleteTarget(DatasetSnapshot, Protocol):
    """What a delete needs of the dataset version it plans against (``LanceDataset`` is one):
    a snapshot and its fragments (a Protocol, as importing ``LanceDataset`` would make a loop)."""

    def get_fragments(self) -> list[LanceFragment]:
        """The fragments of this version, in manifest order."""
        ...


#: fragments whose predicate is evaluated in one pass hold about this many rows (evaluating an
#: expression has a fixed cost of milliseconds: per fragment it dominated deletes of small fragments)
_GROUP_ROWS = 1 << 16


def _live_table(dataset: DatasetSnapshot, frag: LanceFragment, filt: Filter) -> pa.Table:
    """The live rows of ``frag``, the columns ``filt`` reads."""
    cols = [c for c in filt.columns if c in dataset.top_field_ids]
    task = scan.fragment_task(dataset, frag, cols, with_row_id="_rowid" in filt.columns,
                              with_row_address="_rowaddr" in filt.columns)
    return scan.execute(dataset, task)


def _mask(table: pa.Table, filt: Filter) -> np.ndarray:
    """The predicate as a boolean mask over the rows of ``table`` (null counts as false, as in a filter)."""
    from pyarrow import acero

    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([filt.expression], ["m"])),
    ])
    mask = pc.fill_null(plan.to_table(use_threads=False).column(0), False)  # in row order
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _group_matching_offsets(dataset: DatasetSnapshot, frags: Sequence[LanceFragment], filt: Filter) -> list[np.ndarray]:
    """Physical offsets (uint32) of the live rows matching ``filt`` in each of ``frags``: their
    rows are read one fragment at a time and the predicate evaluated once over all of them."""
    tables = [_live_table(dataset, frag, filt) for frag in frags]
    try:
        masks_all = _mask(pa.concat_tables(tables), filt) if len(tables) > 1 else None
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        masks_all = None
    if masks_all is None:
        masks = [_mask(t, filt) for t in tables]
    else:
        masks = np.split(masks_all, np.cumsum([t.num_rows for t in tables])[:-1])
    out = []
    for frag, mask in zip(frags, masks):
        hit = np.flatnonzero(mask)
        live = frag.live_mask()
        if live is not None:
            hit = np.flatnonzero(live)[hit]
        out.append(hit.astype(np.uint32))
    return out


def _all_matching_offsets(dataset: DatasetSnapshot, frags: Sequence[LanceFragment],
                          filt: Filter) -> list[np.ndarray]:
    """The matching physical offsets of every fragment, in order; groups of fragments (about
    ``_GROUP_ROWS`` rows) are scanned side by side (reading and filter evaluation run without the
    GIL)."""
    groups: list[list[LanceFragment]] = [[]]
    rows = 0
    for frag in frags:
        if groups[-1] and rows >= _GROUP_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(frag)
        rows += frag.count_rows()
    if len(groups) <= 1:
        return _group_matching_offsets(dataset, groups[0], filt) if groups[0] else []
    with ThreadPoolExecutor(max_workers=min(_SCANNERS, len(groups)), thread_name_prefix="lance-ops-delete-scan") as pool:
        results = list(pool.map(lambda group: _group_matching_offsets(dataset, group, filt), groups))
    return [offsets for group in results for offsets in group]


def _scan_or_retry(dataset: DatasetSnapshot, frags: Sequence[LanceFragment], filt: Filter) -> list[np.ndarray]:
    """:func:`_all_matching_offsets`; a file missing because cleanup removed the version being
    scanned is a RetryableCommitConflictError (``delete`` re-plans on the newest version)."""
    try:
        return _all_matching_offsets(dataset, frags, filt)
    except ObjectNotFoundError as exc:
        if locate.find_version(dataset.store, dataset.base, dataset.version) is not None:
            raise  # the version is still there: a file is really missing
        raise RetryableCommitConflictError(
            f"{dataset.uri}: version {dataset.version} was removed (cleanup) while the delete scanned it; "
            "re-read the dataset and retry") from exc


def plan_delete(dataset: DeleteTarget,
                predicate: str | pc.Expression) -> tuple[transaction_pb2.Transaction, CommitContext, int]:
    """Transaction, commit context (affected rows, for rebases) and number of rows deleted."""
    filt = compile_filter(predicate, dataset.schema)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=dataset.version)
    # the predicate is recorded as the caller wrote it (as pylance does); expressions as SQL
    txn.delete.predicate = predicate if isinstance(predicate, str) or filt is None else filt.sql
    ctx = CommitContext(dataset.manifest_file)
    count = 0
    if filt is None or filt.constant is False:
        txn.delete.SetInParent()
        return txn, ctx, 0
    # (fragment, merged offsets, its current deletion file)
    to_write: list[tuple[LanceFragment, np.ndarray, table_pb2.DeletionFile | None]] = []
    frags = dataset.get_fragments()
    if filt.constant is True:
        for frag in frags:
            txn.delete.deleted_fragment_ids.append(frag.fragment_id)
            count += frag.count_rows()
    matches = [] if filt.constant is True else _scan_or_retry(dataset, frags, filt)
    for frag, new in zip(frags, matches):
        if new.size == 0:
            continue
        count += int(new.size)
        ctx.deleted_offsets[frag.fragment_id] = new
        old_file = frag.proto.deletion_file if frag.proto.HasField("deletion_file") else None
        merged = deletion.merge_deletions(frag.deleted_offsets, new)
        if merged.size >= frag.physical_rows:
            txn.delete.deleted_fragment_ids.append(frag.fragment_id)
            continue
        to_write.append((frag, merged, old_file))

    def write(item: tuple[LanceFragment, np.ndarray, table_pb2.DeletionFile | None]) -> table_pb2.DeletionFile:
        frag, merged, old_file = item
        proto = deletion.write_deletion_file(dataset.store, dataset.base, frag.fragment_id, dataset.version,
                                             merged, old_file)
        assert proto is not None  # (merged holds the new offsets: never empty)
        return proto

    # the new deletion files are written (and made durable) side by side: their fsyncs overlap
    if len(to_write) > 1:
        with ThreadPoolExecutor(max_workers=min(_WRITERS, len(to_write)),
                                thread_name_prefix="lance-ops-delete") as pool:
            written = list(pool.map(write, to_write))
    else:
        written = [write(item) for item in to_write]
    for (frag, _, _), proto in zip(to_write, written):
        updated = table_pb2.DataFragment()
        updated.CopyFrom(frag.proto)
        updated.deletion_file.CopyFrom(proto)
        txn.delete.updated_fragments.append(updated)
    txn.delete.SetInParent()
    return txn, ctx, count
