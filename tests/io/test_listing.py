"""list / list_dir / delete / delete_many / copy on both stores."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lance_ops.io import ObjectInfo


def _populate(sr):
    files = {
        "a.txt": b"a",
        "b/c.bin": b"cc",
        "b/d/e.bin": b"eee",
        "bc.txt": b"not-under-b",
    }
    for rel, data in files.items():
        sr.store.put(sr.p(rel), data)
    return files


def test_list_recursive(sr):
    files = _populate(sr)
    infos = list(sr.store.list(sr.root))
    assert all(isinstance(i, ObjectInfo) for i in infos)
    assert {i.path: i.size for i in infos} == {sr.p(k): len(v) for k, v in files.items()}
    now = datetime.now(timezone.utc)
    for info in infos:
        assert info.last_modified.tzinfo is not None
        assert info.last_modified.utcoffset() == timedelta(0)
        assert abs(now - info.last_modified) < timedelta(minutes=5)


def test_list_is_directory_scoped(sr):
    _populate(sr)
    assert sorted(i.path for i in sr.store.list(sr.p("b"))) == [sr.p("b/c.bin"), sr.p("b/d/e.bin")]
    assert sorted(i.path for i in sr.store.list(sr.p("b") + "/")) == [
        sr.p("b/c.bin"),
        sr.p("b/d/e.bin"),
    ]


def test_list_missing_prefix_is_empty(sr):
    assert list(sr.store.list(sr.p("does", "not", "exist"))) == []
    assert list(sr.store.list_dir(sr.p("does", "not", "exist"))) == []


def test_list_dir_one_level_files_only(sr):
    _populate(sr)
    assert sorted(i.path for i in sr.store.list_dir(sr.root)) == [sr.p("a.txt"), sr.p("bc.txt")]
    assert [i.path for i in sr.store.list_dir(sr.p("b"))] == [sr.p("b/c.bin")]
    assert [i.size for i in sr.store.list_dir(sr.p("b", "d"))] == [3]


def test_list_dir_selected_looks_only_at_the_picked_files(sr):
    _populate(sr)
    seen = []

    def pick(paths):
        seen.append(paths)
        return [p for p in paths if p.endswith("bc.txt")]

    got = sr.store.list_dir_selected(sr.root, pick)
    assert seen == [[sr.p("a.txt"), sr.p("bc.txt")]]  # every file of the directory, sorted; no sub-directory
    assert [(i.path, i.size) for i in got] == [(sr.p("bc.txt"), len(b"not-under-b"))]
    assert got[0].last_modified.utcoffset() == timedelta(0)
    assert sr.store.list_dir_selected(sr.p("does", "not", "exist"), pick) == []
    assert sr.store.list_dir_selected(sr.root, lambda paths: []) == []


def test_delete(sr):
    _populate(sr)
    sr.store.delete(sr.p("a.txt"))
    assert not sr.store.exists(sr.p("a.txt"))
    sr.store.delete(sr.p("a.txt"))  # missing: no error
    sr.store.delete(sr.p("never", "was"))
    assert len(list(sr.store.list(sr.root))) == 3


def test_delete_many(sr):
    paths = [sr.p("many", f"{i:03d}") for i in range(7)]
    for p in paths:
        sr.store.put(p, b"x")
    sr.store.put(sr.p("many", "keep"), b"k")
    sr.store.metrics.reset()
    sr.store.delete_many(paths + [sr.p("many", "missing")])
    assert [i.path for i in sr.store.list(sr.p("many"))] == [sr.p("many", "keep")]
    sr.store.delete_many([])


def test_delete_many_batches_on_s3(moto_server, s3_bucket):
    from lance_ops.io import open_store

    store, root = open_store(s3_bucket, moto_server.storage_options)
    store.delete_batch_size = 3
    paths = [store.join(root, f"k{i}") for i in range(7)]
    for p in paths:
        store.put(p, b"x")
    store.metrics.reset()
    store.delete_many(iter(paths))
    assert store.metrics.delete_requests == 3
    assert list(store.list(root)) == []


def test_copy(sr):
    sr.store.put(sr.p("src.bin"), b"payload" * 1000)
    sr.store.copy(sr.p("src.bin"), sr.p("sub", "dst.bin"))
    assert sr.store.read(sr.p("sub", "dst.bin")) == b"payload" * 1000
    assert sr.store.read(sr.p("src.bin")) == b"payload" * 1000
    sr.store.put(sr.p("other"), b"o")
    sr.store.copy(sr.p("other"), sr.p("sub", "dst.bin"))  # overwrite
    assert sr.store.read(sr.p("sub", "dst.bin")) == b"o"
