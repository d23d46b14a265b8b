"""Deletion files: read what pylance writes, and make pylance honour what we write."""
from __future__ import annotations

import os
import shutil
import struct

import lance
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from pyroaring import BitMap

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError
from lance_ops.table import deletion as dl
from lance_ops.table.manifest import feature_flags as ff
from lance_ops.table.manifest import codec as mf
from lance_ops.table.manifest import naming
from tests.table import commit_rewritten, int_table, local_store

ROWS = 12000


@pytest.fixture(scope="module")
def plain_ds(tmp_path_factory):
    """Two fragments of 6000 rows, no deletions yet."""
    uri = str(tmp_path_factory.mktemp("del") / "plain")
    lance.write_dataset(int_table(0, ROWS), uri, data_storage_version="2.0", max_rows_per_file=6000)
    return uri


@pytest.fixture(scope="module")
def deleted_ds(plain_ds, tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("del") / "deleted")
    shutil.copytree(plain_ds, uri)
    ds = lance.dataset(uri)
    ds.delete("id % 7 = 0 and id < 6000")  # 858 rows of fragment 0 -> .arrow
    ds.delete("id >= 6000 and id < 11500")  # 5500 rows of fragment 1 -> .bin
    return uri


def _latest(uri):
    store, base = local_store(uri)
    return store, base, mf.read_manifest(store, naming.latest_version(store, base).path)


def test_read_pylance_deletion_files(deleted_ds):
    store, base, current = _latest(deleted_ds)
    frags = {f.id: f for f in current.manifest.fragments}
    f0, f1 = frags[0], frags[1]
    assert f0.deletion_file.file_type == dl.ARROW_ARRAY
    assert f1.deletion_file.file_type == dl.BITMAP

    got0 = dl.read_deletion_file(store, base, 0, f0.deletion_file)
    assert isinstance(got0, np.ndarray) and got0.dtype == np.uint32
    np.testing.assert_array_equal(got0, np.arange(0, 6000, 7, dtype=np.uint32))
    assert f0.deletion_file.num_deleted_rows == got0.size

    got1 = dl.read_deletion_file(store, base, 1, f1.deletion_file)
    assert isinstance(got1, BitMap)
    np.testing.assert_array_equal(dl.to_offsets(got1), np.arange(0, 5500, dtype=np.uint32))
    assert f1.deletion_file.num_deleted_rows == len(got1) == 5500
    # pylance's bitmap has no run containers
    raw = open(dl.deletion_file_path(store, base, 1, f1.deletion_file), "rb").read()
    assert struct.unpack("<I", raw[:4])[0] & 0xFFFF == 0x303A
    np.testing.assert_array_equal(
        dl.read_deletion_offsets(store, base, 1, f1.deletion_file), np.arange(5500, dtype=np.uint32)
    )


@pytest.mark.parametrize("count, kind", [(300, dl.ARROW_ARRAY), (5200, dl.BITMAP)])
def test_pylance_reads_our_deletion_file(plain_ds, tmp_path, count, kind):
    uri = str(tmp_path / "ds")
    shutil.copytree(plain_ds, uri)
    store, base, current = _latest(uri)
    rng = np.random.default_rng(count)
    offsets = rng.choice(6000, size=count, replace=False)  # unsorted input is fine
    read_version = current.version
    proto = dl.write_deletion_file(store, base, 1, read_version, offsets)
    assert proto.file_type == kind and proto.num_deleted_rows == count
    assert proto.read_version == read_version
    path = dl.deletion_file_path(store, base, 1, proto)
    assert os.path.basename(path) == naming.deletion_file_name(1, read_version, proto.id, kind)

    def add_deletion(m):
        for frag in m.fragments:
            if frag.id == 1:
                frag.deletion_file.CopyFrom(proto)
        ff.apply_flags(m)

    version = commit_rewritten(store, base, current, add_deletion)
    ds = lance.dataset(uri)
    assert ds.version == version
    assert ds.count_rows() == ROWS - count
    deleted_ids = set((6000 + offsets).tolist())
    expected = [i for i in range(ROWS) if i not in deleted_ids]
    assert ds.to_table(columns=["id"])["id"].to_pylist() == expected
    # pylance's own follow-up delete merges with our file
    ds.delete("id = 6001 or id = 2")
    assert lance.dataset(uri).count_rows() == ROWS - count - len({6001, 2} - deleted_ids)


def test_arrow_file_layout(tmp_path):
    data = dl.encode_arrow_deletions([9, 3, 3, 1])
    assert data[:6] == b"ARROW1" and data[-6:] == b"ARROW1"
    reader = ipc.open_file(pa.BufferReader(data))
    assert reader.schema == dl.DELETION_SCHEMA
    assert reader.schema.field("row_id").nullable is False
    assert reader.num_record_batches == 1
    assert reader.read_all()["row_id"].to_pylist() == [1, 3, 9]
    # the body is ZSTD compressed (a large enough vector to be worth it)
    big = dl.encode_arrow_deletions(np.arange(0, 8000, 2))
    assert len(big) < 8000 * 4 / 2


def test_kind_choice():
    assert dl.choose_kind(4999) == dl.ARROW_ARRAY
    assert dl.choose_kind(5000) == dl.BITMAP
    # a grown arrow vector switches only above 5000 (as pylance does)
    assert dl.choose_kind(5000, dl.ARROW_ARRAY) == dl.ARROW_ARRAY
    assert dl.choose_kind(5001, dl.ARROW_ARRAY) == dl.BITMAP
    # once a bitmap, always a bitmap
    assert dl.choose_kind(1, dl.BITMAP) == dl.BITMAP
    assert dl.choose_kind(1, table_pb2.DeletionFile(file_type=dl.BITMAP).file_type) == dl.BITMAP


def test_write_read_roundtrip(tmp_path):
    store, base = local_store(tmp_path)
    small = dl.write_deletion_file(store, base, 4, 2, np.array([5, 1, 5, 3]), file_id=17)
    assert small.file_type == dl.ARROW_ARRAY and small.num_deleted_rows == 3 and small.id == 17
    assert os.path.exists(tmp_path / "_deletions" / "4-2-17.arrow")
    np.testing.assert_array_equal(dl.read_deletion_file(store, base, 4, small), [1, 3, 5])

    # the previous kind steers the choice: a bitmap stays a bitmap
    again = dl.write_deletion_file(store, base, 4, 3, [1, 3, 5, 6], previous=small)
    assert again.file_type == dl.ARROW_ARRAY
    bm_prev = table_pb2.DeletionFile(file_type=dl.BITMAP)
    bm = dl.write_deletion_file(store, base, 4, 3, [1, 3, 5, 6], previous=bm_prev)
    assert bm.file_type == dl.BITMAP
    raw = open(dl.deletion_file_path(store, base, 4, bm), "rb").read()
    assert raw[:2] == b"\x3a\x30"  # portable cookie without run containers
    assert list(dl.read_deletion_file(store, base, 4, bm)) == [1, 3, 5, 6]

    dense = dl.write_deletion_file(store, base, 5, 3, np.arange(100000))
    assert dense.file_type == dl.BITMAP and dense.num_deleted_rows == 100000
    raw = open(dl.deletion_file_path(store, base, 5, dense), "rb").read()
    assert raw[:2] == b"\x3a\x30"

    assert dl.write_deletion_file(store, base, 4, 3, []) is None
    assert dl.read_deletion_file(store, base, 4, None).size == 0
    with pytest.raises(ValueError):
        dl.write_deletion_file(store, base, 4, 3, [2**32])
    with pytest.raises(ValueError):
        dl.write_deletion_file(store, base, 4, 3, [-1])


def test_random_ids_differ(tmp_path):
    store, base = local_store(tmp_path)
    ids = {dl.write_deletion_file(store, base, 0, 1, [1]).id for _ in range(20)}
    assert len(ids) == 20
    assert max(ids) < 2**64


def test_merge_deletions():
    a = np.array([5, 1], dtype=np.uint32)
    b = BitMap([2, 5, 9])
    np.testing.assert_array_equal(dl.merge_deletions(a, b), [1, 2, 5, 9])
    np.testing.assert_array_equal(dl.merge_deletions(None, [3, 3]), [3])
    np.testing.assert_array_equal(dl.merge_deletions(b, None), [2, 5, 9])
    assert dl.merge_deletions(None, None).dtype == np.uint32


def test_corrupt_deletion_files(tmp_path):
    store, base = local_store(tmp_path)
    os.makedirs(tmp_path / "_deletions")
    arrow = table_pb2.DeletionFile(file_type=dl.ARROW_ARRAY, read_version=1, id=1)
    (tmp_path / "_deletions" / "0-1-1.arrow").write_bytes(b"not arrow")
    with pytest.raises(CorruptFileError, match="0-1-1.arrow"):
        dl.read_deletion_file(store, base, 0, arrow)
    # wrong schema
    sink = pa.BufferOutputStream()
    tbl = pa.table({"a": pa.array([1], pa.int64()), "b": pa.array([1], pa.int64())})
    with ipc.new_file(sink, tbl.schema) as w:
        w.write_table(tbl)
    (tmp_path / "_deletions" / "0-1-1.arrow").write_bytes(sink.getvalue().to_pybytes())
    with pytest.raises(CorruptFileError, match="one column"):
        dl.read_deletion_file(store, base, 0, arrow)
    bitmap = table_pb2.DeletionFile(file_type=dl.BITMAP, read_version=1, id=2)
    (tmp_path / "_deletions" / "0-1-2.bin").write_bytes(b"\x00\x01")
    with pytest.raises(CorruptFileError, match="0-1-2.bin"):
        dl.read_deletion_file(store, base, 0, bitmap)


@pytest.fixture(scope="module")
def unknown_counts_ds(deleted_ds, tmp_path_factory):
    """``deleted_ds`` with its deletion files' ``num_deleted_rows`` left at 0, as very old writers
    left them: pylance reads such a count as unknown and reads the deletion file instead."""
    uri = str(tmp_path_factory.mktemp("del") / "unknown_counts")
    shutil.copytree(deleted_ds, uri)
    store, base, current = _latest(uri)

    def forget_counts(m):
        for frag in m.fragments:
            if frag.HasField("deletion_file"):
                frag.deletion_file.num_deleted_rows = 0

    commit_rewritten(store, base, current, forget_counts)
    return uri


def test_deletion_count_zero_means_unknown_not_none_deleted(unknown_counts_ds):
    """A deletion file whose recorded count is 0 still deletes its rows: counts, scans, takes and
    fragment views equal pylance's full scan (which reads the file) and the model of the deletes,
    never resurrecting a deleted row. (pylance 14.0.2's filtered scans and takes fail on such a
    manifest with "Fragments are missing row count stats", so the model stands in for them.)"""
    import lance_ops

    ids = np.arange(ROWS)
    model = ids[~(((ids % 7 == 0) & (ids < 6000)) | ((ids >= 6000) & (ids < 11500)))]
    theirs, ours = lance.dataset(unknown_counts_ds), lance_ops.dataset(unknown_counts_ds)
    assert theirs.count_rows() == ours.count_rows() == model.size
    assert ours.to_table(columns=["id"]) == theirs.to_table(columns=["id"])
    assert ours.to_table(columns=["id"])["id"].to_pylist() == model.tolist()
    assert ours.count_rows("id < 6000") == int((model < 6000).sum())
    assert ours.take([0, 1, 500, model.size - 1], columns=["id"])["id"].to_pylist() == model[[0, 1, 500, -1]].tolist()
    assert [f.count_rows() for f in ours.get_fragments()] == [6000 - 858, 500]
    assert [f.num_deletions for f in ours.get_fragments()] == [858, 5500]
    assert ours.get_fragments()[1].to_table(columns=["id"])["id"].to_pylist() == list(range(11500, ROWS))
    assert ours.to_table(columns=["id"], filter="id % 7 = 0 AND id < 6000").num_rows == 0


def test_delete_over_unknown_counts_keeps_the_rows_the_files_delete(unknown_counts_ds, tmp_path):
    """A delete on fragments whose deletion files record a count of 0 ("unknown") reads those
    files and merges: the new vectors hold the old rows and the new ones (pylance reads them)."""
    import lance_ops

    uri = str(tmp_path / "ds")
    shutil.copytree(unknown_counts_ds, uri)
    ids = np.arange(ROWS)
    old = ((ids % 7 == 0) & (ids < 6000)) | ((ids >= 6000) & (ids < 11500))
    gone = old | (ids % 5 == 1)
    assert lance_ops.dataset(uri).delete("id % 5 = 1") == {"num_deleted_rows": int((gone & ~old).sum())}
    assert lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist() == ids[~gone].tolist()
    assert [f.metadata.deletion_file.num_deleted_rows for f in lance.dataset(uri).get_fragments()] == \
        [int(gone[:6000].sum()), int(gone[6000:].sum())]


def test_arrow_decode_by_learned_layout():
    """Files laid out like one the IPC reader decoded skip it (ADR 0037): same offsets as the
    IPC reader, and any change outside the values bytes goes back to it (and its errors)."""
    def ipc_bytes(values, typ=pa.uint32()):
        sink = pa.BufferOutputStream()
        schema = pa.schema([pa.field("row_id", typ, nullable=False)])
        with ipc.new_file(sink, schema) as w:
            w.write_batch(pa.record_batch([pa.array(values, typ)], schema=schema))
        return sink.getvalue().to_pybytes()

    dl._LAYOUTS.clear()
    first = ipc_bytes([9, 3, 7])
    assert dl.decode_arrow_deletions(first).tolist() == [3, 7, 9]  # IPC reader, layout learned
    assert dl._by_layout(first) is not None
    for values in ([5, 1, 2], [0, 4000000000, 17], [8, 8, 1]):
        data = ipc_bytes(values)
        assert dl._by_layout(data) is not None
        assert dl.decode_arrow_deletions(data).tolist() == sorted(set(values))
    # one byte changed outside the values: not the learned layout, so the IPC reader decides
    damaged = bytearray(first)
    damaged[-12] ^= 0xFF
    assert dl._by_layout(bytes(damaged)) is None
    with pytest.raises(CorruptFileError):
        dl.decode_arrow_deletions(bytes(damaged), "x.arrow")
    # int32 layouts keep their type checks: negative offsets are refused either way
    assert dl.decode_arrow_deletions(ipc_bytes([1, 2], pa.int32())).tolist() == [1, 2]
    with pytest.raises(CorruptFileError, match="negative"):
        dl.decode_arrow_deletions(ipc_bytes([-1, 2], pa.int32()), "x.arrow")
    dl._LAYOUTS.clear()
