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

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator, NamedTuple, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import LanceOpsError, ObjectNotFoundError, RetryableCommitConflictError
from lance_ops.table import scan
from lance_ops.table import deletion
from lance_ops.table.manifest import naming
from lance_ops.table.commit import locate
from lance_ops.table.commit.loop import CommitContext
from lance_ops.table.filters import Filter, compile_filter
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.snapshot import DatasetSnapshot

#: deletion-file jobs run at once (creating a file is mostly system time, outside the GIL)
_WRITERS = 4
#: deletion files written by one job, one after the other
_WRITE_JOB = 32


class DeleteTarget(DatasetSnapshot, Protocol):
    """What a delete needs of the dataset version it plans against (``LanceDataset`` is one):
    a snapshot and its fragments (a Protocol, as importing ``LanceDataset`` would make a loop)."""

    def get_fragments(self) -> list[LanceFragment]:
        """The fragments of this version, in manifest order."""
        ...


#: fragments whose predicate is evaluated in one pass hold about this many rows (evaluating an
#: expression has a fixed cost of milliseconds: per fragment it dominated deletes of small fragments)
_GROUP_ROWS = 1 << 16


def _mask(table: pa.Table, filt: Filter) -> np.ndarray:
    """The predicate as a boolean mask over the rows of ``table`` (null counts as false, as in a filter)."""
    from pyarrow import acero

    if table.num_rows and any(col.num_chunks > 1 for col in table.columns):
        # one batch: Acero's cost is per batch, and a group holds ~300 fragments' chunks (ADR 0050)
        try:
            table = table.combine_chunks()
        except pa.ArrowException:  # (e.g. > 2 GiB of one string column: as it is)
            pass
    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([filt.expression], ["m"])),
    ])
    return _true_rows(plan.to_table(use_threads=False).column(0))  # in row order


def _true_rows(mask: pa.ChunkedArray) -> np.ndarray:
    """A boolean column as a numpy bool array, null as False: from its bitmaps (values AND
    validity), unpacked in one numpy pass per chunk (Arrow's own conversion goes value by value)."""
    if not pa.types.is_boolean(mask.type):
        return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
    parts = []
    for chunk in mask.chunks:
        n, off = len(chunk), chunk.offset
        if n == 0:
            continue
        validity, values = chunk.buffers()[:2]
        nbytes = (off + n + 7) // 8
        bits = np.frombuffer(values, dtype=np.uint8, count=nbytes)
        if chunk.null_count:
            bits = bits & np.frombuffer(validity, dtype=np.uint8, count=nbytes)
        parts.append(np.unpackbits(bits, bitorder="little")[off:off + n].view(bool))
    if not parts:
        return np.zeros(0, dtype=bool)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class Found(NamedTuple):
    """A fragment holding rows the predicate matches: its new deleted offsets and all of them."""

    fragment: LanceFragment
    #: physical offsets (uint32, ascending) of live rows the predicate matches (never empty)
    new: np.ndarray
    #: the fragment's deleted offsets after the delete: the old ones and ``new`` (uint32, ascending)
    merged: np.ndarray


def _group_found(dataset: DatasetSnapshot, tasks: Sequence[scan.FragmentScanTask], tables: Sequence[pa.Table],
                 filt: Filter) -> list[Found]:
    """The fragments of ``tasks`` with matches, from the predicate's columns of their live rows
    (``tables``, what the scan returned for each task). The predicate is evaluated once for the
    group; the physical offsets, the matches and the merged deletion vectors are computed on the
    group's concatenated physical rows (one numpy pass, not one per fragment)."""
    frags = [LanceFragment(dataset, t.fragment) for t in tasks]
    try:
        hit = _mask(pa.concat_tables(tables), filt) if len(tables) > 1 else None
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # (columns of other types in some fragments)
        hit = None
    if hit is None:
        hit = np.concatenate([_mask(t, filt) for t in tables]) if tables else np.zeros(0, bool)
    base = np.zeros(len(frags) + 1, dtype=np.int64)
    np.cumsum([f.physical_rows for f in frags], out=base[1:])
    whole = all(t.ranges is None for t in tasks)
    if whole and not any(f.proto.HasField("deletion_file") for f in frags):
        return _whole_found(dataset, frags, tables, hit, base)
    # the group's physical rows, numbered from 0: which are live, and which the scan returned
    live = np.ones(int(base[-1]), dtype=bool)
    old = [f.deleted_offsets.astype(np.int64) + b for f, b in zip(frags, base[:-1].tolist())
           if f.proto.HasField("deletion_file")]  # (a count of 0 is "unknown": the file is read)
    if old:
        live[np.concatenate(old)] = False
    if whole:  # every live row
        returned = np.flatnonzero(live)
    else:  # the live rows of the ranges statistics left, where there are ranges
        returned = np.concatenate([
            np.flatnonzero(live[base[i]:base[i + 1]]) + base[i] if t.ranges is None
            else frags[i].live_offsets_in(t.ranges).astype(np.int64) + base[i] for i, t in enumerate(tasks)])
    # the scan returns exactly these rows, fragment by fragment: never trust less
    _check_returned(dataset, frags, tables, np.diff(np.searchsorted(returned, base)), hit.size, returned.size)
    matched = returned[hit]  # ascending
    if matched.size == 0:
        return []
    deleted = ~live
    deleted[matched] = True  # (matches are live rows: the old and the new offsets are disjoint)
    gone = np.flatnonzero(deleted)
    return _per_fragment(frags, base, matched, gone)


def _whole_found(dataset: DatasetSnapshot, frags: Sequence[LanceFragment], tables: Sequence[pa.Table],
                 hit: np.ndarray, base: np.ndarray) -> list[Found]:
    """:func:`_group_found` of fragments without deletion files, read whole: the scan returned
    every physical row, so the matches are the predicate's own positions (no live-row arrays)."""
    _check_returned(dataset, frags, tables, np.diff(base), hit.size, int(base[-1]))
    matched = np.flatnonzero(hit)
    return _per_fragment(frags, base, matched, matched) if matched.size else []


def _check_returned(dataset: DatasetSnapshot, frags: Sequence[LanceFragment], tables: Sequence[pa.Table],
                    per_task: np.ndarray, values: int, rows: int) -> None:
    """The scan returns exactly the rows planned, fragment by fragment (``per_task``), and the
    predicate gave one value per row: never trust less (LanceOpsError naming the fragments)."""
    got = np.array([t.num_rows for t in tables], dtype=np.int64)
    if not np.array_equal(per_task, got) or values != rows:
        bad = [frags[i].fragment_id for i in np.flatnonzero(per_task != got)[:5].tolist()]
        raise LanceOpsError(f"{dataset.uri}: the delete's scan returned other rows than the live rows planned "
                            f"(fragments {bad}; {values} predicate values for {rows} rows)")


def _per_fragment(frags: Sequence[LanceFragment], base: np.ndarray, matched: np.ndarray,
                  gone: np.ndarray) -> list[Found]:
    """The group's new (``matched``) and all (``gone``) deleted rows, numbered across the group
    from 0, cut at the fragments' bounds ``base``: one Found per fragment with matches."""
    hits_at = np.searchsorted(matched, base)
    gone_at = np.searchsorted(gone, base)
    out = []
    for i in np.flatnonzero(hits_at[1:] > hits_at[:-1]).tolist():
        new = (matched[hits_at[i]:hits_at[i + 1]] - base[i]).astype(np.uint32)
        merged = new if gone is matched else (gone[gone_at[i]:gone_at[i + 1]] - base[i]).astype(np.uint32)
        out.append(Found(frags[i], new, merged))
    return out


def _via_scan(dataset: DatasetSnapshot, filt: Filter) -> Iterator[Found]:
    """:func:`_found` of a predicate naming ``_rowid`` or ``_rowaddr`` (or no data column): the
    scan's filtered read of ``_rowaddr`` (it computes those columns)."""
    tasks = scan.plan(dataset, [], filt, with_row_address=True)
    for task, table in zip(tasks, scan.execute_many(dataset, tasks)):
        if table.num_rows == 0:
            continue
        addrs = table.column(scan.ROW_ADDR).to_numpy()
        frag = LanceFragment(dataset, task.fragment)
        new = (addrs & 0xFFFFFFFF).astype(np.uint32)
        yield Found(frag, new, deletion.merge_deletions(frag.deleted_offsets, new))


def _found(dataset: DatasetSnapshot, filt: Filter) -> Iterator[Found]:
    """Every fragment holding live rows that match ``filt``, in manifest order (ADR 0023, 0042).

    The scan planner's statistics pruning decides which fragments and pages are read (those they
    exclude are not read); the scan (``scan.execute_many``: small files read together, ADR 0033,
    on its pool) reads only the columns the predicate names, of the live rows; the predicate is
    evaluated once per group of about ``_GROUP_ROWS`` rows.
    """
    ids = dataset.top_field_ids
    cols = [c for c in dataset.storage_schema.names if c in filt.columns and c in ids]
    if {scan.ROW_ID, scan.ROW_ADDR} & set(filt.columns) or not cols:
        yield from _via_scan(dataset, filt)
        return
    # the plan with the filter prunes by statistics; the tasks then read the predicate's columns
    # (blobs as bytes) without it: the predicate is evaluated here, over groups of fragments
    tasks = [replace(t, filter=None, blob_handling="all_binary") for t in scan.plan(dataset, cols, filt)]
    group: list[scan.FragmentScanTask] = []
    tables: list[pa.Table] = []
    rows = 0
    for task, table in zip(tasks, scan.execute_many(dataset, tasks)):
        group.append(task)
        tables.append(table)
        rows += task.planned_rows
        if rows >= _GROUP_ROWS:
            yield from _group_found(dataset, group, tables, filt)
            group, tables, rows = [], [], 0
    if group:
        yield from _group_found(dataset, group, tables, filt)


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

    directory = deletion.deletion_directory(dataset.store, dataset.base)

    def write(found: Sequence[Found]) -> list[table_pb2.DataFragment]:
        """The fragments' records with new deletion files holding their merged offsets (written one
        after the other; durable by the commit's barrier, ADR 0036)."""
        items = [(f.fragment_id, merged, f.proto.deletion_file if f.proto.HasField("deletion_file") else None)
                 for f, _, merged in found]  # (merged holds the new offsets: never empty)
        with dataset.store.deferred_sync():  # (a job that fails leaves none of its files behind)
            protos = deletion.write_deletion_files(dataset.store, directory, dataset.version, items)
        out: list[table_pb2.DataFragment] = []
        try:
            for (frag, _, _), proto in zip(found, protos):
                updated = table_pb2.DataFragment()
                updated.CopyFrom(frag.proto)
                updated.deletion_file.CopyFrom(proto)
                out.append(updated)
        except BaseException:
            _discard(dataset, [(f.fragment_id, p) for (f, _, _), p in zip(found, protos)])
            raise
        return out

    # deletion files are written while the scan goes on, a few dozen per job on a small pool; the
    # commit's barrier makes them durable
    written: list[Future[list[table_pb2.DataFragment]]] = []
    with ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="lance-ops-delete") as pool:
        try:
            pending: list[Found] = []
            with _scan_or_retry(dataset):
                for found in _found(dataset, filt):
                    frag, new, merged = found
                    count += int(new.size)
                    ctx.deleted_offsets[frag.fragment_id] = new
                    if merged.size >= frag.physical_rows:
                        txn.delete.deleted_fragment_ids.append(frag.fragment_id)
                        continue
                    pending.append(found)
                    if len(pending) >= _WRITE_JOB:
                        written.append(pool.submit(write, pending))
                        pending = []
            tail: list[table_pb2.DataFragment] = []
            if pending and written:
                written.append(pool.submit(write, pending))
            elif pending:  # the only job: written here (a pool thread would only add its start)
                tail = write(pending)
            updated = [proto for f in written for proto in f.result()] + tail
        except BaseException:
            _discard(dataset, written)
            raise
    txn.delete.updated_fragments.extend(updated)
    txn.delete.SetInParent()
    return txn, ctx, count


def _discard(dataset: DatasetSnapshot,
             written: Sequence[Future[list[table_pb2.DataFragment]]] | Sequence[tuple[int, table_pb2.DeletionFile]]) -> None:
    """Remove the deletion files a failed delete wrote (best effort: no manifest names them):
    those given as (fragment id, deletion file), or those of the records the jobs given returned."""
    files: list[tuple[int, table_pb2.DeletionFile]] = []
    for item in written:
        if isinstance(item, tuple):
            files.append(item)
            continue
        try:
            files.extend((int(f.id), f.deletion_file) for f in item.result())
        except Exception:  # noqa: BLE001 - the original error is the one to report (a failed job cleaned up)
            continue
    for fragment_id, deletion_file in files:
        try:
            dataset.store.delete(deletion.deletion_file_path(dataset.store, dataset.base, fragment_id,
                                                             deletion_file))
        except Exception:  # noqa: BLE001 - the original error is the one to report
            continue
