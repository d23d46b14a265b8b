"""The dataset layer on S3 (a moto server on loopback): lance_ops writes, pylance reads, and back."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import DatasetExistsError, DatasetNotFoundError


def numbers(n: int, start: int = 0) -> pa.Table:
    a = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"a": a, "s": pa.array([f"v{i}" for i in a.tolist()])})


def keys(moto_server, bucket_uri: str, prefix: str) -> list[str]:
    bucket = bucket_uri[len("s3://"):]
    client = moto_server.client()
    out, token = [], None
    while True:
        kw = {"Bucket": bucket, "Prefix": prefix}
        if token:
            kw["ContinuationToken"] = token
        page = client.list_objects_v2(**kw)
        out += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return sorted(out)
        token = page["NextContinuationToken"]


def test_dataset_lifecycle_on_s3(moto_server, s3_bucket):
    opts = moto_server.storage_options
    uri = f"{s3_bucket}/tables/events.lance"

    with pytest.raises(DatasetNotFoundError, match="events.lance"):
        lance_ops.dataset(uri, storage_options=opts)
    ds = lance_ops.write_dataset(numbers(10), uri, max_rows_per_file=4, storage_options=opts,
                                 transaction_properties={"job": "s3"})
    assert ds.version == 1 and len(ds.get_fragments()) == 3
    with pytest.raises(DatasetExistsError):
        lance_ops.write_dataset(numbers(1), uri, storage_options=opts)
    ds = lance_ops.write_dataset(numbers(5, 10), uri, mode="append", storage_options=opts)
    assert ds.delete("a % 4 = 1") == {"num_deleted_rows": 4}
    ds.tags.create("after-delete", 3)
    expected = [a for a in range(15) if a % 4 != 1]

    stored = keys(moto_server, s3_bucket, "tables/events.lance/")
    assert sum(k.startswith("tables/events.lance/data/") for k in stored) == 4
    assert sum(k.startswith("tables/events.lance/_versions/") for k in stored) == 3  # no hint on S3
    assert sum(k.startswith("tables/events.lance/_transactions/") for k in stored) == 3
    assert sum(k.startswith("tables/events.lance/_deletions/") for k in stored) == 4
    assert "tables/events.lance/_refs/tags/after-delete.json" in stored

    ours = lance_ops.dataset(uri, storage_options=opts)
    ref = lance.dataset(uri, storage_options=opts)
    assert ours.version == ref.version == 3
    assert ours.to_table()["a"].to_pylist() == ref.to_table()["a"].to_pylist() == expected
    assert ours.to_table(with_row_id=True).equals(ref.to_table(with_row_id=True))
    assert ours.count_rows("a > 5") == ref.count_rows("a > 5") == len([a for a in expected if a > 5])
    assert ours.take([6, 0, 3]).equals(ref.take([6, 0, 3]))
    row_ids = ref.to_table(with_row_id=True)["_rowid"].to_pylist()
    picks = [row_ids[4], row_ids[0]]
    assert ours.take_by_row_id(picks).equals(ref._take_rows(picks))
    assert ours.versions() == ref.versions()
    assert ref.tags.list()["after-delete"]["version"] == 3
    assert ours.tags.list() == ref.tags.list()
    assert lance.dataset(uri, version="after-delete", storage_options=opts).count_rows() == len(expected)
    assert ref.read_transaction(1).transaction_properties == {"job": "s3"}

    # pylance writes on top; lance_ops reads every version and keeps going
    lance.write_dataset(numbers(3, 100), uri, mode="append", storage_options=opts)
    lance.dataset(uri, storage_options=opts).delete("a = 0")
    lance_ops.dataset(uri, storage_options=opts).delete("a = 101")
    lance_ops.dataset(uri, storage_options=opts).tags.delete("after-delete")
    latest = lance.dataset(uri, storage_options=opts)
    assert latest.version == 6 and latest.tags.list() == {}
    for v in range(1, 7):
        a = lance_ops.dataset(uri, version=v, storage_options=opts).to_table(with_row_id=True)
        b = lance.dataset(uri, version=v, storage_options=opts).to_table(with_row_id=True)
        assert a.equals(b), f"version {v}"
    assert latest.to_table()["a"].to_pylist() == [a for a in expected if a] + [100, 102]

    # overwrite and restore
    lance_ops.write_dataset(numbers(2, 500), uri, mode="overwrite", storage_options=opts)
    lance_ops.dataset(uri, version=3, storage_options=opts).restore()
    assert lance.dataset(uri, storage_options=opts).version == 8
    assert lance.dataset(uri, storage_options=opts).to_table()["a"].to_pylist() == expected


def test_stable_row_ids_and_concurrent_appends_on_s3(moto_server, s3_bucket):
    import threading

    opts = moto_server.storage_options
    uri = f"{s3_bucket}/stable"
    lance_ops.write_dataset(numbers(4), uri, storage_options=opts, enable_stable_row_ids=True)
    errors = []

    def append(i):
        try:
            lance_ops.write_dataset(numbers(1, 100 + i), uri, mode="append", storage_options=opts)
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ref = lance.dataset(uri, storage_options=opts)
    assert ref.version == 5 and ref.has_stable_row_ids
    assert sorted(ref.to_table()["a"].to_pylist()) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert sorted(ref.to_table(with_row_id=True)["_rowid"].to_pylist()) == list(range(8))
    ours = lance_ops.dataset(uri, storage_options=opts)
    assert ours.to_table(with_row_id=True).equals(ref.to_table(with_row_id=True))
    assert ours.take_by_row_id([7, 0]).equals(ref._take_rows([7, 0]))
