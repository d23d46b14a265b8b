"""8 appenders and 2 deleters race on one dataset (local and S3): nothing lost, nothing duplicated."""
from __future__ import annotations

import multiprocessing as mp

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from tests.commit import workers

BASE_ROWS = 10_000
APPEND_ROWS = 1_000
N_APPENDERS = 8
DELETES = {"del1": "id < 10000 AND id % 10 = 1", "del2": "id < 10000 AND id % 10 = 2"}


def _run(uri, storage_options, appenders, deleters, libraries=None):
    ctx = mp.get_context("spawn")
    n = len(appenders) + len(deleters)
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = []
    for i, name in enumerate(appenders):
        lib = (libraries or {}).get(name, "lance_ops")
        start = BASE_ROWS + i * APPEND_ROWS
        procs.append(ctx.Process(target=workers.append_worker,
                                 args=(uri, storage_options, start, APPEND_ROWS, name, barrier, results, lib)))
    for name, predicate in deleters.items():
        lib = (libraries or {}).get(name, "lance_ops")
        procs.append(ctx.Process(target=workers.delete_worker,
                                 args=(uri, storage_options, predicate, name, barrier, results, lib)))
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        name, kind, version, detail = results.get(timeout=240)
        out[name] = (kind, version, detail)
    for p in procs:
        p.join(timeout=60)
    return out


def _expected(outcome, appenders, deleters):
    base = workers.rows(0, BASE_ROWS, "base")
    parts = [base]
    for i, name in enumerate(appenders):
        if outcome[name][0] == "ok":
            parts.append(workers.rows(BASE_ROWS + i * APPEND_ROWS, APPEND_ROWS, name))
    table = pa.concat_tables(parts)
    ids = table["id"].to_numpy()
    keep = np.ones(len(ids), dtype=bool)
    for name in deleters:
        if outcome[name][0] == "ok":
            digit = int(deleters[name].rsplit("=", 1)[1])
            keep &= ~((ids < BASE_ROWS) & (ids % 10 == digit))
    return table.filter(pa.array(keep))


def _check(uri, storage_options, outcome, appenders, deleters):
    errors = {k: v for k, v in outcome.items() if v[0] == "error"}
    assert not errors, errors
    # Every writer committed or failed with a clear lance_ops commit error.
    assert all(kind in ("ok", "conflict") for kind, _, _ in outcome.values())
    ok_versions = [v for kind, v, _ in outcome.values() if kind == "ok"]
    assert len(ok_versions) == len(set(ok_versions)), "two writers claim the same version"
    expected = _expected(outcome, appenders, deleters).sort_by("id")
    ours = lance_ops.dataset(uri, storage_options=storage_options).to_table().sort_by("id")
    assert ours.equals(expected)
    assert len(np.unique(ours["id"].to_numpy())) == ours.num_rows  # no duplicates
    theirs = lance.dataset(uri, storage_options=storage_options).to_table().sort_by("id")
    assert theirs.equals(expected)
    for name, predicate in deleters.items():
        if outcome[name][0] == "ok":
            assert outcome[name][2] == {"num_deleted_rows": BASE_ROWS // 10}


def _seed(uri, storage_options):
    lance_ops.write_dataset(workers.rows(0, BASE_ROWS, "base"), uri, storage_options=storage_options,
                            max_rows_per_file=2_500)


@pytest.mark.slow
def test_local_8_appenders_2_deleters(tmp_path):
    uri = str(tmp_path / "ds")
    _seed(uri, None)
    appenders = [f"app{i}" for i in range(N_APPENDERS)]
    outcome = _run(uri, None, appenders, DELETES)
    _check(uri, None, outcome, appenders, DELETES)
    assert all(kind == "ok" for kind, _, _ in outcome.values()), outcome
    assert lance_ops.dataset(uri).version == 1 + N_APPENDERS + len(DELETES)


@pytest.mark.slow
def test_s3_8_appenders_2_deleters(s3_bucket, moto_server):
    uri = f"{s3_bucket}/ds"
    opts = moto_server.storage_options
    _seed(uri, opts)
    appenders = [f"app{i}" for i in range(N_APPENDERS)]
    outcome = _run(uri, opts, appenders, DELETES)
    _check(uri, opts, outcome, appenders, DELETES)
    assert all(kind == "ok" for kind, _, _ in outcome.values()), outcome


@pytest.mark.slow
def test_pylance_and_lance_ops_race(tmp_path):
    """Both libraries commit concurrently; both must win races and nothing may be lost."""
    uri = str(tmp_path / "ds")
    _seed(uri, None)
    appenders = [f"app{i}" for i in range(N_APPENDERS)]
    libraries = {name: ("pylance" if i % 2 else "lance_ops") for i, name in enumerate(appenders)}
    libraries["del1"] = "pylance"
    libraries["del2"] = "lance_ops"
    outcome = _run(uri, None, appenders, DELETES, libraries)
    _check(uri, None, outcome, appenders, DELETES)
    committed_by = {libraries[n] for n, (kind, _, _) in outcome.items() if kind == "ok"}
    assert committed_by == {"pylance", "lance_ops"}
