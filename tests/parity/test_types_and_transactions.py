"""Extension types pylance round-trips, ``BlobColumn``, and transactions (issue 24, slice 7)."""
from __future__ import annotations

import uuid

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from tests.parity.helper import same


def _tensor() -> pa.Array:
    t = pa.fixed_shape_tensor(pa.float32(), [2, 2])
    storage = pa.array([[1, 2, 3, 4], [5, 6, 7, 8], None], pa.list_(pa.float32(), 4))
    return pa.ExtensionArray.from_storage(t, storage)


def _json() -> pa.Array:
    return pa.array(['{"a": 1}', "[1, 2]", None], pa.json_())


def _uuid() -> pa.Array:
    return pa.array([uuid.UUID(int=i).bytes for i in (1, 2, 3)], pa.uuid())


def _bfloat16() -> pa.Array:
    from lance.arrow import BFloat16Type  # pylance's bfloat16 extension type (test-only)

    bits = np.array([0x3F80, 0x4000, 0xC040], dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(2), 3, [None, pa.py_buffer(bits.tobytes())])
    return pa.ExtensionArray.from_storage(BFloat16Type(), storage)


CASES = {"fixed_shape_tensor": _tensor, "uuid": _uuid, "bfloat16": _bfloat16, "json": _json}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_extension_types_round_trip(tmp_path, name, version):
    table = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "x": CASES[name]()})

    def write_then_read(writer, reader):
        uri = str(tmp_path / f"{writer.__name__}-{reader.__name__}.lance")
        writer.write_dataset(table, uri, data_storage_version=version)
        return reader.dataset(uri).to_table()

    uri = str(tmp_path / "want.lance")
    lance.write_dataset(table, uri, data_storage_version=version)
    want = lance.dataset(uri).to_table()
    for writer in (lance, lance_ops):
        for reader in (lance, lance_ops):
            got = write_then_read(writer, reader)
            assert got.schema.field("x").type == want.schema.field("x").type, (writer, reader)
            assert got.column("x").to_pylist() == want.column("x").to_pylist(), (writer, reader)
            # takes restore the extension type too (dataset take, pylance's _take_rows, fragment take)
            ds = reader.dataset(str(tmp_path / f"{writer.__name__}-{reader.__name__}.lance"))
            for taken in (ds.take([2, 0]), ds._take_rows([2, 0]), ds.get_fragments()[0].take([1])):
                assert taken.schema.field("x").type == want.schema.field("x").type, (writer, reader)
            assert ds.take([2, 0]).equals(want.take([2, 0])), (writer, reader)


def test_blob_column(tmp_path):
    table = pa.table({"b": pa.array([b"abc", None, b"x" * 100], pa.large_binary())})

    def read(lib):
        return [None if f is None else f.read() for f in lib.BlobColumn(table.column("b"))]

    same(read)
    same(lambda lib: [None if f is None else f.read() for f in lib.BlobColumn(table.column("b").chunk(0))])
    same(lambda lib: lib.BlobColumn(pa.array([1, 2])))
    same(lambda lib: lib.BlobColumn([b"a"]))


def test_transactions(tmp_path):
    uri = str(tmp_path / "tx.lance")
    t = pa.table({"a": [1, 2, 3]})
    lance.write_dataset(t, uri)
    lance.write_dataset(t, uri, mode="append", commit_message="second batch")
    lance.dataset(uri).delete("a = 2")

    def txs(lib):
        ds = lib.dataset(uri)
        return [(tx.read_version, type(tx.operation).__name__, dict(tx.transaction_properties or {}))
                for tx in ds.get_transactions()]

    same(txs)
    same(lambda lib: type(lib.dataset(uri).read_transaction(2).operation).__name__)
    same(lambda lib: (lib.dataset(uri).read_transaction(2).transaction_properties or {}).get("lance.commit.message"))
