"""Vector index remap (issue 19 items 1-3): IVF_FLAT / IVF_PQ / IVF_SQ / IVF_HNSW_*, pylance 14.0.2 as oracle.

For a pylance-made dataset (~2k rows, dim 16, 4 partitions, 8 fragments, 10% deleted) pylance's own
``compact_files`` runs on copy A; the same old -> new address map is built from A's fragments and
lance_ops' remapper runs on the original index files. Then:

* the remapped ``auxiliary.idx`` decodes exactly as pylance's (row ids, codes, PQ codes transposed
  per partition, IVF offsets/lengths buffer byte for byte, schema metadata, codebook buffer), and
  ``index.idx`` of a FLAT sub-index carries the same content;
* HNSW graphs (pylance rebuilds them, lance_ops removes deleted nodes and bridges their edges) are
  checked structurally and by search: the files are put into A as the index (CreateIndex through
  pylance) and ``nearest`` must return no deleted row with recall@10 against exact kNN at least
  pylance's own minus 0.05, also with 70% of the rows deleted.
"""
from __future__ import annotations

import json
from datetime import timedelta
import shutil
import uuid
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.dataset import Index

from lance_ops.errors import UnsupportedError
from lance_ops.io import open_store
from lance_ops.maintenance.index_remap import AddressMap, RemapRequest
from lance_ops.maintenance.index_remap.hnsw_graph import HNSW_METADATA_KEY
from lance_ops.maintenance.index_remap.ivf_files import ivf_partitions, read_index_file, with_partitions
from lance_ops.maintenance.index_remap.registry import REMAPPERS
from lance_ops.maintenance.index_remap.vector import VECTOR_KINDS, remap_vector
from lance_ops.table.dataset import LanceDataset
from lance_ops.table.indices import index_kind

N, DIM, PARTS = 2000, 16, 4
QUERIES = np.random.default_rng(7).standard_normal((30, DIM)).astype(np.float32)


def build(uri: Path, kind: str, version: str, stable: bool = False, delete: str = "id % 10 = 3",
          variant: str = "") -> None:
    """8 fragments of 250 rows, the vector index over all of them, then deletions.

    ``variant``: "" (l2), "cosine", "pq4" (4-bit PQ codes, two per byte), "multivector" (three
    vectors per row: storage rows repeat the row id)."""
    rng = np.random.default_rng(0)
    per_row = 3 if variant == "multivector" else 1
    vec = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(N * per_row * DIM).astype(np.float32)), DIM)
    if per_row > 1:
        vec = pa.ListArray.from_arrays(pa.array(np.arange(0, N * per_row + 1, per_row, dtype=np.int32)), vec)
    table = pa.table({"id": pa.array(np.arange(N), pa.int64()), "vec": vec})
    ds = lance.write_dataset(table, str(uri), max_rows_per_file=250, data_storage_version=version,
                             enable_stable_row_ids=stable)
    params: dict = {"num_partitions": PARTS}
    if "PQ" in kind:
        params["num_sub_vectors"] = 4
    if variant == "pq4":
        params["num_bits"] = 4
    if variant in ("cosine", "multivector"):
        params["metric"] = "cosine"
    ds.create_index("vec", index_type=kind, **params)
    ds.delete(delete)


def pylance_compacted(src: Path, dst: Path) -> AddressMap:
    """Compact a copy of ``src`` with pylance at ``dst``; the address map its rewrite applied."""
    shutil.copytree(src, dst)
    old = lance.dataset(str(src))
    old_frags = {f.fragment_id: f for f in old.get_fragments()}
    lance.dataset(str(dst)).optimize.compact_files()
    after = lance.dataset(str(dst)).get_fragments()
    new = [(f.fragment_id, f.metadata.physical_rows) for f in after if f.fragment_id not in old_frags]
    gone = sorted(set(old_frags) - {f.fragment_id for f in after})
    addrs = old.scanner(columns=[], with_row_address=True,
                        fragments=[old_frags[i] for i in gone]).to_table()["_rowaddr"].to_numpy()
    olds = [(i, np.sort(addrs[(addrs >> np.uint64(32)) == i] & np.uint64(0xFFFFFFFF))) for i in gone]
    return AddressMap.from_groups([(olds, new)])


def run_remap(uri: Path, amap: AddressMap, new_uuid: str, stable: bool = False):
    """lance_ops' remapper on the (only) index of the dataset at ``uri``."""
    ds = LanceDataset(str(uri))
    meta = ds.manifest_file.index_section.indices[0]
    request = RemapRequest(store=ds.store, base=ds.base, index=meta, kind=index_kind(ds, meta), new_uuid=new_uuid,
                           addresses=amap, stable_row_ids=stable, dataset=ds, new_fragments=[])
    return REMAPPERS[request.kind](request)


def read(uri: Path, uid: str, name: str):
    store, path = open_store(str(uri / "_indices" / uid / name))
    return read_index_file(store, path)


def swap_index(dst: Path, files: Path) -> lance.LanceDataset:
    """Replace ``dst``'s vector index by the segment files in ``files`` (a CreateIndex via pylance)."""
    ds = lance.dataset(str(dst))
    current = ds.list_indices()[0]
    meta = LanceDataset(str(dst)).manifest_file.index_section.indices[0]
    uid = str(uuid.uuid4())
    shutil.copytree(files, dst / "_indices" / uid)
    common = dict(name=current["name"], fields=list(meta.fields), dataset_version=meta.dataset_version,
                  fragment_ids=set(current["fragment_ids"]), index_version=meta.index_version)
    op = lance.LanceOperation.CreateIndex(
        new_indices=[Index(uuid=uid, index_details=(meta.index_details.type_url, bytes(meta.index_details.value)),
                           **common)],
        removed_indices=[Index(uuid=current["uuid"], **common)])
    return lance.LanceDataset.commit(str(dst), op, read_version=ds.version)


def recall(ds: lance.LanceDataset, alive: set[int]) -> float:
    """recall@10 of the index against exact kNN; asserts no deleted row comes back."""
    hits = 0
    for q in QUERIES:
        exact = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 10, "use_index": False})
        got = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 10, "nprobes": PARTS, "ef": 16})
        ids = got["id"].to_pylist()
        assert set(ids) <= alive, f"deleted rows {set(ids) - alive} returned by the index"
        hits += len(set(exact["id"].to_pylist()) & set(ids))
    return hits / (10 * len(QUERIES))


def check_graph(uri: Path, uid: str) -> None:
    """Structural checks of a remapped HNSW index.idx against its storage."""
    aux, index = read(uri, uid, "auxiliary.idx"), read(uri, uid, "index.idx")
    _, storage_lengths = ivf_partitions(aux.buffers[int(aux.metadata["lance:ivf"]) - 1], "aux")
    offsets, lengths = ivf_partitions(index.buffers[int(index.metadata["lance:ivf"]) - 1], "index")
    entries = [json.loads(e) for e in json.loads(index.metadata[HNSW_METADATA_KEY])]
    table = index.table
    for p, entry in enumerate(entries):
        part = table.slice(int(offsets[p]), int(lengths[p]))
        assert entry["level_offsets"][-1] == lengths[p]
        level0 = part.slice(0, entry["level_offsets"][1]) if len(entry["level_offsets"]) > 1 else part
        assert level0["__vector_id"].to_pylist() == list(range(int(storage_lengths[p])))
        for column in ("__neighbors",):
            flat = part[column].combine_chunks().flatten().to_numpy()
            assert (flat < storage_lengths[p]).all()
        if storage_lengths[p]:
            top = max(i for i in range(len(entry["level_offsets"]) - 1)
                      if entry["level_offsets"][i + 1] > entry["level_offsets"][i])
            lo, hi = entry["level_offsets"][top], entry["level_offsets"][top + 1]
            assert entry["entry_point"] in part["__vector_id"].to_pylist()[lo:hi]


CASES = ([(k, "2.2", "") for k in VECTOR_KINDS]
         + [("IVF_PQ", "2.0", ""), ("IVF_PQ", "2.1", ""), ("IVF_HNSW_SQ", "2.0", ""), ("IVF_SQ", "2.1", ""),
            ("IVF_FLAT", "2.0", ""), ("IVF_PQ", "2.2", "pq4"), ("IVF_HNSW_SQ", "2.2", "cosine"),
            ("IVF_PQ", "2.2", "multivector")])


@pytest.mark.parametrize("kind,version,variant", CASES)
def test_remap_matches_pylance_compaction(tmp_path, kind, version, variant):
    src = tmp_path / "src"
    build(src, kind, version, variant=variant)
    amap = pylance_compacted(src, tmp_path / "A")
    new_uid = lance.dataset(str(tmp_path / "A")).list_indices()[0]["uuid"]
    old_uid = lance.dataset(str(src)).list_indices()[0]["uuid"]
    outcome = run_remap(src, amap, new_uid)
    assert outcome.action == "remap"
    assert [name for name, _ in outcome.files] == ["auxiliary.idx", "index.idx"]
    for name, size in outcome.files:
        assert (src / "_indices" / new_uid / name).stat().st_size == size

    ours, theirs = read(src, new_uid, "auxiliary.idx"), read(tmp_path / "A", new_uid, "auxiliary.idx")
    assert ours.version == theirs.version == read(src, old_uid, "auxiliary.idx").version
    assert ours.table.num_rows == theirs.table.num_rows == (N - N // 10) * (3 if variant == "multivector" else 1)
    assert ours.table.equals(theirs.table)  # row ids, codes (PQ transposed per partition), order
    assert ours.metadata == theirs.metadata  # storage_metadata JSON, distance type, lance:ivf
    assert ours.buffers == theirs.buffers  # IVF offsets/lengths byte for byte, PQ codebook
    if "HNSW" in kind:
        check_graph(src, new_uid)
    else:
        index = read(src, new_uid, "index.idx")
        expected = read(tmp_path / "A", new_uid, "index.idx")
        assert index.table.equals(expected.table) and index.metadata == expected.metadata
        assert index.buffers == expected.buffers

    if variant == "multivector":
        return  # storage equal to pylance's is the check; single-vector queries do not apply
    alive = set(lance.dataset(str(tmp_path / "A")).to_table(columns=["id"])["id"].to_pylist())
    baseline = recall(lance.dataset(str(tmp_path / "A")), alive)
    shutil.copytree(tmp_path / "A", tmp_path / "C")
    mine = swap_index(tmp_path / "C", src / "_indices" / new_uid)
    mine.validate()
    assert mine.stats.index_stats("vec_idx")["num_indexed_rows"] == len(alive)
    assert recall(mine, alive) >= baseline - 0.05


@pytest.mark.parametrize("kind", ["IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_PQ"])
def test_heavy_deletions_keep_recall(tmp_path, kind):
    """70% deleted: HNSW nodes lose most neighbours; bridged edges keep the graph searchable."""
    src = tmp_path / "src"
    build(src, kind, "2.2", delete="id % 10 < 7")
    amap = pylance_compacted(src, tmp_path / "A")
    new_uid = str(uuid.uuid4())
    run_remap(src, amap, new_uid)
    if "HNSW" in kind:
        check_graph(src, new_uid)
    pylance_ds = lance.dataset(str(tmp_path / "A"))
    alive = set(pylance_ds.to_table(columns=["id"])["id"].to_pylist())
    baseline = recall(pylance_ds, alive)
    shutil.copytree(tmp_path / "A", tmp_path / "C")
    mine = swap_index(tmp_path / "C", src / "_indices" / new_uid)
    assert recall(mine, alive) >= baseline - 0.05


def test_whole_partitions_deleted(tmp_path):
    """Every row of the rewritten fragments deleted: empty partitions and an empty storage file."""
    src = tmp_path / "src"
    build(src, "IVF_HNSW_PQ", "2.2", delete="id < 1000")
    ds = lance.dataset(str(src))
    frags = {f.fragment_id: f.metadata.physical_rows for f in ds.get_fragments()}
    gone = [(f, np.array([], np.uint64)) for f in range(4)]  # fragments 0-3 are fully deleted
    assert all(f not in frags for f, _ in gone)
    survivors = [(f, np.arange(250, dtype=np.uint64)) for f in (4, 5)]
    amap = AddressMap.from_groups([(gone, []), (survivors, [(20, 500)])])
    new_uid = str(uuid.uuid4())
    run_remap(src, amap, new_uid)
    aux = read(src, new_uid, "auxiliary.idx")
    rowids = aux.table["_rowid"].to_numpy()
    assert len(rowids) == 1000 and set((rowids >> np.uint64(32)).tolist()) == {6, 7, 20}
    check_graph(src, new_uid)
    empty = AddressMap.from_groups([([(f, np.array([], np.uint64)) for f in range(8)], [])])
    other = str(uuid.uuid4())
    run_remap(src, empty, other)
    aux = read(src, other, "auxiliary.idx")
    assert aux.table.num_rows == 0
    _, lengths = ivf_partitions(aux.buffers[0], "aux")
    assert lengths.tolist() == [0] * PARTS
    reader = lance.file.LanceFileReader(str(src / "_indices" / other / "auxiliary.idx"))
    assert reader.read_all().to_table().num_rows == 0
    check_graph(src, other)


def test_stable_row_ids_keep_files(tmp_path):
    src = tmp_path / "src"
    build(src, "IVF_PQ", "2.2", stable=True)
    new_uid = str(uuid.uuid4())
    outcome = run_remap(src, AddressMap.from_groups([]), new_uid, stable=True)
    assert outcome.action == "keep" and outcome.files == []
    assert not (src / "_indices" / new_uid).exists()


def test_legacy_layout_is_refused_before_writing(tmp_path):
    src = tmp_path / "src"
    build(src, "IVF_PQ", "2.2")
    old_uid = lance.dataset(str(src)).list_indices()[0]["uuid"]
    (src / "_indices" / old_uid / "auxiliary.idx").unlink()
    new_uid = str(uuid.uuid4())
    with pytest.raises(UnsupportedError, match="legacy .v1. vector index layout"):
        run_remap(src, AddressMap.from_groups([]), new_uid)
    assert not (src / "_indices" / new_uid).exists()


def test_ivf_buffer_edit_keeps_other_fields(tmp_path):
    src = tmp_path / "src"
    build(src, "IVF_HNSW_FLAT", "2.2")
    uid = lance.dataset(str(src)).list_indices()[0]["uuid"]
    index = read(src, uid, "index.idx")
    buf = index.buffers[int(index.metadata["lance:ivf"]) - 1]
    offsets, lengths = ivf_partitions(buf, "index")
    assert lengths.sum() == index.table.num_rows and offsets[0] == 0
    assert with_partitions(buf, offsets, lengths) == buf
    smaller = with_partitions(buf, np.array([0, 1, 1, 1]), np.array([1, 0, 0, 0]))
    assert ivf_partitions(smaller, "x")[1].tolist() == [1, 0, 0, 0]
    assert len(buf) - len(smaller) > 0 and smaller.endswith(buf[-20:])  # centroids and loss untouched


def test_registry_names_every_vector_kind():
    assert {k: REMAPPERS.get(k) for k in VECTOR_KINDS} == dict.fromkeys(VECTOR_KINDS, remap_vector)


# --- full lance-ops compaction, checked with pylance ----------------------------------------------
E2E = ([("IVF_PQ", v, s) for v in ("2.0", "2.1", "2.2") for s in (False, True)]
       + [(k, "2.2", False) for k in VECTOR_KINDS if k != "IVF_PQ"] + [("IVF_HNSW_SQ", "2.1", True)])


def indices_view(ds: lance.LanceDataset) -> list[tuple]:
    """What a user sees of the indices: name, type, coverage, indexed / unindexed rows."""
    out = []
    for i in ds.list_indices():
        stats = ds.stats.index_stats(i["name"])
        out.append((i["name"], i["type"], sorted(i["fragment_ids"]), stats["num_indexed_rows"],
                    stats["num_unindexed_rows"]))
    return sorted(out)


@pytest.mark.parametrize("kind,version,stable", E2E)
def test_lance_ops_compaction_keeps_vector_index(tmp_path, kind, version, stable):
    import lance_ops
    from lance_ops.maintenance.compaction import compact_files

    src = tmp_path / "src"
    build(src, kind, version, stable=stable)
    lance.write_dataset(pa.table({  # unindexed fragments appended after the index was built
        "id": pa.array(np.arange(N, N + 100), pa.int64()),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(np.random.default_rng(3).standard_normal(100 * DIM).astype(np.float32)), DIM)}),
        str(src), mode="append", max_rows_per_file=50)
    old_uuid = lance.dataset(str(src)).list_indices()[0]["uuid"]
    ours_uri, theirs_uri = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(src, ours_uri)
    shutil.copytree(src, theirs_uri)
    dry = compact_files(lance_ops.dataset(str(ours_uri)), dry_run=True)
    action = "keep" if stable else "remap"
    assert [(t["fragment_ids"], t["index_action"]) for t in dry["plan"]] == [
        (list(range(8)), "remap"), ([8, 9], "none")]
    assert [(i["name"], i["kind"], i["action"]) for i in dry["plan"][0]["indices"]] == [("vec_idx", kind, action)]
    metrics = compact_files(lance_ops.dataset(str(ours_uri)))
    lance.dataset(str(theirs_uri)).optimize.compact_files()
    ours, theirs = lance.dataset(str(ours_uri)), lance.dataset(str(theirs_uri))
    ours.validate()
    assert ours.version == theirs.version  # ReserveFragments + Rewrite, as pylance commits
    assert [(f.fragment_id, f.metadata.physical_rows) for f in ours.get_fragments()] == \
        [(f.fragment_id, f.metadata.physical_rows) for f in theirs.get_fragments()]
    assert indices_view(ours) == indices_view(theirs)
    new_uuid = ours.list_indices()[0]["uuid"]
    assert (new_uuid == old_uuid) == stable  # stable row ids: files kept; else a new segment
    assert metrics["index_actions"] == {old_uuid: "keep" if stable else "remap"}
    alive = set(ours.to_table(columns=["id"])["id"].to_pylist())
    assert recall(ours, alive) >= recall(theirs, alive) - 0.05

    # pylance's own maintenance keeps working on the result, as on its own compaction's
    after = {uri: pylance_maintenance(uri) for uri in (ours_uri, theirs_uri)}
    assert indices_view(after[ours_uri]) == indices_view(after[theirs_uri])
    alive = set(after[ours_uri].to_table(columns=["id"])["id"].to_pylist())
    assert recall(after[ours_uri], alive) >= recall(after[theirs_uri], alive) - 0.05


def pylance_maintenance(uri: Path) -> lance.LanceDataset:
    """Append, optimize_indices, delete, compact_files, cleanup_old_versions: all pylance."""
    row = pa.table({"id": pa.array([N + 500], pa.int64()),
                    "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(DIM, np.float32)), DIM)})
    lance.write_dataset(row, str(uri), mode="append")
    lance.dataset(str(uri)).optimize.optimize_indices()
    lance.dataset(str(uri)).delete("id % 10 = 5")
    lance.dataset(str(uri)).optimize.compact_files()
    ds = lance.dataset(str(uri))
    ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    ds = lance.dataset(str(uri))
    ds.validate()
    return ds


@pytest.mark.parametrize("kind", ["IVF_PQ", "IVF_HNSW_SQ"])
def test_vector_remap_on_s3(s3_bucket, moto_server, kind):
    import lance_ops
    from lance_ops.maintenance.compaction import compact_files

    uri = f"{s3_bucket}/vec-{kind.lower()}.lance"
    opts = moto_server.storage_options
    vec = np.random.default_rng(0).standard_normal((600, DIM)).astype(np.float32)
    table = pa.table({"id": pa.array(np.arange(600), pa.int64()),
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM)})
    ds = lance.write_dataset(table, uri, max_rows_per_file=200, storage_options=opts)
    ds.create_index("vec", index_type=kind, num_partitions=2, **({"num_sub_vectors": 4} if "PQ" in kind else {}))
    lance.dataset(uri, storage_options=opts).delete("id % 4 = 1")
    metrics = compact_files(lance_ops.dataset(uri, storage_options=opts))
    assert metrics["indices_remapped"] == 1
    after = lance.dataset(uri, storage_options=opts)
    after.validate()
    assert [sorted(i["fragment_ids"]) for i in after.list_indices()] == [[3]]
    assert after.stats.index_stats("vec_idx")["num_indexed_rows"] == 450
    got = after.to_table(columns=["id"], nearest={"column": "vec", "q": vec[6], "k": 3, "nprobes": 2, "refine_factor": 10})
    assert got["id"].to_pylist()[0] == 6 and all(i % 4 != 1 for i in got["id"].to_pylist())
