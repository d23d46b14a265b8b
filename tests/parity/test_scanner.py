"""Scanner options of pylance 14.0.2 vs lance-ops (issue 24, slice 4)."""
from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from tests.parity.helper import same

N = 30
TABLE = pa.table({
    "id": pa.array(range(N), pa.int64()),
    "s": pa.array([{"x": i, "y": f"y{i}"} for i in range(N)]),
    "v": pa.array([float(i) / 2 for i in range(N)]),
})


@pytest.fixture()
def uri(tmp_path) -> str:
    u = str(tmp_path / "ds.lance")
    lance.write_dataset(TABLE, u, max_rows_per_file=10)
    lance.dataset(u).delete("id = 3 OR id = 14")
    return u


def test_nested_columns_and_filters(uri):
    same(lambda lib: lib.dataset(uri).to_table(columns=["s.x"]))
    same(lambda lib: lib.dataset(uri).to_table(columns=["id", "s.y"], filter="s.x > 20"))
    same(lambda lib: lib.dataset(uri).to_table(filter="s.y = 'y7'"))
    same(lambda lib: lib.dataset(uri).count_rows(filter="s.x < 5"))


def test_system_columns(uri):
    same(lambda lib: lib.dataset(uri).to_table(columns=["id", "_rowoffset"]))
    same(lambda lib: lib.dataset(uri).to_table(columns=["id"], with_row_address=True))
    same(lambda lib: lib.dataset(uri).to_table(columns=["id", "_rowaddr", "_rowid"]))
    same(lambda lib: lib.dataset(uri).to_table(columns=["_rowoffset"], filter="id > 20"))


def test_to_batches_options(uri):
    def batches(lib, **kw):
        return [b.num_rows for b in lib.dataset(uri).to_batches(**kw)]

    same(lambda lib: pa.Table.from_batches(list(lib.dataset(uri).to_batches(
        columns=["id"], batch_size=4, batch_readahead=2, fragment_readahead=1, late_materialization=True))))
    same(lambda lib: batches(lib, batch_size=4, strict_batch_size=True))
    same(lambda lib: lib.dataset(uri).to_table(late_materialization=["v"], filter="id > 4"))
    same(lambda lib: lib.dataset(uri).to_table(late_materialization=False, columns=["id"]))


def test_scanner_fragments_and_order(uri):
    def frags(lib):
        return lib.dataset(uri).get_fragments()

    same(lambda lib: lib.dataset(uri).scanner(fragments=frags(lib)[1:], scan_in_order=True).to_table())
    same(lambda lib: lib.dataset(uri).scanner(fragments=[frags(lib)[2]], filter="id > 22", columns=["id"]).to_table())
    same(lambda lib: lib.dataset(uri).scanner(fragments=[frags(lib)[0]]).count_rows())
    same(lambda lib: lib.dataset(uri).scanner(columns=["id"]).dataset_schema)
    same(lambda lib: lib.dataset(uri).scanner(columns=["id"]).projected_schema)


def test_limit_offset(uri):
    same(lambda lib: lib.dataset(uri).to_table(limit=5, offset=7))
    same(lambda lib: lib.dataset(uri).to_table(limit=5, offset=26))
    same(lambda lib: lib.dataset(uri).to_table(offset=5))
    same(lambda lib: lib.dataset(uri).scanner(limit=3, offset=2, filter="id > 10").to_table())
    same(lambda lib: pa.Table.from_batches(list(lib.dataset(uri).to_batches(limit=4, offset=9))))
    same(lambda lib: lib.dataset(uri).scanner(limit=3, offset=2).count_rows())
