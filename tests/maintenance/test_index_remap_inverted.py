"""INVERTED (full-text) indices carried through lance_ops compaction (issue 19, ADR 0014).

pylance 14.0.2 is the oracle: the same dataset compacted by pylance gives the expected index files
(every column decoded equal: docs, posting blocks, scores, impacts, positions, token FST), the
same coverage, and full-text queries return the rows brute-force token matching finds, with
pylance's scores.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_ops
from lance_ops.maintenance.compaction.run import compact_files
from lance_ops.maintenance.index_remap import fts_fst
from lance_ops.maintenance.index_remap import fts_postings as fp
from lance_ops.maintenance.index_remap.inverted import can_remap, plan_action
from lance_ops.maintenance.index_remap.registry import REMAPPERS

#: plain tokens the default analyzer keeps as they are (no stemming, not stop words)
WORDS = [f"t{i}" for i in range(60)] + ["zz9", "q42"]
#: words that make the token dictionary non-ASCII (and are removed when their rows go)
RARE = ["東京", "straße", "épée"]
QUERIES = ["t0", "t3", "t17", "t59", "zz9", "q42", "t1 t2"]


def texts(n: int, seed: int, rare: bool = True) -> list[str | None]:
    rng = np.random.default_rng(seed)
    out: list[str | None] = []
    for i in range(n):
        if i % 97 == 0:
            out.append(None)
            continue
        words = list(rng.choice(WORDS, size=int(rng.integers(0, 25))))
        if rare and i % 50 == 7:  # rare words live only in rows deleted below (id % 50 == 7)
            words.append(RARE[i % 3])
        out.append(" ".join(words))
    return out


def build(uri: str, version: str, stable: bool, with_position: bool, n: int = 1500) -> list[int]:
    """3 indexed fragments of 500 rows, deletions, 2 unindexed appended fragments."""
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "text": texts(n, 1)})
    ds = lance.write_dataset(table, uri, max_rows_per_file=500, data_storage_version=version,
                             enable_stable_row_ids=stable)
    ds.create_scalar_index("text", "INVERTED", with_position=with_position)
    ds.delete("id % 50 = 7 or id % 5 = 1 or (id >= 600 and id < 750)")
    extra = pa.table({"id": pa.array(np.arange(n, n + 200, dtype=np.int64)), "text": texts(200, 2, rare=False)})
    lance.write_dataset(extra.slice(0, 100), uri, mode="append")
    lance.write_dataset(extra.slice(100), uri, mode="append")
    return sorted(lance.dataset(uri).to_table()["id"].to_pylist())


def brute_force(ds, query: str) -> set[int]:
    """Ids of live rows holding any of the query's tokens (simple split; WORDS are kept as they are)."""
    wanted = set(query.split())
    rows = ds.to_table(columns=["id", "text"]).to_pylist()
    return {r["id"] for r in rows if r["text"] and wanted & set(r["text"].split())}


def fts(ds, query: str) -> dict[int, float]:
    out = ds.to_table(columns=["id"], full_text_query=query, limit=100_000)
    return dict(zip(out["id"].to_pylist(), out["_score"].to_pylist()))


def check_queries(ds, expected_ids: list[int], reference=None) -> None:
    assert sorted(ds.to_table()["id"].to_pylist()) == expected_ids
    for q in QUERIES:
        got = fts(ds, q)
        assert set(got) == brute_force(ds, q), q
        assert set(got) <= set(expected_ids), q
        if reference is not None:
            want = fts(reference, q)
            assert set(got) == set(want), q
            assert np.allclose([got[i] for i in sorted(got)], [want[i] for i in sorted(want)], rtol=1e-6), q
    assert fts(ds, RARE[0]) == {}


def index_files(uri: str) -> dict[str, pa.Table]:
    ds = lance.dataset(uri)
    (idx,) = ds.list_indices()
    folder = f"{uri}/_indices/{idx['uuid']}"
    return {f: LanceFileReader(f"{folder}/{f}").read_all().to_table() for f in sorted(os.listdir(folder))}


def coverage(ds) -> list[int]:
    (idx,) = ds.list_indices()
    return sorted(idx["fragment_ids"])


@pytest.mark.parametrize("stable", [False, True], ids=["addr", "stable"])
@pytest.mark.parametrize("version,with_position", [("2.0", False), ("2.1", False), ("2.2", True), ("2.2", False)])
def test_inverted_remap_matches_pylance(tmp_path, version, with_position, stable):
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    expected = build(ours, version, stable, with_position)
    shutil.copytree(ours, theirs)
    (old,) = lance.dataset(ours).list_indices()

    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=10_000)
    dry = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=10_000, dry_run=True)
    action = "keep" if stable else "remap"
    assert [(s["fragment_ids"], s["index_action"]) for s in dry["plan"]] == [([0, 1, 2], "remap"), ([3, 4], "none")]
    assert [(i["kind"], i["action"]) for i in dry["plan"][0]["indices"]] == [("INVERTED", action)]
    metrics = compact_files(lance_ops.dataset(ours), target_rows_per_fragment=10_000)
    assert metrics["indices_remapped"] == (0 if stable else 1)

    a, b = lance.dataset(ours), lance.dataset(theirs)
    a.validate()
    assert a.version == b.version
    assert coverage(a) == coverage(b) == [5]
    (new,) = a.list_indices()
    assert (new["uuid"] == old["uuid"]) is stable  # stable row ids: files kept, bitmap recalculated
    mine, pylance_made = index_files(ours), index_files(theirs)
    assert sorted(mine) == sorted(pylance_made)
    for name in mine:
        assert mine[name].equals(pylance_made[name]), name
        assert mine[name].schema.metadata == pylance_made[name].schema.metadata, name
    if not stable:  # the rare tokens left with their rows: the FST was rebuilt without them
        tokens = fts_fst.read_map(mine["part_0_tokens.lance"]["_token_fst_bytes"][0].as_py())
        assert not {w.encode() for w in RARE} & set(tokens)
    ours_mf, theirs_mf = lance_ops.dataset(ours).manifest_file, lance_ops.dataset(theirs).manifest_file
    (mi,), (ti,) = ours_mf.index_section.indices, theirs_mf.index_section.indices
    assert (mi.name, mi.dataset_version, mi.index_version, mi.fragment_bitmap, mi.index_details) == \
        (ti.name, ti.dataset_version, ti.index_version, ti.fragment_bitmap, ti.index_details)
    stats = a.stats.index_stats("text_idx")
    assert stats["num_indexed_rows"] + stats["num_unindexed_rows"] == len(expected)
    check_queries(a, expected, reference=b)
    if with_position:
        phrase = a.to_table(columns=["id"], full_text_query='"t1 t2"', limit=100_000)["id"].to_pylist()
        assert sorted(phrase) == sorted(b.to_table(columns=["id"], full_text_query='"t1 t2"',
                                                   limit=100_000)["id"].to_pylist())

    # pylance's own maintenance keeps working on top
    lance.write_dataset(pa.table({"id": pa.array([9_000], pa.int64()), "text": ["t0 zz9"]}), ours, mode="append")
    lance.dataset(ours).optimize.optimize_indices()
    lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=10_000)
    lance.dataset(ours).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    final = lance.dataset(ours)
    final.validate()
    check_queries(final, sorted(expected + [9_000]))


def test_registry_and_plan_hooks():
    assert REMAPPERS["INVERTED"].__name__ == "remap_inverted"
    assert can_remap("INVERTED", False) and can_remap("INVERTED", True) and not can_remap("BTREE", False)
    assert (plan_action(True), plan_action(False)) == ("keep", "remap")


def test_codecs_round_trip():
    rng = np.random.default_rng(5)
    values = rng.integers(0, 1 << 40, 500, dtype=np.uint64)
    assert np.array_equal(fp.decode_varints(fp.encode_varints(values)), values)
    for bits in (0, 1, 7, 13, 32):
        block = rng.integers(0, 1 << bits, 128, dtype=np.uint64) if bits else np.zeros(128, np.uint64)
        packed = fp.pack4x(block, bits)
        assert len(packed) == 16 * bits and np.array_equal(fp.unpack4x(packed, bits), block)
    assert fp.length_code(np.array([0, 7, 8, 15, 16, 17, 18, 1000])).tolist() == [0, 7, 8, 15, 16, 16, 17, 63]
    docs = np.cumsum(rng.integers(1, 9, 300)).astype(np.uint64)
    freqs = rng.integers(1, 5, 300).astype(np.uint64)
    blocks = fp.encode_posting(docs, freqs, np.ones(3, np.float32))
    got_docs, got_freqs = fp.decode_posting(blocks, 300)
    assert np.array_equal(got_docs, docs) and np.array_equal(got_freqs, freqs)
    items = {"b".encode(): 3, "ab".encode(): 0, "東京".encode(): 1, b"abc": 2}
    assert fts_fst.read_map(fts_fst.build_map(items.items())) == items


@pytest.mark.slow
def test_multi_partition_index_matches_pylance(tmp_path):
    """An index built as several partitions (small LANCE_FTS_* sizes): each partition remapped on
    its own, files equal pylance's (the partition list order may differ: pylance's is completion order)."""
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    script = f"""
import lance, numpy as np, pyarrow as pa
rng = np.random.default_rng(3)
words = np.array([f"w{{i}}" for i in range(5000)])
lens = rng.integers(1, 30, 40000); allw = words[rng.integers(0, 5000, lens.sum())]
ends = np.cumsum(lens); texts = [" ".join(allw[e - l:e]) for e, l in zip(ends, lens)]
ds = lance.write_dataset(pa.table({{"id": pa.array(np.arange(40000)), "text": texts}}), {ours!r}, max_rows_per_file=5000)
ds.create_scalar_index("text", "INVERTED")
lance.dataset({ours!r}).delete("id % 3 = 0 or (id >= 5000 and id < 7000)")
"""
    env = {**os.environ, "LANCE_FTS_TARGET_SIZE": "1", "LANCE_FTS_PARTITION_SIZE": "1", "LANCE_FTS_NUM_SHARDS": "2"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=12_000)
    compact_files(lance_ops.dataset(ours), target_rows_per_fragment=12_000)
    mine, pylance_made = index_files(ours), index_files(theirs)
    meta = mine["metadata.lance"].schema.metadata
    assert len(json.loads(meta[b"partitions"])) > 1
    assert sorted(json.loads(meta[b"partitions"])) == sorted(
        json.loads(pylance_made["metadata.lance"].schema.metadata[b"partitions"]))
    assert sorted(mine) == sorted(pylance_made)
    for name in mine:
        if name != "metadata.lance":
            assert mine[name].equals(pylance_made[name]), name
    a, b = lance.dataset(ours), lance.dataset(theirs)
    a.validate()
    for q in ["w1", "w42 w4999", "w777"]:
        assert fts(a, q).keys() == fts(b, q).keys()


def test_unknown_layout_is_refused_before_writing(tmp_path):
    """A segment whose layout this module does not know (here: no metadata.lance, as in legacy
    single-partition indices) is named by segment_refusal and refused by the remapper before any
    file is written."""
    from lance_ops.errors import UnsupportedError
    from lance_ops.maintenance.index_remap import AddressMap
    from lance_ops.maintenance.index_remap.base import RemapRequest
    from lance_ops.maintenance.index_remap.inverted import remap_inverted, segment_refusal

    uri = str(tmp_path / "t.lance")
    build(uri, "2.2", False, False, n=600)
    ds = lance_ops.dataset(uri)
    (index,) = ds.manifest_file.index_section.indices
    assert segment_refusal(ds.store, ds.base, index, False) is None
    (old,) = lance.dataset(uri).list_indices()
    os.remove(f"{uri}/_indices/{old['uuid']}/metadata.lance")
    reason = segment_refusal(ds.store, ds.base, index, False)
    assert reason is not None and "legacy" in reason
    assert segment_refusal(ds.store, ds.base, index, True) is None  # stable ids: kept as is
    request = RemapRequest(store=ds.store, base=ds.base, index=index, kind="INVERTED", new_uuid="new-dir",
                           addresses=AddressMap.from_groups([]), stable_row_ids=False, dataset=ds,
                           new_fragments=[])
    with pytest.raises(UnsupportedError, match="text_idx.*legacy"):
        remap_inverted(request)
    assert not (tmp_path / "t.lance" / "_indices" / "new-dir").exists()


def test_merge_without_deletions_matches_pylance(tmp_path):
    """Small indexed fragments merged with nothing deleted: only _rowid changes (postings, scores
    and tokens are carried as they are), as in pylance's output."""
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    table = pa.table({"id": pa.array(np.arange(900, dtype=np.int64)), "text": texts(900, 4, rare=False)})
    lance.write_dataset(table, ours, max_rows_per_file=150).create_scalar_index("text", "INVERTED", with_position=True)
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files()
    compact_files(lance_ops.dataset(ours))
    mine, pylance_made = index_files(ours), index_files(theirs)
    for name in mine:
        assert mine[name].equals(pylance_made[name]), name
    a = lance.dataset(ours)
    a.validate()
    assert coverage(a) == [6]
    check_queries(a, list(range(900)), reference=lance.dataset(theirs))
