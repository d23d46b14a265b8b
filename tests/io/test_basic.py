"""put/read/size/exists, ranged reads, tails and missing-object errors on both stores."""
from __future__ import annotations

import pytest

from lance_ops.errors import CorruptFileError, ObjectNotFoundError

DATA = bytes(range(256)) * 40  # 10240 bytes


def test_put_read_size_exists(sr):
    path = sr.p("a", "b", "obj.bin")
    assert not sr.store.exists(path)
    sr.store.put(path, DATA)
    assert sr.store.exists(path)
    assert sr.store.size(path) == len(DATA)
    assert sr.store.read(path) == DATA
    sr.store.put(path, b"second")  # overwrite
    assert sr.store.read(path) == b"second"
    assert sr.store.size(path) == 6


def test_empty_object(sr):
    path = sr.p("empty")
    sr.store.put(path, b"")
    assert sr.store.read(path) == b""
    assert sr.store.size(path) == 0
    assert sr.store.read_tail(path, 16) == (b"", 0)


def test_read_range(sr):
    path = sr.p("r.bin")
    sr.store.put(path, DATA)
    assert sr.store.read_range(path, 0, 10) == DATA[:10]
    assert sr.store.read_range(path, 1000, 3000) == DATA[1000:4000]
    assert sr.store.read_range(path, len(DATA) - 1, 1) == DATA[-1:]
    assert sr.store.read_range(path, 5, 0) == b""


def test_read_range_past_end_is_corrupt(sr):
    path = sr.p("r.bin")
    sr.store.put(path, DATA)
    with pytest.raises(CorruptFileError):
        sr.store.read_range(path, len(DATA) - 5, 10)
    with pytest.raises(CorruptFileError):
        sr.store.read_range(path, len(DATA) + 5, 10)


def test_read_tail(sr):
    path = sr.p("t.bin")
    sr.store.put(path, DATA)
    sr.store.metrics.reset()
    assert sr.store.read_tail(path, 100) == (DATA[-100:], len(DATA))
    assert sr.store.metrics.get_requests == 1
    assert sr.store.metrics.head_requests == 0
    # smaller file than requested: everything, still one request
    assert sr.store.read_tail(path, len(DATA) * 2) == (DATA, len(DATA))
    assert sr.store.read_tail(path, len(DATA)) == (DATA, len(DATA))
    assert sr.store.metrics.get_requests == 3
    assert sr.store.read_tail(path, 0) == (b"", len(DATA))


def test_metrics_count_bytes(sr):
    path = sr.p("m.bin")
    sr.store.put(path, DATA)
    assert sr.store.metrics.put_requests == 1
    sr.store.metrics.reset()
    sr.store.read(path)
    sr.store.read_range(path, 10, 20)
    snap = sr.store.metrics.snapshot()
    assert snap["get_requests"] == 2
    assert snap["bytes_read"] == len(DATA) + 20
    assert snap["put_requests"] == 0


@pytest.mark.parametrize(
    "op",
    [
        lambda s, p: s.read(p),
        lambda s, p: s.read_range(p, 0, 4),
        lambda s, p: s.read_tail(p, 4),
        lambda s, p: s.read_ranges(p, [(0, 4), (100, 4)]),
        lambda s, p: s.size(p),
        lambda s, p: s.copy(p, p + ".copy"),
    ],
    ids=["read", "read_range", "read_tail", "read_ranges", "size", "copy"],
)
def test_missing_object_raises_not_found_naming_uri(sr, op):
    path = sr.p("nope", "missing.lance")
    with pytest.raises(ObjectNotFoundError) as info:
        op(sr.store, path)
    assert sr.store.uri(path) in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


def test_uri_round_trip(sr):
    from lance_ops.io import open_store

    path = sr.p("x", "y.bin")
    sr.store.put(path, b"abc")
    store2, path2 = open_store(sr.store.uri(path), sr.storage_options)
    assert path2 == path
    assert store2.read(path2) == b"abc"
