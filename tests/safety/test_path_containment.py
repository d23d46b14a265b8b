"""Paths read from manifests, row-id references, transaction files and DynamoDB items never lead
outside the dataset: ``..``, absolute, symlinked (local) and foreign-bucket (S3) paths are refused
with UnsafePathError naming the file, the field and the path; nothing outside is read, copied or
deleted and nothing is committed (issue 16, acceptance item 6)."""
from __future__ import annotations

import os
import uuid

import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import LanceOpsError, UnsafePathError
from lance_ops.io.local import LocalStore
from lance_ops.io.s3.store import S3Store
from lance_ops.table import deletion, rowids
from lance_ops.table.commit import dynamodb as external_store
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest, write_manifest
from lance_ops.table.paths import resolve_inside, unsafe_reason

_TOUCHING = ("size", "exists", "read", "read_range", "read_tail", "_read_spans", "put", "put_if_absent",
             "open_output", "copy", "delete", "delete_many", "read_many_plain", "put_new_many")


def rows(lo: int, hi: int, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "tag": pa.array([tag] * (hi - lo))})


@pytest.fixture
def touched(monkeypatch):
    """Every store path read, written, copied or deleted while the fixture is active."""
    seen: list[str] = []
    for cls in (LocalStore, S3Store):
        for name in _TOUCHING:
            original = getattr(cls, name)

            def spy(self, *args, __original=original, **kwargs):
                for a in args:
                    if isinstance(a, str):
                        seen.append(a)
                    elif isinstance(a, (list, tuple)):  # (put_new_many: (path, data) pairs)
                        seen.extend(x for x in a if isinstance(x, str))
                        seen.extend(y for x in a if isinstance(x, tuple) for y in x if isinstance(y, str))
                return __original(self, *args, **kwargs)

            monkeypatch.setattr(cls, name, spy)
    return seen


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    """(uri of the dataset, storage options, uri of an 'outside' location holding a Lance file)."""
    if request.param == "local":
        return str(tmp_path / "root" / "ds"), None, str(tmp_path / "outside")
    bucket = request.getfixturevalue("s3_bucket")
    server = request.getfixturevalue("moto_server")
    other = f"other-{uuid.uuid4().hex[:16]}"
    server.client().create_bucket(Bucket=other)
    return f"{bucket}/root/ds", server.storage_options, f"s3://{other}/outside"


def _setup(uri, options, outside_uri, *, stable=False):
    """A dataset with two fragments, plus an outside Lance file (same schema, rows 'SECRET')."""
    ds = lance_ops.write_dataset(rows(0, 10, "in"), uri, storage_options=options, enable_stable_row_ids=stable)
    ds = lance_ops.write_dataset(rows(10, 20, "in"), uri, mode="append", storage_options=options)
    evil = lance_ops.write_dataset(rows(100, 110, "SECRET"), outside_uri + "_ds", storage_options=options)
    src = evil._store.join(evil._base, naming.DATA_DIR, evil.manifest.fragments[0].files[0].path)
    ostore, obase = lance_ops.io.open_store(outside_uri, options)
    target = ostore.join(obase, "x.lance")
    ostore.put(target, evil._store.read(src))
    return ds, ostore, target


def _tamper(ds, edit) -> None:
    """Rewrite the dataset's latest manifest in place after ``edit(manifest)``."""
    store = ds._store
    mf = read_manifest(store, ds._manifest_file.path)
    edit(mf.manifest)
    write_manifest(store, mf.path, mf.manifest, mf.transaction, mf.index_section, if_absent=False)


def _snapshot(ds) -> list[tuple[str, int]]:
    return sorted((o.path, o.size) for o in ds._store.list(ds._base))


def _assert_contained(seen, ds) -> None:
    base = ds._base.rstrip("/")
    for p in seen:
        if ds._store.scheme == "file":
            assert os.path.realpath(p).startswith(os.path.realpath(base) + os.sep), p
        else:
            assert p.startswith(base + "/"), p


def _escape_paths(kind, ds, ostore, target, tmp_path):
    """The data-file path (relative to data/) that would reach ``target`` in each way."""
    if kind == "dotdot":
        if ds._store.scheme == "file":
            return os.path.relpath(target, ds._store.join(ds._base, naming.DATA_DIR))
        return "../../../outside/x.lance"  # keys are literal on S3, but still refused
    if kind == "absolute":
        return target if ds._store.scheme == "file" else "/" + target
    if kind == "foreign":
        return ostore.uri(target)
    # symlink (local only): data/escape.lance -> the outside file
    link = ds._store.join(ds._base, naming.DATA_DIR, "escape.lance")
    os.symlink(target, link)
    return "escape.lance"


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "foreign", "symlink"])
def test_data_file_outside_is_refused_by_reads_and_compaction(where, kind, tmp_path, touched):
    uri, options, outside_uri = where
    if kind == "symlink" and options is not None:
        pytest.skip("symlinks exist on local disk only")
    ds, ostore, target = _setup(uri, options, outside_uri)
    bad = _escape_paths(kind, ds, ostore, target, tmp_path)

    def edit(m):
        m.fragments[1].files[0].path = bad
    _tamper(ds, edit)
    before, outside_before = _snapshot(ds), ostore.read(target)
    manifest_uri = ds._store.uri(ds._manifest_file.path)
    touched.clear()

    ds = lance_ops.dataset(uri, storage_options=options)
    with pytest.raises(UnsafePathError) as err:
        ds.to_table()
    msg = str(err.value)
    assert msg.startswith(manifest_uri + ": data file path of fragment 1 " + repr(bad)), msg
    assert "refusing to follow a path outside the dataset" in msg
    assert err.value.path == manifest_uri and err.value.offending == bad
    assert isinstance(err.value, LanceOpsError)
    with pytest.raises(UnsafePathError):
        ds.optimize.compact_files(target_rows_per_fragment=1000)
    with pytest.raises(UnsafePathError):
        ds.take([15])
    _assert_contained(touched, ds)
    # nothing committed, nothing written, nothing outside touched
    again = lance_ops.dataset(uri, storage_options=options)
    assert again.version == ds.version == 2
    assert _snapshot(again) == before
    assert ostore.read(target) == outside_before
    # the good fragment still reads
    assert again.take(list(range(10))).equals(rows(0, 10, "in"))


def _row_id_bytes(ids) -> bytes:
    return rowids.encode_row_ids(np.asarray(ids, dtype=np.uint64))


@pytest.mark.parametrize("field", ["external_row_ids", "external_created_at_versions"])
@pytest.mark.parametrize("kind", ["dotdot", "absolute", "foreign", "symlink"])
def test_external_row_id_files_outside_are_refused(where, field, kind, tmp_path, touched):
    uri, options, outside_uri = where
    if kind == "symlink" and options is not None:
        pytest.skip("symlinks exist on local disk only")
    ds, ostore, target = _setup(uri, options, outside_uri, stable=True)
    payload = (_row_id_bytes(range(10, 20)) if field == "external_row_ids"
               else rowids.uniform_version_sequence(10, 1))
    ostore.put(target, payload)  # a valid sequence, so only the path check stops it
    bad = _escape_paths(kind, ds, ostore, target, tmp_path)
    if kind == "symlink":
        bad = "data/" + bad
    elif kind == "dotdot" and ds._store.scheme == "file":
        bad = os.path.relpath(target, ds._base)

    def edit(m):
        getattr(m.fragments[1], field).CopyFrom(
            lance_ops._proto.table_pb2.ExternalFile(path=bad, offset=0, size=len(payload)))
    _tamper(ds, edit)
    before = _snapshot(ds)
    touched.clear()
    ds = lance_ops.dataset(uri, storage_options=options)
    frag = ds.manifest.fragments[1]
    with pytest.raises(UnsafePathError) as err:
        if field == "external_row_ids":
            rowids.read_fragment_row_ids(ds._store, ds._base, frag)
        else:
            rowids.read_fragment_versions(ds._store, ds._base, frag, "created")
    assert f"path of fragment 1 {bad!r}" in str(err.value)
    if field == "external_row_ids":
        with pytest.raises(UnsafePathError):
            ds.to_table(with_row_id=True)
    with pytest.raises(UnsafePathError):
        ds.optimize.compact_files(target_rows_per_fragment=1000)
    _assert_contained(touched, ds)
    assert lance_ops.dataset(uri, storage_options=options).version == 2
    assert _snapshot(ds) == before
    assert ostore.read(target) == payload


def test_transaction_file_name_outside_is_refused(tmp_path, touched):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(rows(0, 5, "in"), uri)
    (tmp_path / "t.txn").write_bytes(b"")

    def edit(m):
        m.transaction_file = "../../t.txn"
    store = ds._store
    mf = read_manifest(store, ds._manifest_file.path)
    edit(mf.manifest)
    write_manifest(store, mf.path, mf.manifest, None, mf.index_section, if_absent=False)  # no inline copy
    touched.clear()
    with pytest.raises(UnsafePathError, match=r"transaction file name '\.\./\.\./t\.txn' has a '\.\.' segment"):
        lance_ops.dataset(uri).transaction
    _assert_contained(touched, ds)


def test_deletion_and_index_paths_are_built_from_numbers_only(tmp_path):
    """Deletion-file and index paths come from integers and uuids, never from stored strings:
    whatever the fields hold, they stay below the dataset."""
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(rows(0, 5, "in"), uri)
    ds.delete("id = 1")
    ds = lance_ops.dataset(uri)
    frag = ds.manifest.fragments[0]
    dfile = type(frag.deletion_file)()
    dfile.CopyFrom(frag.deletion_file)
    dfile.read_version, dfile.id = 2**64 - 1, 2**64 - 1
    path = deletion.deletion_file_path(ds._store, ds._base, 2**64 - 1, dfile)
    assert os.path.dirname(path) == os.path.join(uri, "_deletions")
    # an index whose uuid is no uuid is ignored by cleanup, which deletes nothing outside
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.bin").write_bytes(b"x")
    store = ds._store
    mf = read_manifest(store, ds._manifest_file.path)
    section = lance_ops._proto.table_pb2.IndexSection()
    section.indices.add(uuid=lance_ops._proto.table_pb2.UUID(uuid=b"../../victim"), name="evil", fields=[0])
    write_manifest(store, mf.path, mf.manifest, mf.transaction, section, if_absent=False)
    lance_ops.dataset(uri).cleanup_old_versions(older_than=__import__("datetime").timedelta(0))
    assert (victim / "keep.bin").read_bytes() == b"x"
    assert lance_ops.dataset(uri).to_table().equals(rows(0, 5, "in").filter(pa.compute.field("id") != 1))


@pytest.mark.parametrize("bad", ["../x.lance", "/etc/passwd", "s3://other/x.lance", "a\\..\\..\\x.lance",
                                 "a/./x.lance", "a//x.lance", "x\x00.lance", ""])
def test_staged_fragments_with_unsafe_paths_are_not_committed(tmp_path, bad, touched):
    from lance_ops.maintenance.staged_commit import commit_staged
    from lance_ops.table.commit.staging import StagedResult, write_staged
    from lance_ops.table.write import write_fragments

    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(rows(0, 5, "in"), uri)
    t = rows(5, 10, "staged")
    frags = write_fragments(pa.RecordBatchReader.from_batches(t.schema, t.to_batches()), ds._store, ds._base,
                            list(ds.manifest.fields))
    frags[0].files[0].path = bad
    write_staged(ds._store, ds._base, StagedResult(key="k1", operation="append", read_version=1, fragments=frags))
    with pytest.raises(UnsafePathError) as err:
        commit_staged(uri, "k1")
    assert f"data file path {bad!r} {unsafe_reason(bad)}" in str(err.value)
    assert lance_ops.dataset(uri).version == 1
    _assert_contained(touched, ds)


@pytest.mark.parametrize("legit", ["data/0a1b-c2.lance", "_deletions/0-1-2.arrow", "_indices/9f/part.idx",
                                   "data/abc/00000001.blob", "_transactions/1-u.txn", "x..y/z.lance..",
                                   ".hidden/a"])
def test_legitimate_paths_resolve(tmp_path, legit):
    store = LocalStore()
    base = str(tmp_path / "ds")
    assert unsafe_reason(legit) is None
    assert resolve_inside(store, base, legit, what="f", where="m") == os.path.join(base, *legit.split("/"))


def _ddb(request):
    s3_bucket = request.getfixturevalue("s3_bucket")
    server = request.getfixturevalue("moto_server")
    table = f"lance-commits-{uuid.uuid4().hex[:8]}"
    options = dict(server.storage_options, dynamodb_endpoint=server.endpoint)
    uri = f"s3+ddb://{s3_bucket[len('s3://'):]}/ds?ddbTableName={table}"
    store, _ = lance_ops.io.open_store(uri, options)
    external_store.create_table(store, table)
    return uri, options


@pytest.mark.parametrize("item_path", ["victim/1.manifest-x", "ds/_versions/../../victim/1.manifest-x",
                                       "ds/_versions/sub/1.manifest-x", "ds/../victim/1.manifest-x",
                                       "s3://other/ds/_versions/1.manifest-x", "dsx/_versions/1.manifest-x",
                                       "ds/data/1.manifest-x"])
def test_dynamodb_item_path_outside_versions_is_refused(request, item_path, touched):
    uri, options = _ddb(request)
    ds = lance_ops.write_dataset(rows(0, 5, "in"), uri, storage_options=options)
    store, base = ds._store, ds._base
    # a victim object (a valid manifest, so only the path check protects it) and a forged item
    victim = "victim/1.manifest-x"
    store.put(victim, store.read(ds._manifest_file.path))
    if item_path.startswith(("ds/_versions/../", "ds/../", "ds/_versions/sub/", "ds/data/")):
        store.put(item_path, store.read(ds._manifest_file.path))
    external_store._client(store).put_item(
        TableName=store.ddb_table_name,
        Item={"base_uri": {"S": store.uri(base)}, "version": {"N": "2"}, "path": {"S": item_path},
              "committer": {"S": "attacker"}, "size": {"N": "1"}})
    before = _snapshot(ds)
    touched.clear()
    with pytest.raises(UnsafePathError) as err:
        lance_ops.dataset(uri, storage_options=options)
    msg = str(err.value)
    assert msg.startswith(f"DynamoDB table {store.ddb_table_name!r} item ({store.uri(base)}, version 2): path "
                          f"{item_path!r}"), msg
    _assert_contained(touched, ds)
    assert store.read(victim) == store.read(ds._manifest_file.path)  # not deleted
    assert not store.exists(store.join(base, naming.manifest_path(2, True)))  # not copied into place
    assert _snapshot(ds) == before
    with pytest.raises(UnsafePathError):
        lance_ops.write_dataset(rows(5, 6, "x"), uri, mode="append", storage_options=options)
    assert store.exists(victim)


def test_branch_name_outside_is_refused_by_cleanup(tmp_path, touched):
    """A branch file whose (percent-encoded) name climbs out of ``tree/`` would make cleanup read
    manifests outside the dataset: cleanup refuses and deletes nothing."""
    from datetime import timedelta

    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 5, "in"), uri)
    ds = lance_ops.write_dataset(rows(5, 10, "in"), uri, mode="append")
    outside = lance_ops.write_dataset(rows(0, 1, "SECRET"), str(tmp_path / "victim"))
    branches = tmp_path / "ds" / "_refs" / "branches"
    branches.mkdir(parents=True)
    (branches / "a%2F..%2F..%2F..%2Fvictim.json").write_text('{"parentVersion": 1}')
    before = _snapshot(ds)
    touched.clear()
    with pytest.raises(UnsafePathError, match=r"branch name 'a/\.\./\.\./\.\./victim' has a '\.\.' segment"):
        ds.cleanup_old_versions(older_than=timedelta(0))
    _assert_contained(touched, ds)
    assert _snapshot(ds) == before
    assert lance_ops.dataset(str(tmp_path / "victim")).to_table().equals(outside.to_table())


def test_symlinked_directories(tmp_path):
    """A symlinked directory below the base that leads out is refused; a base that is itself a
    symlink (or a symlink staying inside) is fine."""
    store = LocalStore()
    real = tmp_path / "real_ds"
    (real / "data").mkdir(parents=True)
    (real / "data" / "a.lance").write_bytes(b"x")
    (real / "inner").symlink_to(real / "data")
    link = tmp_path / "link_ds"
    link.symlink_to(real)
    assert resolve_inside(store, str(link), "a.lance", under=("data",), what="f", where="m") == str(link / "data" / "a.lance")
    assert resolve_inside(store, str(real), "inner/a.lance", what="f", where="m") == str(real / "inner" / "a.lance")
    outside = tmp_path / "outside"
    outside.mkdir()
    (real / "_deletions").symlink_to(outside)
    with pytest.raises(UnsafePathError, match=f"resolves \\(through a symlink\\) to {outside}"):
        resolve_inside(store, str(real), "0-1-2.arrow", under=("_deletions",), what="deletion file", where="m")


def test_symlinked_deletions_dir_is_refused_on_read(tmp_path, touched):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(rows(0, 5, "in"), uri)
    ds.delete("id = 1")
    outside = tmp_path / "outside"
    (tmp_path / "ds" / "_deletions").rename(outside)
    (tmp_path / "ds" / "_deletions").symlink_to(outside)
    touched.clear()
    with pytest.raises(UnsafePathError, match=r"deletion file of fragment 0 '_deletions/0-1-\d+\.arrow' resolves"):
        lance_ops.dataset(uri).to_table()
    _assert_contained(touched, ds)


def test_unsafe_path_error_pickles():
    """Spark ships errors from executors to the driver: the error survives a pickle round trip."""
    import pickle

    err = UnsafePathError("s3://b/ds/_versions/1.manifest", "data file path of fragment 1", "../x.lance",
                          "has a '..' segment")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is UnsafePathError and str(back) == str(err)
    assert (back.path, back.field, back.offending, back.reason) == (err.path, err.field, err.offending, err.reason)
