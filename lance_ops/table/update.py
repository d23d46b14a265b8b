"""Plan ``update(values, where)``: rewrite the rows matching ``where`` with new column values.

Each fragment's matching rows are read (all columns), the SQL expressions of ``values`` evaluated
over them (one Acero projection) and cast to the columns' types; the old rows are deleted and the
new ones written to new fragments, committed as pylance commits them: one ``Update`` whose
``fields_for_preserving_frag_bitmap`` lists the updated columns (as pylance 14.0.2 records it).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import transaction_pb2
from lance_ops.errors import InvalidArgumentError
from lance_ops.table import scan
from lance_ops.table.commit.loop import CommitContext
from lance_ops.table.filters import compile_filter
from lance_ops.table.filters.projection import Projection, compile_expression
from lance_ops.table.fragment import LanceFragment
from lance_ops.table.rewrite_rows import RewriteTarget, RowsRewrite, build_transaction, refuse_unwritable

#: fragments scanned at once
_SCANNERS = max(1, min(4, os.cpu_count() or 1))


def plan_update(dataset: RewriteTarget, values: dict[str, str],
                where: str | pc.Expression | None) -> tuple[transaction_pb2.Transaction, CommitContext, dict[str, int]]:
    """``update``: the rows matching ``where`` rewritten with ``values`` (column -> SQL
    expression) as an Update transaction (files written), its context and pylance's result
    (``{"num_rows_updated": n}``)."""
    refuse_unwritable(dataset, "update")
    schema = dataset.storage_schema
    if not isinstance(values, dict) or not values:
        raise InvalidArgumentError("update needs a non-empty dict of column -> SQL expression")
    for name in values:
        if name not in schema.names:
            raise InvalidArgumentError(f"Column '{name}' does not exist in dataset schema (columns: "
                                       f"{schema.names})")
    exprs = {name: compile_expression(sql, schema) for name, sql in values.items()}
    filt = compile_filter(where, schema) if where is not None else None
    stable = dataset.has_stable_row_ids
    frags = dataset.get_fragments()
    change = RowsRewrite()
    count = 0

    def rewrite(frag: LanceFragment) -> tuple[LanceFragment, pa.Table]:
        task = scan.fragment_task(dataset, frag, list(schema.names), filt, with_row_id=stable, with_row_address=True)
        return frag, scan.execute(dataset, task)

    if filt is not None and filt.constant is False:
        found: list[tuple[LanceFragment, pa.Table]] = []
    elif len(frags) > 1:
        with ThreadPoolExecutor(max_workers=min(_SCANNERS, len(frags)), thread_name_prefix="lance-ops-update") as pool:
            found = list(pool.map(rewrite, frags))
    else:
        found = [rewrite(f) for f in frags]
    for frag, rows in found:
        if not rows.num_rows:
            continue
        count += rows.num_rows
        offsets = (rows.column("_rowaddr").to_numpy() & 0xFFFFFFFF).astype(np.uint32)
        change.delete(frag.fragment_id, offsets)
        if stable:
            change.rewritten_ids.append(rows.column("_rowid").to_numpy())
        table = rows.select(schema.names)
        new_cols = _evaluate(table, exprs)
        for name, col in new_cols.items():
            i = table.schema.get_field_index(name)
            table = table.set_column(i, schema.field(name), col.cast(schema.field(name).type))
        change.rewritten.append(table)
    ids = dataset.top_field_ids
    txn, ctx = build_transaction(dataset, frags, change, [ids[n] for n in values])
    return txn, ctx, {"num_rows_updated": count}


def _evaluate(table: pa.Table, exprs: dict[str, Projection]) -> dict[str, pa.ChunkedArray]:
    """Each compiled expression evaluated over ``table`` (one Acero projection)."""
    from pyarrow import acero

    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([p.expression for p in exprs.values()],
                                                              list(exprs))),
    ])
    out = plan.to_table(use_threads=False)
    return {name: out.column(name) for name in exprs}
