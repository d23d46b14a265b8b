"""Upserts racing compaction (issue 23 item 4): compaction rewrites the fragments an upsert
plans against, appends and deletes land beside them; at the end every update applied once, every
append and delete landed, and no row is lost or doubled. pylance reads the result."""
from __future__ import annotations

import threading
import time

import lance
import pyarrow as pa

import lance_ops
from lance_ops.errors import RetryableCommitConflictError
from lance_ops.maintenance.compaction import compact_files

#: an upsert worker's rounds while no compaction has landed yet
MAX_ROUNDS = 40


def test_upserts_racing_compaction_appends_and_deletes_lose_nothing(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(200), pa.int64()), "v": [f"a{i}" for i in range(200)]}),
                            uri, max_rows_per_file=10)
    errors: list[BaseException] = []
    compactions: list[int] = []
    stop = threading.Event()

    def guarded(fn):
        def body(*args):
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        return body

    @guarded
    def upsert(k: int) -> None:
        # updates keys k*20 .. k*20+19 and inserts 500+k: round 0 writes t{k}.0, every later round
        # t{k}.1 again (idempotent), and rounds go on until a compaction has landed among them
        # (bounded), so the race is real however fast upserts are. Compaction conflicts with every
        # upsert touching its fragments (pylance's rule) and back-to-back upserts can starve it, so
        # the extra rounds leave it growing gaps
        rnd = 0
        while rnd < 2 or (not compactions and rnd < MAX_ROUNDS):
            if rnd >= 2:
                time.sleep(min(0.5, 0.05 * rnd))
            keys = pa.array([*range(k * 20, k * 20 + 20), 500 + k], pa.int64())
            lance_ops.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all() \
                .conflict_retries(100).execute(pa.table({"id": keys, "v": [f"t{k}.{min(rnd, 1)}"] * 21}))
            rnd += 1

    @guarded
    def append(k: int) -> None:
        lance_ops.write_dataset(pa.table({"id": pa.array([1000 + k], pa.int64()), "v": ["app"]}), uri, mode="append")

    @guarded
    def delete(k: int) -> None:  # keys 160..199 are neither upserted nor appended
        lance_ops.dataset(uri).delete(f"id >= {160 + 10 * k} AND id < {170 + 10 * k}")

    @guarded
    def compact() -> None:
        while not stop.is_set():
            try:
                m = compact_files(lance_ops.dataset(uri), target_rows_per_fragment=60, materialize_deletions_threshold=0.05)
                compactions.append(int(m["fragments_removed"]) if isinstance(m, dict) else 1)
            except RetryableCommitConflictError:
                continue

    workers = [threading.Thread(target=upsert, args=(k,)) for k in range(4)]
    workers += [threading.Thread(target=append, args=(k,)) for k in range(3)]
    workers += [threading.Thread(target=delete, args=(k,)) for k in range(2)]
    compactor = threading.Thread(target=compact)
    compactor.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    compactor.join()
    assert not errors, errors
    assert compactions  # compaction really ran alongside
    compact_files(lance_ops.dataset(uri), target_rows_per_fragment=60)  # and once more at the end
    got = lance.dataset(uri).to_table().sort_by("id").to_pydict()
    expect_ids = [*range(200), *range(500, 504), 1000, 1001, 1002]
    expect_ids = [i for i in expect_ids if not 160 <= i < 180]
    assert got["id"] == expect_ids
    expect_v = {i: f"a{i}" for i in range(80, 200)}
    expect_v.update({i: f"t{i // 20}.1" for i in range(80)})
    expect_v.update({500 + k: f"t{k}.1" for k in range(4)})
    expect_v.update({1000 + k: "app" for k in range(3)})
    assert got["v"] == [expect_v[i] for i in got["id"]]
    assert lance_ops.dataset(uri).to_table().sort_by("id").to_pydict() == got
