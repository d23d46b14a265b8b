"""``lance_ops.file.LanceFileReader`` wraps the registry's reader of the file's version (ADR 0002),
reads a 2.0 file's tail once, and keeps pylance's call signature and result shape (ADR 0015)."""
from __future__ import annotations

import inspect

import pyarrow as pa
import pytest

from lance_ops.file import LanceFileReader, LanceFileWriter
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.format.v2_0.reader import LanceFileReader as LanceFileReaderV20
from lance_ops.format.v2_0.reader import TAIL_READ_BYTES
from lance_ops.format.v2_1.reader import LanceFileReaderV21
from lance_ops.io import open_store

TABLE = pa.table({"id": pa.array(range(50), pa.int64()), "s": pa.array([f"v{i}" for i in range(50)])})


@pytest.mark.parametrize("version, reader_type", [
    ("2.0", LanceFileReaderV20), ("2.1", LanceFileReaderV21), ("2.2", LanceFileReaderV21),
    ("0.1", LegacyFileReader),
])
def test_returns_the_reader_of_the_file_version(tmp_path, version, reader_type):
    path = str(tmp_path / f"f{version}.lance")
    with LanceFileWriter(path, TABLE.schema, version=version) as w:
        w.write_batch(TABLE)
    with LanceFileReader(path) as reader:
        assert type(reader.format_reader) is reader_type
        assert reader.num_rows() == 50
        assert reader.read_all().to_table().equals(TABLE)
        assert reader.take_rows([3, 1]).to_table().column("id").to_pylist() == [3, 1]


def test_a_2_0_file_costs_one_tail_read(tmp_path):
    path = str(tmp_path / "f.lance")
    with LanceFileWriter(path, TABLE.schema, version="2.0") as w:
        w.write_batch(TABLE)
    store, inner = open_store(path)
    tails: list[int] = []
    real = store.read_tail

    def read_tail(p: str, n: int) -> tuple[bytes, int]:
        tails.append(n)
        return real(p, n)

    store.read_tail = read_tail  # type: ignore[method-assign]
    reader = LanceFileReader(inner, store=store)
    assert tails == [TAIL_READ_BYTES]
    assert reader.read_range(10, 5).to_table().equals(TABLE.slice(10, 5))


def test_keeps_pylance_signature():
    params = inspect.signature(LanceFileReader).parameters
    assert list(params)[:3] == ["path", "storage_options", "columns"]
    assert params["storage_options"].default is None
    assert params["store"].kind is inspect.Parameter.KEYWORD_ONLY
