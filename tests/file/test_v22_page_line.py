"""2.1+ pages encoded in the background (``format/v2_1/page_line.py``, ADR 0055): ``write_batch``
does not wait for a page being encoded, the file's bytes are those of the writer that waits, a
failed page fails the file, and datasets cut into files and statistics exactly as before.
"""
from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
import lance.file as lance_file  # noqa: E402

import lance_ops  # noqa: E402
from lance_ops.file import LanceFileWriter  # noqa: E402
from lance_ops.format import writer as writer_mod  # noqa: E402
from lance_ops.format.v2_1.encode import FieldEncoderV21  # noqa: E402


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(11)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "name": pa.array([f"n{i % 5003}-{'y' * (i % 17)}" for i in range(n)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16),
        "info": pa.StructArray.from_arrays([pa.array(rng.integers(0, 9, n, dtype=np.int32)),
                                            pa.array([None if i % 7 == 0 else str(i) for i in range(n)])],
                                           names=["a", "s"]),
    })


def _write(path: str, table: pa.Table, threads: int, monkeypatch, **kw) -> bytes:
    monkeypatch.setattr(writer_mod, "ENCODE_THREADS", threads)
    with LanceFileWriter(path, table.schema, version="2.2", **kw) as w:
        for batch in table.to_batches(max_chunksize=2_500):
            w.write_batch(batch)
    with open(path, "rb") as f:
        return f.read()


def test_background_pages_write_the_same_bytes(tmp_path, monkeypatch) -> None:
    # small budgets: pages are cut while batches stream in, some inside a batch (max_page_bytes)
    table = _table(20_000)
    kw = {"data_cache_bytes": 4 * 48 * 1024, "max_page_bytes": 100 * 1024}
    waited = _write(str(tmp_path / "w.lance"), table, 1, monkeypatch, **kw)
    background = _write(str(tmp_path / "b.lance"), table, 3, monkeypatch, **kw)
    assert background == waited
    got = lance_file.LanceFileReader(str(tmp_path / "b.lance")).read_all().to_table()
    assert got.equals(table)
    assert sum(len(c.pages) for c in lance_file.LanceFileReader(str(tmp_path / "b.lance")).metadata().columns) > 25


def test_write_batch_does_not_wait_for_a_page(tmp_path, monkeypatch) -> None:
    table = _table(6_000)
    release, started = threading.Event(), threading.Event()
    original = FieldEncoderV21._encode_at

    def slow(self, arrays, first_row):
        if self.field.name == "name" and not started.is_set():
            started.set()
            assert release.wait(30), "the test never released the page"
        return original(self, arrays, first_row)

    monkeypatch.setattr(FieldEncoderV21, "_encode_at", slow)
    monkeypatch.setattr(writer_mod, "ENCODE_THREADS", 4)  # (a line of 10 jobs)
    path = str(tmp_path / "x.lance")
    w = LanceFileWriter(path, table.schema, version="2.2", data_cache_bytes=4 * 16 * 1024)
    try:
        for batch in table.to_batches(max_chunksize=3_000):  # (8 pages: fewer than the line holds)
            w.write_batch(batch)  # returns although the first "name" page is still being encoded
        # every batch was taken while the first "name" page cannot finish (it waits for ``release``)
        assert w.rows_written == 6_000
        assert started.wait(30)
    finally:
        release.set()
    w.close()
    assert lance_file.LanceFileReader(path).read_all().to_table().equals(table)


def test_a_failed_page_fails_the_file(tmp_path, monkeypatch) -> None:
    table = _table(6_000)
    original = FieldEncoderV21._encode_at
    calls = []

    def failing(self, arrays, first_row):
        calls.append(self.field.name)
        if len(calls) == 3:
            raise RuntimeError("encoder broke")
        return original(self, arrays, first_row)

    monkeypatch.setattr(FieldEncoderV21, "_encode_at", failing)
    monkeypatch.setattr(writer_mod, "ENCODE_THREADS", 3)
    path = str(tmp_path / "x.lance")
    with pytest.raises(RuntimeError, match="encoder broke"):
        with LanceFileWriter(path, table.schema, version="2.2", data_cache_bytes=4 * 16 * 1024) as w:
            for batch in table.to_batches(max_chunksize=1_000):
                w.write_batch(batch)
    assert not os.path.exists(path)
    assert not [f for f in os.listdir(tmp_path)]  # no temp file left either


def test_dataset_files_and_statistics_as_before(tmp_path, monkeypatch, caplog) -> None:
    # a small file size limit: where files are cut must not depend on encoding threads
    table = _table(30_000)
    monkeypatch.setattr(writer_mod, "DEFAULT_CACHE_BYTES_PER_COLUMN", 64 * 1024)  # pages as batches arrive
    frags, data = {}, {}
    for threads in (1, 3):
        monkeypatch.setattr(writer_mod, "ENCODE_THREADS", threads)
        uri = str(tmp_path / f"d{threads}")
        batches = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=1_000))
        with caplog.at_level(logging.WARNING):
            lance_ops.write_dataset(batches, uri, data_storage_version="2.2", max_bytes_per_file=700_000)
        ds = lance_ops.dataset(uri)
        frags[threads] = [f.physical_rows for f in ds.manifest.fragments]
        files = [f.files[0].path for f in ds.manifest.fragments]
        data[threads] = [open(os.path.join(uri, "data", p), "rb").read() for p in files]
        assert sorted(os.listdir(os.path.join(uri, "_stats"))) == sorted(p[:-len(".lance")] + ".stats.lance"
                                                                          for p in files)
        assert lance.dataset(uri).to_table().equals(table)
    assert "statistics" not in caplog.text
    assert frags[1] == frags[3] and len(frags[1]) > 2, frags
    assert data[1] == data[3]
