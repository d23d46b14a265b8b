"""Acceptance (maintenance engine, item 5): cleanup after random histories made by *our* operations.

The property test in ``test_cleanup.py`` builds its histories with pylance. This one drives the
lance_ops operations only: ``lance_ops.write_dataset`` (append / overwrite), ``ds.delete``,
``compact_files``, ``materialize_deletions``, ``refresh_row_id_index``, ``rebuild_statistics``,
tags, and ``cleanup_old_versions`` itself (also in the middle of a history). After every cleanup:

* the surviving versions are exactly the newest ``retain`` ones, the tagged ones and the latest;
* every surviving version reads exactly as before, in lance_ops and in pylance (with ``_rowid``
  when the dataset has stable row ids), and ``take_by_row_id`` still agrees with pylance;
* no unreferenced file is left in ``data/``, ``_deletions/``, ``_transactions/``, ``_stats/`` or
  ``_rowid_index/`` (our operations leave no unverified garbage, so this holds with and without
  ``delete_unverified``), and nothing a surviving version uses is gone - tags on old versions
  included;
* the counters and ``bytes_removed`` of the returned stats match what disappeared.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_ops
from lance_ops.io import open_store
from lance_ops.maintenance.cleanup import cleanup_old_versions
from lance_ops.maintenance.compaction import compact_files, materialize_deletions
from lance_ops.maintenance.rowid_index import refresh_row_id_index
from lance_ops.maintenance.statistics import rebuild_statistics
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest
from lance_ops.table.stats import stats_path
from tests.maintenance.test_cleanup import listing, removed_counts

ZERO = timedelta(0)
AREAS = ("data", "_deletions", "_transactions", "_stats", "_rowid_index")


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"a": ids, "s": pa.array([f"row-{i}" for i in ids]),
                     "f": pa.array(np.where(ids % 5 == 0, np.nan, ids * 0.5))})


def version_refs(uri: str) -> dict[int, set[str]]:
    """version -> every root-relative path it needs (data, stats, deletions, transaction)."""
    store, base = open_store(uri)
    out = {}
    for loc in naming.list_versions(store, base):
        mf = read_manifest(store, loc.path)
        paths = set()
        for frag in mf.manifest.fragments:
            for df in frag.files:
                paths.add(f"data/{df.path}")
                paths.add("_stats/" + os.path.basename(stats_path(store, "", df.path)))
            if frag.HasField("deletion_file"):
                paths.add(naming.deletion_file_path(frag.id, frag.deletion_file))
        if mf.manifest.transaction_file:
            paths.add(f"_transactions/{mf.manifest.transaction_file}")
        out[loc.version] = paths
    return out


def _norm(v):
    return "NaN" if isinstance(v, float) and v != v else v


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal schema and values, NaN equal to NaN (``pa.Table.equals`` says NaN != NaN)."""
    return a.schema.equals(b.schema) and [{k: _norm(x) for k, x in r.items()} for r in a.to_pylist()] == \
        [{k: _norm(x) for k, x in r.items()} for r in b.to_pylist()]


def referenced(rel: str, kept_paths: set[str], kept_versions: set[int]) -> bool:
    if rel.startswith("_rowid_index/"):
        return int(rel.split("/", 1)[1].split("-", 1)[0]) in kept_versions
    return rel in kept_paths


def reads(uri: str, v: int, stable: bool) -> tuple[pa.Table, pa.Table]:
    ours = lance_ops.dataset(uri, version=v).to_table(with_row_id=stable).replace_schema_metadata(None)
    theirs = lance.dataset(uri, version=v).to_table(with_row_id=stable).replace_schema_metadata(None)
    return ours, theirs


def cleanup_and_check(uri: str, stable: bool, tags: dict[int, str], retain: int, use_age: bool,
                      delete_unverified: bool) -> None:
    refs = version_refs(uri)
    files = listing(uri)
    snap = {}
    for v in refs:
        ours, theirs = reads(uri, v, stable)
        assert same(ours, theirs.cast(ours.schema)), v  # the two libraries agree to begin with
        snap[v] = (ours, theirs)
    versions = sorted(refs)
    expect = set(versions[-retain:]) | set(tags) | {versions[-1]}

    stats = cleanup_old_versions(lance_ops.dataset(uri), ZERO if use_age else None, retain,
                                 delete_unverified=delete_unverified, error_if_tagged_old_versions=False)

    after_versions = set(version_refs(uri))
    assert after_versions == expect
    for v in sorted(after_versions):
        ours, theirs = reads(uri, v, stable)
        assert same(ours, snap[v][0]), f"lance_ops reads version {v} differently after cleanup"
        assert same(theirs, snap[v][1]), f"pylance reads version {v} differently after cleanup"
    after = listing(uri)
    assert set(after) <= set(files)
    kept_paths = set().union(*(refs[v] for v in after_versions))
    for rel in after:
        if rel.partition("/")[0] in AREAS:
            assert referenced(rel, kept_paths, after_versions), f"{rel} survived but nothing kept uses it"
    for rel in files:
        if rel.partition("/")[0] in AREAS and referenced(rel, kept_paths, after_versions):
            assert rel in after, f"{rel} is used by a kept version but was deleted"
    removed = {rel: size for rel, size in files.items() if rel not in after}
    got = stats.to_dict()
    for key, value in removed_counts(removed).items():
        assert got[key] == value, (key, got)
    assert stats.bytes_removed == sum(removed.values()) and stats.failed_deletes == 0
    if stable:  # row-id lookups on the latest version still agree with pylance
        ds = lance_ops.dataset(uri)
        ids = ds.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy()[::3]
        probe = np.concatenate([ids, np.array([10 ** 9], np.uint64)])
        got_rows = ds.take_by_row_id(probe)
        want = lance.dataset(uri)._take_rows(ids.tolist())
        assert got_rows["a"].to_pylist() == want["a"].to_pylist()


OPS = st.one_of(
    st.tuples(st.just("append"), st.sampled_from([5, 40])),
    st.tuples(st.just("overwrite"), st.sampled_from([5, 30])),
    st.tuples(st.just("delete"), st.integers(2, 6), st.integers(0, 5)),
    st.tuples(st.just("compact"), st.sampled_from([30, 1000])),
    st.tuples(st.just("materialize"), st.sampled_from([0.0, 0.2])),
    st.tuples(st.just("refresh"), st.just(0)),
    st.tuples(st.just("rebuild"), st.booleans()),
    st.tuples(st.just("tag"), st.just(0)),
    st.tuples(st.just("cleanup"), st.integers(1, 4), st.booleans(), st.booleans()),
)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(stable=st.booleans(), ops=st.lists(OPS, min_size=1, max_size=10), retain=st.integers(1, 6),
       use_age=st.booleans(), delete_unverified=st.booleans())
def test_property_our_operations_then_cleanup(stable, ops, retain, use_age, delete_unverified):
    root = tempfile.mkdtemp(prefix="acc-cleanup-")
    try:
        uri = os.path.join(root, "ds")
        lance_ops.write_dataset(rows(0, 20), uri, max_rows_per_file=15, enable_stable_row_ids=stable)
        n, tags = 20, {}
        for op in ops:
            kind = op[0]
            ds = lance_ops.dataset(uri)
            if kind == "append":
                lance_ops.write_dataset(rows(n, op[1]), uri, mode="append", max_rows_per_file=25)
                n += op[1]
            elif kind == "overwrite":
                lance_ops.write_dataset(rows(n, op[1]), uri, mode="overwrite")
                n += op[1]
            elif kind == "delete":
                ds.delete(f"a % {op[1]} = {op[2] % op[1]}")
            elif kind == "compact":
                compact_files(ds, target_rows_per_fragment=op[1])
            elif kind == "materialize":
                materialize_deletions(ds, op[1])
            elif kind == "refresh":
                refresh_row_id_index(ds)
            elif kind == "rebuild":
                if not op[1]:  # a data file without statistics (as pylance writes them) to fill in
                    last = ds.manifest.fragments[-1].files[0].path if ds.manifest.fragments else None
                    if last and os.path.exists(stats_path(ds._store, ds._base, last)):
                        os.remove(stats_path(ds._store, ds._base, last))
                res = rebuild_statistics(ds, force=op[1])
                assert res["failed"] == 0 and res["unsupported"] == 0
            elif kind == "tag":
                if ds.version not in tags:
                    tags[ds.version] = f"t{len(tags)}"
                    ds.tags.create(tags[ds.version], ds.version)
            else:
                cleanup_and_check(uri, stable, tags, op[1], op[2], op[3])
        cleanup_and_check(uri, stable, tags, retain, use_age, delete_unverified)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_tag_on_an_old_version_leaks_nothing_of_our_maintenance(tmp_path):
    """A tag on version 1, then appends, deletes, compaction, stats and index refreshes."""
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 30), uri, max_rows_per_file=10, enable_stable_row_ids=True)
    lance_ops.dataset(uri).tags.create("first", 1)
    for i in range(3):
        lance_ops.write_dataset(rows(30 + 10 * i, 10), uri, mode="append")
        lance_ops.dataset(uri).delete(f"a % 4 = {i}")
        refresh_row_id_index(lance_ops.dataset(uri))
    compact_files(lance_ops.dataset(uri), target_rows_per_fragment=100)
    refresh_row_id_index(lance_ops.dataset(uri))
    cleanup_and_check(uri, True, {1: "first"}, 1, True, False)
    assert sorted(version_refs(uri)) == [1, lance_ops.dataset(uri).version]
    assert len(os.listdir(os.path.join(uri, "_rowid_index"))) == 1
