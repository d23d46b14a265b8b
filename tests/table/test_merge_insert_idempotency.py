"""``merge_insert(...).execute(data, idempotency_key=...)``: a key already committed lands no
second version (lance_ops' addition for Airflow retries, ADR 0027); pylance reads the result."""
from __future__ import annotations

import pyarrow as pa


def test_execute_with_a_committed_key_lands_once(tmp_path):
    import lance

    import lance_ops
    from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}), uri)
    src = pa.table({"id": pa.array([3, 4], pa.int64()), "v": ["C", "d"]})
    ds = lance_ops.dataset(uri)
    first = (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
             .execute(src, idempotency_key="k1", transaction_properties={"who": "test"}))
    assert first == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert ds.version == 2
    txn = lance_ops.dataset(uri).transaction
    assert txn.transaction_properties[IDEMPOTENCY_KEY] == "k1" and txn.transaction_properties["who"] == "test"

    again = lance_ops.dataset(uri)
    replay = (again.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
              .execute(src, idempotency_key="k1"))
    assert replay == first, "the earlier commit's result"
    assert lance.dataset(uri).version == 2 and again.version == 2, "the key was committed: no second version"
    expected = {"id": [1, 2, 3, 4], "v": ["a", "b", "C", "d"]}
    assert lance.dataset(uri).to_table().sort_by("id").to_pydict() == expected

    # another key: a new version, the same rows
    (lance_ops.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
     .execute(src, idempotency_key="k2"))
    assert lance.dataset(uri).version == 3
    assert lance.dataset(uri).to_table().sort_by("id").to_pydict() == expected
