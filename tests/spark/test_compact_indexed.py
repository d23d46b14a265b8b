"""Spark compaction of a BTREE-indexed dataset: the driver's commit remaps the index (issue 19)."""
from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.spark import compact

pytestmark = pytest.mark.slow


def test_spark_compaction_remaps_btree(spark, tmp_path):
    ours, theirs = str(tmp_path / "spark.lance"), str(tmp_path / "pylance.lance")
    n = 2000
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "v": pa.array(np.arange(n) % 17)})
    ds = lance.write_dataset(table, ours, max_rows_per_file=250)
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id % 9 = 4")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=1000)

    summary = compact.run(spark, compact.build_parser().parse_args(
        ["--uri", ours, "--target-rows-per-fragment", "1000", "--idempotency-key", "c-idx"]))
    assert summary["committed"] and summary["tasks"] >= 1
    assert [f.metadata.physical_rows for f in lance.dataset(ours).get_fragments()] == \
        [f.metadata.physical_rows for f in lance.dataset(theirs).get_fragments()]
    a, b = lance.dataset(ours), lance.dataset(theirs)
    a.validate()
    assert [i["fragment_ids"] for i in a.list_indices()] == [i["fragment_ids"] for i in b.list_indices()]
    assert a.to_table().equals(b.to_table())
    for f in ["id < 50", "id = 1300", "id between 990 and 1010"]:
        got = a.to_table(filter=f, use_scalar_index=True)["id"].to_pylist()
        assert sorted(got) == sorted(b.to_table(filter=f, use_scalar_index=False)["id"].to_pylist()), f
    again = compact.run(spark, compact.build_parser().parse_args(
        ["--uri", ours, "--target-rows-per-fragment", "1000", "--idempotency-key", "c-idx"]))
    assert again["already_committed"] is True and lance_ops.dataset(ours).version == a.version
