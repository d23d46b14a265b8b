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


def _history(uri, storage_options):
    """Every manifest in ``_versions/``: version, stored time, transaction uuid and operation."""
    from lance_ops.io.factory import open_store
    from lance_ops.table.commit.transaction_file import load_transaction
    from lance_ops.table.manifest import naming
    from lance_ops.table.manifest.codec import read_manifest

    store, base = open_store(uri, storage_options)
    lines = []
    for loc in naming.list_versions(store, base):
        try:
            mf = read_manifest(store, loc.path)
            txn = load_transaction(store, base, mf)
            rows = sum(f.physical_rows for f in mf.manifest.fragments)
            what = (f"txn {txn.uuid if txn else '?'} {txn.WhichOneof('operation') if txn else '?'} "
                    f"read_version {txn.read_version if txn else '?'} file {mf.manifest.transaction_file} "
                    f"fragments {len(mf.manifest.fragments)} physical_rows {rows}")
        except Exception as exc:  # noqa: BLE001 - evidence only
            what = f"unreadable: {type(exc).__name__}: {exc}"
        lines.append(f"  v{loc.version} {loc.last_modified} {what}")
    return "\n".join(lines)


def _data_check(uri, storage_options, expected):
    """(lance_ops equal, pylance equal, no duplicate ids, detail) of the final dataset."""
    ours = lance_ops.dataset(uri, storage_options=storage_options).to_table().sort_by("id")
    theirs = lance.dataset(uri, storage_options=storage_options).to_table().sort_by("id")
    unique = len(np.unique(ours["id"].to_numpy())) == ours.num_rows
    writers = pc.value_counts(ours["writer"]).to_pylist()
    return (ours.equals(expected), theirs.equals(expected), unique,
            f"rows {ours.num_rows} (expected {expected.num_rows}); rows per writer {writers}")


def _check(uri, storage_options, outcome, appenders, deleters):
    errors = {k: v for k, v in outcome.items() if v[0] == "error"}
    assert not errors, errors
    # Every writer committed or failed with a clear lance_ops commit error.
    assert all(kind in ("ok", "conflict") for kind, _, _ in outcome.values())
    # The data check runs first, so that a failure below always says whether rows were lost.
    expected = _expected(outcome, appenders, deleters).sort_by("id")
    ours_ok, theirs_ok, unique, detail = _data_check(uri, storage_options, expected)
    ok_versions = [v for kind, v, _ in outcome.values() if kind == "ok"]
    deleted_ok = all(outcome[n][2] == {"num_deleted_rows": BASE_ROWS // 10}
                     for n in deleters if outcome[n][0] == "ok")
    if not (len(ok_versions) == len(set(ok_versions)) and ours_ok and theirs_ok and unique and deleted_ok):
        evidence = "\n".join(
            [f"data check: lance_ops equal={ours_ok} pylance equal={theirs_ok} unique ids={unique}; {detail}",
             "outcomes:"]
            + [f"  {name}: {kind} version={version} {str(d)[:300]}" for name, (kind, version, d) in sorted(outcome.items())]
            + ["_versions/:", _history(uri, storage_options)])
        print(evidence)  # (also in the assertion message: -rA or the report shows it)
        assert len(ok_versions) == len(set(ok_versions)), "two writers claim the same version\n" + evidence
        assert ours_ok and theirs_ok and unique and deleted_ok, "data check failed\n" + evidence


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
