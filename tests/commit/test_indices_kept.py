"""Commits by lance_ops keep the indices pylance built (the index section is carried over)."""
import lance
import pyarrow as pa

import lance_ops


def test_append_and_delete_keep_pylance_indices(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array(range(1000), pa.int64())}), uri, data_storage_version="2.0")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    assert len(lance.dataset(uri).list_indices()) == 1
    lance_ops.write_dataset(pa.table({"id": pa.array(range(1000, 1100), pa.int64())}), uri, mode="append")
    lance_ops.dataset(uri).delete("id < 10")
    ds = lance.dataset(uri)
    assert [i["name"] for i in ds.list_indices()] == ["id_idx"]
    assert ds.to_table(filter="id = 500")["id"].to_pylist() == [500]
    assert ds.to_table(filter="id = 1050")["id"].to_pylist() == [1050]
    assert ds.count_rows() == 1090
    lance_ops.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri, mode="overwrite")
    assert lance.dataset(uri).list_indices() == []
