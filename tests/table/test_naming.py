"""File naming and version discovery, checked against names pylance writes."""
from __future__ import annotations

import os
import re

import lance
import pytest

from lance_ops.errors import UnsupportedError
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.naming import NamingScheme
from tests.table import int_table, local_store

U64_MAX = 2**64 - 1


@pytest.fixture(scope="module")
def pylance_ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("naming")
    out = {}
    for v2 in (True, False):
        uri = str(root / f"ds_{'v2' if v2 else 'v1'}")
        lance.write_dataset(int_table(0, 20), uri, data_storage_version="2.0",
                            enable_v2_manifest_paths=v2, max_rows_per_file=10)
        ds = lance.write_dataset(int_table(20, 30), uri, mode="append")
        ds.delete("id = 3")
        out[v2] = uri
    return out


def test_manifest_names():
    assert naming.manifest_name(1, True) == "18446744073709551614.manifest"
    assert naming.manifest_name(0, True) == "18446744073709551615.manifest"
    assert naming.manifest_name(12, False) == "12.manifest"
    assert naming.manifest_path(3, True) == "_versions/18446744073709551612.manifest"
    for v in (0, 1, 9, 10, 12345, 2**40, 2**63 - 1):
        for v2 in (True, False):
            scheme = NamingScheme.V2 if v2 else NamingScheme.V1
            assert naming.parse_manifest_name(naming.manifest_name(v, v2)) == (v, scheme)
            assert naming.parse_manifest_name("/x/_versions/" + naming.manifest_name(v, v2)) == (v, scheme)
    # V2 names sort newest first
    names = sorted(naming.manifest_name(v, True) for v in (1, 2, 10, 100))
    assert [naming.parse_manifest_name(n)[0] for n in names] == [100, 10, 2, 1]
    with pytest.raises(ValueError):
        naming.manifest_name(-1, True)


@pytest.mark.parametrize(
    "name",
    [
        "d5.manifest",
        "d9223372036854775813.manifest",
        ".tmp_7.manifest_1f2e",
        ".tmp_18446744073709551612.manifest_abc",
        "latest_version_hint.json",
        "7.manifest-0a7d2b3c-1111-2222-3333-444455556666",
        "manifest",
        ".manifest",
        "x7.manifest",
        "99999999999999999999.manifest",  # 20 digits above u64::MAX
        "07.manifest",
    ],
)
def test_ignored_names(name):
    assert naming.parse_manifest_name(name) is None


def test_list_versions_matches_pylance(pylance_ds):
    for v2, uri in pylance_ds.items():
        store, base = local_store(uri)
        # detached and temp files next to the manifests are ignored
        vdir = os.path.join(uri, "_versions")
        open(os.path.join(vdir, "d9223372036854775809.manifest"), "wb").write(b"x")
        open(os.path.join(vdir, ".tmp_9.manifest_123"), "wb").write(b"x")
        entries = naming.list_versions(store, base)
        expected = [v["version"] for v in lance.dataset(uri).versions()]
        assert [e.version for e in entries] == expected == [1, 2, 3]
        scheme = NamingScheme.V2 if v2 else NamingScheme.V1
        assert {e.scheme for e in entries} == {scheme}
        for e in entries:
            assert e.size == os.path.getsize(e.path)
            assert os.path.basename(e.path) == naming.manifest_name(e.version, v2)
        assert naming.detect_scheme(store, base) is scheme
        assert naming.latest_version(store, base).version == 3
        assert naming.find_version(store, base, 2).version == 2
        assert naming.find_version(store, base, 9) is None


def test_mixed_and_empty(tmp_path):
    store, base = local_store(tmp_path)
    assert naming.list_versions(store, base) == []
    assert naming.latest_version(store, base) is None
    assert naming.detect_scheme(store, base) is None
    os.makedirs(tmp_path / "_versions")
    (tmp_path / "_versions" / naming.manifest_name(1, False)).write_bytes(b"")
    assert naming.detect_scheme(store, base) is NamingScheme.V1
    (tmp_path / "_versions" / naming.manifest_name(2, True)).write_bytes(b"")
    with pytest.raises(UnsupportedError, match="mixed V1 and V2 manifest naming"):
        naming.detect_scheme(store, base)
    with pytest.raises(UnsupportedError, match="mixed V1 and V2 manifest naming"):
        naming.latest_version(store, base)
    assert [e.version for e in naming.list_versions(store, base)] == [1, 2]


def test_version_hint(pylance_ds, tmp_path):
    # pylance writes the compact form
    for uri in pylance_ds.values():
        raw = open(os.path.join(uri, "_versions", "latest_version_hint.json"), "rb").read()
        assert raw == b'{"version":3}'
        store, base = local_store(uri)
        assert naming.read_version_hint(store, base) == 3
    store, base = local_store(tmp_path)
    assert naming.read_version_hint(store, base) is None
    assert naming.write_version_hint(store, base, 42) is True
    assert (tmp_path / "_versions" / "latest_version_hint.json").read_bytes() == b'{"version":42}'
    assert naming.read_version_hint(store, base) == 42
    (tmp_path / "_versions" / "latest_version_hint.json").write_bytes(b"{garbage")
    assert naming.read_version_hint(store, base) is None

    class FakeS3:
        scheme = "s3"

        def put(self, *a):  # pragma: no cover - must not be called
            raise AssertionError("no hint on object stores")

        def join(self, *parts):
            return "/".join(parts)

    assert naming.write_version_hint(FakeS3(), "bucket/ds", 3) is False


def test_data_file_names_match_pylance(pylance_ds):
    theirs = []
    for uri in pylance_ds.values():
        theirs += os.listdir(os.path.join(uri, "data"))
    assert len(theirs) >= 4
    shape = re.compile(r"^[01]{24}[0-9a-f]{26}\.lance$")
    for name in theirs:
        assert shape.match(name), name
        assert len(name) == 56 and naming.is_generated_data_file_name(name)
    ours = {naming.new_data_file_name() for _ in range(200)}
    assert len(ours) == 200
    for name in ours:
        assert shape.match(name), name
    # bytes 0..3 as 24 bits, bytes 3..16 as hex
    raw = bytes(range(16))
    assert naming.new_data_file_name(raw) == "000000000000000100000010" + raw[3:].hex() + ".lance"


def test_transaction_and_deletion_names_match_pylance(pylance_ds):
    uri = pylance_ds[True]
    for name in os.listdir(os.path.join(uri, "_transactions")):
        read_version, uuid = naming.parse_transaction_file_name(name)
        assert naming.transaction_file_name(read_version, uuid) == name
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid)
    dels = os.listdir(os.path.join(uri, "_deletions"))
    assert len(dels) == 1
    frag, read_version, file_id, kind = naming.parse_deletion_file_name(dels[0])
    assert (frag, read_version, kind) == (0, 2, 0)
    assert naming.deletion_file_name(frag, read_version, file_id, kind) == dels[0]
    assert naming.deletion_file_name(3, 1, 99, "bin") == "3-1-99.bin"
    assert naming.parse_transaction_file_name("x.txn") is None
    assert naming.parse_deletion_file_name("1-2-3.parquet") is None
    with pytest.raises(ValueError):
        naming.deletion_file_name(1, 1, 1, 7)


def test_on_s3(moto_server, s3_bucket):
    """Listing, manifests and tags through the S3 store on a pylance-written dataset."""
    from lance_ops.io import open_store
    from lance_ops.table.manifest import codec as mf
    from lance_ops.table import tags as tg

    uri = f"{s3_bucket}/tables/ds"
    opts = moto_server.storage_options
    lance.write_dataset(int_table(0, 10), uri, data_storage_version="2.0", storage_options=opts)
    lance.write_dataset(int_table(10, 20), uri, mode="append", storage_options=opts)
    store, base = open_store(uri, opts)
    entries = naming.list_versions(store, base)
    assert [e.version for e in entries] == [1, 2]
    assert naming.detect_scheme(store, base) is NamingScheme.V2
    latest = naming.latest_version(store, base)
    m = mf.read_manifest(store, latest.path)
    assert m.version == 2 and m.size == latest.size
    assert naming.read_version_hint(store, base) is None  # pylance writes none on S3
    assert naming.write_version_hint(store, base, 2) is False
    tg.create_tag(store, base, "s3tag", 1)
    ds = lance.dataset(uri, storage_options=opts)
    assert ds.tags.list()["s3tag"]["version"] == 1
    assert lance.dataset(uri, version="s3tag", storage_options=opts).count_rows() == 10
