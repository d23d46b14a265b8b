"""Issue 19 item 3: cleanup keeps every index file a retained version references and removes only
those no retained version uses. pylance 14.0.2 is the oracle (test-only import): its own
``cleanup_old_versions`` on an identical copy must leave exactly the same ``_indices/`` files.

History: BTREE + IVF_PQ + INVERTED indices; (a) BTREE and INVERTED rebuilt with ``replace=True``
(the first INVERTED uuid is then referenced only by removed versions; the first BTREE's version
is tagged, so its files stay); (b)
``optimize_indices()`` adds delta segments; (c) ``compact_files`` remaps indices under new uuids.
An age cutoff in the middle retains some versions and removes others.
"""
from __future__ import annotations

import shutil
import time
from datetime import datetime, timedelta, timezone

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_ops.maintenance.cleanup import cleanup_old_versions
from tests.maintenance.test_cleanup import listing, manifest_refs, our_ds, versions_of

ZERO = timedelta(0)
WORDS = ["apple", "banana", "cherry", "delta", "echo", "fig", "grape", "hotel"]
DIM = 8


def table(lo: int, hi: int) -> pa.Table:
    """Rows ``lo..hi``: an id, a two-word text and a deterministic 8-d vector."""
    ids = np.arange(lo, hi, dtype=np.int64)
    rng = np.random.default_rng(lo)
    vecs = rng.random((hi - lo, DIM), dtype=np.float32)
    texts = [f"{WORDS[i % 8]} {WORDS[(i // 8) % 8]}" for i in ids]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), DIM)
    return pa.table({"id": ids, "text": texts, "vec": vec})


def index_files(uri: str) -> set[str]:
    return {r for r in listing(uri) if r.startswith("_indices/")}


def build(uri: str) -> tuple[datetime, int, str]:
    """The history above; returns (age cutoff, tagged version, uuid of the replaced INVERTED)."""
    lance.write_dataset(table(0, 1200), uri, max_rows_per_file=300)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds = lance.dataset(uri)
    tagged = ds.version  # the first BTREE only: its uuid survives through the tag
    ds.tags.create("keep", tagged)
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    ds.create_scalar_index("text", "INVERTED")
    ds = lance.dataset(uri)
    old_fts = next(str(i["uuid"]) for i in ds.list_indices() if i["type"] == "Inverted")
    lance.write_dataset(table(1200, 1300), uri, mode="append")
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE", replace=True)  # (a)
    ds.create_scalar_index("text", "INVERTED", replace=True)
    time.sleep(1.5)
    cutoff = datetime.now(timezone.utc)
    time.sleep(1.5)
    lance.write_dataset(table(1300, 1400), uri, mode="append")
    ds = lance.dataset(uri)
    ds.optimize.optimize_indices(num_indices_to_merge=0)  # (b) delta segments
    ds = lance.dataset(uri)
    ds.delete("id % 10 = 3")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)  # (c) remap
    return cutoff, tagged, old_fts


@pytest.mark.parametrize("policy", ["mid", "all"])
def test_cleanup_index_files_match_pylance(tmp_path, policy):
    """mid: versions before the cutoff go; all: every untagged version but the latest goes (the
    pre-compaction and delta segments too)."""
    uri, copy = str(tmp_path / "ds"), str(tmp_path / "copy")
    cutoff, tagged, old_fts = build(uri)
    if policy == "all":
        time.sleep(0.05)
        cutoff = datetime.now(timezone.utc)
    shutil.copytree(uri, copy)
    before_files = index_files(uri)
    refs = manifest_refs(uri)

    ours = cleanup_old_versions(
        our_ds(uri), datetime.now(timezone.utc) - cutoff,
        error_if_tagged_old_versions=False, min_superseded_age=ZERO,
    )
    lance.dataset(copy).cleanup_old_versions(
        older_than=datetime.now(timezone.utc) - cutoff, error_if_tagged_old_versions=False,
    )
    retained = versions_of(uri)
    assert retained == versions_of(copy)
    assert tagged in retained and 1 not in retained and len(retained) < len(refs)
    if policy == "all":
        assert retained == [tagged, max(refs)]
    assert ours.index_files_removed > 0

    after = index_files(uri)
    # every file under a uuid a retained version references is still there
    kept_prefixes = set().union(*(refs[v][1] for v in retained))
    assert {f for f in before_files if any(f.startswith(p) for p in kept_prefixes)} <= after
    # and nothing else is: files only removed versions used are gone
    assert all(any(f.startswith(p) for p in kept_prefixes) for f in after)
    assert any(f.startswith(f"_indices/{old_fts}/") for f in before_files)
    assert not any(f.startswith(f"_indices/{old_fts}/") for f in after)
    assert refs[tagged][1] and all(any(f.startswith(p) for f in after) for p in refs[tagged][1])
    # exactly what pylance's own cleanup leaves
    assert after == index_files(copy)

    for v in retained:
        ds = lance.dataset(uri, version=v)
        ds.validate()
        ds.to_table(columns=["id"])
    ds = lance.dataset(uri)
    assert {i["type"] for i in ds.list_indices()} >= {"BTree", "Inverted", "IVF_PQ"}
    full = ds.to_table(columns=["id", "text"]).to_pydict()
    live = set(full["id"])
    got = ds.to_table(columns=["id"], filter="id >= 100 AND id < 150").column("id").to_pylist()
    assert sorted(got) == sorted(i for i in live if 100 <= i < 150)
    assert "ScalarIndexQuery" in ds.scanner(filter="id >= 100 AND id < 150").explain_plan(True)
    fts = ds.to_table(columns=["id"], full_text_query="cherry").column("id").to_pylist()
    assert sorted(fts) == sorted(i for i, t in zip(full["id"], full["text"]) if "cherry" in t.split())
    q = table(0, 1).column("vec")[0].values.to_numpy()
    hits = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 10}).column("id").to_pylist()
    assert len(hits) == 10 and set(hits) <= live
    # the tagged version keeps its index files and answers through them
    old = lance.dataset(uri, version=tagged)
    assert sorted(old.to_table(columns=["id"], filter="id = 7").column("id").to_pylist()) == [7]
