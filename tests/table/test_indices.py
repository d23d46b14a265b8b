"""``list_indices`` and ``lance-ops inspect`` against pylance 14.0.2 (the oracle, test-only): every
index pylance lists, with its kind, columns, uuid(s), dataset version and coverage as
``ds.stats.index_stats(name)`` counts it, at storage 2.0 and 2.2, with unindexed appended
fragments, delta segments and deletions."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

#: pylance's list_indices "type" -> lance_ops' kind
PYLANCE_TYPES = {"BTree": "BTREE", "Bitmap": "BITMAP", "LabelList": "LABEL_LIST", "Inverted": "INVERTED",
                 "NGram": "NGRAM", "ZoneMap": "ZONEMAP", "BloomFilter": "BLOOMFILTER"}


def _table(lo: int, hi: int) -> pa.Table:
    rng = np.random.default_rng(lo)
    vec = rng.standard_normal((hi - lo, 8)).astype("float32")
    return pa.table({
        "id": pa.array(range(lo, hi), pa.int64()),
        "cat": pa.array([f"c{i % 5}" for i in range(lo, hi)]),
        "tags": pa.array([[f"t{i % 3}", f"t{i % 7}"] for i in range(lo, hi)]),
        "text": pa.array([f"hello number {i}" for i in range(lo, hi)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 8),
    })


def _build(uri: str, version: str) -> None:
    ds = lance.write_dataset(_table(0, 800), uri, data_storage_version=version, max_rows_per_file=200)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    ds.create_scalar_index("text", "INVERTED")
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2, name="vec_pq")
    ds.create_index("vec", "IVF_FLAT", num_partitions=2, name="vec_flat")
    ds = lance.write_dataset(_table(800, 900), uri, mode="append")
    ds.optimize.optimize_indices(num_indices_to_merge=0, index_names=["id_idx"])  # a delta segment
    ds = lance.write_dataset(_table(900, 950), uri, mode="append")  # unindexed by every index
    ds.delete("id < 200")  # fragment 0 goes: bitmaps still name it
    ds.delete("id % 10 = 3")


def inspect_json(uri: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from lance_ops.cli import main

    assert main(["inspect", uri, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _kind(pylance_type: str) -> str:
    return PYLANCE_TYPES.get(pylance_type, pylance_type)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_inspect_lists_indices_as_pylance_does(tmp_path: Path, version: str, capsys: pytest.CaptureFixture[str]):
    uri = str(tmp_path / f"idx_{version}.lance")
    _build(uri, version)
    out = inspect_json(uri, capsys)
    ours = {i["name"]: i for i in out["indices"]}
    ds = lance.dataset(uri)
    segments = ds.list_indices()
    assert set(ours) == {s["name"] for s in segments} == {"id_idx", "cat_idx", "tags_idx", "text_idx", "vec_pq",
                                                          "vec_flat"}
    for name, info in ours.items():
        theirs = [s for s in segments if s["name"] == name]
        assert info["kind"] == _kind(theirs[0]["type"]), name
        assert info["columns"] == theirs[0]["fields"], name
        assert info["uuids"] == [s["uuid"] for s in theirs], name
        assert [s["dataset_version"] for s in info["segments"]] == [s["version"] for s in theirs], name
        assert [s["fragment_ids"] for s in info["segments"]] == [sorted(s["fragment_ids"]) for s in theirs], name
        stats = ds.stats.index_stats(name)
        assert info["indexed_rows"] == stats["num_indexed_rows"], name
        assert info["unindexed_rows"] == stats["num_unindexed_rows"], name
        assert info["indexed_fragments"] == stats["num_indexed_fragments"], name
        assert info["unindexed_fragments"] == stats["num_unindexed_fragments"], name
        assert [s["indexed_rows"] for s in info["segments"]] == stats["num_indexed_rows_per_delta"], name
        assert info["system"] is False
    assert len(ours["id_idx"]["segments"]) == 2
    assert ours["id_idx"]["unindexed_rows"] == 45 and ours["cat_idx"]["unindexed_rows"] == 135
    assert {n: i["index_version"] for n, i in ours.items()} == {
        "id_idx": 0, "cat_idx": 0, "tags_idx": 1, "text_idx": 2, "vec_pq": 1, "vec_flat": 1}


def test_inspect_text_shows_one_line_per_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from lance_ops.cli import main

    uri = str(tmp_path / "text.lance")
    _build(uri, "2.2")
    assert main(["inspect", uri]) == 0
    text = capsys.readouterr().out
    block = text.split("\nindices:\n", 1)[1].splitlines()
    assert len(block) == 6
    line = next(b for b in block if b.strip().startswith("id_idx:"))
    assert "BTREE on id" in line and "unindexed 45 rows in 1 fragments" in line and "2 segments" in line
    assert any("IVF_PQ on vec" in b for b in block) and any("IVF_FLAT on vec" in b for b in block)


def test_more_kinds_and_unknown(tmp_path: Path):
    import lance_ops
    from lance_ops.table.indices import list_indices

    uri = str(tmp_path / "kinds.lance")
    ds = lance.write_dataset(_table(0, 400), uri, max_rows_per_file=200)
    ds.create_scalar_index("id", "ZONEMAP", name="zm")
    ds.create_scalar_index("cat", "NGRAM", name="ng")
    ds.create_scalar_index("id", "BLOOMFILTER", name="bf")
    ds.create_index("vec", "IVF_SQ", num_partitions=2, name="sq")
    ds.create_index("vec", "IVF_HNSW_SQ", num_partitions=2, name="hnsw_sq")
    ds.create_index("vec", "IVF_HNSW_PQ", num_partitions=2, num_sub_vectors=2, name="hnsw_pq")
    infos = list_indices(lance_ops.dataset(uri))
    assert {i.name: i.kind for i in infos} == {"zm": "ZONEMAP", "ng": "NGRAM", "bf": "BLOOMFILTER", "sq": "IVF_SQ",
                                               "hnsw_sq": "IVF_HNSW_SQ", "hnsw_pq": "IVF_HNSW_PQ"}
    pyl = {s["name"]: _kind(s["type"]) for s in lance.dataset(uri).list_indices()}
    assert pyl == {i.name: i.kind for i in infos}

    # a future index kind: named with its type URL, nothing else breaks
    from lance_ops._proto import table_pb2
    from lance_ops.table.indices import index_kind

    meta = table_pb2.IndexMetadata(name="future")
    meta.index_details.type_url = "/lance.table.QuantumIndexDetails"
    assert index_kind(lance_ops.dataset(uri), meta) == "unknown (/lance.table.QuantumIndexDetails)"


def test_vector_kind_from_index_file_when_details_are_empty(tmp_path: Path):
    """Older vector indices carry empty VectorIndexDetails: the kind comes from index.idx."""
    import lance_ops
    from lance_ops.table.indices import index_kind

    uri = str(tmp_path / "old.lance")
    ds = lance.write_dataset(_table(0, 400), uri)
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2, name="v")
    ods = lance_ops.dataset(uri)
    index = ods.manifest_file.index_section.indices[0]
    index.index_details.value = b""
    assert index_kind(ods, index) == "IVF_PQ"


def test_no_indices(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    uri = str(tmp_path / "plain.lance")
    lance.write_dataset(_table(0, 10), uri)
    assert inspect_json(uri, capsys)["indices"] == []
