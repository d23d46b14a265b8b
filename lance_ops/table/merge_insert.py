"""Plan a merge-insert (upsert): match source rows with target rows on key columns.

Only the key columns (and the columns a condition or a delete expression reads) of the target are
scanned, one fragment at a time, and matched with the source's keys (:mod:`lance_ops.table.merge_keys`:
a binary search or a hash lookup, a pyarrow hash join for several keys). Matched
target rows that are updated, and target rows deleted because no source row matches them, are
marked in deletion vectors; the source rows replacing them and the source rows inserted go to new
fragments (:mod:`lance_ops.table.rewrite_rows`), committed as pylance commits them: one ``Update``.

pylance's rules, checked against pylance 14.0.2: several source rows matching one target row is
an error when matched rows are updated ("Ambiguous merge inserts are prohibited"), nothing is
written; source rows matching no target row are all inserted, duplicates included; a source row
whose match fails the update condition is neither updated nor inserted; null keys match nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from lance_ops._proto import transaction_pb2
from lance_ops.errors import AmbiguousMergeError, InvalidArgumentError, MergeMatchError, UnsupportedError
from lance_ops.table import scan
from lance_ops.table.commit.loop import CommitContext
from lance_ops.table.commit.properties import CommitProperties
from lance_ops.table.filters import Filter, compile_filter
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.merge_keys import SourceKeys, prepare_keys
from lance_ops.table.stats import prune as stats_prune
from lance_ops.table.rewrite_rows import RewriteTarget, RowsRewrite, build_transaction, refuse_unwritable, run
from lance_ops.table.write import check_append_schema

_OFF = "__lance_ops_target_pos"


@dataclass
class MergeSpec:
    """The clauses of a merge-insert, as pylance's ``MergeInsertBuilder`` collects them."""

    on: list[str]
    update: bool = False
    #: what matched target rows become when they are not updated: "keep", "delete" or "fail"
    matched: str = "keep"
    #: SQL over ``target.<col>`` and ``source.<col>``; None: every matched row is updated
    condition: str | None = None
    insert: bool = False
    delete_by_source: bool = False
    #: SQL over the target's columns; None: every target row without a match is deleted
    delete_expr: str | None = None


@dataclass
class _FragmentMatch:
    """One fragment's outcome: target offsets updated (with their source rows and row ids),
    offsets deleted for lack of a match, and every source row that matched a row here."""

    fragment_id: int
    updated: np.ndarray
    updated_source: np.ndarray
    updated_ids: np.ndarray | None
    deleted: np.ndarray
    matched_source: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _literal(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def key_values(keys: pa.Table, position: int) -> str:
    """``k = v, ...`` of one row's key columns, as pylance's messages name a row."""
    row = keys.slice(position, 1).to_pylist()[0]
    return ", ".join(f"{k} = {_literal(row[k])}" for k in keys.column_names)


def ambiguous_error(keys: pa.Table, position: int) -> AmbiguousMergeError:
    """pylance's error for several source rows matching the target row whose key columns are
    row ``position`` of ``keys`` (also raised by the Spark merge job)."""
    where = key_values(keys, position)
    return AmbiguousMergeError(
        f"Ambiguous merge inserts are prohibited: multiple source rows match the same target row on ({where}). "
        "Please ensure each target row is matched by at most one source row.")


def _target_columns(condition: str, names: Sequence[str]) -> list[str]:
    """Target columns a condition reads (``target.<name>``, optionally back-quoted)."""
    return [n for n in names if re.search(r"target\s*\.\s*`?" + re.escape(n) + r"(?![\w])", condition, re.I)]


@dataclass
class _Plan:
    spec: MergeSpec
    source: pa.Table
    keys: SourceKeys
    condition: Filter | None
    condition_columns: list[str]
    delete_filter: Filter | None
    stable: bool


def _ranges_with_keys(dataset: RewriteTarget, frag: LanceFragment, plan: _Plan) -> np.ndarray | None:
    """Physical row ranges of ``frag`` whose key statistics (min/max per page, lance_ops statistics
    files) admit a source key: ``(n, 2)`` ``[start, end)`` ranges, empty to skip the fragment, None
    to read it whole (no statistics, nothing ruled out, or every row needed: deletes by source).
    For one integer key: the rows of other pages cannot match, so they change nothing."""
    name = plan.spec.on[0]
    if (plan.keys.unsorted is None and plan.keys.sorted_values is None) or plan.spec.delete_by_source:
        return None  # (not one integer-like key)
    t = dataset.storage_schema.field(name).type
    if not pa.types.is_integer(t) or pa.types.is_uint64(t):
        return None
    try:
        pages = stats_prune.fragment_statistics(dataset, frag, [name]).get(name)
    except Exception:  # noqa: BLE001 - statistics never break a merge: read the fragment
        return None
    if pages is None or not len(pages):
        return None
    keys = plan.keys.sorted_keys()
    assert keys is not None
    keep = np.ones(len(pages), dtype=bool)
    for i in range(len(pages)):
        lo, hi, nulls = pages.mins[i], pages.maxs[i], pages.null_count[i]
        if lo is not None and hi is not None:
            keep[i] = np.searchsorted(keys, int(hi), side="right") > np.searchsorted(keys, int(lo), side="left")
        elif nulls is not None and nulls >= int(pages.num_rows[i]):
            keep[i] = False  # (only nulls: they match nothing)
    if keep.all():
        return None
    starts = np.asarray(pages.row_start, dtype=np.int64)[keep]
    return np.stack([starts, starts + np.asarray(pages.num_rows, dtype=np.int64)[keep]], axis=1)


def _read_targets(dataset: RewriteTarget, frags: list[LanceFragment], columns: list[str],
                  plan: _Plan) -> Iterator[tuple[LanceFragment, pa.Table, np.ndarray | None]]:
    """Each fragment's live rows of ``columns`` that may match a source key (see
    :func:`_ranges_with_keys`; the scan reads ahead while the previous fragment is matched), with
    the physical offsets (uint32) of its rows; None: the positions themselves (nothing deleted, all
    read). Offsets come from the deletion vector, not from a ``_rowaddr`` column built for every
    row of the fragment."""
    ranges = [_ranges_with_keys(dataset, f, plan) for f in frags]
    wanted = [(f, r) for f, r in zip(frags, ranges) if r is None or len(r)]
    tasks = [scan.fragment_task(dataset, f, columns, ranges=r) for f, r in wanted]
    for (frag, r), target in zip(wanted, scan.execute_many(dataset, tasks)):
        if r is not None:
            offsets: np.ndarray | None = frag.live_offsets_in(r).astype(np.uint32)
        else:
            mask = frag.live_mask()
            offsets = None if mask is None else np.flatnonzero(mask).astype(np.uint32)
        if (frag.physical_rows if offsets is None else offsets.size) != target.num_rows:
            # (never expected: then the scan gives each row's address)
            task = scan.fragment_task(dataset, frag, columns, with_row_address=True)
            target = scan.execute(dataset, task)
            offsets = (target.column("_rowaddr").to_numpy() & 0xFFFFFFFF).astype(np.uint32)
            target = target.drop_columns(["_rowaddr"])
        yield frag, target, offsets


def _match_fragment(frag: LanceFragment, target: pa.Table, offsets: np.ndarray | None,
                    plan: _Plan) -> _FragmentMatch:
    """What the merge does to the rows of one fragment (``target``: its live rows' key and
    condition columns; ``offsets``: their physical offsets, None when equal to positions)."""
    spec = plan.spec

    def physical(positions: np.ndarray) -> np.ndarray:
        return positions.astype(np.uint32) if offsets is None else offsets[positions]

    pos, src = plan.keys.match(target.select(spec.on))  # (sorted by position, then source row)
    if spec.matched == "fail" and pos.size:
        raise MergeMatchError("Merge insert failed: found matching row with key values: "
                              + key_values(target.select(spec.on), int(pos[0])))
    if (spec.update or spec.matched == "delete") and pos.size > 1:
        dup = np.flatnonzero(pos[1:] == pos[:-1])
        if dup.size:
            raise ambiguous_error(target.select(spec.on), int(pos[dup[0]]))
    upd_pos, upd_src = (pos, src) if spec.update else (pos[:0], src[:0])
    if spec.update and plan.condition is not None and pos.size:
        pairs = pa.table({
            "target": pa.StructArray.from_arrays(
                [target.column(c).combine_chunks().take(pa.array(pos)) for c in plan.condition_columns] or
                [pa.nulls(pos.size)], names=plan.condition_columns or ["__none"]),
            "source": pa.StructArray.from_arrays(
                [plan.source.column(c).combine_chunks().take(pa.array(src)) for c in plan.source.column_names],
                names=plan.source.column_names),
            _OFF: pa.array(np.arange(pos.size, dtype=np.int64)),
        })
        keep = pairs.filter(plan.condition.expression).column(_OFF).to_numpy().astype(np.int64)
        upd_pos, upd_src = pos[keep], src[keep]
    deleted = physical(np.unique(pos)) if spec.matched == "delete" else np.zeros(0, np.uint32)
    if spec.delete_by_source:
        unmatched = np.ones(target.num_rows, dtype=bool)
        unmatched[pos] = False
        if plan.delete_filter is not None and plan.delete_filter.constant is not True:
            if plan.delete_filter.constant is False:
                unmatched[:] = False
            else:
                t = target.append_column(_OFF, pa.array(np.arange(target.num_rows, dtype=np.int64)))
                hit = np.zeros(target.num_rows, dtype=bool)
                hit[t.filter(plan.delete_filter.expression).column(_OFF).to_numpy()] = True
                unmatched &= hit
        deleted = np.concatenate([deleted, physical(np.flatnonzero(unmatched))])
    updated = physical(upd_pos)
    ids = frag.row_ids(updated) if plan.stable else None
    return _FragmentMatch(frag.fragment_id, updated, upd_src, ids, deleted, src)


def _prepare(dataset: RewriteTarget, spec: MergeSpec, source: pa.Table) -> _Plan:
    names = dataset.storage_schema.names
    for key in spec.on:
        if key not in names:
            raise InvalidArgumentError(f"Merge insert key column '{key}' does not exist in schema")
    if not spec.on:
        raise InvalidArgumentError("merge_insert needs at least one key column ('on')")
    if not (spec.update or spec.matched != "keep" or spec.insert or spec.delete_by_source):
        raise InvalidArgumentError("The merge insert job is not configured to change the data in any way")
    missing = [n for n in names if n not in source.column_names]
    if missing and not [n for n in source.column_names if n not in names]:
        raise UnsupportedError(
            f"{dataset.uri}: merge_insert with a source lacking columns {missing} (a partial update) is not "
            "supported by lance_ops yet; give every column. Nothing was written")
    check_append_schema(dataset.storage_schema, source.schema, dataset.uri)
    source = source.select(names)
    condition = cond_cols = None
    if spec.update and spec.condition:
        both = pa.schema([pa.field("target", pa.struct(list(dataset.storage_schema))),
                          pa.field("source", pa.struct(list(source.schema)))])
        condition = compile_filter(spec.condition, both)
        cond_cols = _target_columns(spec.condition, names)
    delete_filter = compile_filter(spec.delete_expr, dataset.storage_schema) if spec.delete_by_source else None
    return _Plan(spec, source, prepare_keys(source, spec.on), condition, cond_cols or [], delete_filter,
                 dataset.has_stable_row_ids)


def _mask(size: int, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(size, dtype=bool)
    out[rows] = True
    return out


def plan_merge(dataset: RewriteTarget, spec: MergeSpec,
               source: pa.Table) -> tuple[transaction_pb2.Transaction, CommitContext, dict[str, int]]:
    """The Update transaction of the merge (its new files written), its commit context, and
    pylance's result counts (``num_inserted_rows``, ``num_updated_rows``, ``num_deleted_rows``)."""
    refuse_unwritable(dataset, "merge_insert")
    plan = _prepare(dataset, spec, source)
    frags = dataset.get_fragments()
    extra = [*plan.condition_columns, *(sorted(plan.delete_filter.columns) if plan.delete_filter else [])]
    cols = list(dict.fromkeys([*spec.on, *(c for c in extra if c in dataset.top_field_ids)]))
    matches = [_match_fragment(frag, target, offsets, plan)
               for frag, target, offsets in _read_targets(dataset, frags, cols, plan)]
    change = RowsRewrite()
    updated = deleted = 0
    for m in matches:
        change.delete(m.fragment_id, np.concatenate([m.updated, m.deleted]))
        updated += int(m.updated.size)
        deleted += int(m.deleted.size)
    rows = plan.source.num_rows
    rewritten = np.zeros(0, np.int64)  # source rows of the rewritten rows, in the order written
    if updated:
        # pylance writes the updated rows in source order; in target order when every column is a
        # key, or when rows missing from the source are deleted and none inserted (its join differs)
        src = np.concatenate([m.updated_source for m in matches])
        ids = np.concatenate([m.updated_ids for m in matches if m.updated_ids is not None]) if plan.stable else None
        target_order = (spec.delete_by_source and not spec.insert) or set(spec.on) >= set(plan.source.column_names)
        chosen = None if target_order else _mask(rows, src)
        if chosen is not None and int(np.count_nonzero(chosen)) == src.size:
            # each source row updates one target row: source order is the mask's order
            rewritten = np.flatnonzero(chosen)
            if ids is not None:
                by_row = np.zeros(rows, dtype=ids.dtype)
                by_row[src] = ids
                change.rewritten_ids.append(by_row[rewritten])
        else:  # target order, or a source row matching several target rows (duplicate target keys)
            order = np.arange(src.size) if target_order else np.argsort(src, kind="stable")
            rewritten = src[order]
            if ids is not None:
                change.rewritten_ids.append(ids[order])
    alone = np.zeros(0, np.int64)  # source rows inserted, in source order
    if spec.insert:
        unmatched = np.ones(rows, dtype=bool)
        for m in matches:
            unmatched[m.matched_source] = False
        alone = np.flatnonzero(unmatched)
    inserted = int(alone.size)
    if rewritten.size or alone.size:  # one take for both (the new rows: rewritten ones first)
        both = plan.source if rewritten.size + alone.size == rows and not rewritten.size else \
            plan.source.take(pa.array(np.concatenate([rewritten, alone])))
        if rewritten.size:
            change.rewritten.append(both.slice(0, rewritten.size))
        if alone.size:
            change.inserted.append(both.slice(rewritten.size))
    preserving = [f.id for f in dataset.manifest.fields if f.parent_id == -1]
    txn, ctx = build_transaction(dataset, frags, change, preserving)
    return txn, ctx, {"num_inserted_rows": inserted, "num_updated_rows": updated, "num_deleted_rows": deleted}


class MergeInsertBuilder:
    """pylance's ``MergeInsertBuilder``: clauses are set by chained calls (each returns the
    builder), ``execute(data)`` plans against the dataset's version, commits one ``Update`` and
    moves the dataset to the new version (re-planning on the newest version when a concurrent
    commit preempts it, ``conflict_retries`` times)."""

    def __init__(self, dataset: RewriteTarget, on: str | Sequence[str] | None = None) -> None:
        self._dataset = dataset
        keys = [on] if isinstance(on, str) else list(on or [])
        self._spec = MergeSpec(keys)
        self._retries = 10

    def when_matched_update_all(self, condition: str | None = None) -> "MergeInsertBuilder":
        """Matched target rows take the source row's values (only where ``condition``, SQL over
        ``target.<col>`` and ``source.<col>``, holds)."""
        self._spec.update, self._spec.condition, self._spec.matched = True, condition, "keep"
        return self

    def when_matched_delete(self) -> "MergeInsertBuilder":
        """Matched target rows are deleted (counted in ``num_deleted_rows``)."""
        self._spec.update, self._spec.condition, self._spec.matched = False, None, "delete"
        return self

    def when_matched_fail(self) -> "MergeInsertBuilder":
        """Any matched target row fails the merge before anything is written (an insert-only
        load that must not meet existing keys)."""
        self._spec.update, self._spec.condition, self._spec.matched = False, None, "fail"
        return self

    def when_not_matched_insert_all(self) -> "MergeInsertBuilder":
        """Source rows matching no target row are inserted."""
        self._spec.insert = True
        return self

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> "MergeInsertBuilder":
        """Target rows matching no source row are deleted (only those matching ``expr``)."""
        self._spec.delete_by_source, self._spec.delete_expr = True, expr
        return self

    def conflict_retries(self, max_retries: int) -> "MergeInsertBuilder":
        """Times the merge is re-planned when a concurrent commit preempts it (pylance's default: 10)."""
        self._retries = int(max_retries)
        return self

    def retry_timeout(self, timeout: Any) -> "MergeInsertBuilder":
        """Accepted for pylance compatibility; retries are bounded by ``conflict_retries``."""
        return self

    def use_index(self, use_index: bool) -> "MergeInsertBuilder":
        """Accepted for pylance compatibility (matches are found by a hash join of the key columns)."""
        return self

    def execute(self, data_obj: Any, *, schema: pa.Schema | None = None, idempotency_key: str | None = None,
                transaction_properties: Mapping[str, str] | None = None) -> dict[str, int]:
        """Run the merge with ``data_obj`` (a table, batches, a reader or a pandas frame, as
        ``write_dataset`` takes) as the source; pylance's result counts. ``idempotency_key`` and
        ``transaction_properties`` (lance_ops additions, as ``write_dataset``'s) go on the commit:
        the commit loop does not land a second version under a key already committed."""
        from lance_ops.table.write import as_storage_types, to_reader

        source = as_storage_types(to_reader(data_obj, schema)).read_all()
        spec = self._spec
        properties = CommitProperties.from_keywords("merge_insert", idempotency_key=idempotency_key,
                                                    transaction_properties=transaction_properties)
        return dict(run(self._dataset, lambda ds: plan_merge(ds, spec, source), "merge_insert",
                        conflict_retries=self._retries, properties=properties))
