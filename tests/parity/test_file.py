"""``lance.file`` vs ``lance_ops.file``: the same calls, the same results (issue 24, slice 1)."""
from __future__ import annotations

import warnings

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops.file as lo_file
from tests.parity.helper import same

N = 3000
TABLE = pa.table({
    "a": pa.array(np.arange(N, dtype=np.int64)),
    "s": pa.array([f"v{i}" for i in range(N)]),
    "st": pa.array([{"x": i, "y": float(i)} for i in range(N)]),
})


@pytest.fixture(params=["2.0", "2.1", "2.2"])
def path(request, tmp_path) -> str:
    p = str(tmp_path / f"f{request.param}.lance")
    w = lance.file.LanceFileWriter(p, TABLE.schema, version=request.param)
    w.write_batch(TABLE)
    w.add_schema_metadata("k", "v")
    w.close()
    return p


def test_reads_return_reader_results(path):
    same(lambda lib: lib.file.LanceFileReader(path).read_all().to_table())
    same(lambda lib: lib.file.LanceFileReader(path).read_all(batch_size=1000).to_batches())
    same(lambda lib: [b.num_rows for b in lib.file.LanceFileReader(path).read_all(batch_size=700).to_batches()])
    same(lambda lib: lib.file.LanceFileReader(path).read_range(5, 2500, batch_size=1000).to_batches())
    same(lambda lib: lib.file.LanceFileReader(path).take_rows([1, 3, 2000, 2999]).to_table())
    same(lambda lib: [b.num_rows for b in lib.file.LanceFileReader(path).take_rows([1, 3, 9], batch_size=2).to_batches()])
    same(lambda lib: type(lib.file.LanceFileReader(path).read_all()).__name__)


def test_constructor_columns_and_methods(path):
    same(lambda lib: lib.file.LanceFileReader(path, columns=["s"]).read_all().to_table())
    same(lambda lib: lib.file.LanceFileReader(path, None, ["st", "a"]).read_range(10, 20).to_table())
    same(lambda lib: lib.file.LanceFileReader(path).num_rows())
    same(lambda lib: lib.file.LanceFileReader(path).read_global_buffer(0) is not None)


def test_metadata_and_statistics(path):
    def meta(lib):
        m = lib.file.LanceFileReader(path).metadata()
        return (m.num_rows, m.major_version, m.minor_version, m.num_data_bytes, m.num_column_metadata_bytes,
                m.num_global_buffer_bytes, [(b.position, b.size) for b in m.global_buffers],
                [([(b.position, b.size) for b in c.column_buffers], [[(b.position, b.size) for b in p.buffers]
                                                                      for p in c.pages]) for c in m.columns],
                m.schema.equals(TABLE.schema, check_metadata=False))

    same(meta)
    same(lambda lib: [(c.num_pages, c.size_bytes) for c in lib.file.LanceFileReader(path).file_statistics().columns])


def test_errors_match(path, tmp_path):
    same(lambda lib: lib.file.LanceFileReader(str(tmp_path / "missing.lance")))
    same(lambda lib: lib.file.LanceFileReader(path).read_range(2990, 20).to_table())
    same(lambda lib: lib.file.LanceFileReader(path, columns=["nope"]).read_all().to_table())


@pytest.mark.parametrize("version", [None, "2.0", "2.1", "2.2"])
def test_writer_options_and_files_pylance_reads(tmp_path, version):
    def write(lib):
        p = str(tmp_path / f"{lib.__name__}.lance")
        w = lib.file.LanceFileWriter(p, TABLE.schema, version=version, max_page_bytes=1 << 16,
                                     data_cache_bytes=1 << 20, storage_options={})
        w.write_batch(TABLE.slice(0, 1000))
        w.write_batch(TABLE.slice(1000))
        w.add_schema_metadata("owner", "me")
        idx = w.add_global_buffer(b"payload")
        rows = w.close()
        r = lance.file.LanceFileReader(p)  # pylance reads both files
        m = r.metadata()
        return (rows, idx, (m.major_version, m.minor_version), r.read_global_buffer(idx),
                r.read_all().to_table().equals(TABLE), r.metadata().schema.metadata.get(b"owner"))

    same(write)


def test_writer_without_schema_and_no_data(tmp_path):
    same(lambda lib: lib.file.LanceFileWriter(str(tmp_path / f"{lib.__name__}.lance")).close())


def test_old_property_access_still_works_with_a_warning(path):
    r = lo_file.LanceFileReader(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert r.num_rows() == N  # pylance's call: no warning
        m = r.metadata()
        assert r.metadata.num_rows == N == m.num_rows
        t = r.read_all().to_table()
    with pytest.warns(DeprecationWarning, match="num_rows"):
        assert r.num_rows == N
    with pytest.warns(DeprecationWarning, match="to_table"):
        assert r.read_all().num_rows == N
    with pytest.warns(DeprecationWarning, match="to_table"):
        assert r.take_rows([2, 1]).column("a").to_pylist() == [2, 1]
    with pytest.warns(DeprecationWarning, match="to_table"):
        assert r.read_all().equals(t)


NESTED = pa.table({"a": pa.array([1, 2, 3], pa.int64()),
                   "s": pa.array([{"x": 1, "y": "a", "z": {"q": 1.5, "r": 1}}, None,
                                  {"x": 3, "y": None, "z": None}])})


@pytest.mark.parametrize("columns", [["s.x"], ["s.y", "s.x"], ["s.z.q", "s.x"], ["s.x", "a"], ["a", "s.x"],
                                     ["s.z"], ["s.x", "s"], ["s.z.q", "s.z"], ["s.nope.x"], ["q.x"]])
def test_nested_columns_in_the_reader(tmp_path, columns):
    """``LanceFileReader(path, columns=["s.x"])`` reads ``s`` cut to ``struct<x>`` (struct nulls kept)."""
    p = str(tmp_path / "n.lance")
    with lance.file.LanceFileWriter(p, version="2.1") as w:
        w.write_batch(batch=NESTED)  # pylance's keyword
    same(lambda lib: lib.file.LanceFileReader(p, columns=columns).read_all().to_table())
    same(lambda lib: lib.file.LanceFileReader(p, columns=columns).take_rows([1, 2]).to_table())
    same(lambda lib: lib.file.LanceFileReader(p, columns=columns).read_range(2, 1).to_table())


def test_writer_takes_the_batch_keyword(tmp_path):
    def write_then_read(lib):
        p = str(tmp_path / f"{lib.__name__}.lance")
        with lib.file.LanceFileWriter(p, version="2.1") as w:
            w.write_batch(batch=NESTED)
        return lance.file.LanceFileReader(p).read_all().to_table()

    same(write_then_read)


def test_writer_earlier_data_keyword_warns(tmp_path):
    p = str(tmp_path / "d.lance")
    with lo_file.LanceFileWriter(p, version="2.1") as w:
        with pytest.warns(DeprecationWarning, match="batch="):
            w.write_batch(data=NESTED)
    assert lance.file.LanceFileReader(p).read_all().to_table().equals(NESTED)
    with pytest.raises(TypeError):
        lo_file.LanceFileWriter(str(tmp_path / "e.lance")).write_batch()
