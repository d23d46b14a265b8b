"""S3 faults injected by a loopback proxy between lance_ops and moto_server.

Part 1: every fault kind against every read of the S3 store - each read is retried, returns
exactly the stored bytes and each fault is counted by the proxy. Part 2 (slow): a soak of
appends, deletes, compaction and cleanup from several processes through the proxy, checked
against the log of acknowledged operations.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import uuid
from collections import Counter

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import AlreadyExistsError, CorruptFileError, IncompleteResponseError, StorageError
from lance_ops.io import S3Store
from lance_ops.io.retry import RetryPolicy
from tests.fixtures.faultproxy import FAULT_KINDS, FaultProxy
from tests.safety import fault_workers
from tests.safety.soak_evidence import ManifestArchive, write_evidence
from tests.safety.fault_workers import BATCH_KEY, BATCH_ROWS

DATA = bytes((i * 7 + i // 256) % 256 for i in range(40_000))
KEY = "dir/obj.bin"
LISTED = ["dir/a.txt", "dir/b.txt", "dir/sub/c.txt", KEY]
FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)


@pytest.fixture(scope="module")
def bucket(moto_server) -> str:
    """One bucket for the module: the tests only read it (or add keys of their own)."""
    name = f"faults-{uuid.uuid4().hex[:16]}"
    client = moto_server.client()
    client.create_bucket(Bucket=name)
    for key in LISTED:
        client.put_object(Bucket=name, Key=key, Body=DATA if key == KEY else key.encode())
    return name


@pytest.fixture(scope="module")
def _module_proxy(moto_server):
    with FaultProxy(moto_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def fault_proxy(_module_proxy: FaultProxy) -> FaultProxy:
    """The module's proxy with no rules and zeroed counters (one endpoint: boto clients are reused)."""
    _module_proxy.clear()
    _module_proxy.reset_counters()
    return _module_proxy


@pytest.fixture
def store(bucket, moto_server, fault_proxy) -> S3Store:
    return S3Store(bucket, fault_proxy.storage_options(moto_server.storage_options), retry=FAST,
                   coalesce_gap=1_024)


# op name -> (call, expected result, request filter for the fault)
OPS = {
    "read": (lambda s: s.read(KEY), DATA, dict(method="GET", ranged=False)),
    "read_range": (lambda s: s.read_range(KEY, 1_000, 5_000), DATA[1_000:6_000], dict(method="GET", ranged=True)),
    "read_range_to_end": (lambda s: s.read_range(KEY, 39_000, 1_000), DATA[39_000:], dict(method="GET", ranged=True)),
    "read_tail": (lambda s: s.read_tail(KEY, 4_096), (DATA[-4_096:], len(DATA)), dict(method="GET", ranged=True)),
    "read_tail_whole": (lambda s: s.read_tail(KEY, 100_000), (DATA, len(DATA)), dict(method="GET", ranged=True)),
    "read_ranges": (lambda s: s.read_ranges(KEY, [(0, 10), (30_000, 100), (5, 3)]),
                    [DATA[0:10], DATA[30_000:30_100], DATA[5:8]], dict(method="GET", ranged=True)),
    "size": (lambda s: s.size(KEY), len(DATA), dict(method="HEAD")),
    "exists": (lambda s: s.exists(KEY), True, dict(method="HEAD")),
    "list": (lambda s: sorted(i.path for i in s.list("dir")), sorted(LISTED), dict(query="list-type=2")),
    "list_dir": (lambda s: sorted(i.path for i in s.list_dir("dir")), sorted(set(LISTED) - {"dir/sub/c.txt"}),
                 dict(query="list-type=2")),
}
ALWAYS = ["error_before", "error_after", "reset", "reset_after", "truncate", "cut_after_status"]
RANGED = ["strip_content_range", "short_206"]


def _cases():
    for op, (_, _, match) in OPS.items():
        kinds = list(ALWAYS)
        if match.get("ranged"):
            kinds += RANGED
        if match.get("method") == "HEAD":
            kinds.remove("truncate")  # a HEAD answer has no body to cut
        if op.startswith("list"):
            kinds.append("empty_listing")
        for kind in kinds:
            yield pytest.param(op, kind, id=f"{op}-{kind}")


@pytest.mark.parametrize("op, kind", list(_cases()))
def test_one_fault_is_retried_and_read_is_exact(store, fault_proxy, op, kind):
    call, expected, match = OPS[op]
    fault_proxy.inject(kind, status=500 if op in ("read", "read_tail", "size", "list") else 503, **match)
    assert call(store) == expected
    stats = fault_proxy.stats()
    assert stats["faults"] == {kind: 1}
    extra = 1 if op != "read_ranges" else 2  # read_ranges issues two requests (the near ones merge)
    assert stats["requests"] == 1 + extra
    if kind == "empty_listing":  # a valid but empty answer is asked again, not retried as an error
        assert store.metrics.retries == 0 and store.metrics.list_requests == 2
    else:
        assert store.metrics.retries == 1


def test_proxy_stays_on_loopback(fault_proxy):
    assert fault_proxy.endpoint.startswith("http://127.0.0.1:")
    with pytest.raises(ValueError, match="only forwards to loopback"):
        FaultProxy("http://10.1.2.3:9000")
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        fault_proxy.inject("explode")


def test_delay_is_waited_out_not_retried(store, fault_proxy):
    fault_proxy.inject("delay", delay=0.3, method="GET")
    assert store.read(KEY) == DATA
    assert fault_proxy.stats()["faults"] == {"delay": 1}
    assert fault_proxy.stats()["requests"] == 1 and store.metrics.retries == 0


@pytest.mark.parametrize("kind", ALWAYS + RANGED)
def test_a_fault_that_persists_is_a_storage_error_naming_the_object(store, fault_proxy, kind):
    fault_proxy.inject(kind, times=100, method="GET", ranged=True)
    with pytest.raises(StorageError) as info:
        store.read_range(KEY, 100, 200)
    assert not isinstance(info.value, CorruptFileError)
    assert f"s3://{store.bucket}/{KEY}" in str(info.value)
    assert "gave up after 5 attempts" in str(info.value)
    if kind in RANGED:
        assert isinstance(info.value, IncompleteResponseError)
    assert fault_proxy.stats()["requests"] == 5
    assert fault_proxy.stats()["faults"] == {kind: 5}
    assert store.metrics.retries == 4


def test_a_failing_listing_raises_instead_of_listing_nothing(store, fault_proxy):
    fault_proxy.inject("cut_after_status", times=100, query="list-type=2")
    with pytest.raises(StorageError, match=f"s3://{store.bucket}/dir/"):
        list(store.list_dir("dir"))
    assert fault_proxy.stats()["requests"] == 5


def test_empty_listing_twice_is_believed_but_a_probe_still_finds_the_object(store, fault_proxy):
    """A valid empty answer cannot be told from a real one; callers acting on absence probe."""
    fault_proxy.inject("empty_listing", times=2)
    assert list(store.list_dir("dir")) == []
    assert store.exists(KEY)
    assert sorted(i.path for i in store.list_dir("dir")) == sorted(set(LISTED) - {"dir/sub/c.txt"})


def test_every_listing_page_is_retried_on_its_own(store, fault_proxy, moto_server, bucket):
    keys = [f"many/k{i:02d}" for i in range(7)]
    for key in keys:
        moto_server.client().put_object(Bucket=bucket, Key=key, Body=b"x")
    store.list_page_size = 2
    fault_proxy.inject("truncate", times=2, query="continuation-token")
    fault_proxy.inject("error_after", times=1, query="continuation-token")
    try:
        assert [i.path for i in store.list("many")] == keys
    finally:
        moto_server.client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert fault_proxy.stats()["faults"] == {"truncate": 2, "error_after": 1}
    assert store.metrics.list_requests == 4 and store.metrics.retries == 3


@pytest.mark.parametrize("kind", ["strip_content_range", "short_206", "truncate", "cut_after_status",
                                  "reset", "error_after"])
def test_dataset_reads_through_faults_are_exact(moto_server, fault_proxy, bucket, kind):
    """Manifest tails, data-file footers and pages all survive three faults in a row."""
    uri = f"s3://{bucket}/ds-{kind}"
    table = pa.table({"id": pa.array(range(5_000), pa.int64()), "s": [f"v{i}" for i in range(5_000)]})
    lance_ops.write_dataset(table, uri, storage_options=moto_server.storage_options, max_rows_per_file=2_000)
    opts = dict(fault_proxy.storage_options(moto_server.storage_options), client_max_retries="4")
    ranged = True if kind in RANGED else None
    fault_proxy.inject(kind, times=3, method="GET", ranged=ranged)
    got = lance_ops.dataset(uri, storage_options=opts).to_table()
    assert got.equals(table)
    assert fault_proxy.stats()["faults"] == {kind: 3}


def test_one_empty_listing_is_not_a_missing_dataset(moto_server, fault_proxy, bucket):
    """The first empty answer for _versions/ is asked again, so the dataset is found."""
    uri = f"s3://{bucket}/ds-listing"
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    lance_ops.write_dataset(table, uri, storage_options=moto_server.storage_options)
    fault_proxy.inject("empty_listing", query="prefix=ds-listing")
    ds = lance_ops.dataset(uri, storage_options=fault_proxy.storage_options(moto_server.storage_options))
    assert ds.version == 1 and ds.to_table().equals(table)
    assert fault_proxy.stats()["faults"] == {"empty_listing": 1}


# --- part 2: the soak -------------------------------------------------------------------------
# LANCE_OPS_SOAK_SECONDS / LANCE_OPS_SOAK_SEED run it longer or with other faults (reproduction loops).
# The soak runs SOAK_SECONDS (default 30, within the suite's CI budget); if the floors checked at its
# end (acknowledged appends, faults injected, fault kinds) are not reached by then (a slow or loaded
# machine), it goes on in 5-second steps until they are, up to LANCE_OPS_SOAK_MAX_SECONDS (default 45).
SOAK_SECONDS = float(os.environ.get("LANCE_OPS_SOAK_SECONDS", "30"))
SOAK_MAX_SECONDS = max(SOAK_SECONDS, float(os.environ.get("LANCE_OPS_SOAK_MAX_SECONDS", "45")))
SOAK_SEED = int(os.environ.get("LANCE_OPS_SOAK_SEED", "16"))
SOAK_RATE = 0.10
SEED_ROWS = 400
APPENDERS = 3  # workers 0..2 append; worker 3 appends and deletes half of each own batch
MAX_OP_SECONDS = 120  # a hang detector: no operation may take longer (read retries are bounded)


def _seed_table() -> pa.Table:
    return pa.table({"id": pa.array(range(SEED_ROWS), pa.int64()),
                     "worker": pa.array([-1] * SEED_ROWS, pa.int32()),
                     "payload": pa.array([f"seed-{i}" for i in range(SEED_ROWS)])})


def _read_logs(paths) -> list[dict]:
    out = []
    for path in paths:
        if path.exists():
            out.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return out


#: the soak's floors, asserted at its end: acknowledged appends, faults injected, distinct fault kinds
SOAK_FLOORS = (10, 50, 8)


def _soak_floors_reached(paths, stats: dict) -> bool:
    """Whether the logs so far and the proxy's counters reach SOAK_FLOORS (a line being written is skipped)."""
    acked = 0
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                acked += e.get("op") == "append" and e.get("outcome") == "ok"
    appends, faults, kinds = SOAK_FLOORS
    return acked >= appends and stats["fault_total"] >= faults and len(stats["faults"]) >= kinds


def _soak_until_floors(deadline, limit: float, paths, proxy) -> None:
    """Until the shared ``deadline``: then move it on by 5 s while the floors are not reached,
    never past ``limit``."""
    while True:
        time.sleep(max(0.0, deadline.value - 2 - time.time()))
        if _soak_floors_reached(paths, proxy.stats()) or deadline.value >= limit:
            return
        deadline.value = min(limit, deadline.value + 5)


def _check_soak(uri: str, direct: dict, entries: list[dict]) -> dict:
    """Check the final dataset against the log; returns figures for the report."""
    crashes = [e for e in entries if e["outcome"] == "crash"]
    assert not crashes, crashes[:3]
    ds = lance_ops.dataset(uri, storage_options=direct)
    table = ds.to_table().sort_by("id")
    ids = table["id"].to_numpy()
    values, counts = np.unique(ids, return_counts=True)
    assert (counts == 1).all(), f"duplicated ids: {values[counts > 1][:20].tolist()}"
    present = set(ids.tolist())

    assert set(range(SEED_ROWS)) <= present, "seed rows lost"
    deletes = {e["batch"]: e for e in entries if e["op"] == "delete"}
    appends = [e for e in entries if e["op"] == "append"]
    allowed = set(range(SEED_ROWS))
    for a in appends:
        batch = set(range(a["lo"], a["hi"]))
        odd = {i for i in batch if i % 2}
        d = deletes.get(a["batch"])
        if a["outcome"] == "error":
            assert not batch & present, f"append {a['batch']} failed ({a['error']}) but its rows landed"
            continue
        allowed |= batch
        if a["outcome"] == "unknown":  # must be resolvable: all of it or nothing
            assert batch <= present or not batch & present, f"append {a['batch']} landed partially"
            continue
        # acknowledged: every row present exactly once, except acknowledged deletes
        expected = batch - odd if d is not None and d["outcome"] == "ok" else batch
        if d is not None and d["outcome"] == "unknown":
            assert batch - odd <= present and (odd <= present or not odd & present), a["batch"]
        else:
            assert batch & present == expected, f"append {a['batch']} / delete {d}: rows differ"
        if d is not None and d["outcome"] == "ok":
            assert d["result"]["num_deleted_rows"] == BATCH_ROWS // 2, d
    assert present <= allowed, f"rows nobody wrote: {sorted(present - allowed)[:20]}"

    # no transaction at two versions; no batch committed twice among retained versions
    acked_versions = [e["version"] for e in entries if e["outcome"] == "ok" and e["op"] in ("append", "delete")]
    assert len(acked_versions) == len(set(acked_versions)), "two operations acknowledged at one version"
    uuids, batches = Counter(), Counter()
    versions = [v["version"] for v in ds.versions()]
    for v in versions:
        txn = ds.checkout_version(v).transaction
        if txn is not None:
            uuids[txn.uuid] += 1
            if BATCH_KEY in txn.transaction_properties:
                batches[txn.transaction_properties[BATCH_KEY]] += 1
    assert max(uuids.values(), default=1) == 1, [u for u, n in uuids.items() if n > 1]
    assert max(batches.values(), default=1) == 1, [b for b, n in batches.items() if n > 1]

    theirs = lance.dataset(uri, storage_options=direct).to_table().sort_by("id")
    assert theirs.equals(table), "pylance reads the dataset differently"
    slowest = max((e["seconds"] for e in entries), default=0)
    assert slowest < MAX_OP_SECONDS, f"an operation took {slowest}s"
    by_outcome = Counter((e["op"], e["outcome"]) for e in entries)
    return {"rows": len(ids), "versions_retained": len(versions), "latest": ds.version,
            "ops": {f"{op}:{o}": n for (op, o), n in sorted(by_outcome.items())},
            "read_retries": sum(e["retries"] for e in entries),
            "orphans_withdrawn": sum(e.get("withdrawn", 0) for e in entries),
            "max_read_retries_per_op": max((e["retries"] for e in entries), default=0),
            "slowest_op_s": slowest}


@pytest.mark.slow
def test_soak_appends_deletes_compaction_cleanup_through_faults(moto_server, tmp_path):
    """Several processes append, delete, compact and clean up through a proxy failing ~10%."""
    name = f"soak-{uuid.uuid4().hex[:16]}"
    moto_server.client().create_bucket(Bucket=name)
    uri, direct = f"s3://{name}/ds", moto_server.storage_options
    lance_ops.write_dataset(_seed_table(), uri, storage_options=direct, max_rows_per_file=100)

    ctx = mp.get_context("spawn")
    logs = [tmp_path / f"worker{i}.jsonl" for i in range(APPENDERS + 2)]
    # every manifest and transaction file the dataset ever shows, kept for a failure's evidence
    archive = ManifestArchive(moto_server.client(), name, "ds", tmp_path / "archive")
    archive.start()
    with FaultProxy(moto_server.endpoint, seed=SOAK_SEED) as proxy:
        kinds = {k: 1.0 for k in FAULT_KINDS if k != "ignore_range"}
        proxy.set_random(SOAK_RATE, kinds, delay=0.2, method_rates={"PUT": 0.15})
        opts = dict(proxy.storage_options(direct), client_max_retries="4")
        started = time.time()
        deadline = ctx.Value("d", started + SOAK_SECONDS)  # a lock-guarded double the workers read
        procs = [ctx.Process(target=fault_workers.append_worker,
                             args=(uri, opts, w, deadline, str(logs[w]), w == APPENDERS))
                 for w in range(APPENDERS + 1)]
        procs.append(ctx.Process(target=fault_workers.maintenance_worker,
                                 args=(uri, opts, deadline, str(logs[-1]), 5.0)))
        for p in procs:
            p.start()
        _soak_until_floors(deadline, started + SOAK_MAX_SECONDS, logs, proxy)
        hung = []
        for p in procs:
            p.join(timeout=max(1.0, deadline.value + MAX_OP_SECONDS + 30 - time.time()))
            if p.is_alive():
                hung.append(p.pid)
                p.kill()
                p.join()
        stats = proxy.stats()
    archive.stop()
    assert not hung, f"workers still running long after the deadline: {hung}"
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    entries = _read_logs(logs)
    print("soak proxy counters:", json.dumps(stats, sort_keys=True), "seed:", SOAK_SEED)
    try:
        figures = _check_soak(uri, direct, entries)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nsoak evidence (worker logs in {tmp_path}): "
                             f"{_soak_evidence(uri, direct, entries, archive, tmp_path, str(exc))}") from exc
    figures["proxy"] = stats
    print("soak figures:", json.dumps(figures, sort_keys=True))
    assert sum(1 for e in entries if e["op"] == "append" and e["outcome"] == "ok") >= 10, figures
    assert stats["fault_total"] >= 50 and len(stats["faults"]) >= 8, stats


def _soak_evidence(uri: str, direct: dict, entries: list[dict], archive: ManifestArchive, tmp_path,
                   failure: str) -> str:
    """Replay the archived manifest chain against the logs (tests/safety/soak_evidence.py)."""
    try:
        ds = lance_ops.dataset(uri, storage_options=direct)
        present = set(ds.to_table(columns=["id"])["id"].to_pylist())
        retained = {v["version"] for v in ds.versions()}
        return write_evidence(tmp_path / "evidence", archive, entries, present, retained, failure)
    except Exception as exc:  # noqa: BLE001 - the failure itself must still be reported
        return f"(evidence could not be written: {exc!r})"


def _entry(op: str, worker: int, seq: int, outcome: str, **extra) -> dict:
    lo, hi = fault_workers.batch_ids(worker, seq)
    return dict(op=op, batch=f"w{worker}-{seq}", lo=lo, hi=hi, outcome=outcome, seconds=0.1, retries=0,
                error="" if outcome != "ok" else None, **extra)


@pytest.mark.parametrize("case", ["lost", "duplicated", "failed_but_landed", "partial_unknown", "delete_not_applied"])
def test_the_soak_check_catches_each_kind_of_damage(moto_server, bucket, case):
    """The checker is not vacuous: each damage the soak looks for fails it."""
    uri, direct = f"s3://{bucket}/check-{case}", moto_server.storage_options
    lance_ops.write_dataset(_seed_table(), uri, storage_options=direct)
    b0, b1 = fault_workers.batch_table(0, 0), fault_workers.batch_table(0, 1)
    ds = lance_ops.write_dataset(b0, uri, mode="append", storage_options=direct)
    entries = [_entry("append", 0, 0, "ok", version=ds.version)]
    if case == "lost":
        entries.append(_entry("append", 0, 1, "ok", version=ds.version + 1))
    elif case == "duplicated":
        lance_ops.write_dataset(b0, uri, mode="append", storage_options=direct)
    elif case == "failed_but_landed":
        lance_ops.write_dataset(b1, uri, mode="append", storage_options=direct)
        entries.append(_entry("append", 0, 1, "error"))
    elif case == "partial_unknown":
        lance_ops.write_dataset(b1.slice(0, 5), uri, mode="append", storage_options=direct)
        entries.append(_entry("append", 0, 1, "unknown"))
    else:
        entries.append(_entry("delete", 0, 0, "ok", version=ds.version + 1,
                              result={"num_deleted_rows": BATCH_ROWS // 2}))
    with pytest.raises(AssertionError):
        _check_soak(uri, direct, entries)


def test_the_soak_check_accepts_a_consistent_log(moto_server, bucket):
    uri, direct = f"s3://{bucket}/check-ok", moto_server.storage_options
    lance_ops.write_dataset(_seed_table(), uri, storage_options=direct)
    ds = lance_ops.write_dataset(fault_workers.batch_table(0, 0), uri, mode="append", storage_options=direct)
    lo, hi = fault_workers.batch_ids(0, 0)
    out = ds.delete(f"id >= {lo} AND id < {hi} AND id % 2 = 1")
    entries = [_entry("append", 0, 0, "ok", version=2), _entry("delete", 0, 0, "ok", version=3, result=out),
               _entry("append", 0, 1, "error"), _entry("append", 0, 2, "unknown")]
    figures = _check_soak(uri, direct, entries)
    assert figures["rows"] == SEED_ROWS + BATCH_ROWS // 2 and figures["latest"] == 3


def test_soak_evidence_replays_the_chain_and_names_a_lost_append(moto_server, bucket, tmp_path):
    """The evidence a failed soak writes: the lost batch, the manifests seen at its version, the
    versions naming its files, and each worker's log lines (uuids) beside them."""
    uri, direct = f"s3://{bucket}/evidence", moto_server.storage_options
    archive = ManifestArchive(moto_server.client(), bucket, "evidence", tmp_path / "archive", interval=0.05)
    archive.start()
    lance_ops.write_dataset(_seed_table(), uri, storage_options=direct)
    b0 = lance_ops.write_dataset(fault_workers.batch_table(0, 0), uri, mode="append", storage_options=direct,
                                 transaction_properties={BATCH_KEY: "w0-0"})
    lo, hi = fault_workers.batch_ids(0, 0)
    b0.delete(f"id >= {lo} AND id < {hi}")  # the batch's rows go (as a lost append's would)
    archive.stop()
    entries = [_entry("append", 0, 0, "ok", version=2, uuid=b0.checkout_version(2).transaction.uuid)]
    with pytest.raises(AssertionError) as info:
        _check_soak(uri, direct, entries)
    summary = json.loads(_soak_evidence(uri, direct, entries, archive, tmp_path, str(info.value)))
    (lost,) = summary["lost"]
    assert lost["batch"] == "w0-0" and lost["acknowledged_version"] == 2 and lost["missing"] == BATCH_ROWS
    assert lost["manifests_seen_at_that_version"][0]["batch"] == "w0-0"
    assert lost["manifests_seen_at_that_version"][0]["op"] == "append"
    assert lost["versions_naming_its_files"] == [2]  # the delete of every row dropped the fragment
    chain = (tmp_path / "evidence" / "chain.txt").read_text().splitlines()
    assert [line.split()[0] for line in chain] == ["v1", "v2", "v3"] and "delete" in chain[2]
    assert json.loads((tmp_path / "evidence" / "evidence.json").read_text())["lost"][0]["its_files"]


def test_conditional_put_has_one_winner_under_concurrency(moto_server, bucket):
    """The soak relies on the S3 endpoint's put-if-absent being atomic (else two writers could both
    publish one version: the later overwrite would lose the first, acknowledged commit). moto
    checks and stores in two steps; racing writers never both won here (nor in 9,000 races run
    while investigating the lost append)."""
    import threading

    stores = [S3Store(bucket, moto_server.storage_options) for _ in range(6)]
    doubles = []
    for r in range(30):
        key, wins, gate = f"race/{uuid.uuid4().hex}", [], threading.Barrier(len(stores))

        def put(i, key=key, wins=wins, gate=gate):
            gate.wait()
            try:
                stores[i].put_if_absent(key, bytes([i]) * 10_000)
                wins.append(i)
            except AlreadyExistsError:
                pass

        threads = [threading.Thread(target=put, args=(i,)) for i in range(len(stores))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(wins) != 1:
            doubles.append((r, wins))
    assert not doubles
