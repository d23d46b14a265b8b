"""The public accessors of LanceDataset and LanceFragment that maintenance, Spark and the CLI use
(ADR 0004): what each returns, on a real dataset written by lance_ops."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import UnsupportedError
from lance_ops.table import scan
from lance_ops.table.filters import compile_filter


@pytest.fixture
def ds(tmp_path):
    uri = str(tmp_path / "d.lance")
    table = pa.table({"a": pa.array(range(10), pa.int64()),
                      "s": pa.StructArray.from_arrays([pa.array(range(10)), pa.array([str(i) for i in range(10)])],
                                                      names=["x", "y"])})
    lance_ops.write_dataset(table, uri, max_rows_per_file=5)
    return lance_ops.dataset(uri)


def test_store_base_and_manifest_file_locate_the_dataset(ds, tmp_path):
    assert ds.store.uri(ds.base) == ds.uri == str(tmp_path / "d.lance")
    assert ds.manifest_file.manifest.version == ds.version == 1
    assert ds.manifest_file.path.startswith(ds.base) and ds.store.exists(ds.manifest_file.path)


def test_field_ids(ds):
    assert dict(ds.top_field_ids) == {"a": 0, "s": 1}
    assert {k: sorted(v) for k, v in ds.descendant_field_ids.items()} == {0: [0], 1: [1, 2, 3]}


def test_reopen_latest_and_move_to(ds):
    lance_ops.write_dataset(pa.table({"a": pa.array([10], pa.int64()),
                                      "s": pa.array([{"x": 10, "y": "10"}], ds.schema.field("s").type)}),
                            ds.uri, mode="append")
    latest = ds.reopen_latest()
    assert (ds.version, latest.version) == (1, 2)
    assert latest.store is ds.store and latest.base == ds.base
    cache = ds.cache("test")
    cache["k"] = 1
    ds.move_to(latest.manifest_file)
    assert ds.version == 2 and ds.count_rows() == 11
    assert ds.cache("test") is cache and cache == {"k": 1}  # a cache outlives the move
    assert latest.cache("test") == {}  # one cache per object


def test_fragment_task_reads_one_fragment_as_a_scan_does(ds):
    frag = ds.get_fragments()[1]
    filt = compile_filter("a % 2 = 0", ds.schema)
    got = scan.execute(ds, scan.fragment_task(ds, frag, ["s", "a"], filt, with_row_id=True))
    assert got.to_pydict() == {"s": [{"x": 6, "y": "6"}, {"x": 8, "y": "8"}], "a": [6, 8],
                               "_rowid": [(1 << 32) | 1, (1 << 32) | 3]}
    part = scan.execute(ds, scan.fragment_task(ds, frag, ["a"], with_row_address=True,
                                               offsets=np.array([0, 4], dtype=np.uint64)))
    assert part.to_pydict() == {"a": [5, 9], "_rowaddr": [1 << 32, (1 << 32) | 4]}
    assert not hasattr(ds, "scan_fragment")  # fragments are read through the scan planner (ADR 0005)


def test_select_rows_and_locate_fields(ds):
    ds.delete("a = 1")
    frags, which, offsets = ds.select_rows("indices", np.array([1, 5]))
    assert [f.fragment_id for f in frags] == [0, 1]
    assert which.tolist() == [0, 1] and offsets.tolist() == [2, 1]  # live index 1 is row a=2
    with pytest.raises(UnsupportedError, match="deleted or missing rows"):
        ds.select_rows("addresses", np.array([1], dtype=np.uint64))
    assert frags[0].locate_fields([0, 1]) == {0: (0, "a"), 1: (0, "s")}
