"""Random interleavings of two writers through the conflict resolver, checked against a model.

Each writer plans an operation against the same read version; they commit in either order, or
the second plans only after the first committed. The outcome (committed, retryable conflict or
incompatible) and the final rows must match a sequential model of the format's rules.
"""
from __future__ import annotations

import itertools
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import lance_ops
from lance_ops.errors import CommitConflictError, RetryableCommitConflictError
from lance_ops.schema import to_lance_fields
from lance_ops.table.manifest import naming
from lance_ops.table.commit.loop import CommitContext, CommitOptions, commit_transaction
from lance_ops.table.delete import plan_delete
from lance_ops.table.write import to_reader, write_fragments
from lance_ops._proto import transaction_pb2

BASE_IDS = np.arange(60)
_fresh = itertools.count(1000)


def table(ids) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "v": ids * 2})


ops = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 30)),
    st.tuples(st.just("delete"), st.sets(st.integers(0, 59), min_size=1, max_size=25)),
    st.tuples(st.just("overwrite"), st.integers(1, 10)),
)


def plan(ds, op):
    """(transaction, commit context, model function rows->rows) for one writer's operation."""
    kind, arg = op
    store, base = ds._store, ds._base
    if kind == "delete":
        ids = sorted(arg)
        txn, ctx, _ = plan_delete(ds, f"id IN ({', '.join(map(str, ids))})")
        return txn, ctx, lambda rows: rows - set(ids)
    new_ids = [next(_fresh) for _ in range(arg)]
    frags = write_fragments(to_reader(table(new_ids)), store, base, list(ds.manifest.fields), max_rows_per_file=15)
    txn = transaction_pb2.Transaction(uuid=naming.new_transaction_uuid(), read_version=ds.version)
    if kind == "append":
        txn.append.fragments.extend(frags)
        return txn, CommitContext(ds._manifest_file), lambda rows: rows | set(new_ids)
    txn.overwrite.fragments.extend(frags)
    txn.overwrite.schema.extend(ds.manifest.fields)
    return txn, CommitContext(ds._manifest_file), lambda rows: set(new_ids)


def expected_verdict(first, second, concurrent):
    """None = commits; 'retry' = RetryableCommitConflictError; 'incompatible' = CommitConflictError."""
    if not concurrent:
        return None
    a, b = first[0], second[0]
    if a == "overwrite":
        return "retry" if b == "overwrite" else ("incompatible" if b in ("append", "delete") else None)
    if b == "delete" and a == "delete" and set(first[1]) & set(second[1]):
        return "retry"
    return None


def commit(ds, txn, ctx):
    return commit_transaction(ds._store, ds._base, txn, ctx, CommitOptions(max_retries=2))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=ops, second=ops, concurrent=st.booleans())
def test_two_writers_match_sequential_model(first, second, concurrent):
    tmp = tempfile.mkdtemp()
    try:
        uri = f"{tmp}/ds"
        ds0 = lance_ops.write_dataset(table(BASE_IDS), uri, max_rows_per_file=20)
        rows = set(BASE_IDS.tolist())
        txn_a, ctx_a, model_a = plan(ds0, first)
        if concurrent:
            txn_b, ctx_b, model_b = plan(ds0, second)
            commit(ds0, txn_a, ctx_a)
        else:
            commit(ds0, txn_a, ctx_a)
            ds1 = lance_ops.dataset(uri)
            txn_b, ctx_b, model_b = plan(ds1, second)
            ds0 = ds1
        rows = model_a(rows)
        want = expected_verdict(first, second, concurrent)
        if want == "retry":
            with pytest.raises(RetryableCommitConflictError):
                commit(ds0, txn_b, ctx_b)
        elif want == "incompatible":
            with pytest.raises(CommitConflictError) as info:
                commit(ds0, txn_b, ctx_b)
            assert not isinstance(info.value, RetryableCommitConflictError)
        else:
            commit(ds0, txn_b, ctx_b)
            rows = model_b(rows)
        final = lance_ops.dataset(uri)
        got = final.to_table(columns=["id"])["id"].to_pylist()
        assert len(got) == len(set(got)), "duplicated rows"
        assert set(got) == rows
        assert final.version == (3 if want is None else 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_pylance_reads_rebased_deletes(tmp_path):
    """Two deletes of disjoint rows of the same fragments rebase; pylance reads the merged vectors."""
    import lance

    uri = str(tmp_path / "ds")
    ds0 = lance_ops.write_dataset(table(BASE_IDS), uri, max_rows_per_file=30)
    txn_a, ctx_a, _ = plan(ds0, ("delete", {1, 2, 31}))
    txn_b, ctx_b, _ = plan(ds0, ("delete", {3, 4, 32}))
    commit(ds0, txn_a, ctx_a)
    commit(ds0, txn_b, ctx_b)
    expected = sorted(set(BASE_IDS.tolist()) - {1, 2, 3, 4, 31, 32})
    assert lance.dataset(uri).to_table()["id"].to_pylist() == expected
    assert lance_ops.dataset(uri).to_table()["id"].to_pylist() == expected
