"""Issue 16, acceptance 8(c): appenders, a deleter, compaction and cleanup at older_than=0 race on
one dataset from separate processes (local disk and S3), checked against the log of
acknowledged operations.

Every operation must be acknowledged or cleanly rejected (a LanceOpsError, never an unknown
outcome, never another exception). At the end the rows equal the model built from the
acknowledged operations only: every acknowledged append's rows exactly once (minus acknowledged
deletes of them), no rejected append's rows, every acknowledged delete applied with the exact
count, nothing of a rejected delete applied; no two acknowledged operations at one version; no
transaction uuid at two of the versions left; pylance reads every version left.

``LANCE_OPS_RACE_SECONDS`` sets the duration per store (default 30, within the suite's CI budget);
if by then the operation log has fewer acknowledged operations than the floors checked below (a
slow or loaded machine), the race goes on in 5-second steps until it has them, up to
``LANCE_OPS_RACE_MAX_SECONDS`` (default 60); set both higher for reproduction loops;
``LANCE_OPS_RACE_MIN_AGE`` cleanup's ``min_superseded_age`` in seconds (default 5: versions are
removed five seconds after they stop being the latest, far below the 5-minute default, so commits
and compactions keep meeting versions that vanished since they read the dataset). The minimum age
must exceed the longest stall between a commit's last listing and its manifest put (see
lance_ops.table.commit.loop): 0 is unsafe with concurrent writers by design, and a loaded CI
machine can stall a process for a second or two. ``LANCE_OPS_RACE_LOGS`` keeps the operation logs
(and the local dataset) in that directory for diagnosis.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections import Counter
from pathlib import Path

import lance
import numpy as np
import pytest

import lance_ops
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table.commit.transaction_file import load_transaction
from tests.safety import race_workers as W

SECONDS = float(os.environ.get("LANCE_OPS_RACE_SECONDS", "30"))
#: keep the operation logs (and the local dataset) here (default: the test's tmp_path, removed later by pytest)
LOGS = os.environ.get("LANCE_OPS_RACE_LOGS")
MIN_AGE = float(os.environ.get("LANCE_OPS_RACE_MIN_AGE", "5"))
MAX_SECONDS = max(SECONDS, float(os.environ.get("LANCE_OPS_RACE_MAX_SECONDS", "60")))
APPENDERS = 2
#: acknowledged operations of each kind that _check requires (the race runs on until it has them)
FLOORS = {"append": 10, "delete": 5, "compact": 1, "cleanup": 3}


def _acknowledged(log_dir) -> Counter:
    """Acknowledged operations per kind in the logs so far (a line being written is skipped)."""
    counts = Counter()
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("status") == "ok":
                    counts[e.get("op")] += 1
    return counts


def _wait_for_floors(deadline, limit: float, log_dir) -> None:
    """Until the shared ``deadline``: then move it on by 5 s while the logs lack any of FLOORS,
    never past ``limit``."""
    while True:
        time.sleep(max(0.0, deadline.value - 2 - time.time()))
        counts = _acknowledged(log_dir)
        if all(counts[op] >= n for op, n in FLOORS.items()) or deadline.value >= limit:
            return
        deadline.value = min(limit, deadline.value + 5)


def _race(uri, opts, log_dir):
    lance_ops.write_dataset(W.rows(np.arange(W.BASE_ROWS), "base"), uri, storage_options=opts,
                            max_rows_per_file=W.BASE_FILE_ROWS)
    ctx = mp.get_context("spawn")
    start = time.time() + 10  # (spawned interpreters need a few seconds to start)
    deadline = ctx.Value("d", start + SECONDS)  # a lock-guarded double the workers read each loop
    log = lambda name: os.path.join(log_dir, f"{name}.jsonl")  # noqa: E731
    procs = [ctx.Process(target=W.appender, args=(uri, opts, w, deadline, log(f"append{w}")))
             for w in range(APPENDERS)]
    procs.append(ctx.Process(target=W.deleter, args=(uri, opts, 7, deadline, log("delete"), log_dir)))
    procs.append(ctx.Process(target=W.compactor, args=(uri, opts, deadline, log("compact"))))
    procs.append(ctx.Process(target=W.cleaner, args=(uri, opts, deadline, log("cleanup"), MIN_AGE)))
    for p in procs:
        p.start()
    _wait_for_floors(deadline, start + MAX_SECONDS, log_dir)
    for p in procs:
        p.join(timeout=MAX_SECONDS + 300)
    assert all(p.exitcode == 0 for p in procs), [(p.name, p.exitcode) for p in procs]
    entries = []
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            entries.extend(json.loads(line) for line in f)
    return entries


def _check(uri, opts, entries):
    by_status = Counter((e.get("op"), e["status"]) for e in entries)
    for e in entries:
        if e["status"] != "ok":
            print(e.get("op"), e["status"], e["error"][:400])
    bad = [e for e in entries if e["status"] not in ("ok", "rejected")]
    assert not bad, bad[:3]
    acked = [e for e in entries if e["status"] == "ok"]
    # a committed version belongs to one operation (compaction/cleanup may commit nothing)
    versions = Counter(e["version"] for e in acked if e["op"] in ("append", "delete", "compact")
                       and e.get("version") is not None)
    assert max(versions.values()) == 1, [v for v, n in versions.items() if n > 1]
    assert by_status[("append", "ok")] >= 10 and by_status[("delete", "ok")] >= 5, by_status
    assert by_status[("compact", "ok")] >= 1 and by_status[("cleanup", "ok")] >= 3, by_status

    # the model: acknowledged operations only
    expected = set(range(W.BASE_ROWS))
    for e in acked:
        if e["op"] == "append":
            expected.update(W.append_ids(e["writer"], e["seq"]).tolist())
    for e in acked:
        if e["op"] == "delete":
            hit = {i for i in range(e["lo"], e["hi"]) if i in expected}
            assert e["deleted"] == e["hi"] - e["lo"] == len(hit), e
            expected -= hit

    ours = lance_ops.dataset(uri, storage_options=opts).to_table()["id"].to_numpy()
    assert len(np.unique(ours)) == len(ours), "rows committed twice"
    assert set(ours.tolist()) == expected
    theirs = lance.dataset(uri, storage_options=opts)
    assert sorted(theirs.to_table()["id"].to_pylist()) == sorted(expected)

    # every version left: readable by pylance, one transaction uuid each
    ds = lance_ops.dataset(uri, storage_options=opts)
    uuids = []
    for loc in naming.list_versions(ds._store, ds._base):
        mf = read_manifest(ds._store, loc.path)
        uuids.append(load_transaction(ds._store, ds._base, mf).uuid)
        assert lance.dataset(uri, version=loc.version, storage_options=opts).count_rows() >= 0
    assert len(uuids) == len(set(uuids))
    return by_status


@pytest.mark.slow
def test_race_local(tmp_path):
    uri = str(Path(LOGS or tmp_path) / "ds")
    logs = Path(LOGS or tmp_path) / "logs-local"
    logs.mkdir(parents=True)
    stats = _check(uri, None, _race(uri, None, str(logs)))
    print("race local:", dict(stats))


@pytest.mark.slow
def test_race_s3(tmp_path, moto_server, s3_bucket):
    uri = f"{s3_bucket}/ds"
    opts = moto_server.storage_options
    logs = Path(LOGS or tmp_path) / "logs-s3"
    logs.mkdir(parents=True)
    stats = _check(uri, opts, _race(uri, opts, str(logs)))
    print("race s3:", dict(stats))
