"""``small_file_bytes``: a small flat table's Lance 2.0 file made in memory equals the writer's file, byte for byte (ADR 0053)."""
from __future__ import annotations

import decimal
import os

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops.format.registry import LanceFileWriter
from lance_ops.format.writer import small_file_bytes
from lance_ops.table.stats.store import PageRecord, PageStat, stats_table

_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(), pa.float16(),
          pa.float32(), pa.float64(), pa.bool_(), pa.date32(), pa.timestamp("us"), pa.timestamp("ns", tz="UTC"),
          pa.duration("ms"), pa.time64("us"), pa.decimal128(12, 3), pa.string(), pa.large_string(), pa.binary(),
          pa.large_binary(), pa.binary(4)]


def _values(t: pa.DataType, n: int, rng: np.random.Generator, nulls: bool, repeat: bool) -> pa.Array:
    """``n`` values of ``t`` (a few distinct ones if ``repeat``: the string encoder's dictionary path)."""
    k = 3 if repeat else n
    pick = rng.integers(0, max(k, 1), n)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        vals = [("v" * int(i % 7)) + str(i) for i in pick]
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        vals = [bytes([int(i) % 256]) * int(i % 5) for i in pick]
    elif pa.types.is_fixed_size_binary(t):
        vals = [int(i).to_bytes(4, "little") for i in pick]
    elif pa.types.is_boolean(t):
        vals = [bool(i % 2) for i in pick]
    elif pa.types.is_decimal(t):
        vals = [decimal.Decimal(int(i)) / 1000 for i in pick]
    elif pa.types.is_floating(t):
        vals = [float(i) / 3 for i in pick]
    else:
        vals = [int(i) % 100 for i in pick]
    mask = rng.random(n) < 0.3 if nulls else np.zeros(n, dtype=bool)
    if pa.types.is_float16(t):
        arr = pa.array(np.asarray(vals, dtype=np.float16), type=t)
    else:
        arr = pa.array(vals, type=t)
    return pa.array([None if m else v for v, m in zip(arr.to_pylist(), mask)], type=t) if nulls else arr


def _writer_bytes(table: pa.Table, path: str) -> bytes:
    with LanceFileWriter(path, table.schema) as w:
        w.write_batch(table)
    with open(path, "rb") as fh:
        return fh.read()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(_TYPES), st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=8),
       st.integers(1, 300), st.integers(0, 2**32 - 1), st.booleans())
def test_small_file_bytes_equal_the_writer(tmp_path, cols, rows, seed, with_metadata) -> None:
    rng = np.random.default_rng(seed)
    fields, arrays = [], []
    for i, (t, nullable, nulls, repeat) in enumerate(cols):
        fields.append(pa.field(f"c{i}", t, nullable=nullable))
        arrays.append(_values(t, rows, rng, nulls and nullable, repeat))
    meta = {b"lance_ops.stats.format": b"1", "k": "v"} if with_metadata else None
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))
    got = small_file_bytes(table)
    assert got is not None
    assert got == _writer_bytes(table, str(tmp_path / f"w{seed}.lance"))


def test_statistics_tables_take_it_and_pylance_reads_them(tmp_path) -> None:
    """A statistics table (as :func:`stats_table` makes it) is made in memory, with the writer's
    bytes, and pylance reads the file back."""
    recs = [PageRecord(0, 0, 0, 1000, PageStat(0, None, pa.scalar(5, pa.int64()), pa.scalar(900, pa.int64())), pa.int64()),
            PageRecord(1, 0, 0, 1000, PageStat(3, 2, pa.scalar(-1.5), pa.scalar(2.0)), pa.float64()),
            PageRecord(2, 0, 0, 1000, PageStat(0, None, pa.scalar("a"), pa.scalar("zz")), pa.string()),
            PageRecord(3, 0, 0, 1000, PageStat(1000, None, None, None), pa.string())]
    table = stats_table(recs, "x.lance", 1000)
    got = small_file_bytes(table)
    assert got is not None and got == _writer_bytes(table, str(tmp_path / "w.lance"))
    path = str(tmp_path / "s.lance")
    with open(path, "wb") as fh:
        fh.write(got)
    back = lance.file.LanceFileReader(path).read_all().to_table()
    assert back.equals(table.replace_schema_metadata(None)) or back.to_pylist() == table.to_pylist()


@pytest.mark.parametrize("case", ["empty", "chunked", "struct", "list", "dictionary", "null_in_non_null",
                                  "field_metadata", "big"])
def test_other_tables_are_left_to_the_writer(case: str) -> None:
    """Anything not known to give the writer's bytes is declined (None)."""
    ints = pa.array([1, 2, 3], pa.int64())
    if case == "empty":
        table = pa.table({"a": pa.array([], pa.int64())})
    elif case == "chunked":
        table = pa.Table.from_batches([pa.record_batch({"a": ints})] * 2)
    elif case == "struct":
        table = pa.table({"a": pa.StructArray.from_arrays([ints], ["x"])})
    elif case == "list":
        table = pa.table({"a": pa.array([[1], [2], []])})
    elif case == "dictionary":
        table = pa.table({"a": pa.array(["x", "y", "x"]).dictionary_encode()})
    elif case == "null_in_non_null":
        table = pa.Table.from_arrays([pa.array([1, None, 3])], schema=pa.schema([pa.field("a", pa.int64(), nullable=False)]))
    elif case == "field_metadata":
        table = pa.Table.from_arrays([ints], schema=pa.schema([pa.field("a", pa.int64(), metadata={"lance-encoding:compression": "zstd"})]))
    else:
        table = pa.table({"a": pa.array(np.arange(300_000, dtype=np.int64))})
    assert small_file_bytes(table) is None


def test_page_size_limit_is_the_writers(monkeypatch) -> None:
    """A page size limit (``LANCE_FILE_WRITER_MAX_PAGE_BYTES``) below the table's size: declined."""
    table = pa.table({"a": pa.array(np.arange(1000, dtype=np.int64))})
    assert small_file_bytes(table) is not None
    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "4096")
    assert small_file_bytes(table) is None
    assert os.environ["LANCE_FILE_WRITER_MAX_PAGE_BYTES"] == "4096"
