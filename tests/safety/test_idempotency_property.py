"""Random sequences of keyed appends (staged and direct), keyed deletes, keyed compaction, cleanup
and re-runs of any earlier step, checked against a model of the rows.

A re-run must be a no-op whatever maintenance happened in between: the rows stay the model's
(no duplicate, no second delete, the dataset readable by lance_ops and pylance) and no version
is added; staged and compaction re-runs report the version of their first commit.
"""
from __future__ import annotations

import itertools
import shutil
import tempfile
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import lance_ops
from lance_ops.io import open_store
from lance_ops.maintenance.cleanup import cleanup_old_versions
from lance_ops.maintenance.compaction import compact_files
from lance_ops.maintenance.staged_commit import commit_staged
from lance_ops.table.commit.staging import StagedResult, write_staged
from lance_ops.table.write import write_fragments

steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 25), st.booleans()),  # rows, staged?
    st.tuples(st.just("delete"), st.integers(2, 5), st.integers(0, 4)),  # id % m = r
    st.tuples(st.just("compact"), st.just(0), st.just(0)),
    st.tuples(st.just("cleanup"), st.just(0), st.just(0)),
    st.tuples(st.just("rerun"), st.integers(0, 50), st.just(0)),
), min_size=1, max_size=14)


def table(ids) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "v": ids * 3})


def live_ids(uri: str) -> list[int]:
    ours = sorted(lance_ops.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())
    assert sorted(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist()) == ours
    return ours


class Run:
    """The dataset, the model and the history of keyed steps (with how to re-run each)."""

    def __init__(self, uri: str):
        self.uri = uri
        self.model = list(range(20))
        lance_ops.write_dataset(table(self.model), uri, max_rows_per_file=7)
        self.fresh = itertools.count(1000)
        self.keys = itertools.count()
        self.history: list[tuple[str, str, tuple, int | None]] = []  # kind, key, args, first version

    def append(self, n: int, staged: bool) -> None:
        key = f"k{next(self.keys)}"
        new = [next(self.fresh) for _ in range(n)]
        if staged:
            ds = lance_ops.dataset(self.uri)
            store, base = open_store(self.uri)
            frags = write_fragments(pa.RecordBatchReader.from_batches(table(new).schema, table(new).to_batches()),
                                    store, base, list(ds.manifest.fields), max_rows_per_file=10)
            write_staged(store, base, StagedResult(key=key, operation="append", read_version=ds.version,
                                                   fragments=frags))
            version = commit_staged(self.uri, key)["version"]
            self.history.append(("staged", key, (), version))
        else:
            version = lance_ops.write_dataset(table(new), self.uri, mode="append", idempotency_key=key).version
            self.history.append(("write", key, (new,), version))
        self.model += new

    def delete(self, m: int, r: int) -> None:
        key = f"k{next(self.keys)}"
        pred = f"id % {m} = {r % m}"
        ds = lance_ops.dataset(self.uri)
        n = ds.delete(pred, idempotency_key=key)["num_deleted_rows"]
        gone = [i for i in self.model if i % m == r % m]
        assert n == len(gone)
        self.model = [i for i in self.model if i % m != r % m]
        self.history.append(("delete", key, (pred, n), ds.version))

    def compact(self) -> None:
        key = f"k{next(self.keys)}"
        out = compact_files(lance_ops.dataset(self.uri), target_rows_per_fragment=1000, idempotency_key=key)
        if out.get("version") is not None:  # committed something: a keyed step to re-run later
            self.history.append(("compact", key, (), out["version"]))

    def cleanup(self) -> None:
        cleanup_old_versions(lance_ops.dataset(self.uri), timedelta(0))

    def rerun(self, index: int) -> None:
        if not self.history:
            return
        kind, key, args, first = self.history[index % len(self.history)]
        latest = lance_ops.dataset(self.uri).version
        if kind == "staged":
            out = commit_staged(self.uri, key)
            assert out["already_committed"] is True and out["version"] == first
        elif kind == "write":
            lance_ops.write_dataset(table(args[0]), self.uri, mode="append", idempotency_key=key)
        elif kind == "delete":
            assert lance_ops.dataset(self.uri).delete(args[0], idempotency_key=key) == {"num_deleted_rows": args[1]}
        else:
            out = compact_files(lance_ops.dataset(self.uri), target_rows_per_fragment=1000, idempotency_key=key)
            assert out["already_committed"] is True and out["version"] == first
        assert lance_ops.dataset(self.uri).version == latest, f"re-run of {kind} {key} committed"


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_reruns_after_any_maintenance_are_noops(seq):
    root = tempfile.mkdtemp(prefix="idem-prop-")
    try:
        run = Run(f"{root}/ds")
        for op, a, b in seq:
            if op == "append":
                run.append(a, b)
            elif op == "delete":
                run.delete(a, b)
            elif op == "compact":
                run.compact()
            elif op == "cleanup":
                run.cleanup()
            else:
                run.rerun(a)
            assert live_ids(run.uri) == sorted(run.model), (op, a, b)
        for i in range(len(run.history)):  # finally: every step once more
            run.rerun(i)
        assert live_ids(run.uri) == sorted(run.model)
    finally:
        shutil.rmtree(root, ignore_errors=True)
