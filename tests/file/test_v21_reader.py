"""LanceFileReaderV21 against files written by the real pylance (2.1 and 2.2).

Every read is compared with the source table and with pylance's own read of the same file.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance_file = pytest.importorskip("lance.file")

from lance_ops.errors import CorruptFileError, UnsupportedError  # noqa: E402
from lance_ops.format.v2_1.reader import LanceFileReaderV21  # noqa: E402
from lance_ops.io import open_store  # noqa: E402
from tests.file.type_matrix import assert_tables_equal, make_table  # noqa: E402

VERSIONS = ("2.1", "2.2")


def write(path, table: pa.Table, version: str, batch: int | None = None, **kw) -> str:
    with lance_file.LanceFileWriter(str(path), table.schema, version=version, **kw) as w:
        if batch:
            for b in table.to_batches(max_chunksize=batch):
                w.write_batch(b)
        elif table.num_rows:
            w.write_batch(table)
    return str(path)


def pylance_all(path: str) -> pa.Table:
    return lance_file.LanceFileReader(path).read_all().to_table()


# --------------------------------------------------------------------------------------------
# the type matrix
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1, 1000, 5000])
@pytest.mark.parametrize("mode", ["nulls", "no_nulls", "all_null"])
def test_type_matrix_read_all(tmp_path, version, n, mode):
    table = make_table(n, seed=n + 7, null_fraction=0.0 if mode == "no_nulls" else 0.2, all_null=mode == "all_null")
    path = write(tmp_path / "m.lance", table, version)
    r = LanceFileReaderV21(path)
    assert r.version == version
    assert r.num_rows == n
    assert r.num_columns == len(lance_file.LanceFileReader(path).metadata().columns)
    got = r.read_all()
    assert_tables_equal(got, table)
    assert_tables_equal(got, pylance_all(path))
    assert got.schema.metadata == table.schema.metadata


@pytest.mark.parametrize("version", VERSIONS)
def test_range_and_take_agree_with_pylance(tmp_path, version):
    n = 5000
    table = make_table(n, seed=11)
    path = write(tmp_path / "m.lance", table, version)
    r = LanceFileReaderV21(path)
    ref = lance_file.LanceFileReader(path)
    for start, cnt in [(0, 0), (0, 1), (n - 1, 1), (1234, 777), (3, n - 3)]:
        got = r.read_range(start, cnt)
        assert_tables_equal(got, table.slice(start, cnt))
        if cnt:
            assert_tables_equal(got, ref.read_range(start, cnt).to_table())
    rng = np.random.default_rng(3)
    idx = rng.integers(0, n, 300)
    got = r.take_rows(idx)  # unsorted, with duplicates
    assert_tables_equal(got, table.take(idx))
    uniq = np.unique(idx)
    assert_tables_equal(r.take_rows(uniq), ref.take_rows(uniq).to_table())
    assert r.take_rows([]).num_rows == 0
    sub = r.read_all(columns=["list_struct", "int32"])
    assert sub.column_names == ["list_struct", "int32"]
    assert_tables_equal(sub, table.select(["list_struct", "int32"]))
    with pytest.raises(IndexError):
        r.take_rows([n])
    with pytest.raises(IndexError):
        r.read_range(n - 1, 2)
    with pytest.raises(KeyError):
        r.read_all(columns=["nope"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [30_000, pytest.param(200_000, marks=pytest.mark.slow)])
def test_large_multi_page_multi_chunk(tmp_path, version, n):
    """Written in batches with a small page cache: many pages and chunks per column."""
    table = make_table(n, seed=5)
    path = write(tmp_path / "big.lance", table, version, batch=7000, data_cache_bytes=1 << 16 if n < 100_000 else 1 << 18)
    store, p = open_store(path)
    r = LanceFileReaderV21(p, store=store)
    assert max(len(r._column_pages(c)) for c in range(r.num_columns)) > 3
    assert_tables_equal(r.read_all(), table)
    ref = lance_file.LanceFileReader(path)
    rng = np.random.default_rng(9)
    idx = np.unique(rng.integers(0, n, 400))
    assert_tables_equal(r.take_rows(idx), ref.take_rows(idx).to_table())
    assert_tables_equal(r.read_range(n // 2 + 17, 5000), table.slice(n // 2 + 17, 5000))
    # take_rows reads only the chunks holding the rows
    store.metrics.reset()
    LanceFileReaderV21(p, store=store).read_all()
    full = store.metrics.snapshot()["bytes_read"]
    store.metrics.reset()
    got = LanceFileReaderV21(p, store=store).take_rows([7, n // 2, n - 1])
    few = store.metrics.snapshot()["bytes_read"]
    assert_tables_equal(got, table.take([7, n // 2, n - 1]))
    assert few * 10 < full, (few, full)


# --------------------------------------------------------------------------------------------
# nested and nullable structs
# --------------------------------------------------------------------------------------------
def _nested_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < 0.15
    inner = pa.StructArray.from_arrays(
        [pa.array([f"q{i}" for i in range(n)], mask=rng.random(n) < 0.3)], names=["z"],
        mask=pa.array(rng.random(n) < 0.2))
    nested = pa.StructArray.from_arrays([pa.array(rng.integers(0, 9, n)), inner], names=["x", "inner"], mask=pa.array(mask))
    sls = pa.array([{"l": [{"a": i, "b": None}, None, {"a": None, "b": "b"}] if i % 3 else []} if i % 5 else None
                    for i in range(n)],
                   pa.struct([("l", pa.list_(pa.struct([("a", pa.int32()), ("b", pa.string())])))]))
    lol = pa.array([[[i, None], None, []] if i % 4 else None for i in range(n)], pa.list_(pa.list_(pa.int64())))
    lfsl = pa.array([[[1.0, 2.0], None] if i % 2 else [] for i in range(n)], pa.list_(pa.list_(pa.float32(), 2)))
    return pa.table({"nested": nested, "sls": sls, "lol": lol, "lfsl": lfsl})


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [1, 3000])
def test_nullable_structs_and_nested_lists(tmp_path, version, n):
    table = _nested_table(n)
    path = write(tmp_path / "n.lance", table, version)
    r = LanceFileReaderV21(path)
    got = r.read_all()
    assert_tables_equal(got, table)
    assert_tables_equal(got, pylance_all(path))
    idx = np.arange(0, n, 7)
    assert_tables_equal(r.take_rows(idx), table.take(idx))


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------
def test_not_a_2_1_file(tmp_path):
    table = pa.table({"a": pa.array([1, 2, 3])})
    path = write(tmp_path / "old.lance", table, "2.0")
    with pytest.raises(UnsupportedError, match="2.0"):
        LanceFileReaderV21(path)


def test_damaged_bytes_raise_corrupt_file_error(tmp_path):
    table = make_table(2000, seed=1)
    path = write(tmp_path / "d.lance", table, "2.2")
    data = bytearray(open(path, "rb").read())
    r = LanceFileReaderV21(path)
    # scribble over the page data (everything before the metadata) with a repeating pattern
    meta_start = r._footer.column_meta_start
    rng = np.random.default_rng(0)
    hit = 0
    for trial in range(8):
        bad = bytearray(data)
        pos = rng.integers(0, meta_start - 4096, 1)[0]
        bad[pos:pos + 4096] = bytes(rng.integers(0, 256, 4096, dtype=np.uint8))
        p = tmp_path / f"bad{trial}.lance"
        p.write_bytes(bytes(bad))
        try:
            LanceFileReaderV21(str(p)).read_all()
        except CorruptFileError as exc:
            assert str(p) in str(exc)
            hit += 1
        except UnsupportedError as exc:
            assert str(p) in str(exc)
    # truncated file / bad footer
    p = tmp_path / "trunc.lance"
    p.write_bytes(bytes(data[:-10]))
    with pytest.raises(CorruptFileError, match="trunc.lance"):
        LanceFileReaderV21(str(p))
    # damaged metadata
    p = tmp_path / "meta.lance"
    bad = bytearray(data)
    bad[r._footer.column_meta_start:r._footer.column_meta_start + 64] = b"\xff" * 64
    p.write_bytes(bytes(bad))
    with pytest.raises((CorruptFileError, UnsupportedError), match="meta.lance"):
        LanceFileReaderV21(str(p)).read_all()


def test_unsupported_encoding_names_file_column_and_encoding(tmp_path, monkeypatch):
    from lance_ops.format.v2_1.layout import chunks
    from lance_ops.format.v2_1.compression import decode as comp

    table = pa.table({"a": pa.array(np.arange(3000, dtype=np.int64) % 7)})
    path = write(tmp_path / "u.lance", table, "2.2")

    def boom(*a, **k):
        raise comp.EncodingUnsupported("frobnicate(42)")

    monkeypatch.setattr(chunks, "batch_values", boom)
    with pytest.raises(UnsupportedError) as info:
        LanceFileReaderV21(path).read_all()
    msg = str(info.value)
    assert "u.lance" in msg and "column 0 (a)" in msg and "frobnicate" in msg


def test_global_buffers_and_metadata(tmp_path):
    table = make_table(10, seed=2)
    path = write(tmp_path / "g.lance", table, "2.2")
    r = LanceFileReaderV21(path)
    assert r.read_global_buffer(0) == lance_file.LanceFileReader(path).read_global_buffer(0)
    assert [f.name for f in r.lance_fields][:2] == ["bool", "int8"]
    assert r.schema.equals(table.schema, check_metadata=False)
    with pytest.raises(IndexError):
        r.read_global_buffer(5)


# --------------------------------------------------------------------------------------------
# small files: one read (ADR 0022)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.0", *VERSIONS])
def test_small_file_is_read_with_its_tail(tmp_path, version):
    """A file smaller than the tail read costs one GET: the dispatch's tail read is handed to the
    reader, which serves every later range from it; reads equal pylance's."""
    from lance_ops.format.registry import open_file_reader

    import os

    table = make_table(40, seed=3)
    path = write(tmp_path / "small.lance", table, version)
    assert os.path.getsize(path) < 64 * 1024
    store, p = open_store(path)
    store.metrics.reset()
    r = open_file_reader(p, store=store)
    got_all = r.read_all()
    got_range = r.read_range(17, 20)
    got_take = r.take_rows([3, 20, 39])
    assert store.metrics.snapshot()["get_requests"] == 1
    ref = lance_file.LanceFileReader(path)
    assert_tables_equal(got_all, pylance_all(path))
    assert_tables_equal(got_range, ref.read_range(17, 20).to_table())
    assert_tables_equal(got_take, ref.take_rows([3, 20, 39]).to_table())
