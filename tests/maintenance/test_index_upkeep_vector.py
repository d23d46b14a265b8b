"""Vector index upkeep (issue 22 items 1 and 4): IVF_FLAT / IVF_PQ / IVF_SQ, pylance 14.0.2 as oracle.

A pylance-made dataset (6000 rows, dim 16, 2 partitions: every partition above pylance's join
threshold, so its ``optimize_indices`` neither splits nor joins and keeps the centroids) gets 700
appended rows and deletions in old and new fragments. Copy A runs pylance's ``optimize_indices``;
copy B runs lance_ops' updater through a minimal driver (an ``UpkeepRequest`` built by hand, the
segment committed as a CreateIndex through pylance: the core ``optimize_indices`` commit lives on
another branch). Then:

* B's new ``auxiliary.idx`` holds exactly A's rows per partition (row ids, in order) and codes
  (PQ transposed per partition), A's schema metadata and quantizer buffers, and ``index.idx`` A's
  centroids; as a delta (``num_indices_to_merge=0``) and merged into the old segment (``=1``);
* pylance opens B: ``index_stats`` shows 0 unindexed rows, ``nearest`` returns live rows only, with
  recall@10 at least A's minus 0.05.
"""
from __future__ import annotations

import shutil
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.dataset import Index, IndexFile as PyIndexFile

from lance_ops.errors import UnsupportedError
from lance_ops.maintenance.index_remap.ivf_files import ivf_partitions, read_index_file
from lance_ops.maintenance.index_upkeep import ivf_assign
from lance_ops.maintenance.index_upkeep.base import UpkeepRequest
from lance_ops.maintenance.index_upkeep.registry import UPDATERS
from lance_ops.table.dataset import LanceDataset
from lance_ops.table.indices import fragment_ids, index_kind, segment_uuid

N, NEW, DIM, PARTS = 6000, 700, 16, 2


def _table(rng: np.random.Generator, n: int, start: int, dim: int, nulls: bool = False) -> pa.Table:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    mask = pa.array(np.arange(n) % 7 == 3) if nulls else None  # every 7th new vector null
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim, mask=mask)})


def make(tmp: Path, kind: str, metric: str, version: str = "2.2", stable: bool = False, dim: int = DIM) -> Path:
    """Indexed dataset + appended unindexed fragments (some null vectors) + deletions old and new."""
    rng = np.random.default_rng(0)
    path = tmp / "src"
    ds = lance.write_dataset(_table(rng, N, 0, dim), str(path), max_rows_per_file=2000,
                             data_storage_version=version, enable_stable_row_ids=stable)
    params: dict[str, Any] = {"num_partitions": PARTS, "metric": metric}
    if kind == "IVF_PQ":
        params["num_sub_vectors"] = 4
    ds.create_index("vec", kind, **params)
    ds = lance.write_dataset(_table(rng, NEW, N, dim, nulls=True), str(path), mode="append", max_rows_per_file=400)
    ds.delete(f"id < 20 or id = {N + 5} or id = {N + 450}")
    return path


def copy(src: Path, name: str) -> Path:
    dst = src.parent / name
    shutil.copytree(src, dst)
    return dst


def drive(path: Path, merge: bool, retrain: bool = False) -> lance.LanceDataset:
    """Minimal optimize_indices driver: one UpkeepRequest, the updater, a CreateIndex via pylance."""
    ods = LanceDataset(str(path))
    segments = list(ods.manifest_file.index_section.indices)
    template = segments[-1]
    covered = {i for s in segments for i in fragment_ids(s)}
    new = [f for f in ods.manifest.fragments if f.id not in covered]
    merged = segments if merge else []
    request = UpkeepRequest(store=ods.store, base=ods.base, dataset=ods, index_name=template.name,
                            kind=index_kind(ods, template), merged=merged, template=template,
                            new_fragments=new, new_uuid=str(uuid.uuid4()), retrain=retrain)
    outcome = UPDATERS[request.kind](request)
    version = outcome.dataset_version if outcome.dataset_version is not None else ods.version
    details = (template.index_details.type_url, bytes(template.index_details.value))
    new_index = Index(uuid=request.new_uuid, name=template.name, fields=list(template.fields),
                      dataset_version=version, fragment_ids=set(outcome.fragment_ids),
                      index_version=template.index_version, index_details=details,
                      files=[PyIndexFile(name, size) for name, size in outcome.files])
    removed = [Index(uuid=segment_uuid(s), name=s.name, fields=list(s.fields), dataset_version=s.dataset_version,
                     fragment_ids=set(fragment_ids(s)), index_version=s.index_version) for s in merged]
    op = lance.LanceOperation.CreateIndex(new_indices=[new_index], removed_indices=removed)
    return lance.LanceDataset.commit(str(path), op, read_version=ods.version)


def newest_segment(path: Path) -> tuple[Any, Any, Any]:
    """(metadata, index.idx, auxiliary.idx) of the segment covering the highest fragment."""
    ods = LanceDataset(str(path))
    seg = max(ods.manifest_file.index_section.indices, key=lambda s: max(fragment_ids(s)))
    folder = f"{ods.base}/_indices/{segment_uuid(seg)}"
    return (seg, read_index_file(ods.store, f"{folder}/index.idx"),
            read_index_file(ods.store, f"{folder}/auxiliary.idx"))


def partition_contents(aux: Any) -> list[tuple[list[int], bytes]]:
    """Per partition: row ids in order and the code bytes as stored."""
    offsets, lengths = ivf_partitions(aux.buffers[int(aux.metadata["lance:ivf"]) - 1], "aux")
    code = [c for c in aux.table.column_names if c != "_rowid"][0]
    rows = aux.table.column("_rowid").to_numpy()
    values = aux.table.column(code).combine_chunks().flatten().to_numpy(zero_copy_only=False)
    width = aux.table.schema.field(code).type.list_size
    return [(rows[o:o + n].tolist(), values[o * width:(o + n) * width].tobytes())
            for o, n in zip(offsets.tolist(), lengths.tolist())]


def alive_ids(ds: lance.LanceDataset) -> set[int]:
    return set(ds.to_table(columns=["id"])["id"].to_pylist())


def recall(ds: lance.LanceDataset, dim: int) -> float:
    """recall@10 of the index against exact kNN; asserts no deleted row comes back."""
    alive, hits = alive_ids(ds), 0
    queries = np.random.default_rng(7).standard_normal((30, dim)).astype(np.float32)
    for q in queries:
        exact = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 10, "use_index": False})
        got = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 10, "nprobes": PARTS})
        ids = got["id"].to_pylist()
        assert set(ids) <= alive, f"deleted rows {set(ids) - alive} returned by the index"
        hits += len(set(exact["id"].to_pylist()) & set(ids))
    return hits / (10 * len(queries))


def ivf_loss(index: Any) -> float:
    """The ``loss`` (field 5, a double) of ``index.idx``'s IVF message."""
    message = index.buffers[int(index.metadata["lance:ivf"]) - 1]
    return float(ivf_assign.ivf_loss(message))


def check_against_pylance(src: Path, merge: bool, dim: int = DIM) -> None:
    a = lance.dataset(str(copy(src, "a")))
    a.optimize.optimize_indices(num_indices_to_merge=1 if merge else 0)
    b = drive(copy(src, "b"), merge)
    a, b = lance.dataset(str(src.parent / "a")), lance.dataset(str(src.parent / "b"))

    seg_a, index_a, aux_a = newest_segment(src.parent / "a")
    seg_b, index_b, aux_b = newest_segment(src.parent / "b")
    assert fragment_ids(seg_b) == fragment_ids(seg_a)
    assert seg_b.dataset_version == seg_a.dataset_version
    assert len(b.describe_indices()[0].segments) == len(a.describe_indices()[0].segments)
    assert partition_contents(aux_b) == partition_contents(aux_a)
    assert aux_b.metadata == aux_a.metadata
    assert aux_b.table.schema == aux_a.table.schema
    ivf = int(aux_a.metadata["lance:ivf"]) - 1
    assert [x for i, x in enumerate(aux_b.buffers) if i != ivf] == [x for i, x in enumerate(aux_a.buffers) if i != ivf]
    assert aux_b.buffers[ivf] == aux_a.buffers[ivf]
    assert index_b.metadata == index_a.metadata and index_b.table.num_rows == index_a.table.num_rows == 0
    np.testing.assert_array_equal(ivf_assign.centroids(index_b, "b"), ivf_assign.centroids(index_a, "a"))
    assert ivf_loss(index_b) == pytest.approx(ivf_loss(index_a), rel=1e-4)  # pylance sums in f32, lance_ops in f64

    stats = b.stats.index_stats("vec_idx")
    assert stats["num_unindexed_rows"] == 0
    assert stats["num_indexed_rows"] == a.stats.index_stats("vec_idx")["num_indexed_rows"] == b.count_rows()
    assert recall(b, dim) >= recall(a, dim) - 0.05


@pytest.mark.parametrize("kind,metric", [
    ("IVF_PQ", "l2"), ("IVF_PQ", "cosine"), ("IVF_PQ", "dot"),
    ("IVF_SQ", "l2"), ("IVF_SQ", "cosine"), ("IVF_SQ", "dot"),
    ("IVF_FLAT", "l2"), ("IVF_FLAT", "cosine"), ("IVF_FLAT", "dot"),
])
def test_delta_segment_equals_pylance(tmp_path: Path, kind: str, metric: str) -> None:
    check_against_pylance(make(tmp_path, kind, metric), merge=False)


@pytest.mark.parametrize("kind,metric", [("IVF_PQ", "l2"), ("IVF_SQ", "cosine"), ("IVF_FLAT", "dot")])
def test_merged_segment_equals_pylance(tmp_path: Path, kind: str, metric: str) -> None:
    check_against_pylance(make(tmp_path, kind, metric), merge=True)


@pytest.mark.parametrize("version,stable,merge", [
    ("2.0", False, False), ("2.0", True, True), ("2.2", True, False), ("2.2", True, True),
])
def test_storage_versions_and_stable_row_ids(tmp_path: Path, version: str, stable: bool, merge: bool) -> None:
    check_against_pylance(make(tmp_path, "IVF_PQ", "l2", version, stable), merge=merge)


@pytest.mark.parametrize("kind,metric", [("IVF_FLAT", "cosine"), ("IVF_PQ", "cosine"), ("IVF_SQ", "l2")])
def test_dimension_not_a_multiple_of_16(tmp_path: Path, kind: str, metric: str) -> None:
    """dim 24: the cosine norm sums the squares in dimension order as pylance does (FLAT codes bit-equal)."""
    check_against_pylance(make(tmp_path, kind, metric, dim=24), merge=False, dim=24)


def test_retrain_and_hnsw_are_refused_before_writing(tmp_path: Path) -> None:
    src = make(tmp_path, "IVF_SQ", "l2")
    before = sorted(p.name for p in (src / "_indices").iterdir())
    with pytest.raises(UnsupportedError, match="retrain=True"):
        drive(src, merge=False, retrain=True)
    assert sorted(p.name for p in (src / "_indices").iterdir()) == before
    assert not {"IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ"} & set(UPDATERS)
    assert set(UPDATERS) >= {"IVF_FLAT", "IVF_PQ", "IVF_SQ"}


def test_encoders_match_the_documented_rules() -> None:
    """SQ truncates and saturates; cosine normalises; dot PQ encodes the raw vector by inner product."""
    sq = ivf_assign.Quantizer("SQ", "l2", pa.list_(pa.uint8(), 2), bounds=(-1.0, 1.0))
    x = np.array([[-2.0, 0.999], [0.0, 1.5]], dtype=np.float32)
    np.testing.assert_array_equal(ivf_assign.encode(sq, x, np.zeros(2, np.int64), np.zeros((1, 2))),
                                  [[0, 254], [127, 255]])
    np.testing.assert_allclose(np.linalg.norm(ivf_assign.prepare(x, "cosine"), axis=1), 1.0, rtol=1e-6)
    codes = np.arange(24, dtype=np.uint8).reshape(6, 4)
    lengths = np.array([2, 0, 4])
    stored = ivf_assign.transpose_codes(codes, lengths)
    np.testing.assert_array_equal(ivf_assign.untranspose_codes(stored, 4, lengths), codes)
    assert stored[:4].tolist() == [0, 4, 1, 5]
    assert replace(sq, kind="FLAT").kind == "FLAT"


def _core_against_pylance(src: Path, **kwargs: Any) -> None:
    """``ds.optimize.optimize_indices(**kwargs)`` on both libraries: same segments, same partitions."""
    import lance_ops

    a = lance.dataset(str(copy(src, "a")))
    a.optimize.optimize_indices(**kwargs)
    lance_ops.dataset(str(copy(src, "b"))).optimize.optimize_indices(**kwargs)
    a, b = lance.dataset(str(src.parent / "a")), lance.dataset(str(src.parent / "b"))
    seg_a, _, aux_a = newest_segment(src.parent / "a")
    seg_b, _, aux_b = newest_segment(src.parent / "b")
    assert sorted(sorted(s.fragment_ids) for s in b.describe_indices()[0].segments) == \
        sorted(sorted(s.fragment_ids) for s in a.describe_indices()[0].segments)
    assert seg_b.dataset_version == seg_a.dataset_version
    assert partition_contents(aux_b) == partition_contents(aux_a)
    assert b.stats.index_stats("vec_idx")["num_unindexed_rows"] == 0
    assert recall(b, DIM) >= recall(a, DIM) - 0.05


@pytest.mark.parametrize("kwargs", [{}, {"num_indices_to_merge": 0}, {"num_indices_to_merge": 1}])
def test_core_optimize_indices_equals_pylance(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    """Through the core (segment choice + CreateIndex commit): pylance's default is a delta here."""
    _core_against_pylance(make(tmp_path, "IVF_PQ", "l2"), **kwargs)


def test_core_refuses_retrain_before_writing_anything(tmp_path: Path) -> None:
    import lance_ops

    src = make(tmp_path, "IVF_SQ", "l2")
    before = sorted(p.name for p in (src / "_indices").iterdir())
    version = lance.dataset(str(src)).version
    with pytest.raises(UnsupportedError, match="retrain=True.*Nothing was written"):
        lance_ops.dataset(str(src)).optimize.optimize_indices(retrain=True)
    assert sorted(p.name for p in (src / "_indices").iterdir()) == before
    assert lance.dataset(str(src)).version == version
