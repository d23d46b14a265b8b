"""Datasets with blob columns read by lance_ops exactly as pylance 14.0.2 reads them.

* legacy blob columns (``large_binary`` + ``lance-encoding:blob``; pylance's datasets at 2.0 /
  2.1, lance_ops' at every version): ``to_table`` / ``take`` / scans return the
  ``struct<position, size>`` descriptions, ``blob_handling="all_binary"`` the bytes, and
  ``take_blobs`` lazy file objects;
* blob v2 (pylance's ``write_dataset`` at 2.2): ``to_table`` returns the 5-field descriptors,
  bytes come from the data file (inline), side ``.blob`` files (packed / dedicated) or external
  URIs; cleanup keeps side files exactly as long as their data file; lance_ops appends to and
  compacts pylance's blob v2 datasets (its own blob v2 writes: tests/table/test_blob_v2_write.py).
"""
from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import LanceOpsError, UnsupportedError

lance = pytest.importorskip("lance")

BLOB = {"lance-encoding:blob": "true"}
ZERO = timedelta(0)


def blob_field(name: str = "b") -> pa.Field:
    return pa.field(name, pa.large_binary(), metadata=BLOB)


def blob_values(rng: np.random.Generator, sizes, null_every: int = 0) -> pa.Array:
    vals = [rng.integers(0, 256, s, dtype=np.uint8).tobytes() for s in sizes]
    if null_every:
        vals = [None if i % null_every == null_every - 1 else v for i, v in enumerate(vals)]
    return pa.array(vals, pa.large_binary())


def table_of(b: pa.Array, start: int = 0) -> pa.Table:
    schema = pa.schema([pa.field("id", pa.int64()), blob_field()])
    return pa.table({"id": pa.array(np.arange(start, start + len(b))), "b": b}, schema=schema)


def read_handles(files) -> list:
    return [None if f is None else f.read() for f in files]


def files_under(uri: str) -> dict[str, int]:
    """Every file of the dataset but lance_ops' own bookkeeping (_lance_ops/: the key ledger)."""
    out = {}
    for root, _, names in os.walk(uri):
        for n in names:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, uri)
            if not rel.startswith("_lance_ops" + os.sep):
                out[rel] = os.path.getsize(p)
    return out


# --------------------------------------------------------------------------------------------
# legacy blob columns
# --------------------------------------------------------------------------------------------
def legacy_dataset(path, version: str, writer: str) -> tuple[str, pa.Table]:
    """Two fragments with nulls, empties, a deletion; written by pylance or lance_ops."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(0, 3000, 40)
    sizes[::7] = 0
    t = table_of(blob_values(rng, sizes, null_every=5))
    uri = str(path)
    if writer == "pylance":
        lance.write_dataset(t, uri, data_storage_version=version, max_rows_per_file=25)
    else:
        lance_ops.write_dataset(t, uri, data_storage_version=version, max_rows_per_file=25)
    lance.dataset(uri).delete("id = 3 or id = 30")
    return uri, t


LEGACY = [("2.0", "pylance"), ("2.1", "pylance"), ("2.0", "lance_ops"), ("2.1", "lance_ops")]


@pytest.mark.parametrize("version,writer", LEGACY)
def test_legacy_blob_reads_equal_pylance(tmp_path, version, writer):
    uri, _ = legacy_dataset(tmp_path / "ds", version, writer)
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    got = ours.to_table()
    assert got.equals(theirs.to_table())
    assert got.schema.field("b").type == pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
    assert got.schema.field("b").metadata == {b"lance-encoding:blob": b"true"}
    assert ours.to_table(columns=["b"], filter="id > 20").equals(theirs.to_table(columns=["b"], filter="id > 20"))
    assert ours.take([30, 0, 7, 7]).equals(theirs.take([30, 0, 7, 7]))
    for handling in ("all_binary", "blobs_descriptions", "all_descriptions"):
        assert ours.to_table(blob_handling=handling).equals(theirs.to_table(blob_handling=handling))
        assert ours.scanner(columns=["b", "id"], blob_handling=handling).to_table().equals(
            theirs.scanner(columns=["b", "id"], blob_handling=handling).to_table())
    batches = list(ours.to_batches(blob_handling="all_binary"))
    assert pa.Table.from_batches(batches).equals(theirs.to_table(blob_handling="all_binary"))


@pytest.mark.parametrize("version,writer", LEGACY)
def test_legacy_take_blobs_like_pylance(tmp_path, version, writer):
    uri, t = legacy_dataset(tmp_path / "ds", version, writer)
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    idx = [36, 0, 4, 4, 20, 2]
    assert read_handles(ours.take_blobs("b", indices=idx)) == read_handles(theirs.take_blobs("b", indices=idx))
    addrs = theirs.to_table(columns=["id"], with_row_address=True).column("_rowaddr").to_pylist()
    pick = [addrs[5], addrs[0], addrs[30], addrs[5]]
    assert read_handles(ours.take_blobs("b", addresses=pick)) == read_handles(theirs.take_blobs("b", addresses=pick))
    assert read_handles(ours.take_blobs("b", ids=pick)) == read_handles(theirs.take_blobs("b", ids=pick))
    live = [v for i, v in enumerate(t.column("b").to_pylist()) if i not in (3, 30)]
    assert read_handles(ours.take_blobs("b", indices=list(range(len(live))))) == live


def test_blob_file_handle(tmp_path):
    uri, t = legacy_dataset(tmp_path / "ds", "2.1", "lance_ops")
    value = t.column("b")[1].as_py()
    f = lance_ops.dataset(uri).take_blobs("b", indices=[1], buffer_size=64)[0]
    assert repr(f) == f"<BlobFile size={len(value)}>" and f.size() == len(value)
    assert f.readable() and f.seekable()
    assert f.read(10) == value[:10] and f.tell() == 10
    assert f.read(100) == value[10:110]
    assert f.seek(-5, os.SEEK_END) == len(value) - 5 and f.read() == value[-5:]
    assert f.read() == b"" and f.read(3) == b""
    assert f.seek(7) == 7 and f.read_range(100, 20) == value[100:120] and f.tell() == 7
    assert f.read_ranges([(0, 3), (50, 0), (len(value) - 2, 2)]) == [value[:3], b"", value[-2:]]
    buf = bytearray(16)
    assert f.readinto(buf) == 16 and bytes(buf) == value[7:23]
    f.seek(0)
    assert f.readall() == value
    with pytest.raises(ValueError, match="out of bounds"):
        f.read_range(len(value) - 1, 2)
    with pytest.raises(ValueError, match="negative seek"):
        f.seek(-1)
    f.close()
    assert f.closed
    with pytest.raises(ValueError):
        f.read()
    with lance_ops.dataset(uri).take_blobs("b", indices=[1])[0] as g:
        assert g.read() == value


def test_take_blobs_argument_errors_like_pylance(tmp_path):
    uri, _ = legacy_dataset(tmp_path / "ds", "2.1", "pylance")
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    for kw in ({}, {"ids": [0], "indices": [0]}):
        for ds in (ours, theirs):
            with pytest.raises(ValueError, match="Exactly one of ids, indices, or addresses must be specified"):
                ds.take_blobs("b", **kw)
    for ds in (ours, theirs):
        with pytest.raises(ValueError, match="the column 'id' is not a blob column"):
            ds.take_blobs("id", indices=[0])
        with pytest.raises(ValueError, match="Invalid blob_handling: xx. Expected one of: "
                                             "all_binary, all_descriptions, blobs_descriptions"):
            ds.to_table(blob_handling="xx")
    with pytest.raises(LanceOpsError, match="nope"):
        ours.take_blobs("nope", indices=[0])
    with pytest.raises(IndexError):
        ours.take_blobs("b", indices=[1000])
    # deleted rows by id: pylance refuses (NotImplementedError), so do we
    deleted = (0 << 32) | 3
    with pytest.raises(NotImplementedError):
        theirs.take_blobs("b", ids=[deleted])
    with pytest.raises(UnsupportedError, match="deleted"):
        ours.take_blobs("b", ids=[deleted])


@pytest.mark.parametrize("version", ("2.0", "2.1"))
def test_nested_legacy_blobs(tmp_path, version):
    st = pa.struct([blob_field("b"), pa.field("i", pa.int32())])
    rows = [{"b": b"x", "i": 1}, {"b": b"yy", "i": 2}, {"b": None, "i": 3}, {"b": b"", "i": 4}]
    if version != "2.0":
        rows.append(None)
    t = pa.table({"s": pa.array(rows, st)})
    uri = str(tmp_path / "ds")
    lance.write_dataset(t, uri, data_storage_version=version)
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.to_table(blob_handling="all_binary").equals(theirs.to_table(blob_handling="all_binary"))
    idx = list(range(len(rows)))
    assert read_handles(ours.take_blobs("s.b", indices=idx)) == read_handles(theirs.take_blobs("s.b", indices=idx))


def test_list_of_legacy_blobs_at_2_0(tmp_path):
    lt = pa.list_(blob_field("item"))
    t = pa.table({"l": pa.array([[b"a", b"bb"], None, [], [None, b"c"]], lt)})
    uri = str(tmp_path / "ds")
    lance.write_dataset(t, uri, data_storage_version="2.0")
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.to_table(blob_handling="all_binary").equals(theirs.to_table(blob_handling="all_binary"))


# --------------------------------------------------------------------------------------------
# blob v2: cleanup keeps side files as long as their data file
# --------------------------------------------------------------------------------------------
def v2_history(uri: str) -> None:
    """Two writes with inline, packed and dedicated values, then pylance's compaction (new data
    file and side files; the old ones only old versions name)."""
    rng = np.random.default_rng(5)
    lance.write_dataset(table_of(blob_values(rng, [100, 200_000, 5_000_000])), uri, data_storage_version="2.2")
    lance.write_dataset(table_of(blob_values(rng, [100, 300_000, 4_500_000]), 3), uri, mode="append")
    lance.dataset(uri).optimize.compact_files()


def add_strays(uri: str, age: float) -> list[str]:
    """Files pylance's cleanup judges by their directory (``age`` seconds old): side files of
    no data file, of a live and of a removed one, and .blob files elsewhere that it leaves alone."""
    stems = sorted(p[:-6] for p in os.listdir(os.path.join(uri, "data")) if p.endswith(".lance"))
    rels = [f"data/{s}/11110000000000000000000000000000.blob" for s in stems] + [
        f"data/{stems[0]}/notes.txt", "data/orphan/10000000000000000000000000000000.blob", "data/orphan/x.txt",
        "data/orphan2/foo.blob", "data/loose.blob", "data/a/b/10000000000000000000000000000000.blob"]
    when = time.time() - age
    for rel in rels:
        p = os.path.join(uri, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b"y" * 10)
        os.utime(p, (when, when))
    return rels


@pytest.mark.parametrize("age", (0, 3600, 8 * 24 * 3600))
@pytest.mark.parametrize("delete_unverified", (False, True))
def test_cleanup_of_blob_v2_side_files_like_pylance(tmp_path, delete_unverified, age):
    """Side files go with their data file; strays in a removed data file's directory go when
    they predate it (pylance's cutoff), else by the unverified-file rules."""
    base = str(tmp_path / "base")
    v2_history(base)
    add_strays(base, age)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(base, ours)
    shutil.copytree(base, theirs)
    before = files_under(ours)
    expected = lance.dataset(theirs).to_table(blob_handling="all_binary")
    st_theirs = lance.dataset(theirs).cleanup_old_versions(older_than=ZERO, delete_unverified=delete_unverified)
    st_ours = lance_ops.dataset(ours).cleanup_old_versions(older_than=ZERO, delete_unverified=delete_unverified)
    after = files_under(ours)
    assert set(after) == set(files_under(theirs))
    assert (st_ours.old_versions, st_ours.data_files_removed) == (st_theirs.old_versions, st_theirs.data_files_removed)
    removed_blobs = [r for r in before if r not in after and r.endswith(".blob")]
    assert len(removed_blobs) >= 4  # the side files of the two compacted-away data files
    assert lance.dataset(ours).to_table(blob_handling="all_binary").equals(expected)


# --------------------------------------------------------------------------------------------
# blob v2: lance_ops refuses to rewrite or append, before writing anything
# --------------------------------------------------------------------------------------------
def test_compaction_rewrites_pylance_blob_v2(tmp_path):
    """lance_ops compacts a blob v2 dataset pylance wrote: the new data file gets its own side
    files; pylance reads every value back and its cleanup keeps only what the new file needs."""
    uri = str(tmp_path / "ds")
    rng = np.random.default_rng(1)
    lance.write_dataset(table_of(blob_values(rng, [10, 100_000, 0])), uri, data_storage_version="2.2")
    lance.write_dataset(table_of(blob_values(rng, [20, 5_000_000, 70_000, 7], null_every=4), 3), uri, mode="append")
    lance.dataset(uri).delete("id = 0")
    expected = lance.dataset(uri).to_table(blob_handling="all_binary")
    lance_ops.dataset(uri).optimize.compact_files()
    theirs = lance.dataset(uri)
    assert len(theirs.get_fragments()) == 1
    assert theirs.to_table(blob_handling="all_binary").equals(expected)
    assert read_handles(theirs.take_blobs("b", indices=list(range(6)))) == expected.column("b").to_pylist()
    assert [d and d["kind"] for d in theirs.to_table().column("b").to_pylist()] == [1, 0, 0, 2, 1, None]
    assert lance_ops.dataset(uri).to_table().equals(theirs.to_table())


@pytest.mark.parametrize("version", ("2.0", "2.1"))
def test_compaction_carries_legacy_blobs(tmp_path, version):
    """Compaction rewrites legacy blob columns with their bytes (new positions in the new file)."""
    uri, _ = legacy_dataset(tmp_path / "ds", version, "pylance")
    expected = lance.dataset(uri).to_table(blob_handling="all_binary")
    lance_ops.dataset(uri).optimize.compact_files()
    theirs = lance.dataset(uri)
    assert len(theirs.get_fragments()) == 1
    assert theirs.to_table(blob_handling="all_binary").equals(expected)
    n = theirs.count_rows()
    assert read_handles(theirs.take_blobs("b", indices=list(range(n)))) == expected.column("b").to_pylist()
    assert lance_ops.dataset(uri).to_table().equals(theirs.to_table())


def test_append_to_pylance_blob_v2_dataset(tmp_path):
    """Bytes, the storage struct and pylance's extension arrays all append to a blob v2 column."""
    from lance.blob import blob_array

    uri = str(tmp_path / "ds")
    rng = np.random.default_rng(2)
    first = blob_values(rng, [10, 100_000])
    lance.write_dataset(table_of(first), uri, data_storage_version="2.2")
    logical = pa.struct([("data", pa.large_binary()), ("uri", pa.utf8())])
    lance_ops.write_dataset(table_of(blob_values(rng, [5, 5_000_000]), 2), uri, mode="append")
    lance_ops.write_dataset(pa.table({"id": pa.array([4], pa.int64()),
                                      "b": pa.array([{"data": b"x" * 70_000, "uri": None}], logical)}),
                            uri, mode="append")
    lance_ops.write_dataset(pa.table({"id": pa.array([5, 6], pa.int64()), "b": blob_array([b"y", None])}),
                            uri, mode="append")
    theirs = lance.dataset(uri)
    got = theirs.to_table(blob_handling="all_binary")
    assert got.column("id").to_pylist() == list(range(7))
    values = got.column("b").to_pylist()
    assert values[:2] == first.to_pylist()
    assert [None if v is None else len(v) for v in values[2:]] == [5, 5_000_000, 70_000, 1, None]
    assert read_handles(theirs.take_blobs("b", indices=[3, 4, 5])) == values[3:6]
    assert lance_ops.dataset(uri).to_table().equals(theirs.to_table())


def test_blob_v2_data_before_2_2_is_refused(tmp_path):
    from lance.blob import blob_array

    t = pa.table({"id": pa.array([0, 1], pa.int64()), "b": blob_array([b"x", None])})
    uri = str(tmp_path / "ds")
    for version in ("2.0", "2.1"):
        with pytest.raises(UnsupportedError, match=r"'b' is a lance.blob.v2 blob, which needs data_storage_version 2.2"):
            lance_ops.write_dataset(t, uri, data_storage_version=version)
    assert not os.path.exists(uri) or not any(n.endswith(".lance") for n in files_under(uri))


def _legacy_layout_2_2_dataset(uri: str, t: pa.Table, monkeypatch) -> None:
    """A 2.2 dataset whose blob column has the legacy layout (what lance_ops wrote before it
    wrote blob v2)."""
    from lance_ops.table import write as write_mod

    with monkeypatch.context() as m:
        m.setattr(write_mod, "blob_v2_schema", lambda schema, version, where: schema)
        lance_ops.write_dataset(t, uri, data_storage_version="2.2")


def test_blob_fields_of_2_2_datasets_become_blob_v2(tmp_path, monkeypatch):
    """At 2.2 ("stable") lance_ops stores blob fields as lance.blob.v2, as pylance; appends to a
    2.2 dataset still holding the legacy layout are refused before anything is written."""
    rng = np.random.default_rng(3)
    t = table_of(blob_values(rng, [10, 100, 1000], null_every=2))
    for version in ("2.2", "stable"):
        uri = str(tmp_path / version)
        lance_ops.write_dataset(t, uri, data_storage_version=version)
        theirs = lance.dataset(uri)
        assert theirs.schema.field("b").type.extension_name == "lance.blob.v2"
        assert theirs.to_table(blob_handling="all_binary").equals(t)
    uri = str(tmp_path / "legacy")
    _legacy_layout_2_2_dataset(uri, t, monkeypatch)
    before = files_under(uri)
    with pytest.raises(UnsupportedError, match=r"blob column\(s\) \['b'\] of this 2.2 dataset use the legacy blob layout"):
        lance_ops.write_dataset(t, uri, mode="append")
    assert files_under(uri) == before


def test_blob_v2_label_over_legacy_files_reads_as_inline_descriptors(tmp_path, monkeypatch):
    """A 2.2 dataset with legacy blob files (as lance_ops wrote before refusing them) that pylance
    then committed to: its manifest now says lance.blob.v2 and pylance cannot read it. lance_ops
    reads the legacy files as inline descriptors and resolves their bytes."""
    rng = np.random.default_rng(4)
    t = table_of(blob_values(rng, [10, 0, 1000, 70_000, 5, 6], null_every=2))
    uri = str(tmp_path / "ds")
    _legacy_layout_2_2_dataset(uri, t, monkeypatch)
    lance.dataset(uri).delete("id = 5")  # pylance's commit relabels the field
    assert lance.dataset(uri).schema.field("b").type.extension_name == "lance.blob.v2"
    with pytest.raises(Exception):
        lance.dataset(uri).to_table()
    ours = lance_ops.dataset(uri)
    got = ours.to_table().column("b").combine_chunks()
    values = t.column("b").to_pylist()[:5]
    assert [None if d is None else (d["kind"], d["size"], d["blob_id"], d["blob_uri"]) for d in got.to_pylist()] == \
        [None if v is None else (0, len(v), 0, "") for v in values]
    assert ours.to_table(blob_handling="all_binary").column("b").to_pylist() == values
    assert read_handles(ours.take_blobs("b", indices=[4, 0, 1])) == [values[i] for i in (4, 0, 1)]


# --------------------------------------------------------------------------------------------
# blob v2: reads
# --------------------------------------------------------------------------------------------
V2_SIZES = [0, 10, 100, 1000, 60_000, 65_536, 65_537, 100_000, 200_000, 1_000_000, 4_194_304, 4_194_305,
            5_000_000]


def v2_dataset(path) -> tuple[str, pa.Table]:
    """Inline (<= 64 KiB), packed (<= 4 MiB, shared side file) and dedicated values, nulls,
    two fragments, a deletion, and a fragment with external URIs (whole object and a range)."""
    from lance.blob import Blob, blob_array

    rng = np.random.default_rng(9)
    uri = str(path / "ds")
    t = table_of(blob_values(rng, V2_SIZES + V2_SIZES[::-1], null_every=6))
    lance.write_dataset(t, uri, data_storage_version="2.2", max_rows_per_file=14)
    ext = str(path / "external.bin")
    with open(ext, "wb") as f:
        f.write(bytes(range(256)) * 40)
    t2 = pa.table({"id": pa.array([100, 101, 102, 103, 104], pa.int64()),
                   "b": blob_array([Blob.from_uri(f"file://{ext}"), Blob.from_uri(f"file://{ext}", position=10, size=20),
                                    b"inline", None, b""])})
    lance.write_dataset(t2, uri, mode="append", allow_external_blob_outside_bases=True)
    lance.dataset(uri).delete("id = 2")
    return uri, t


def test_blob_v2_to_table_and_take_equal_pylance(tmp_path):
    uri, _ = v2_dataset(tmp_path)
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    got = ours.to_table()
    assert got.equals(theirs.to_table())
    kinds = set(got.column("b").combine_chunks().field("kind").to_pylist())
    assert kinds == {0, 1, 2, 3}
    assert got.schema.field("b").type == theirs.to_table().schema.field("b").type
    assert ours.take([29, 0, 5, 5]).equals(theirs.take([29, 0, 5, 5]))
    assert ours.to_table(filter="id >= 100").equals(theirs.to_table(filter="id >= 100"))


def test_blob_v2_bytes_equal_pylance(tmp_path):
    uri, t = v2_dataset(tmp_path)
    ours, theirs = lance_ops.dataset(uri), lance.dataset(uri)
    got = ours.to_table(blob_handling="all_binary")
    assert got.equals(theirs.to_table(blob_handling="all_binary"))
    assert got.schema.field("b") == pa.field("b", pa.large_binary())
    n = ours.count_rows()
    idx = list(range(n))[::-1] + [0, 0]
    assert read_handles(ours.take_blobs("b", indices=idx)) == read_handles(theirs.take_blobs("b", indices=idx))
    sizes = [None if f is None else f.size() for f in ours.take_blobs("b", indices=idx)]
    assert sizes == [None if f is None else f.size() for f in theirs.take_blobs("b", indices=idx)]
    addrs = theirs.to_table(columns=["id"], with_row_address=True).column("_rowaddr").to_pylist()
    pick = [addrs[-1], addrs[3], addrs[20]]
    assert read_handles(ours.take_blobs("b", addresses=pick)) == read_handles(theirs.take_blobs("b", addresses=pick))


def test_blob_v2_side_file_naming(tmp_path):
    """Side files sit at data/<stem>/<blob_id, 32 binary digits least significant first>.blob."""
    from lance_ops.format import blob_v2

    uri, _ = v2_dataset(tmp_path)
    desc = lance.dataset(uri).to_table().column("b").combine_chunks()
    frags = lance.dataset(uri).get_fragments()
    first = frags[0].data_files()[0].path
    stem = first[:-len(".lance")]
    on_disk = set(os.listdir(os.path.join(uri, "data", stem)))
    ids = {d["blob_id"] for d in desc.to_pylist()[:frags[0].count_rows()] if d and d["kind"] in (1, 2)}
    assert on_disk == {blob_v2.side_file_name(i) for i in ids}
    assert blob_v2.side_file_name(6) == "011" + "0" * 29 + ".blob"


def test_blob_v2_on_s3(moto_server, s3_bucket):
    """Side files and inline values resolve through the object store (S3 keys, coalesced reads)."""
    opts = moto_server.storage_options
    uri = f"{s3_bucket}/blobs/v2.lance"
    rng = np.random.default_rng(8)
    t = table_of(blob_values(rng, [10, 70_000, 200_000, 4_500_000, 0], null_every=4))
    lance.write_dataset(t, uri, data_storage_version="2.2", storage_options=opts)
    ours, theirs = lance_ops.dataset(uri, storage_options=opts), lance.dataset(uri, storage_options=opts)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.to_table(blob_handling="all_binary").column("b").to_pylist() == t.column("b").to_pylist()
    assert read_handles(ours.take_blobs("b", indices=[3, 2, 1, 0])) == [t.column("b")[i].as_py() for i in (3, 2, 1, 0)]
