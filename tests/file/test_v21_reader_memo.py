"""The 2.1+ readers of one dataset object share what they derive from metadata bytes (ADR 0043).

Checked: files with byte-identical metadata share one parsed state and still read their own
data (equal to pylance's reads); a file replaced in place (same path, same size or not) is
never read through the state of the bytes it had; nothing is shared between dataset objects
or between readers opened on their own; and damaged metadata fails as before.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
import lance.file as lance_file  # noqa: E402

import lance_ops  # noqa: E402
from lance_ops.errors import CorruptFileError  # noqa: E402
from lance_ops.format.registry import open_file_reader  # noqa: E402
from lance_ops.format.v2_1.reader import LanceFileReaderV21  # noqa: E402
from lance_ops.io import LocalStore  # noqa: E402
from tests.file.type_matrix import assert_tables_equal  # noqa: E402


def _table(seed: int, n: int = 200) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": np.arange(n, dtype=np.int64)[::-1].copy() if seed % 2 else np.arange(n, dtype=np.int64),
        "x": rng.standard_normal(n),
        "name": pa.array([f"n{seed}-{i:04d}" for i in range(n)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4, dtype=np.float32)), 4),
    })


def _write(path, table: pa.Table, version: str = "2.2") -> str:
    with lance_file.LanceFileWriter(str(path), table.schema, version=version) as w:
        w.write_batch(table)
    return str(path)


def _open(path: str, memo: dict) -> LanceFileReaderV21:
    reader = open_file_reader(path, store=LocalStore(), memo=memo)
    assert isinstance(reader, LanceFileReaderV21)
    return reader


def _pylance(path: str) -> pa.Table:
    return lance_file.LanceFileReader(path).read_all().to_table()


def test_identical_metadata_is_parsed_once_and_each_file_reads_its_own_data(tmp_path):
    # same schema, same row count and same value sizes: byte-identical metadata regions
    paths = [_write(tmp_path / f"f{i}.lance", _table(i)) for i in range(1, 4)]
    memo: dict = {}
    readers = [_open(p, memo) for p in paths]
    assert readers[1]._meta is readers[0]._meta and readers[2]._meta is readers[0]._meta
    for r, p in zip(readers, paths):
        assert_tables_equal(r.read_all(), _pylance(p))
        assert_tables_equal(r.take_rows([5, 0, 199]), _pylance(p).take([5, 0, 199]))
    together = LanceFileReaderV21.read_all_of(readers, ["id", "name", "vec"])
    assert_tables_equal(together, pa.concat_tables([_pylance(p).select(["id", "name", "vec"]) for p in paths]))


def test_a_replaced_file_is_read_from_its_new_bytes(tmp_path):
    memo: dict = {}
    path = _write(tmp_path / "f.lance", _table(1))
    first = _open(path, memo)
    assert_tables_equal(first.read_all(), _table(1))
    # replaced by a file of the same size and metadata bytes but other values
    other = _write(tmp_path / "other.lance", _table(2))
    assert os.path.getsize(other) == os.path.getsize(path)
    shutil.copyfile(other, path)
    assert_tables_equal(_open(path, memo).read_all(), _table(2))
    # replaced by a file of another schema and size
    shutil.copyfile(_write(tmp_path / "third.lance", pa.table({"s": ["a", "bb", None]})), path)
    again = _open(path, memo)
    assert again._meta is not first._meta
    assert_tables_equal(again.read_all(), pa.table({"s": ["a", "bb", None]}))


def test_nothing_is_shared_between_dataset_objects_or_lone_readers(tmp_path):
    uri = str(tmp_path / "ds.lance")
    for i in range(3):
        lance.write_dataset(_table(i + 1), uri, mode="create" if i == 0 else "append", data_storage_version="2.2")
    a, b = lance_ops.dataset(uri), lance_ops.dataset(uri)
    ra = [f.data_file_reader(0) for f in a.get_fragments()]
    rb = [f.data_file_reader(0) for f in b.get_fragments()]
    assert all(x._meta is ra[0]._meta for x in ra)  # one dataset object: shared
    assert not {id(x._meta) for x in ra} & {id(y._meta) for y in rb}  # two objects: nothing shared
    assert_tables_equal(a.to_table(), lance.dataset(uri).to_table())
    path = ra[0].path
    assert LanceFileReaderV21(path)._meta is not LanceFileReaderV21(path)._meta


def test_damaged_metadata_fails_after_a_good_file_with_the_same_memo(tmp_path):
    memo: dict = {}
    good = _write(tmp_path / "good.lance", _table(1))
    _open(good, memo).read_all()
    data = bytearray(open(good, "rb").read())
    reader = _open(good, memo)
    pos, size = reader.global_buffer_locations()[0]
    data[pos:pos + size] = b"\xff" * size  # FileDescriptor garbled: the key bytes differ
    bad = tmp_path / "bad.lance"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="FileDescriptor"):
        _open(str(bad), memo)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_take_all_of_equals_taking_file_by_file(tmp_path, version):
    rng = np.random.default_rng(7)
    tables, paths = [], []
    for i in range(5):
        n = int(rng.integers(50, 400))
        t = pa.table({
            "id": np.arange(n, dtype=np.int64) + i * 10_000,
            "s": pa.array([None if k % 7 == 0 else "v" * int(k % 13) for k in range(n)]),
            "l": pa.array([None if k % 5 == 0 else list(range(int(k % 4))) for k in range(n)], pa.list_(pa.int32())),
        })
        tables.append(t)
        paths.append(_write(tmp_path / f"t{i}.lance", t, version))
    memo: dict = {}
    readers = [_open(p, memo) for p in paths]
    picks = [rng.integers(0, t.num_rows, int(rng.integers(0, 30))) for t in tables]
    picks[1] = np.array([3, 3, 0, 2, 1])  # repeats and any order
    picks[2] = np.arange(tables[2].num_rows)  # every row
    got = LanceFileReaderV21.take_all_of(readers, picks, ["id", "s", "l"])
    expected = pa.concat_tables([_pylance(p).take(pa.array(k, pa.int64())) for p, k in zip(paths, picks)])
    assert_tables_equal(got, expected)
    one_by_one = pa.concat_tables([r.take_rows(k, ["id", "s", "l"]) for r, k in zip(readers, picks)])
    assert_tables_equal(got, one_by_one)
