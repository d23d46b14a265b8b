"""LocalStore's calls for many small files (ADR 0054): ``put_new_many`` creates in place and never
overwrites, leaves nothing behind when it fails, and defers its fsyncs like ``put``;
``read_many_plain`` reads regular files and leaves everything else (None) to ``read``."""
from __future__ import annotations

import os

import pytest

import lance_ops.io.local as local_mod
from lance_ops.errors import AlreadyExistsError, StorageError
from lance_ops.io import open_store


def test_put_new_many_creates_refuses_taken_names_and_cleans_up(tmp_path):
    store, root = open_store(str(tmp_path / "ds"))
    a, b, c = (store.join(root, "_deletions", n) for n in ("1-1-1.arrow", "2-1-2.arrow", "3-1-3.arrow"))
    store.put_new_many([(a, b"aa"), (b, b"bbb")])  # the directory is made
    assert open(a, "rb").read() == b"aa" and open(b, "rb").read() == b"bbb"
    assert store.metrics.put_requests == 2 and store.metrics.bytes_written == 5
    with pytest.raises(AlreadyExistsError, match=r"put: .*2-1-2\.arrow already exists"):
        store.put_new_many([(c, b"c"), (b, b"new")])
    assert open(b, "rb").read() == b"bbb"  # never overwritten
    assert not os.path.exists(c)  # what the failed call created is gone
    assert sorted(os.listdir(os.path.dirname(a))) == ["1-1-1.arrow", "2-1-2.arrow"]


def test_put_new_many_failing_write_removes_the_calls_files(tmp_path, monkeypatch):
    store, root = open_store(str(tmp_path / "ds"))
    paths = [store.join(root, "_deletions", f"{i}-1-{i}.arrow") for i in range(3)]
    real, calls = local_mod._write_all, []

    def failing(fd, data):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(local_mod, "_write_all", failing)
    with pytest.raises(StorageError, match=r"put .*1-1-1\.arrow failed: .*No space left"):
        store.put_new_many([(p, b"x") for p in paths])
    assert os.listdir(os.path.dirname(paths[0])) == []


def test_put_new_many_defers_like_put(tmp_path, monkeypatch):
    store, root = open_store(str(tmp_path / "ds"))
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(local_mod.os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd))
    a, b = (store.join(root, "_deletions", n) for n in ("1-1-1.arrow", "2-1-2.arrow"))
    with store.deferred_sync():
        store.put_new_many([(a, b"a")])
    assert synced == []  # remembered for the barrier
    store.put_if_absent(store.join(root, "_versions", "1.manifest"), b"m")
    assert a in synced and os.path.dirname(a) in synced
    synced.clear()
    store.put_new_many([(b, b"b")])  # outside a scope: fsynced before it returns
    assert synced == [b]


def test_read_many_plain_reads_regular_files_only(tmp_path):
    store, root = open_store(str(tmp_path / "ds"))
    d = tmp_path / "ds" / "_deletions"
    d.mkdir(parents=True)
    (d / "a").write_bytes(b"A" * 70000)  # more than one read's worth of a small buffer
    (d / "b").write_bytes(b"")
    os.symlink(d / "a", d / "link")
    (d / "dir").mkdir()
    os.mkfifo(d / "fifo")
    names = ["a", "b", "link", "dir", "fifo", "missing"]
    got = store.read_many_plain([str(d / n) for n in names])
    assert got == [b"A" * 70000, b"", None, None, None, None]
    assert store.metrics.get_requests == 2 and store.metrics.bytes_read == 70000


def test_delete_many_removes_every_file_in_lanes_and_raises_after_the_rest(tmp_path):
    store, root = open_store(str(tmp_path / "ds"))
    names = [store.join(root, d, f"f{i}") for d in ("data", "_versions") for i in range(300)]
    for name in names:
        store.put(name, b"x")
    store.delete_many(names + [store.join(root, "data", "never-there")])  # missing: not an error
    assert os.listdir(os.path.join(root, "data")) == [] and os.listdir(os.path.join(root, "_versions")) == []
    assert store.metrics.delete_requests == len(names) + 1
    for name in names:
        store.put(name, b"x")
    blocker = store.join(root, "data", "a-directory")
    os.makedirs(os.path.join(blocker, "inside"))  # unlink of a directory fails
    with pytest.raises(StorageError, match="a-directory"):
        store.delete_many(names[:100] + [blocker] + names[100:])
    assert sorted(os.listdir(os.path.join(root, "data"))) == ["a-directory"]  # every other file went
    assert os.listdir(os.path.join(root, "_versions")) == []
