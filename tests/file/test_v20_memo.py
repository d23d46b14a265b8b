"""Readers of one dataset's 2.0 files share parsed metadata through a memo keyed by bytes
(``lance_ops.format.v2_0.memo``, ADR 0044): results equal reading alone, a replaced file is read
afresh, and a column whose bytes were seen in a larger file is still checked against this file."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.errors import CorruptFileError
from lance_ops.format.v2_0 import batch
from lance_ops.format.v2_0.memo import ReadMemo, memo_of
from lance_ops.format.v2_0.reader import LanceFileReader
from tests.file.test_bad_input import Surgery, rewrite_file, write_pylance

lance = pytest.importorskip("lance")


def _table(seed: int, n: int = 50) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64) + seed * n),
        "x": pa.array(rng.standard_normal(n)),
        "s": pa.array([f"r{seed}-{'z' * int(k)}" if k % 4 else None for k in rng.integers(0, 9, n)]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3, dtype=np.float32)), 3),
    })


def test_shared_memo_reads_what_reading_alone_reads(tmp_path):
    paths = [write_pylance(tmp_path / f"f{i}.lance", _table(i)) for i in range(12)]
    shared: dict = {}
    readers = [LanceFileReader(p, memo=shared) for p in paths]
    memo = memo_of(shared)
    assert isinstance(memo, ReadMemo) and memo_of(shared) is memo
    assert len(memo.descriptors) == 1  # one schema, one row count: parsed once
    for r, p in zip(readers, paths):
        alone = LanceFileReader(p)
        assert r.read_all().equals(alone.read_all())
        assert r.take_rows([3, 1, 49]).equals(alone.take_rows([3, 1, 49]))
        assert r.read_range(5, 20, columns=["s", "id"]).equals(alone.read_range(5, 20, columns=["s", "id"]))
        assert r.lance_fields == alone.lance_fields and r.num_rows == alone.num_rows
    got = batch.read_all_of([LanceFileReader(p, memo=shared) for p in paths], ["x", "s", "v", "id"])
    assert got.equals(pa.concat_tables([_table(i).select(["x", "s", "v", "id"]) for i in range(12)]).cast(got.schema))
    assert memo_of(None) is not memo_of(None)  # a reader alone shares nothing


def test_replaced_file_is_read_afresh(tmp_path):
    path = tmp_path / "f.lance"
    shared: dict = {}
    write_pylance(path, _table(1))
    assert LanceFileReader(str(path), memo=shared).read_all().equals(_table(1))
    write_pylance(path, _table(2))  # same schema and rows, other bytes at the same path
    assert LanceFileReader(str(path), memo=shared).read_all().equals(_table(2))


def test_column_seen_in_a_larger_file_is_checked_against_this_file(tmp_path):
    n = 1000
    src = write_pylance(tmp_path / "a.lance", pa.table({"a": np.arange(n, dtype=np.int64),
                                                        "b": np.arange(n, dtype=np.int64)}))
    pos = len(Surgery(open(src, "rb").read()).body) + (-len(Surgery(open(src, "rb").read()).body)) % 64

    def point_b_at(s: Surgery, add: bool) -> None:
        if add:
            assert s.add_buffer(np.full(n, 7, dtype=np.int64).tobytes()) == pos
        page = s.columns[1].pages[0]
        page.buffer_offsets[0] = pos  # column b's values: the buffer added after the data

    big = rewrite_file(src, tmp_path / "big.lance", lambda s: point_b_at(s, True))
    small = rewrite_file(src, tmp_path / "small.lance", lambda s: point_b_at(s, False))
    with pytest.raises(CorruptFileError) as alone:
        LanceFileReader(small).read_all()
    assert "beyond the end of the data" in str(alone.value)
    shared: dict = {}
    assert LanceFileReader(big, memo=shared).read_all().column("b").to_pylist() == [7] * n
    with pytest.raises(CorruptFileError) as after:
        LanceFileReader(small, memo=shared).read_all()  # equal column bytes, shorter file
    assert str(after.value) == str(alone.value)
