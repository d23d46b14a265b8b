"""Compaction's source reading (ADR 0034, 0041): small fragments read together in groups, read
ahead by a bounded queue; the output equals pylance's compaction of the same dataset row for row,
at 2.0 and 2.2, with deletions, and never more than ``PREFETCH + 1`` groups are held at once; the
readers of a group's files leave the task's reader cache once the group is read (ADR 0048)."""
from __future__ import annotations

import shutil
import threading

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.maintenance.compaction import compact_files, source


def _small_fragments(uri: str, version: str) -> None:
    rng = np.random.default_rng(7)
    for i in range(24):
        n = int(rng.integers(5, 60))
        ids = np.arange(i * 100, i * 100 + n, dtype=np.int64)
        t = pa.table({"id": ids, "x": rng.random(n), "name": pa.array([None if j % 7 == 0 else f"n{j}" for j in ids]),
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4), pa.float32()), 4)})
        lance.write_dataset(t, uri, mode="create" if i == 0 else "append", data_storage_version=version)
    lance.dataset(uri).delete("id % 11 = 3")


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_groups_read_ahead_give_pylance_data(tmp_path, monkeypatch, version):
    uri = str(tmp_path / "src.lance")
    _small_fragments(uri, version)
    theirs, ours = str(tmp_path / "theirs.lance"), str(tmp_path / "ours.lance")
    shutil.copytree(uri, theirs)
    shutil.copytree(uri, ours)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=1 << 20)
    monkeypatch.setattr(source, "GROUP_ROWS", 150)  # several groups, several read ahead
    held, peak, lock = [0], [0], threading.Lock()
    cached_after: list[int] = []
    real_load, real_account = source.TaskReader._load, source.TaskReader._account

    def load(self, group, pool):
        with lock:
            held[0] += 1
            peak[0] = max(peak[0], held[0])
        tables = real_load(self, group, pool)
        paths = {(df.path,) for proto, _ in group for df in proto.files}
        cached_after.append(len(paths & set(self._view.cache("lance_ops.file_readers"))))
        return tables

    def account(self, group, tables):
        with lock:
            held[0] -= 1
        return real_account(self, group, tables)

    monkeypatch.setattr(source.TaskReader, "_load", load)
    monkeypatch.setattr(source.TaskReader, "_account", account)
    metrics = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=1 << 20)
    assert metrics["fragments_removed"] == 24 and metrics["fragments_added"] == 1
    assert 1 < peak[0] <= source.PREFETCH + 1
    assert len(cached_after) > 1 and set(cached_after) == {0}  # no reader of a read group stays cached
    want = lance.dataset(theirs).to_table()
    assert lance.dataset(ours).to_table().equals(want)
    assert lance_ops.dataset(ours).to_table().equals(want)
    assert len(lance.dataset(ours).get_fragments()) == 1
