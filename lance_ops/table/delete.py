"""Plan a delete: find matching rows per fragment and write the new deletion vectors.

Literal ``true`` removes every fragment without scanning; literal ``false`` commits an empty
Delete (a new version, as upstream). Otherwise a filtered scan of ``_rowaddr`` finds the matching
rows (only the predicate's columns are read; fragments and pages the statistics exclude are
skipped), the matching physical offsets of each fragment are unioned with its existing deletion
vector and written as a new deletion file (``.arrow`` below 5000 entries, ``.bin`` roaring from
there on) on a small thread pool while the scan goes on; a fragment whose rows are all deleted is
dropped instead. One transaction is committed by the caller (ADR 0023).
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator, Protocol, Sequence

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


class DeleteTarget(DatasetSnapshot, Protocol):
    """What a delete needs of the dataset version it plans against (``LanceDataset`` is one):
    a snapshot and its fragments (a Protocol, as importing ``LanceDataset`` would make a loop)."""

    def get_fragments(self) -> list[LanceFragment]:
        """The fragments of this version, in manifest order."""
        ...


#: fragments whose predicate is evaluated in one pass hold about this many rows (evaluating an
#: expression has a fixed cost of milliseconds: per fragment it dominated deletes of small fragments)
_GROUP_ROWS = 1 << 16
#: groups of fragments scanned at once (file reads, decoding and the predicate release the GIL)
_SCANNERS = max(1, min(4, os.cpu_count() or 1))


def _mask(table: pa.Table, filt: Filter) -> np.ndarray:
    """The predicate as a boolean mask over the rows of ``table`` (null counts as false, as in a filter)."""
    from pyarrow import acero

    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([filt.expression], ["m"])),
    ])
    mask = pc.fill_null(plan.to_table(use_threads=False).column(0), False)  # in row order
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _group_offsets(dataset: DatasetSnapshot, tasks: Sequence[scan.FragmentScanTask],
                   filt: Filter) -> list[tuple[LanceFragment, np.ndarray]]:
    """(fragment, physical offsets (uint32, ascending) of its live rows matching ``filt``) for each
    of ``tasks``: the predicate's columns are read (all physical rows, or the rows of the ranges
    statistics left) one fragment at a time and the predicate evaluated once over all of them."""
    ids = dataset.top_field_ids
    cols = [c for c in filt.columns if c in ids]
    fields, field_ids = [dataset.storage_schema.field(c) for c in cols], [ids[c] for c in cols]
    read: list[tuple[LanceFragment, np.ndarray | None, pa.Table]] = []
    for task in tasks:
        frag = LanceFragment(dataset, task.fragment)
        rows = None if task.ranges is None else frag.live_offsets_in(task.ranges)
        read.append((frag, rows, frag.read(fields, field_ids, rows)))
    tables = [t for _, _, t in read]
    try:
        every = _mask(pa.concat_tables(tables), filt) if len(tables) > 1 else None
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        every = None
    masks = ([_mask(t, filt) for t in tables] if every is None
             else np.split(every, np.cumsum([t.num_rows for t in tables])[:-1]))
    out = []
    for (frag, rows, _), mask in zip(read, masks):
        if rows is not None:  # (live rows of the ranges only)
            hit = rows[mask]
        else:  # every physical row was read: matches among the deleted ones do not count
            live = frag.live_mask()
            hit = np.flatnonzero(mask if live is None else mask & live)
        out.append((frag, hit.astype(np.uint32)))
    return out


def _via_scan(dataset: DatasetSnapshot, tasks: Sequence[scan.FragmentScanTask]) -> Iterator[tuple[LanceFragment, np.ndarray]]:
    """:func:`_matching_offsets` of a predicate naming ``_rowid`` or ``_rowaddr``: the scan's
    filtered read of ``_rowaddr`` (it computes those columns)."""
    for task, table in zip(tasks, scan.execute_many(dataset, tasks)):
        addrs = table.column(scan.ROW_ADDR).to_numpy()
        yield LanceFragment(dataset, task.fragment), (addrs & 0xFFFFFFFF).astype(np.uint32)


def _matching_offsets(dataset: DatasetSnapshot, filt: Filter) -> Iterator[tuple[LanceFragment, np.ndarray]]:
    """(fragment, physical offsets (uint32, ascending) of its live rows matching ``filt``) for
    every fragment that may hold a match, in manifest order (ADR 0023).

    The scan planner's statistics pruning decides which fragments and pages are read (those they
    exclude are not yielded); only the columns the predicate names are read, groups of about
    ``_GROUP_ROWS`` rows side by side on a small pool, the predicate evaluated once per group.
    """
    tasks = scan.plan(dataset, [], filt, with_row_address=True)
    if {scan.ROW_ID, scan.ROW_ADDR} & set(filt.columns):
        yield from _via_scan(dataset, tasks)
        return
    groups: list[list[scan.FragmentScanTask]] = [[]]
    rows = 0
    for task in tasks:
        if groups[-1] and rows >= _GROUP_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(task)
        rows += task.planned_rows
    if len(groups) <= 1:
        yield from _group_offsets(dataset, groups[0], filt)
        return
    with ThreadPoolExecutor(max_workers=min(_SCANNERS, len(groups)), thread_name_prefix="lance-ops-delete-scan") as pool:
        for found in pool.map(lambda group: _group_offsets(dataset, group, filt), groups):
            yield from found


@contextmanager
def _scan_or_retry(dataset: DatasetSnapshot) -> Iterator[None]:
    """Around the scan of a delete: a file missing because cleanup removed the version being
    scanned is a RetryableCommitConflictError (``delete`` re-plans on the newest version)."""
    try:
        yield
    except ObjectNotFoundError as exc:
        if locate.find_version(dataset.store, dataset.base, dataset.version) is not None:
            raise  # the version is still there: a file is really missing
        raise RetryableCommitConflictError(
            f"{dataset.uri}: version {dataset.version} was removed (cleanup) while the delete scanned it; "
            "re-read the dataset and retry") from exc


def plan_delete(dataset: DeleteTarget,
                predicate: str | pc.Expression) -> tuple[transaction_pb2.Transaction, CommitContext, int]:
    """Transaction, commit context (affected rows, for rebases) and number of rows deleted."""
    filt = compile_filter(predicate, dataset.storage_schema)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=dataset.version)
    # the predicate is recorded as the caller wrote it (as pylance does); expressions as SQL
    txn.delete.predicate = predicate if isinstance(predicate, str) or filt is None else filt.sql
    ctx = CommitContext(dataset.manifest_file)
    count = 0
    if filt is None or filt.constant is False:
        txn.delete.SetInParent()
        return txn, ctx, 0
    frags = dataset.get_fragments() if filt.constant is True else []
    for frag in frags:
        txn.delete.deleted_fragment_ids.append(frag.fragment_id)
        count += frag.count_rows()
    if filt.constant is True:
        txn.delete.SetInParent()
        return txn, ctx, count

    def write(frag: LanceFragment, merged: np.ndarray) -> table_pb2.DataFragment:
        """The fragment's record with a new deletion file holding ``merged`` (written; durable by the
        commit's barrier, ADR 0036)."""
        old_file = frag.proto.deletion_file if frag.proto.HasField("deletion_file") else None
        with dataset.store.deferred_sync():
            proto = deletion.write_deletion_file(dataset.store, dataset.base, frag.fragment_id, dataset.version,
                                                 merged, old_file)
        assert proto is not None  # (merged holds the new offsets: never empty)
        updated = table_pb2.DataFragment()
        updated.CopyFrom(frag.proto)
        updated.deletion_file.CopyFrom(proto)
        return updated

    # deletion files are written while the scan goes on; the commit's barrier makes them durable
    written: list[Future[table_pb2.DataFragment]] = []
    with ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="lance-ops-delete") as pool:
        try:
            with _scan_or_retry(dataset):
                for frag, new in _matching_offsets(dataset, filt):
                    if new.size == 0:
                        continue
                    count += int(new.size)
                    ctx.deleted_offsets[frag.fragment_id] = new
                    merged = deletion.merge_deletions(frag.deleted_offsets, new)
                    if merged.size >= frag.physical_rows:
                        txn.delete.deleted_fragment_ids.append(frag.fragment_id)
                    else:
                        written.append(pool.submit(write, frag, merged))
            updated = [f.result() for f in written]
        except BaseException:
            _discard(dataset, written)
            raise
    txn.delete.updated_fragments.extend(updated)
    txn.delete.SetInParent()
    return txn, ctx, count


def _discard(dataset: DatasetSnapshot, written: Sequence[Future[table_pb2.DataFragment]]) -> None:
    """Remove the deletion files a failed delete wrote (best effort: no manifest names them)."""
    for fut in written:
        try:
            frag = fut.result()
            dataset.store.delete(deletion.deletion_file_path(dataset.store, dataset.base, int(frag.id),
                                                             frag.deletion_file))
        except Exception:  # noqa: BLE001 - the original error is the one to report
            continue
