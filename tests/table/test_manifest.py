"""Manifest files, inline/external transactions and feature flags, checked against pylance."""
from __future__ import annotations

import glob
import os
import struct

import lance
import pyarrow as pa
import pytest

from lance_ops._proto import table_pb2, transaction_pb2
from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.table.manifest import feature_flags as ff
from lance_ops.table.manifest import codec as mf
from lance_ops.table.manifest import naming
from lance_ops.table.commit import transaction_file as tf
from tests.table import commit_rewritten, int_table, local_store


# --- pylance-built datasets ------------------------------------------------------------------
@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("manifests")
    out = {}

    # V2 naming, 2.0 files, appends, deletes, a scalar index, a tag
    uri = str(root / "v2")
    lance.write_dataset(int_table(0, 100), uri, data_storage_version="2.0")
    ds = lance.write_dataset(int_table(100, 200), uri, mode="append")
    ds.delete("id < 5")
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id >= 150 and id < 160")
    ds.tags.create("keep", 2)
    out["v2"] = uri

    # V1 naming, stable row ids, deletes and compaction
    uri = str(root / "v1_stable")
    lance.write_dataset(
        int_table(0, 50), uri, data_storage_version="2.0", enable_stable_row_ids=True,
        enable_v2_manifest_paths=False,
    )
    ds = lance.write_dataset(int_table(50, 120), uri, mode="append")
    ds.delete("id % 3 = 0")
    ds.optimize.compact_files()
    out["v1_stable"] = uri

    # default storage version (2.2), single-key schema metadata, one overwrite
    uri = str(root / "meta")
    # single-entry maps (one with an empty value, which upstream leaves out of the entry)
    tbl = int_table(0, 10).replace_schema_metadata({"owner": "lance-ops"})
    tbl = tbl.cast(tbl.schema.set(0, tbl.schema.field(0).with_metadata({"note": ""})))
    lance.write_dataset(tbl, uri)
    lance.write_dataset(tbl, uri, mode="overwrite")
    out["meta"] = uri
    return out


def _all_manifests(uri):
    return sorted(glob.glob(os.path.join(uri, "_versions", "*.manifest")))


# --- byte compatibility ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["v2", "v1_stable", "meta"])
def test_reencode_is_byte_identical(datasets, name):
    paths = _all_manifests(datasets[name])
    assert len(paths) >= 2
    for path in paths:
        original = open(path, "rb").read()
        decoded = mf.decode_manifest(original, path)
        assert decoded.size == len(original)
        assert decoded.transaction is not None  # pylance 14 always inlines the transaction
        again = mf.encode_manifest(decoded.manifest, decoded.transaction, decoded.index_section)
        assert again == original, path


def test_index_section_and_inline_txn_match_files(datasets):
    store, base = local_store(datasets["v2"])
    seen_index = False
    for loc in naming.list_versions(store, base):
        m = mf.read_manifest(store, loc.path)
        assert m.version == loc.version
        if m.index_section is not None:
            seen_index = True
            assert m.manifest.HasField("index_section")
            assert [i.name for i in m.index_section.indices] == ["id_idx"]
        # the inline copy is the same transaction as the .txn file
        from_file = tf.read_transaction_file(store, base, m.manifest.transaction_file)
        assert from_file == m.transaction
        assert tf.load_transaction(store, base, m) == m.transaction
        assert m.manifest.transaction_file == naming.transaction_file_name(
            m.transaction.read_version, m.transaction.uuid
        )
    assert seen_index


def test_pylance_opens_our_manifest(datasets, tmp_path):
    import shutil

    uri = str(tmp_path / "copy")
    shutil.copytree(datasets["v2"], uri)
    store, base = local_store(uri)
    latest = naming.latest_version(store, base)
    before = lance.dataset(uri).to_table()
    current = mf.read_manifest(store, latest.path)

    def touch(m):
        m.timestamp.seconds += 1

    new_version = commit_rewritten(store, base, current, touch)
    ds = lance.dataset(uri)
    assert ds.version == new_version == latest.version + 1
    assert ds.to_table().equals(before)
    assert [i.name for i in ds.describe_indices()] == ["id_idx"]
    # and pylance can keep committing on top of it
    ds.delete("id = 199")
    assert lance.dataset(uri).count_rows() == before.num_rows - 1


def test_encode_without_sections_clears_offsets(datasets):
    path = _all_manifests(datasets["v2"])[0]
    decoded = mf.decode_manifest(open(path, "rb").read(), path)
    m = table_pb2.Manifest()
    m.CopyFrom(decoded.manifest)
    m.index_section = 77
    m.transaction_section_v1 = 5
    data = mf.encode_manifest(m)
    again = mf.decode_manifest(data, "x")
    assert again.transaction is None and again.index_section is None
    assert not again.manifest.HasField("transaction_section")
    assert not again.manifest.HasField("transaction_section_v1")
    assert not again.manifest.HasField("index_section")
    assert m.index_section == 77  # the caller's message is left alone
    # footer: i64 position, 0, 2, LANC
    pos, major, minor, magic = struct.unpack("<qhh4s", data[-16:])
    assert (pos, major, minor, magic) == (0, 0, 2, b"LANC")


def test_reads_legacy_field_21(datasets):
    path = _all_manifests(datasets["v2"])[0]
    decoded = mf.decode_manifest(open(path, "rb").read(), path)
    data = mf.encode_manifest(decoded.manifest, decoded.transaction, decoded.index_section)
    # rebuild the same file with the offset in field 21 instead of 23
    pos = struct.unpack("<q", data[-16:-8])[0]
    m = table_pb2.Manifest()
    m.ParseFromString(data[pos + 4 : -16])
    m.transaction_section_v1 = m.transaction_section
    m.ClearField("transaction_section")
    blob = m.SerializeToString()
    legacy = data[:pos] + struct.pack("<I", len(blob)) + blob + data[-16:]
    got = mf.decode_manifest(legacy, "legacy.manifest")
    assert got.transaction == decoded.transaction


def test_large_manifest_two_reads(tmp_path):
    store, base = local_store(tmp_path)
    m = table_pb2.Manifest(version=3)
    for i in range(3000):
        frag = m.fragments.add(id=i, physical_rows=10)
        frag.files.add(path=naming.new_data_file_name(), fields=[0, 1], column_indices=[0, 1])
    txn = transaction_pb2.Transaction(read_version=2, uuid=naming.new_transaction_uuid())
    txn.append.fragments.add(id=0, physical_rows=10)
    path = store.join(base, naming.manifest_path(3, True))
    size = mf.write_manifest(store, path, m, txn)
    assert size > mf.PREFETCH_SIZE
    store.metrics.reset()
    got = mf.read_manifest(store, path)
    assert store.metrics.get_requests == 2
    assert len(got.manifest.fragments) == 3000 and got.transaction == txn and got.size == size
    # a small one is a single read
    small = store.join(base, naming.manifest_path(4, True))
    mf.write_manifest(store, small, table_pb2.Manifest(version=4))
    store.metrics.reset()
    assert mf.read_manifest(store, small).version == 4
    assert store.metrics.get_requests == 1
    # put-if-absent by default
    from lance_ops.errors import AlreadyExistsError

    with pytest.raises(AlreadyExistsError):
        mf.write_manifest(store, small, table_pb2.Manifest(version=4))


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: d[:10], "truncated"),
        (lambda d: d[:-4] + b"LANX", "bad magic"),
        (lambda d: d[:-16] + struct.pack("<q", len(d)) + d[-8:], "outside the file"),
        (lambda d: d[:1] + d, "length mismatch"),
        (lambda d: d[:-17] + d[-16:], "length mismatch"),
    ],
)
def test_corrupt_manifests(damage, problem):
    m = table_pb2.Manifest(version=1)
    txn = transaction_pb2.Transaction(read_version=0, uuid="u")
    data = mf.encode_manifest(m, txn)
    with pytest.raises(CorruptFileError) as err:
        mf.decode_manifest(damage(data), "/ds/_versions/1.manifest")
    assert "/ds/_versions/1.manifest" in str(err.value)
    assert problem in str(err.value)


def test_corrupt_protobuf_and_sections():
    garbage = b"\xff\xff\xff\xff\xff"
    data = struct.pack("<I", len(garbage)) + garbage + struct.pack("<qhh4s", 0, 0, 2, b"LANC")
    with pytest.raises(CorruptFileError, match="protobuf does not decode"):
        mf.decode_manifest(data, "p.manifest")
    # a transaction offset pointing past the manifest start
    m = table_pb2.Manifest(version=1, transaction_section=1000)
    blob = m.SerializeToString()
    data = struct.pack("<I", len(blob)) + blob + struct.pack("<qhh4s", 0, 0, 2, b"LANC")
    with pytest.raises(CorruptFileError, match="inline transaction"):
        mf.decode_manifest(data, "p.manifest")


def test_inline_transaction_is_decoded_on_first_use():
    """Open reads the manifest only; a damaged inline transaction is still named when it is used."""
    m = table_pb2.Manifest(version=1)
    txn = transaction_pb2.Transaction(read_version=0, uuid="u" * 36)
    data = mf.encode_manifest(m, txn)
    got = mf.decode_manifest(data, "/ds/_versions/1.manifest")
    assert got._transaction_blob is not None and got.transaction == txn and got._transaction_blob is None
    pos = got.manifest.transaction_section + 4  # after the section's length prefix
    bad = data[:pos] + b"\x0f" + data[pos + 1:]  # the first tag gets wire type 7: no longer decodes
    damaged = mf.decode_manifest(bad, "/ds/_versions/1.manifest")
    assert damaged.manifest == got.manifest
    with pytest.raises(CorruptFileError, match="/ds/_versions/1.manifest.*Transaction protobuf does not decode"):
        damaged.transaction  # noqa: B018


# --- transaction files -----------------------------------------------------------------------
def test_transaction_file_roundtrip(tmp_path):
    store, base = local_store(tmp_path)
    txn = transaction_pb2.Transaction(read_version=7)
    txn.delete.predicate = "x > 1"
    txn.delete.deleted_fragment_ids.extend([3, 4])
    name = tf.write_transaction_file(store, base, txn)
    assert name == f"7-{txn.uuid}.txn" and len(txn.uuid) == 36
    assert os.path.exists(tmp_path / "_transactions" / name)
    assert tf.read_transaction_file(store, base, name) == txn

    # load_transaction: inline copy first, then the named file, else None
    manifest = table_pb2.Manifest(version=8, transaction_file=name)
    external = mf.ManifestFile(manifest)
    assert tf.load_transaction(store, base, external) == txn
    inline = mf.ManifestFile(manifest, transaction=transaction_pb2.Transaction(uuid="inline"))
    assert tf.load_transaction(store, base, inline).uuid == "inline"
    missing = mf.ManifestFile(table_pb2.Manifest(version=8, transaction_file="1-nope.txn"))
    assert tf.load_transaction(store, base, missing) is None
    assert tf.load_transaction(store, base, mf.ManifestFile(table_pb2.Manifest())) is None

    (tmp_path / "_transactions" / "bad.txn").write_bytes(b"\xff\xff\xff")
    with pytest.raises(CorruptFileError, match="bad.txn"):
        tf.read_transaction_file(store, base, "bad.txn")


def test_pylance_transaction_files_decode(datasets):
    store, base = local_store(datasets["v1_stable"])
    ops = []
    for info in sorted(store.list_dir(store.join(base, "_transactions")), key=lambda i: i.path):
        name = os.path.basename(info.path)
        parsed = naming.parse_transaction_file_name(name)
        assert parsed is not None
        txn = tf.read_transaction_file(store, base, name)
        assert (txn.read_version, txn.uuid) == parsed
        assert tf.encode_transaction(txn) == open(info.path, "rb").read()
        ops.append(txn.WhichOneof("operation"))
    assert {"overwrite", "append", "delete", "rewrite"} <= set(ops)


# --- feature flags ---------------------------------------------------------------------------
def test_flags_match_pylance(datasets):
    for name in datasets:
        store, base = local_store(datasets[name])
        for loc in naming.list_versions(store, base):
            m = mf.read_manifest(store, loc.path).manifest
            assert ff.compute_flags(m) == (m.reader_feature_flags, m.writer_feature_flags), loc
            ff.check_reader_flags(m.reader_feature_flags, loc.path)
            ff.check_writer_flags(m.writer_feature_flags, loc.path)


def test_compute_flags_rules():
    m = table_pb2.Manifest()
    frag = m.fragments.add(id=0, physical_rows=3)
    assert ff.compute_flags(m) == (0, 0)
    frag.deletion_file.num_deleted_rows = 1
    assert ff.compute_flags(m) == (1, 1)
    m.config["lance.auto_cleanup.interval"] = "20"
    assert ff.compute_flags(m) == (1, 1 | 8)
    m.base_paths.add(id=1, path="s3://b/x")
    assert ff.compute_flags(m) == (1 | 16, 1 | 8 | 16)
    assert ff.compute_flags(m, disable_transaction_file=True)[1] == 1 | 8 | 16 | 32
    with pytest.raises(ValueError, match="row id sequence"):
        ff.compute_flags(m, stable_row_ids=True)
    frag.inline_row_ids = b""
    assert ff.compute_flags(m, stable_row_ids=True) == (1 | 2 | 16, 1 | 2 | 8 | 16)
    # an already flagged manifest keeps stable row ids
    ff.apply_flags(m, stable_row_ids=True)
    assert ff.compute_flags(m)[0] & ff.FLAG_STABLE_ROW_IDS


def test_flag_checks():
    for ok in (0, 1, 2, 3, 4, 8, 16, 32, 1 | 2 | 8 | 16 | 32):
        ff.check_reader_flags(ok)
    ff.check_writer_flags(1 | 2 | 8 | 32)
    with pytest.raises(UnsupportedError, match="unsupported reader feature flags 64"):
        ff.check_reader_flags(64 | 1, "/data/t")
    with pytest.raises(UnsupportedError, match="/data/t"):
        ff.check_reader_flags(1 << 40, "/data/t")
    with pytest.raises(UnsupportedError, match="unsupported writer feature flags 16"):
        ff.check_writer_flags(16)
    assert ff.can_read(2) and not ff.can_read(128) and not ff.can_write(16)


def test_multi_entry_maps_roundtrip_semantically(tmp_path):
    """Upstream writes protobuf maps in hash order; we write sorted keys. Same content/length."""
    uri = str(tmp_path / "maps")
    schema = pa.schema(
        [pa.field("a", pa.int64(), metadata={f"f{i}": "x" for i in range(5)})],
        metadata={f"k{i}": "v" * i for i in range(8)},
    )
    lance.write_dataset(pa.table({"a": [1, 2]}, schema=schema), uri, data_storage_version="2.0")
    path = _all_manifests(uri)[0]
    original = open(path, "rb").read()
    decoded = mf.decode_manifest(original, path)
    assert len(decoded.manifest.schema_metadata) == 8
    again = mf.encode_manifest(decoded.manifest, decoded.transaction, decoded.index_section)
    assert len(again) == len(original)
    redecoded = mf.decode_manifest(again, path)
    assert redecoded.manifest == decoded.manifest
    assert redecoded.transaction == decoded.transaction
    # deterministic: encoding twice gives the same bytes
    assert mf.encode_manifest(redecoded.manifest, redecoded.transaction) == again


def test_map_entries_like_upstream():
    m = table_pb2.Manifest()
    m.config[""] = "v"
    m.config["k"] = ""
    m.config["a"] = "b"
    data = mf.serialize_like_upstream(m)
    # field 16 entries: "" -> value only, "a" -> both, "k" -> key only
    entries = [b"\x82\x01\x03\x12\x01v", b"\x82\x01\x06\n\x01a\x12\x01b", b"\x82\x01\x03\n\x01k"]
    assert len(data) == sum(map(len, entries)) and all(e in data for e in entries)
    assert mf.serialize_like_upstream(m) == data  # deterministic
    assert table_pb2.Manifest.FromString(data) == m
    # map-free messages are untouched
    frag = table_pb2.DataFragment(id=0, physical_rows=0, inline_row_ids=b"")
    assert mf.serialize_like_upstream(frag) == frag.SerializeToString()
    # nested: a Field's metadata inside the manifest and inside a transaction
    m = table_pb2.Manifest()
    m.fields.add(name="x").metadata["e"] = b""
    assert b"\x52\x03\n\x01e" in mf.serialize_like_upstream(m)
    txn = transaction_pb2.Transaction(uuid="u")
    txn.overwrite.schema.add(name="x").metadata["e"] = b""
    txn.transaction_properties["p"] = ""
    raw = tf.encode_transaction(txn)
    assert b"\x52\x03\n\x01e" in raw and b"\x22\x03\n\x01p" in raw
    assert transaction_pb2.Transaction.FromString(raw) == txn
