"""Spark compaction of a dataset carrying BITMAP, LABEL_LIST, NGRAM, ZONEMAP and BLOOMFILTER
indices: the driver's commit remaps / rebuilds them; pylance's index-served queries stay exact."""
from __future__ import annotations

import lance
import pytest

from lance_ops.spark import compact
from tests.maintenance.test_index_remap_kinds import _assert_queries_exact, _build

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stable", [False, True], ids=["addr", "stable"])
def test_spark_compaction_carries_every_scalar_kind(spark, tmp_path, stable):
    path = str(tmp_path / "ds.lance")
    _build(path, "2.2", stable)
    deleted = set(lance.dataset(path).to_table(filter="id % 9 = 4", columns=["id"])["id"].to_pylist())
    lance.dataset(path).delete("id % 9 = 4")
    summary = compact.run(spark, compact.build_parser().parse_args(
        ["--uri", path, "--target-rows-per-fragment", "1000", "--idempotency-key", f"kinds-{stable}"]))
    assert summary["committed"] and summary["tasks"] >= 1
    ds = lance.dataset(path)
    ds.validate()
    live = {f.fragment_id for f in ds.get_fragments()}
    for info in ds.describe_indices():
        assert {f for s in info.segments for f in s.fragment_ids} == live, info.name
    _assert_queries_exact(ds, deleted)
