"""Crash safety of commits, and the DynamoDB external manifest store on moto."""
from __future__ import annotations

import multiprocessing as mp
import uuid

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.table.commit import dynamodb as external_store
from lance_ops.table.commit import locate
from lance_ops.table.manifest import naming
from tests.commit import workers


def _crash_child(uri, options):
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=workers.crash_before_publish, args=(uri, options, 1000, 500))
    p.start()
    p.join(timeout=120)
    return p.exitcode


@pytest.mark.parametrize("where", ["local", "s3"])
def test_killed_between_data_write_and_publish(where, tmp_path, request):
    if where == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        options = request.getfixturevalue("moto_server").storage_options
        uri = f"{bucket}/ds"
    else:
        options, uri = None, str(tmp_path / "ds")
    base = workers.rows(0, 1000, "base")
    lance_ops.write_dataset(base, uri, storage_options=options)
    assert _crash_child(uri, options) == 17
    ds = lance_ops.dataset(uri, storage_options=options)
    assert ds.version == 1
    assert ds.to_table().equals(base)
    assert lance.dataset(uri, storage_options=options).to_table().equals(base)
    store, root = ds._store, ds._base
    assert len(list(store.list(store.join(root, "data")))) == 2  # the orphan data file is there
    more = workers.rows(5000, 10, "next")
    ds2 = lance_ops.write_dataset(more, uri, mode="append", storage_options=options)
    assert ds2.version == 2
    assert ds2.to_table().equals(pa.concat_tables([base, more]))


@pytest.fixture
def ddb(s3_bucket, moto_server):
    table = f"lance-commits-{uuid.uuid4().hex[:8]}"
    options = dict(moto_server.storage_options, dynamodb_endpoint=moto_server.endpoint)
    uri = f"s3+ddb://{s3_bucket[len('s3://'):]}/ds?ddbTableName={table}"
    store, _ = lance_ops.io.open_store(uri, options)
    external_store.create_table(store, table)
    return uri, options, f"{s3_bucket}/ds"


def test_external_store_commits_and_pylance_reads(ddb):
    uri, options, plain_uri = ddb
    t1, t2 = workers.rows(0, 100, "a"), workers.rows(100, 50, "b")
    lance_ops.write_dataset(t1, uri, storage_options=options)
    ds = lance_ops.write_dataset(t2, uri, mode="append", storage_options=options)
    assert ds.version == 2
    ds.delete("id < 10")
    expected = pa.concat_tables([t1, t2]).slice(10)
    assert lance_ops.dataset(uri, storage_options=options).to_table().equals(expected)
    item = external_store.latest_item(ds._store, ds._base)
    assert int(item["version"]["N"]) == 3 and not item["path"]["S"].rsplit("/", 1)[-1].count(".manifest-")
    plain = {k: v for k, v in options.items() if k != "dynamodb_endpoint"}
    assert lance.dataset(plain_uri, storage_options=plain).to_table().equals(expected)


def test_external_store_lost_race_is_detected(ddb):
    uri, options, _ = ddb
    ds = lance_ops.write_dataset(workers.rows(0, 10, "a"), uri, storage_options=options)
    store, base = ds._store, ds._base
    with pytest.raises(lance_ops.errors.AlreadyExistsError):
        external_store.commit(store, base, 1, b"not a manifest", True)
    # the loser's staged file was removed and the winner's manifest is intact
    assert lance_ops.dataset(uri, storage_options=options).to_table().num_rows == 10
    staged = [o for o in store.list(store.join(base, "_versions")) if ".manifest-" in o.path]
    assert staged == []


@pytest.mark.parametrize("crash_after", [1, 2, 3])
def test_external_store_half_finished_commit_is_repaired(ddb, monkeypatch, crash_after):
    uri, options, plain_uri = ddb
    t1, t2 = workers.rows(0, 100, "a"), workers.rows(100, 50, "b")
    lance_ops.write_dataset(t1, uri, storage_options=options)
    original = external_store.commit

    class Died(Exception):
        pass

    def dying(*args, **kwargs):
        original(*args, **kwargs, crash_after=crash_after)
        raise Died()

    monkeypatch.setattr(external_store, "commit", dying)
    with pytest.raises(Died):
        lance_ops.write_dataset(t2, uri, mode="append", storage_options=options)
    monkeypatch.setattr(external_store, "commit", original)

    ds = lance_ops.dataset(uri, storage_options=options)
    if crash_after == 1:  # staged only: the commit never happened
        assert ds.version == 1 and ds.to_table().equals(t1)
    else:  # the DynamoDB row exists: the reader finishes the commit
        assert ds.version == 2 and ds.to_table().equals(pa.concat_tables([t1, t2]))
        final = ds._store.join(ds._base, naming.manifest_path(2, True))
        assert ds._store.exists(final)
        assert ".manifest-" not in external_store.latest_item(ds._store, ds._base)["path"]["S"]
    nxt = lance_ops.write_dataset(workers.rows(500, 5, "c"), uri, mode="append", storage_options=options)
    assert nxt.version == ds.version + 1
    assert nxt.count_rows() == ds.count_rows() + 5


def test_locate_finds_a_version_only_the_external_store_knows(ddb):
    """naming answers from _versions/ only and refuses an s3+ddb store; locate asks the table too."""
    uri, options, _ = ddb
    ds = lance_ops.write_dataset(workers.rows(0, 10, "a"), uri, storage_options=options)
    store, base = ds._store, ds._base
    body = b"manifest of version 2"
    external_store.commit(store, base, 2, body, True, crash_after=2)  # item put, not copied into place
    assert naming.find_manifest_by_name(store, base, 2) is None
    assert naming.latest_listed(store, base)[0].version == 1
    with pytest.raises(ValueError, match=r"naming\.latest_version reads _versions/ only, but s3://.*/ds has "
                       r"a DynamoDB external manifest store: use lance_ops\.table\.commit\.locate\.latest_version"):
        naming.latest_version(store, base)
    with pytest.raises(ValueError, match=r"use lance_ops\.table\.commit\.locate\.find_version$"):
        naming.find_version(store, base, 2)
    loc = locate.find_version(store, base, 2)  # finishes the half-done commit
    assert (loc.version, loc.path, loc.size) == (2, store.join(base, naming.manifest_path(2, True)), len(body))
    assert store.read(loc.path) == body
    assert locate.latest_version(store, base).version == 2
    assert locate.find_version(store, base, 3) is None
