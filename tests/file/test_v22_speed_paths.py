"""Speed paths of the 2.1+ file format code (issue 20), held to exact results and exact bytes:
pages read back to back are joined as one view instead of copied, and the columns of a batch are
encoded on a thread pool without changing a byte of the file.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance_file = pytest.importorskip("lance.file")

from lance_ops.file import LanceFileReader, LanceFileWriter  # noqa: E402
from lance_ops.format import writer as writer_mod  # noqa: E402
from lance_ops.format.v2_1.compression.decode import adjacent_view  # noqa: E402


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "name": pa.array([f"name-{i % 977}-{'x' * (i % 13)}" for i in range(n)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 64, dtype=np.float32)), 64),
        "tags": pa.array([[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int32())),
    })


def test_adjacent_view_joins_back_to_back_slices_only() -> None:
    base = np.frombuffer(bytes(range(256)) * 4, dtype=np.uint8)
    view = adjacent_view([base[10:20], base[20:50]])
    assert view is not None and np.array_equal(view, base[10:50])
    assert view.__array_interface__["data"][0] == base[10:].__array_interface__["data"][0]  # no copy
    assert adjacent_view([base[10:20], base[21:50]]) is None  # a gap
    assert adjacent_view([base[10:20], base[0:10]]) is None  # out of order
    mv = memoryview(bytearray(range(100)))
    parts = [np.frombuffer(mv[0:40], dtype=np.uint8), np.frombuffer(mv[40:100], dtype=np.uint8)]
    joined = adjacent_view(parts)
    assert joined is not None and joined.tolist() == list(range(100))
    other = np.arange(30, dtype=np.uint8)
    assert adjacent_view([base[0:10], other]) is None  # another buffer


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_multi_page_column_reads_as_pylance_does(tmp_path, version: str) -> None:
    table = _table(20_000)
    path = str(tmp_path / "f.lance")
    # small pages: the fixed-size-list column spans many full-zip pages read as one range
    with lance_file.LanceFileWriter(path, table.schema, version=version, max_page_bytes=256 * 1024) as w:
        w.write_batch(table)
    ours = LanceFileReader(path).read_all()
    assert ours.equals(lance_file.LanceFileReader(path).read_all().to_table())
    assert ours.equals(table)
    assert LanceFileReader(path).read_range(777, 9000, columns=["vec"]).equals(table.select(["vec"]).slice(777, 9000))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_threaded_encoding_writes_the_same_bytes(tmp_path, monkeypatch, version: str) -> None:
    table = _table(30_000)
    outs = []
    for threads in (1, 3):
        monkeypatch.setattr(writer_mod, "ENCODE_THREADS", threads)
        path = tmp_path / f"t{threads}.lance"
        with LanceFileWriter(str(path), table.schema, version=version) as w:
            for batch in table.to_batches(max_chunksize=7_000):
                w.write_batch(batch)
        outs.append(path.read_bytes())
    assert outs[0] == outs[1]
    # and pylance reads the threaded file back exactly
    assert lance_file.LanceFileReader(str(tmp_path / "t3.lance")).read_all().to_table().equals(table)
