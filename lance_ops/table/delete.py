"""Plan a delete: find matching rows per fragment and write the new deletion vectors.

Literal ``true`` removes every fragment without scanning; literal ``false`` commits an empty
Delete (a new version, as upstream). Otherwise each fragment's filter columns are scanned, the
matching physical offsets are unioned with the existing deletion vector and written as a new
deletion file (``.arrow`` below 5000 entries, ``.bin`` roaring from there on); a fragment whose
rows are all deleted is dropped instead.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.table import deletion, naming
from lance_ops.table.commit import CommitContext
from lance_ops.table.filters import compile_filter

_OFFSET = "__lance_ops_offset"


def _matching_offsets(dataset, frag, filt) -> np.ndarray:
    cols = [c for c in filt.columns if c in dataset._top_field_ids]
    table = dataset._scan_fragment(frag, cols, None, "_rowid" in filt.columns, "_rowaddr" in filt.columns)
    live = frag.live_offsets()
    table = table.append_column(_OFFSET, pa.array(live, pa.uint64()))
    hit = table.filter(filt.expression).column(_OFFSET)
    return hit.to_numpy().astype(np.uint32)


def plan_delete(dataset, predicate) -> tuple[transaction_pb2.Transaction, CommitContext, int]:
    """Transaction, commit context (affected rows, for rebases) and number of rows deleted."""
    filt = compile_filter(predicate, dataset.schema)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=dataset.version)
    # the predicate is recorded as the caller wrote it (as pylance does); expressions as SQL
    txn.delete.predicate = predicate if isinstance(predicate, str) or filt is None else filt.sql
    ctx = CommitContext(dataset._manifest_file)
    count = 0
    if filt is None or filt.constant is False:
        txn.delete.SetInParent()
        return txn, ctx, 0
    for frag in dataset.get_fragments():
        if filt.constant is True:
            txn.delete.deleted_fragment_ids.append(frag.fragment_id)
            count += frag.count_rows()
            continue
        new = _matching_offsets(dataset, frag, filt)
        if new.size == 0:
            continue
        count += int(new.size)
        ctx.deleted_offsets[frag.fragment_id] = new
        old_file = frag.metadata.deletion_file if frag.metadata.HasField("deletion_file") else None
        merged = deletion.merge_deletions(frag.deleted_offsets, new)
        if merged.size >= frag.physical_rows:
            txn.delete.deleted_fragment_ids.append(frag.fragment_id)
            continue
        updated = table_pb2.DataFragment()
        updated.CopyFrom(frag.metadata)
        updated.deletion_file.CopyFrom(
            deletion.write_deletion_file(dataset._store, dataset._base, frag.fragment_id, dataset.version, merged, old_file)
        )
        txn.delete.updated_fragments.append(updated)
    txn.delete.SetInParent()
    return txn, ctx, count
