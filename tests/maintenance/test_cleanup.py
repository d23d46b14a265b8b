"""cleanup_old_versions: datasets written by pylance, cleaned by us, checked with pylance.

Invariants checked after every cleanup (``check_cleanup``):
  * every surviving version reads exactly as before (pylance ``to_table``);
  * the removed versions are gone, nothing new appeared;
  * every file in data/, _deletions/, _transactions/, _indices/ that a surviving version
    names is still there, and every one that only removed versions named is gone;
  * the stats counters and ``bytes_removed`` match the files that actually disappeared.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_ops
from lance_ops.errors import LanceOpsError, StorageError, TagError
from lance_ops._proto import table_pb2
from lance_ops.io import open_store
from lance_ops.maintenance.cleanup import CleanupStats, cleanup_old_versions
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest

ZERO = timedelta(0)
OLD = time.time() - 8 * 24 * 3600  # an mtime past the 7-day unverified threshold
STD_AREAS = ("data", "_deletions", "_transactions", "_indices")
COUNTER_OF_AREA = {
    "data": "data_files_removed",
    "_deletions": "deletion_files_removed",
    "_transactions": "transaction_files_removed",
    "_indices": "index_files_removed",
    "_stats": "statistics_files_removed",
    "_rowid_index": "rowid_index_files_removed",
}


# --- helpers ------------------------------------------------------------------------------------
def table(start: int, stop: int) -> pa.Table:
    return pa.table({"a": pa.array(range(start, stop), pa.int64()),
                     "s": pa.array([f"row-{i}" for i in range(start, stop)])})


def our_ds(uri: str, opts: dict | None = None, version=None):
    return lance_ops.dataset(uri, version=version, storage_options=opts)


def listing(uri: str, opts: dict | None = None) -> dict[str, int]:
    """Every object below the dataset root: relative path -> size."""
    store, base = open_store(uri, opts)
    prefix = base.replace("\\", "/").rstrip("/")
    out = {}
    for info in store.list(base):
        p = info.path.replace("\\", "/")
        rel = p[len(prefix) + 1:] if prefix else p
        if rel.startswith("_lance_ops/"):  # lance_ops' key ledger: written by cleanup, never a data file
            continue
        out[rel] = info.size
    return out


def manifest_refs(uri: str, opts: dict | None = None) -> dict[int, tuple[set[str], set[str]]]:
    """version -> (root-relative paths it names, index directory prefixes it names)."""
    store, base = open_store(uri, opts)
    out = {}
    for loc in naming.list_versions(store, base):
        mf = read_manifest(store, loc.path)
        paths, idx = set(), set()
        for frag in mf.manifest.fragments:
            paths.update(f"data/{df.path}" for df in frag.files)
            if frag.HasField("deletion_file"):
                paths.add(naming.deletion_file_path(frag.id, frag.deletion_file))
        if mf.manifest.transaction_file:
            paths.add(f"_transactions/{mf.manifest.transaction_file}")
        if mf.index_section is not None:
            idx.update(f"_indices/{uuid.UUID(bytes=i.uuid.uuid)}/" for i in mf.index_section.indices)
        out[loc.version] = (paths, idx)
    return out


def versions_of(uri: str, opts: dict | None = None) -> list[int]:
    store, base = open_store(uri, opts)
    return [loc.version for loc in naming.list_versions(store, base)]


def snapshot(uri: str, opts: dict | None = None) -> dict[int, pa.Table]:
    return {v: lance.dataset(uri, version=v, storage_options=opts).to_table()
            for v in versions_of(uri, opts)}


def is_referenced(rel: str, refs) -> bool:
    paths, idx = refs
    return rel in paths or any(rel.startswith(p) for p in idx)


def union(refs_by_version, versions) -> tuple[set[str], set[str]]:
    paths, idx = set(), set()
    for v in versions:
        paths |= refs_by_version[v][0]
        idx |= refs_by_version[v][1]
    return paths, idx


class Before:
    """Everything needed to judge a cleanup, captured before it runs."""

    def __init__(self, uri: str, opts: dict | None = None):
        self.uri, self.opts = uri, opts
        self.files = listing(uri, opts)
        self.refs = manifest_refs(uri, opts)
        self.snap = snapshot(uri, opts)


def removed_counts(removed: dict[str, int]) -> dict[str, int]:
    counts = {c: 0 for c in COUNTER_OF_AREA.values()}
    counts.update(old_versions=0, temporary_files_removed=0)
    for rel in removed:
        area, _, rest = rel.partition("/")
        name = rel.rsplit("/", 1)[-1]
        if area == "_versions" and naming.parse_manifest_name(name) is not None:
            counts["old_versions"] += 1
        elif name.startswith(".") or "#" in name or area == "_versions":
            counts["temporary_files_removed"] += 1
        else:
            counts[COUNTER_OF_AREA[area]] += 1
    return counts


def check_cleanup(before: Before, stats: CleanupStats, expect_versions=None) -> set[str]:
    """Assert the invariants of the module docstring; returns the removed relative paths."""
    uri, opts = before.uri, before.opts
    after_versions = versions_of(uri, opts)
    if expect_versions is not None:
        assert after_versions == sorted(expect_versions)
    assert set(after_versions) <= set(before.refs)
    for v in after_versions:
        assert lance.dataset(uri, version=v, storage_options=opts).to_table() == before.snap[v], v
    for v in set(before.refs) - set(after_versions):
        with pytest.raises(Exception):
            lance.dataset(uri, version=v, storage_options=opts)
    after = listing(uri, opts)
    assert set(after) <= set(before.files), set(after) - set(before.files)
    kept_refs = union(before.refs, after_versions)
    any_refs = union(before.refs, before.refs)
    for rel in before.files:
        if rel.partition("/")[0] not in STD_AREAS:
            continue
        if is_referenced(rel, kept_refs):
            assert rel in after, f"{rel} is referenced by a kept version but was deleted"
        elif is_referenced(rel, any_refs):
            assert rel not in after, f"{rel} is only referenced by removed versions but survived"
    removed = {rel: size for rel, size in before.files.items() if rel not in after}
    expected = removed_counts(removed)
    got = stats.to_dict()
    for key, value in expected.items():
        assert got[key] == value, (key, got, expected)
    assert stats.bytes_removed == sum(removed.values())
    assert stats.failed_deletes == 0
    assert stats.old_versions == len(set(before.refs) - set(after_versions))
    return set(removed)


def build_rich(uri: str, opts: dict | None = None) -> None:
    """appends, small (.arrow) and big (.bin) deletes, an index, compaction, a tag, overwrite."""
    kw = {"storage_options": opts} if opts else {}
    lance.write_dataset(table(0, 20), uri, **kw)                       # v1
    lance.write_dataset(table(20, 6020), uri, mode="append", **kw)     # v2
    ds = lance.dataset(uri, **kw)
    ds.delete("a % 7 = 0")                                             # v3 (.arrow)
    ds.delete("a >= 30 AND a < 5700")                                  # v4 (.bin)
    ds.create_scalar_index("a", "BTREE")                               # v5
    ds.optimize.compact_files()                                        # v6, v7
    ds = lance.dataset(uri, **kw)
    ds.tags.create("keep", 3)
    lance.write_dataset(table(7000, 7010), uri, mode="append", **kw)   # v8
    lance.write_dataset(table(9000, 9030), uri, mode="overwrite", **kw)  # v9
    lance.write_dataset(table(9030, 9040), uri, mode="append", **kw)   # v10


def set_old(path: str, when: float = OLD) -> None:
    os.utime(path, (when, when))


def put(path: str, data: bytes = b"x" * 10, old: bool = False) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if old:
        set_old(path)
    return path


def simple_history(uri: str, n: int = 4) -> None:
    lance.write_dataset(table(0, 10), uri)
    for i in range(1, n):
        lance.write_dataset(table(10 * i, 10 * i + 10), uri, mode="append")


# --- scenarios ----------------------------------------------------------------------------------
def test_rich_history_local(tmp_path):
    uri = str(tmp_path / "ds")
    build_rich(uri)
    before = Before(uri)
    assert any(r.endswith(".bin") for r in before.files) and any(r.endswith(".arrow") for r in before.files)
    assert any(r.startswith("_indices/") for r in before.files)
    assert versions_of(uri) == list(range(1, 11))
    stats = cleanup_old_versions(our_ds(uri), ZERO, 2, error_if_tagged_old_versions=False)
    removed = check_cleanup(before, stats, expect_versions=[3, 9, 10])
    assert stats.data_files_removed > 0 and stats.deletion_files_removed > 0
    assert stats.index_files_removed > 0
    # exactly the files of the kept versions remain in the standard areas
    kept_paths, kept_idx = union(before.refs, [3, 9, 10])
    left = {r for r in listing(uri) if r.partition("/")[0] in STD_AREAS}
    assert left == {r for r in before.files if r.partition("/")[0] in STD_AREAS
                    and is_referenced(r, (kept_paths, kept_idx))}
    assert removed
    # pylance's own cleanup still works afterwards and finds nothing more to do
    again = lance.dataset(uri).cleanup_old_versions(
        older_than=ZERO, retain_versions=2, error_if_tagged_old_versions=False)
    assert again.old_versions == 0 and again.data_files_removed == 0
    assert again.deletion_files_removed == 0 and again.bytes_removed == 0
    # and pylance can still remove versions we kept (the tag gone)
    lance.dataset(uri).tags.delete("keep")
    assert lance.dataset(uri).cleanup_old_versions(older_than=ZERO).old_versions == 2
    assert lance.dataset(uri).to_table() == before.snap[10]


def test_rich_history_s3(moto_server, s3_bucket):
    uri, opts = f"{s3_bucket}/tables/rich", moto_server.storage_options
    build_rich(uri, opts)
    before = Before(uri, opts)
    dry = cleanup_old_versions(our_ds(uri, opts), ZERO, 2, error_if_tagged_old_versions=False,
                               dry_run=True)
    assert listing(uri, opts) == before.files
    stats = cleanup_old_versions(our_ds(uri, opts), ZERO, 2, error_if_tagged_old_versions=False)
    removed = check_cleanup(before, stats, expect_versions=[3, 9, 10])
    store, base = open_store(uri, opts)
    assert {p[len(base) + 1:] for p in dry.planned} == removed
    again = lance.dataset(uri, storage_options=opts).cleanup_old_versions(
        older_than=ZERO, retain_versions=2, error_if_tagged_old_versions=False)
    assert again.old_versions == 0 and again.bytes_removed == 0


def test_unverified_on_s3(moto_server, s3_bucket):
    uri, opts = f"{s3_bucket}/tables/orphans", moto_server.storage_options
    lance.write_dataset(table(0, 10), uri, storage_options=opts)
    lance.write_dataset(table(10, 20), uri, mode="append", storage_options=opts)
    lance.fragment.LanceFragment.create(uri, table(500, 510), storage_options=opts)
    store, base = open_store(uri, opts)
    store.put(store.join(base, "notes.txt"), b"user file")
    before = Before(uri, opts)
    (orphan,) = [r for r in before.files if r.startswith("data/")
                 and not is_referenced(r, union(before.refs, before.refs))]
    stats = cleanup_old_versions(our_ds(uri, opts), ZERO)  # the orphan is young: kept
    check_cleanup(before, stats, expect_versions=[2])
    assert orphan in listing(uri, opts)
    stats = cleanup_old_versions(our_ds(uri, opts), ZERO, delete_unverified=True)
    assert stats.data_files_removed == 1 and stats.bytes_removed == before.files[orphan]
    left = listing(uri, opts)
    assert orphan not in left and "notes.txt" in left
    assert lance.dataset(uri, storage_options=opts).to_table() == before.snap[2]


def test_method_on_lance_dataset_delegates(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 4)
    before = Before(uri)
    stats = our_ds(uri).cleanup_old_versions(older_than=ZERO)
    check_cleanup(before, stats, expect_versions=[4])
    assert stats.old_versions == 3 and stats.transaction_files_removed == 3


def test_tagged_old_versions_raise_like_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 4)
    ds = lance.dataset(uri)
    ds.tags.create("b", 1)
    ds.tags.create("a", 1)
    ds.tags.create("c", 2)
    files = listing(uri)
    with pytest.raises(TagError) as ours:
        cleanup_old_versions(our_ds(uri), ZERO)
    assert isinstance(ours.value, LanceOpsError)
    assert listing(uri) == files  # nothing deleted
    with pytest.raises(OSError) as theirs:
        ds.cleanup_old_versions(older_than=ZERO)
    # same text; pylance lists the tags in hash order, we sort them
    ours_head, _, ours_tags = str(ours.value).partition("cleanup: ")
    theirs_head, _, theirs_tags = str(theirs.value).partition("cleanup: ")
    assert theirs_head == "Cleanup error: " + ours_head
    assert json.loads(ours_tags) == json.loads(theirs_tags) == {"a": 1, "b": 1, "c": 2}
    assert str(ours.value).startswith("3 tagged version(s) have been marked for cleanup")
    # a tag outside the removable range is no error
    stats = cleanup_old_versions(our_ds(uri), ZERO, retain_versions=3,
                                 error_if_tagged_old_versions=False)
    assert stats.old_versions == 0


def test_tagged_old_versions_kept_silently(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 5)
    lance.dataset(uri).tags.create("t", 2)
    before = Before(uri)
    stats = cleanup_old_versions(our_ds(uri), ZERO, error_if_tagged_old_versions=False)
    check_cleanup(before, stats, expect_versions=[2, 5])


def test_tag_on_old_version_does_not_leak_newer_files(tmp_path):
    """lance #8705 and friends: a tag on v1 must not freeze the listing cutoff."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(table(0, 100), uri)
    lance.dataset(uri).tags.create("v1", 1)
    v1_mtime = os.path.getmtime(os.path.join(uri, naming.manifest_path(1, True)))
    time.sleep(0.05)
    n = 100
    for round_ in range(4):
        lance.write_dataset(table(n, n + 50), uri, mode="append")
        n += 50
        ds = lance.dataset(uri)
        ds.delete(f"a % 5 = {round_}")
        ds.optimize.compact_files()
    before = Before(uri)
    mtimes = {rel: os.path.getmtime(os.path.join(uri, rel)) for rel in before.files}
    latest = max(before.refs)
    stats = cleanup_old_versions(our_ds(uri), ZERO, error_if_tagged_old_versions=False)
    removed = check_cleanup(before, stats, expect_versions=[1, latest])
    # what is left in the standard areas is exactly what v1 and the latest need
    need = union(before.refs, [1, latest])
    left = {r for r in listing(uri) if r.partition("/")[0] in STD_AREAS}
    assert left == {r for r in before.files if r.partition("/")[0] in STD_AREAS and is_referenced(r, need)}
    # and the removed files include many written after the tagged manifest
    newer = [r for r in removed if r.startswith("data/") and mtimes[r] > v1_mtime]
    assert len(newer) >= 4


def test_unverified_files_wait_seven_days(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 3)
    # a real abandoned write: a fragment written but never committed
    lance.fragment.LanceFragment.create(uri, table(500, 510))
    orphans = [r for r in listing(uri) if r.startswith("data/")
               and r not in union(manifest_refs(uri), manifest_refs(uri))[0]]
    assert len(orphans) == 1
    txn = put(os.path.join(uri, "_transactions", f"9-{uuid.uuid4()}.txn"))
    dele = put(os.path.join(uri, "_deletions", "0-9-12345.arrow"))
    idx = put(os.path.join(uri, "_indices", str(uuid.uuid4()), "part.lance"))
    young = {orphans[0], *(os.path.relpath(p, uri) for p in (txn, dele, idx))}

    stats = cleanup_old_versions(our_ds(uri), ZERO)
    assert stats.old_versions == 2 and stats.data_files_removed == 0
    assert young <= set(listing(uri))

    # 8 days old, but older_than=10 days: the threshold is max(7 days, older_than)
    for rel in young:
        set_old(os.path.join(uri, rel))
    stats = cleanup_old_versions(our_ds(uri), timedelta(days=10))
    assert stats.bytes_removed == 0 and young <= set(listing(uri))

    before = listing(uri)
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    assert not (young & set(listing(uri)))
    assert (stats.data_files_removed, stats.transaction_files_removed,
            stats.deletion_files_removed, stats.index_files_removed) == (1, 1, 1, 1)
    assert stats.bytes_removed == sum(before[r] for r in young)
    assert lance.dataset(uri).to_table() == pa.concat_tables([table(0, 10), table(10, 20), table(20, 30)])


def test_delete_unverified_removes_young_orphans(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 2)
    lance.fragment.LanceFragment.create(uri, table(500, 510))
    before = Before(uri)
    orphan = [r for r in before.files if r.startswith("data/")
              and not is_referenced(r, union(before.refs, before.refs))]
    stats = cleanup_old_versions(our_ds(uri), ZERO, delete_unverified=True)
    assert stats.data_files_removed == 1
    assert orphan[0] not in listing(uri)
    assert lance.dataset(uri).to_table() == before.snap[2]


def test_dry_run_lists_exactly_what_a_real_run_deletes(tmp_path):
    uri = str(tmp_path / "ds")
    build_rich(uri)
    lance.fragment.LanceFragment.create(uri, table(500, 510))
    for rel in list(listing(uri)):
        if rel.startswith("data/") and not is_referenced(rel, union(manifest_refs(uri), manifest_refs(uri))):
            set_old(os.path.join(uri, rel))
    put(os.path.join(uri, "_versions", f".tmp_11.manifest_{uuid.uuid4()}"), old=True)
    before = listing(uri)
    dry = cleanup_old_versions(our_ds(uri), ZERO, 2, error_if_tagged_old_versions=False, dry_run=True)
    assert listing(uri) == before
    assert dry.planned and dry.temporary_files_removed == 1 and dry.data_files_removed > 0
    real = cleanup_old_versions(our_ds(uri), ZERO, 2, error_if_tagged_old_versions=False)
    after = listing(uri)
    removed = {os.path.join(uri, r) for r in before if r not in after}
    assert set(dry.planned) == removed and len(dry.planned) == len(removed)
    assert real.planned == []
    assert {k: v for k, v in dry.to_dict().items() if k != "planned"} == real.to_dict()
    assert "planned" in dry.to_dict() and "planned" not in real.to_dict()


def test_user_files_and_refs_are_untouched(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 3)
    lance.dataset(uri).tags.create("t", 3)
    users = ["notes.txt", "data/README.md", "data/sub/x.parquet", "_indices/stray.txt",
             "_deletions/foo.txt", "_deletions/sub/0-1-2.arrow", "_transactions/notes.md",
             "other/y.lance", "_versions/README", "_versions/d5.manifest.bak", "x.lance",
             "_refs/tags/notes.txt", "_indices/not-a-uuid/file.lance"]
    for rel in users:
        put(os.path.join(uri, rel), old=True)
    set_old(os.path.join(uri, "_versions", naming.VERSION_HINT_NAME))
    stats = cleanup_old_versions(our_ds(uri), ZERO, delete_unverified=True)
    assert stats.old_versions == 2
    left = set(listing(uri))
    assert set(users) <= left
    assert f"_versions/{naming.VERSION_HINT_NAME}" in left and "_refs/tags/t.json" in left


def test_temporary_files(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 3)
    old_tmp = [f"_versions/.tmp_2.manifest_{uuid.uuid4()}",
               f"data/.{'0' * 24}{'a' * 26}.lance.0123456789ab.tmp",
               f"_deletions/.0-1-2.arrow.0123456789ab.tmp",
               f"_versions/2.manifest-{uuid.uuid4()}",   # staged copy of a committed version
               f"_versions/{naming.manifest_name(1, True)}-{uuid.uuid4()}",  # same, V2 name
               "data/abc.lance#1"]                      # object_store upload staging
    young_tmp = [f"_versions/.tmp_4.manifest_{uuid.uuid4()}", "data/.x.lance.0123456789ab.tmp"]
    future_staged = f"_versions/9.manifest-{uuid.uuid4()}"  # may be the only copy of v9
    future_staged_v2 = f"_versions/{naming.manifest_name(9, True)}-{uuid.uuid4()}"
    for rel in old_tmp + [future_staged, future_staged_v2]:
        put(os.path.join(uri, rel), old=True)
    for rel in young_tmp:
        put(os.path.join(uri, rel))
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    left = set(listing(uri))
    assert stats.temporary_files_removed == len(old_tmp)
    assert not (set(old_tmp) & left)
    assert set(young_tmp) <= left and {future_staged, future_staged_v2} <= left
    stats = cleanup_old_versions(our_ds(uri), ZERO, delete_unverified=True)
    assert stats.temporary_files_removed == len(young_tmp)
    assert {future_staged, future_staged_v2} <= set(listing(uri))


def test_stats_and_rowid_index_areas_follow_their_owners(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(table(0, 10), uri)                       # v1: file A
    lance.write_dataset(table(10, 20), uri, mode="overwrite")    # v2: file B
    lance.write_dataset(table(20, 30), uri, mode="append")       # v3: B + C
    refs = manifest_refs(uri)
    (a,) = [p for p in refs[1][0] if p.startswith("data/")]
    stem = lambda rel: rel.split("/")[1][: -len(".lance")]  # noqa: E731
    latest_data = sorted(p for p in refs[3][0] if p.startswith("data/"))
    files = {
        f"_stats/{stem(a)}.stats": "gone",                    # data file of a removed version
        f"_stats/{stem(a)}/page.stats": "gone",
        f"_stats/{stem(latest_data[0])}.stats": "kept",       # data file still referenced
        f"_stats/{'1' * 24}{'f' * 26}.stats": "kept",         # unknown data file, young
        "_rowid_index/1-abc.idx": "gone",                     # removed version
        "_rowid_index/3-abc.idx": "kept",                     # kept version
        "_rowid_index/3-dir/part.idx": "kept",
        "_rowid_index/99-abc.idx": "kept",                    # unknown version, young
        "_rowid_index/README": "kept",                        # not ours
    }
    for rel in files:
        put(os.path.join(uri, rel))
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    left = set(listing(uri))
    assert {r for r, what in files.items() if what == "kept"} <= left
    assert not ({r for r, what in files.items() if what == "gone"} & left)
    assert stats.statistics_files_removed == 2 and stats.rowid_index_files_removed == 1
    assert stats.old_versions == 2 and stats.data_files_removed == 1
    # once old, the unverified ones go too
    set_old(os.path.join(uri, f"_stats/{'1' * 24}{'f' * 26}.stats"))
    set_old(os.path.join(uri, "_rowid_index/99-abc.idx"))
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    assert stats.statistics_files_removed == 1 and stats.rowid_index_files_removed == 1
    assert "_rowid_index/3-abc.idx" in set(listing(uri))


def test_pending_staged_results_pin_their_files(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(table(0, 10), uri)                       # v1: file A
    lance.write_dataset(table(10, 20), uri, mode="overwrite")    # v2: file B
    lance.write_dataset(table(20, 30), uri, mode="append")       # v3
    (a,) = [p for p in manifest_refs(uri)[1][0] if p.startswith("data/")]

    def orphan() -> str:
        known = set(listing(uri))
        lance.fragment.LanceFragment.create(uri, table(500, 510))
        (new,) = [r for r in listing(uri) if r not in known and r.startswith("data/")]
        set_old(os.path.join(uri, new))
        return new

    staged_b64, staged_plain, abandoned = orphan(), orphan(), orphan()
    frag = table_pb2.DataFragment(id=0, physical_rows=10)
    frag.files.add(path=staged_b64.split("/")[1])
    pending = {"key": "k1", "operation": "append", "read_version": 3,
               "fragments": [base64.b64encode(frag.SerializeToString()).decode()]}
    rewrite = {"key": "k2", "operation": "rewrite", "read_version": 3, "rewrite_groups": [
        {"result": {"new_fragments": [{"files": [{"path": staged_plain.split("/")[1]}]}]}}]}
    committed = {"key": "k0", "operation": "overwrite", "read_version": 0,
                 "fragments": [], "files": [a.split("/")[1]]}   # v1's file: committed long ago
    for name, doc in (("k1", pending), ("k2", rewrite), ("k0", committed)):
        put(os.path.join(uri, "_staging", f"{name}.json"), json.dumps(doc).encode())  # young: pending
    put(os.path.join(uri, "_staging", "broken.json"), b"{not json", old=True)

    stats = cleanup_old_versions(our_ds(uri), ZERO)
    left = set(listing(uri))
    assert staged_b64 in left and staged_plain in left   # pinned by young stages, though old themselves
    assert abandoned not in left and a not in left
    assert stats.data_files_removed == 2 and stats.old_versions == 2 and stats.staged_results_removed == 0
    assert {f"_staging/{k}.json" for k in ("k0", "k1", "k2", "broken")} <= left

    # past the unverified-file guard a pending stage is abandoned: it goes, and its files with it.
    # k0 (committed before the key ledger existed; the version naming its file is gone now, so
    # nothing tells it from an abandoned stage) goes too - its file is gone, it could never commit.
    # The broken file stays.
    for name in ("k0", "k1", "k2"):
        set_old(os.path.join(uri, "_staging", f"{name}.json"))
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    left = set(listing(uri))
    assert staged_b64 not in left and staged_plain not in left
    assert stats.data_files_removed == 2 and stats.staged_results_removed == 3
    assert "_staging/broken.json" in left
    assert not {f"_staging/{k}.json" for k in ("k0", "k1", "k2")} & left


class FlakyStore:
    """Wraps a store; deletes of paths ending in one of ``fail`` raise (like a denied delete)."""

    def __init__(self, inner, fail=(), on_first_delete=None):
        self._inner, self._fail, self._hook = inner, tuple(fail), on_first_delete

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def delete(self, path):
        if path.endswith(self._fail):
            raise StorageError(f"delete {path}: access denied")
        self._inner.delete(path)

    def delete_many(self, paths):
        if self._hook is not None:
            hook, self._hook = self._hook, None
            hook()
        for p in list(paths):
            self.delete(p)


def stand_in(uri, store):
    _, base = open_store(uri)
    return SimpleNamespace(store=store, base=base, uri=uri)


def test_failed_deletes_are_counted_and_keep_the_version_whole(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(table(0, 10), uri)                       # v1
    lance.write_dataset(table(10, 20), uri, mode="append")       # v2
    lance.write_dataset(table(20, 30), uri, mode="overwrite")    # v3
    lance.write_dataset(table(30, 40), uri, mode="append")       # v4
    refs = manifest_refs(uri)
    snap = snapshot(uri)
    v1_txn = next(p for p in refs[1][0] if p.startswith("_transactions/"))
    store, _ = open_store(uri)
    flaky = FlakyStore(store, fail=(naming.manifest_name(2, True), v1_txn.split("/")[1]))
    stats = cleanup_old_versions(stand_in(uri, flaky), ZERO)
    assert stats.failed_deletes == 2
    assert stats.old_versions == 2  # v1 and v3
    assert versions_of(uri) == [2, 4]
    for v in (2, 4):  # v2's manifest survived, so every file it names did too
        assert lance.dataset(uri, version=v).to_table() == snap[v]
    left = set(listing(uri))
    assert v1_txn in left and all(p in left for p in refs[2][0])
    assert stats.data_files_removed == 0 and stats.transaction_files_removed == 1  # v3's txn
    # a later run finishes the job
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    assert stats.old_versions == 1 and stats.failed_deletes == 0
    assert versions_of(uri) == [4]


def test_version_committed_during_cleanup_keeps_its_files(tmp_path):
    """A commit landing mid-cleanup that re-uses fragments of a removed version (a restore)."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(table(0, 10), uri)                       # v1: file A
    lance.write_dataset(table(10, 20), uri, mode="overwrite")    # v2: file B
    lance.write_dataset(table(20, 30), uri, mode="append")       # v3: B + C
    v1 = lance.dataset(uri, version=1)
    frags, schema = [f.metadata for f in v1.get_fragments()], v1.schema
    expected = v1.to_table()

    def restore_v1():
        lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(schema, frags), read_version=3)

    store, _ = open_store(uri)
    stats = cleanup_old_versions(stand_in(uri, FlakyStore(store, on_first_delete=restore_v1)), ZERO)
    assert stats.old_versions == 2 and stats.data_files_removed == 0
    assert versions_of(uri) == [3, 4]
    assert lance.dataset(uri, version=4).to_table() == expected


def test_default_policy_keeps_fresh_versions(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 4)
    files = listing(uri)
    stats = cleanup_old_versions(our_ds(uri))
    assert stats == CleanupStats()
    assert listing(uri) == files
    # retain_versions alone ignores age
    before = Before(uri)
    stats = cleanup_old_versions(our_ds(uri), retain_versions=2)
    check_cleanup(before, stats, expect_versions=[3, 4])


def test_checked_out_version_and_newer_are_kept(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 5)
    before = Before(uri)
    stats = cleanup_old_versions(our_ds(uri, version=3), ZERO)
    check_cleanup(before, stats, expect_versions=[3, 4, 5])


def test_branch_files_survive_main_cleanup(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(table(0, 10), uri)                        # v1
    ds = lance.write_dataset(table(10, 20), uri, mode="append")   # v2
    branch = ds.create_branch("br1", 2)
    lance.write_dataset(table(100, 110), branch.uri, mode="append")
    lance.write_dataset(table(20, 30), uri, mode="overwrite")     # v3
    lance.write_dataset(table(30, 40), uri, mode="append")        # v4
    branch_snap = snapshot(branch.uri)
    before = Before(uri)
    stats = cleanup_old_versions(our_ds(uri), ZERO)
    check_cleanup(before, stats, expect_versions=[2, 4])  # v2: the branch's parent
    assert snapshot(branch.uri).keys() == branch_snap.keys()
    for v, t in branch_snap.items():
        assert lance.dataset(branch.uri, version=v).to_table() == t
    assert any(r.startswith("tree/br1/") for r in listing(uri))


def test_bad_arguments(tmp_path):
    uri = str(tmp_path / "ds")
    simple_history(uri, 2)
    with pytest.raises(ValueError):
        cleanup_old_versions(our_ds(uri), timedelta(days=-1))
    with pytest.raises(ValueError):
        cleanup_old_versions(our_ds(uri), retain_versions=0)
    with pytest.raises(TypeError):
        cleanup_old_versions(our_ds(uri), 5)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LanceOpsError):
        cleanup_old_versions(SimpleNamespace(store=open_store(str(empty))[0], base=str(empty),
                                             uri=str(empty)), ZERO)


# --- property -----------------------------------------------------------------------------------
OPS = st.one_of(
    st.tuples(st.just("append"), st.sampled_from([5, 40])),
    st.tuples(st.just("delete"), st.integers(2, 6), st.integers(0, 5)),
    st.tuples(st.just("big_delete"), st.just(0)),
    st.tuples(st.just("compact"), st.just(0)),
    st.tuples(st.just("tag"), st.just(0)),
    st.tuples(st.just("overwrite"), st.sampled_from([5, 20])),
)


@settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(OPS, min_size=1, max_size=7), retain=st.integers(1, 8),
       use_age=st.booleans(), delete_unverified=st.booleans())
def test_property_random_histories(ops, retain, use_age, delete_unverified):
    root = tempfile.mkdtemp(prefix="cleanup-prop-")
    try:
        uri = os.path.join(root, "ds")
        lance.write_dataset(table(0, 10), uri)
        n, tags = 10, {}
        for op in ops:
            kind = op[0]
            if kind == "append":
                lance.write_dataset(table(n, n + op[1]), uri, mode="append")
                n += op[1]
            elif kind == "overwrite":
                lance.write_dataset(table(n, n + op[1]), uri, mode="overwrite")
                n += op[1]
            elif kind == "delete":
                lance.dataset(uri).delete(f"a % {op[1]} = {op[2] % op[1]}")
            elif kind == "big_delete":
                lance.write_dataset(table(n, n + 5200), uri, mode="append")
                lance.dataset(uri).delete(f"a >= {n + 10} AND a < {n + 5150}")
                n += 5200
            elif kind == "compact":
                lance.dataset(uri).optimize.compact_files()
            else:
                ds = lance.dataset(uri)
                if ds.version not in tags:
                    tags[ds.version] = f"t{len(tags)}"
                    ds.tags.create(tags[ds.version], ds.version)
        before = Before(uri)
        all_versions = sorted(before.refs)
        expect = set(all_versions[-retain:]) | set(tags) | {all_versions[-1]}
        stats = cleanup_old_versions(our_ds(uri), ZERO if use_age else None, retain,
                                     delete_unverified=delete_unverified,
                                     error_if_tagged_old_versions=False)
        check_cleanup(before, stats, expect_versions=expect)
    finally:
        shutil.rmtree(root, ignore_errors=True)
