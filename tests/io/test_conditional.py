"""put_if_absent: one winner; losers get AlreadyExistsError; the content stays the winner's."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lance_ops.errors import AlreadyExistsError


def test_second_put_if_absent_raises_and_keeps_first(sr):
    path = sr.p("_versions", "1.manifest")
    sr.store.put_if_absent(path, b"first")
    with pytest.raises(AlreadyExistsError) as info:
        sr.store.put_if_absent(path, b"second")
    assert isinstance(info.value, FileExistsError)
    assert sr.store.read(path) == b"first"


def test_put_if_absent_after_delete_succeeds(sr):
    path = sr.p("k")
    sr.store.put_if_absent(path, b"one")
    sr.store.delete(path)
    sr.store.put_if_absent(path, b"two")
    assert sr.store.read(path) == b"two"


def test_put_if_absent_leaves_no_temp_files(sr):
    path = sr.p("d", "x")
    sr.store.put_if_absent(path, b"1")
    with pytest.raises(AlreadyExistsError):
        sr.store.put_if_absent(path, b"2")
    assert [o.path for o in sr.store.list(sr.root)] == [path]


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_put_if_absent_one_winner(sr, round_):
    path = sr.p("_versions", f"{round_ + 2}.manifest")
    threads = 8
    barrier = threading.Barrier(threads)

    def attempt(i: int) -> int | None:
        payload = f"writer-{i}".encode() * 1000
        barrier.wait()
        try:
            sr.store.put_if_absent(path, payload)
        except AlreadyExistsError:
            return None
        return i

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(attempt, range(threads)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1, results
    assert sr.store.read(path) == f"writer-{winners[0]}".encode() * 1000
