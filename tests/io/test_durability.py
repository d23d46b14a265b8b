"""Local durability (ADR 0036): files written in a deferred-sync scope are fsynced by the next
put_if_absent, before the link that publishes it; the directory is fsynced after the link."""
from __future__ import annotations

import os
import threading

import pytest

import lance_ops.io.local as local_mod
from lance_ops.errors import AlreadyExistsError
from lance_ops.io import open_store


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """A local store and the ordered list of ("fsync", path) / ("link", path) events."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        with lock:
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(src: str, dst: str) -> None:
        real_link(src, dst)
        with lock:
            events.append(("link", dst))

    monkeypatch.setattr(local_mod.os, "fsync", fsync)
    monkeypatch.setattr(local_mod.os, "link", link)
    store, root = open_store(str(tmp_path / "ds"))
    return store, root, events


def test_deferred_files_are_synced_before_the_publish_and_the_directory_after(traced):
    store, root, events = traced
    data, txn, manifest = (store.join(root, d, n) for d, n in
                           (("data", "a.lance"), ("_transactions", "t.txn"), ("_versions", "1.manifest")))
    with store.deferred_sync():
        store.put(txn, b"txn")
        with store.open_output(data) as out:
            out.write(b"rows")
    assert events == []  # nothing synced yet: remembered for the barrier
    store.put_if_absent(manifest, b"manifest")
    link_at = events.index(("link", manifest))
    before = {p for kind, p in events[:link_at] if kind == "fsync"}
    assert {data, txn, os.path.dirname(data), os.path.dirname(txn)} <= before
    assert any(os.path.basename(p).startswith(".1.manifest") for p in before)  # the temp file itself
    assert events[link_at + 1:] == [("fsync", os.path.dirname(manifest))]
    events.clear()
    store.put_if_absent(store.join(root, "_versions", "2.manifest"), b"m2")  # the barrier emptied the set
    assert {p for _, p in events} & {data, txn} == set()


def test_outside_the_scope_every_put_is_synced_at_once(traced):
    store, root, events = traced
    path = store.join(root, "_refs", "tags", "t.json")
    store.put(path, b"{}")
    assert len(events) == 1 and os.path.basename(events[0][1]).startswith(".t.json")
    with store.open_output(store.join(root, "data", "b.lance")) as out:
        out.write(b"x")
    assert len(events) == 2


def test_scope_is_per_thread(traced):
    store, root, events = traced
    other = store.join(root, "x", "other")

    def elsewhere() -> None:
        store.put(other, b"1")

    with store.deferred_sync():
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        store.put(store.join(root, "x", "mine"), b"2")
    assert [os.path.basename(p)[:7] for _, p in events] == [".other."]


def test_a_lost_race_still_syncs_and_raises(traced):
    store, root, events = traced
    path = store.join(root, "_versions", "1.manifest")
    store.put_if_absent(path, b"first")
    with store.deferred_sync():
        store.put(store.join(root, "_deletions", "d.arrow"), b"del")
    with pytest.raises(AlreadyExistsError):
        store.put_if_absent(path, b"second")
    assert store.read(path) == b"first"
    assert ("fsync", store.join(root, "_deletions", "d.arrow")) in events


FAILED_FSYNC_SCRIPT = r"""
import errno, json, os, sys
import pyarrow as pa
import lance_ops
import lance_ops.io.local as local_mod
from lance_ops.errors import DurabilityError

uri = sys.argv[1]
lance_ops.write_dataset(pa.table({"id": [1, 2]}), uri)
real_fsync = os.fsync
failing = {"armed": True}

def fsync(fd):
    path = os.readlink(f"/proc/self/fd/{fd}")
    if failing["armed"] and path.endswith(".lance") and "/data/" in path:
        failing["armed"] = False  # one write error, as a disk reports it once
        raise OSError(errno.EIO, "Input/output error")
    real_fsync(fd)

local_mod.os.fsync = fsync
out = {}
for step in ("first", "second"):
    try:
        lance_ops.write_dataset(pa.table({"id": [3, 4]}), uri, mode="append")
        out[step] = "committed"
    except DurabilityError as exc:
        out[step] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


def test_a_failed_fsync_publishes_nothing_now_or_later_in_the_process(tmp_path):
    """After a write error, a second fsync may report the lost pages as written (Linux): the
    commit whose barrier failed is refused without a retry, and so is every later commit of the
    process; the dataset keeps its last good version (run in a child process: the refusal lasts
    as long as the process)."""
    import json
    import subprocess
    import sys

    uri = str(tmp_path / "ds")
    done = subprocess.run([sys.executable, "-c", FAILED_FSYNC_SCRIPT, uri], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["first"].startswith("DurabilityError: fsync failed") and "Input/output error" in out["first"]
    assert out["second"].startswith("DurabilityError: an fsync failed earlier in this process")
    import lance

    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.to_table()["id"].to_pylist() == [1, 2]


def test_an_append_syncs_its_data_and_statistics_files_before_the_manifest_link(traced):
    """A real append (ADR 0053: the statistics file is one put): its data file, statistics file and
    transaction file are fsynced before the link that publishes the manifest naming them."""
    import pyarrow as pa

    import lance_ops

    store, root, events = traced

    def files() -> set[str]:
        return {os.path.join(root, d, n) for d in ("data", "_stats", "_transactions")
                for n in os.listdir(os.path.join(root, d))}

    lance_ops.write_dataset(pa.table({"a": pa.array([1, 2, 3], pa.int64())}), root, data_storage_version="2.2")
    old = files()
    events.clear()
    lance_ops.write_dataset(pa.table({"a": pa.array([4, 5], pa.int64())}), root, mode="append")
    new = files() - old
    assert {os.path.basename(os.path.dirname(p)) for p in new} == {"data", "_stats", "_transactions"}
    links = [i for i, (kind, p) in enumerate(events) if kind == "link" and "/_versions/" in p]
    assert len(links) == 1
    before = {p for kind, p in events[:links[0]] if kind == "fsync"}
    assert new <= before
