"""``to_batches`` streams a large fragment in pieces (issue 20 item 3: bounded memory) with the
same rows as pylance, with deletions, filters, projections and row ids."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_ops  # noqa: E402
from lance_ops.table import dataset as dataset_mod  # noqa: E402


@pytest.fixture()
def uri(tmp_path) -> str:
    n = 60_000
    rng = np.random.default_rng(3)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(rng.standard_normal(n)),
        "s": pa.array([f"s{i % 101}" for i in range(n)]),
    })
    path = str(tmp_path / "ds")
    lance.write_dataset(table, path, data_storage_version="2.2", max_rows_per_file=40_000)
    lance.dataset(path).delete("id % 7 = 3")
    return path


@pytest.mark.parametrize("kwargs", [
    {}, {"filter": "x > 0.5"}, {"columns": ["id", "s"], "with_row_id": True},
    {"filter": "id > 10000 AND id < 50000", "with_row_address": True},
])
def test_pieces_match_pylance(uri: str, monkeypatch, kwargs: dict) -> None:
    monkeypatch.setattr(dataset_mod, "STREAM_READ_BYTES", 64 * 1024)
    batches = list(lance_ops.dataset(uri).to_batches(**kwargs))
    got = pa.Table.from_batches(batches)
    expected = lance.dataset(uri).to_table(**kwargs)
    assert got.column_names == expected.column_names
    assert got.equals(expected.select(got.column_names))
    if not kwargs:
        assert len(batches) > 2 * len(lance.dataset(uri).get_fragments())  # fragments were cut


def test_small_fragments_are_not_cut(uri: str) -> None:
    batches = list(lance_ops.dataset(uri).to_batches())  # 40k-row files are far below 64 MiB
    assert len(batches) == len(lance.dataset(uri).get_fragments())
