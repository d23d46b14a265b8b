"""Row id sequences, version sequences and row addresses."""
from __future__ import annotations

import shutil

import lance
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_ops._proto import rowids_pb2
from lance_ops.errors import CorruptFileError
from lance_ops.table import addresses as ad
from lance_ops.table import deletion as dl
from lance_ops.table.manifest import codec as mf
from lance_ops.table.manifest import naming
from lance_ops.table import rowids as ri
from tests.table import commit_rewritten, int_table, local_store

U64_MAX = 2**64 - 1
SETTINGS = settings(max_examples=150, deadline=None)


# --- strategies ------------------------------------------------------------------------------
@st.composite
def row_id_arrays(draw):
    shape = draw(st.sampled_from(["empty", "range", "holes", "dense", "sparse", "unsorted", "wide"]))
    start = draw(st.one_of(st.integers(0, 1000), st.integers(0, 2**63)))
    if shape == "empty":
        return np.empty(0, dtype=np.uint64)
    n = draw(st.integers(1, 400))
    if shape == "range":
        return np.arange(start, start + n, dtype=np.uint64)
    if shape == "holes":
        base = np.arange(start, start + n + 5, dtype=np.uint64)
        drop = draw(st.lists(st.integers(1, n + 3), max_size=4, unique=True))
        return np.delete(base, drop)
    if shape == "dense":
        keep = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        keep[0] = True
        return np.arange(start, start + n, dtype=np.uint64)[keep]
    values = draw(st.lists(st.integers(0, 2**64 - 1 if shape == "wide" else 100000),
                           min_size=1, max_size=n, unique=True))
    arr = np.array(values, dtype=np.uint64)
    return arr if shape == "unsorted" else np.sort(arr)


# --- round trips -----------------------------------------------------------------------------
@SETTINGS
@given(row_id_arrays())
def test_segment_roundtrip(values):
    seg = ri.encode_segment(values)
    again = rowids_pb2.U64Segment.FromString(seg.SerializeToString())
    np.testing.assert_array_equal(ri.decode_segment(again), values)
    assert ri.segment_length(again) == values.size
    assert seg.WhichOneof("segment") == ri.choose_segment_kind(values)


@SETTINGS
@given(st.lists(row_id_arrays(), max_size=5))
def test_sequence_roundtrip(parts):
    seq = ri.RowIdSequence(parts)
    data = seq.to_bytes()
    expected = np.concatenate(parts) if parts else np.empty(0, np.uint64)
    np.testing.assert_array_equal(ri.decode_row_ids(data), expected)
    assert len(ri.RowIdSequence.from_bytes(data)) == expected.size
    np.testing.assert_array_equal(ri.decode_row_ids(ri.encode_row_ids(expected)), expected)


@SETTINGS
@given(row_id_arrays(), st.sampled_from([ri.RANGE_WITH_BITMAP, ri.RANGE_WITH_HOLES,
                                          ri.SORTED_ARRAY, ri.ARRAY]))
def test_forced_kinds_roundtrip(values, kind):
    sorted_unique = values.size > 0 and np.all(values[1:] > values[:-1]) and values[-1] < U64_MAX
    if kind in (ri.RANGE_WITH_BITMAP, ri.RANGE_WITH_HOLES):
        if not sorted_unique or int(values[-1]) - int(values[0]) > 100000:
            return
    if kind == ri.SORTED_ARRAY and values.size > 1 and not np.all(values[1:] >= values[:-1]):
        return
    seg = ri.encode_segment(values, kind)
    assert seg.WhichOneof("segment") == kind
    np.testing.assert_array_equal(ri.decode_segment(seg), values)


@SETTINGS
@given(st.lists(st.integers(0, 5), max_size=300))
def test_version_sequence_roundtrip(raw):
    versions = np.array(raw, dtype=np.uint64)
    data = ri.encode_version_sequence(versions)
    np.testing.assert_array_equal(ri.decode_version_sequence(data), versions)
    msg = rowids_pb2.RowDatasetVersionSequence.FromString(data)
    assert len(msg.runs) == (0 if not raw else 1 + int(np.count_nonzero(np.diff(versions))))


@SETTINGS
@given(st.lists(row_id_arrays(), max_size=4), st.data())
def test_slice_mask_concat(parts, data):
    seq = ri.RowIdSequence(parts)
    flat = seq.to_numpy()
    n = flat.size
    offset = data.draw(st.integers(0, n))
    length = data.draw(st.integers(0, n - offset))
    np.testing.assert_array_equal(seq.slice(offset, length).to_numpy(), flat[offset:offset + length])
    drop = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=20)) if n else []
    np.testing.assert_array_equal(seq.mask(drop).to_numpy(), np.delete(flat, drop))
    joined = ri.RowIdSequence.concat([seq, seq.mask(drop)])
    np.testing.assert_array_equal(joined.to_numpy(), np.concatenate([flat, np.delete(flat, drop)]))
    sizes = [offset, n - offset]
    chunks = ri.RowIdSequence.rechunk([seq], sizes)
    np.testing.assert_array_equal(
        np.concatenate([c.to_numpy() for c in chunks]) if chunks else flat, flat
    )


# --- segment choice --------------------------------------------------------------------------
def _kind_and_array(values):
    seg = ri.encode_segment(np.array(values, dtype=np.uint64))
    kind = seg.WhichOneof("segment")
    inner = {
        ri.SORTED_ARRAY: seg.sorted_array,
        ri.ARRAY: seg.array,
        ri.RANGE_WITH_HOLES: seg.range_with_holes.holes,
    }.get(kind)
    return kind, (inner.WhichOneof("array") if inner is not None else None), seg


def test_segment_choice():
    assert _kind_and_array([])[0] == ri.RANGE
    kind, _, seg = _kind_and_array(range(10, 20))
    assert kind == ri.RANGE and (seg.range.start, seg.range.end) == (10, 20)
    kind, arr, seg = _kind_and_array([x for x in range(1000) if x not in (10, 500)])
    assert (kind, arr) == (ri.RANGE_WITH_HOLES, "u16_array")
    assert ri.decode_u64_array(seg.range_with_holes.holes).tolist() == [10, 500]  # absolute
    kind, _, seg = _kind_and_array(range(0, 100, 2))
    assert kind == ri.RANGE_WITH_BITMAP
    assert seg.range_with_bitmap.bitmap[:1] == b"\x55"  # LSB first, as pylance writes it
    assert _kind_and_array([1, 5000, 90000])[:2] == (ri.SORTED_ARRAY, "u32_array")
    assert _kind_and_array([5, 1, 3])[:2] == (ri.ARRAY, "u16_array")
    assert _kind_and_array([2**40, 2**40 + 65534])[1] == "u16_array"
    assert _kind_and_array([2**40, 2**40 + 65535])[1] == "u32_array"
    assert _kind_and_array([0, 2**33])[:2] == (ri.SORTED_ARRAY, "u64_array")
    assert _kind_and_array([2**64 - 1, 0])[:2] == (ri.ARRAY, "u64_array")


def test_corrupt_sequences():
    with pytest.raises(CorruptFileError):
        ri.decode_row_ids(b"\xff\xff\xff")
    bad = rowids_pb2.RowIdSequence()
    bad.segments.add().range_with_bitmap.end = 100  # no bitmap bytes
    with pytest.raises(CorruptFileError, match="bitmap"):
        ri.decode_row_ids(bad.SerializeToString())
    bad = rowids_pb2.RowIdSequence()
    bad.segments.add().sorted_array.u16_array.offsets = b"\x01"
    with pytest.raises(CorruptFileError):
        ri.decode_row_ids(bad.SerializeToString())
    bad = rowids_pb2.RowIdSequence()
    bad.segments.add()
    with pytest.raises(CorruptFileError, match="no segment"):
        ri.decode_row_ids(bad.SerializeToString())


# --- interop with pylance --------------------------------------------------------------------
@pytest.fixture(scope="module")
def stable_ds(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("rowids") / "stable")
    lance.write_dataset(int_table(0, 300), uri, data_storage_version="2.0",
                        enable_stable_row_ids=True, max_rows_per_file=100)
    ds = lance.write_dataset(int_table(300, 500), uri, mode="append")
    ds.delete("id % 2 = 1 and id < 100")  # dense holes -> bitmap after compaction
    ds.delete("id in (120, 150, 151)")    # a few holes -> holes after compaction
    ds.optimize.compact_files(target_rows_per_fragment=250)
    ds = lance.write_dataset(int_table(500, 600), uri, mode="append")
    ds.delete("id in (510, 590)")
    return uri


def _row_ids_by_fragment(store, base, manifest):
    out = []
    for frag in manifest.fragments:
        ids = ri.read_fragment_row_ids(store, base, frag)
        assert ids.size == frag.physical_rows
        if frag.HasField("deletion_file"):
            ids = ri.RowIdSequence.from_array(ids).mask(
                dl.read_deletion_offsets(store, base, frag.id, frag.deletion_file)).to_numpy()
        out.append(ids)
    return np.concatenate(out)


def test_decode_pylance_row_ids(stable_ds):
    store, base = local_store(stable_ds)
    current = mf.read_manifest(store, naming.latest_version(store, base).path)
    m = current.manifest
    kinds = set()
    same_bytes = 0
    for frag in m.fragments:
        seq = rowids_pb2.RowIdSequence.FromString(frag.inline_row_ids)
        for seg in seq.segments:
            kinds.add(seg.WhichOneof("segment"))
            values = ri.decode_segment(seg)
            # our chooser picks what pylance picked
            same_bytes += ri.encode_segment(values).SerializeToString() == seg.SerializeToString()
        created = ri.read_fragment_versions(store, base, frag, "created")
        updated = ri.read_fragment_versions(store, base, frag, "updated")
        assert created.size == updated.size == frag.physical_rows
        assert set(created.tolist()) <= set(range(1, m.version + 1))
    assert {ri.RANGE, ri.RANGE_WITH_HOLES, ri.RANGE_WITH_BITMAP} <= kinds
    assert same_bytes == sum(
        len(rowids_pb2.RowIdSequence.FromString(f.inline_row_ids).segments) for f in m.fragments
    )
    ours = _row_ids_by_fragment(store, base, m)
    theirs = lance.dataset(stable_ds).to_table(with_row_id=True)["_rowid"].to_numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert m.next_row_id == 600


@pytest.mark.parametrize("kind", [ri.ARRAY, ri.SORTED_ARRAY, ri.RANGE_WITH_HOLES, ri.RANGE_WITH_BITMAP])
def test_pylance_reads_our_row_ids(stable_ds, tmp_path, kind):
    uri = str(tmp_path / "ds")
    shutil.copytree(stable_ds, uri)
    store, base = local_store(uri)
    current = mf.read_manifest(store, naming.latest_version(store, base).path)
    before = lance.dataset(uri).to_table(with_row_id=True)

    def reencode(m):
        for frag in m.fragments:
            # one segment of the forced kind per fragment (the compacted fragment has gaps)
            values = ri.decode_row_ids(frag.inline_row_ids)
            if kind == ri.ARRAY:
                values = values[::-1]
            seq = rowids_pb2.RowIdSequence()
            seq.segments.append(ri.encode_segment(values, kind))
            frag.inline_row_ids = seq.SerializeToString()
            n = frag.physical_rows
            versions = ri.decode_version_sequence(frag.inline_created_at_versions)
            frag.inline_created_at_versions = ri.encode_version_sequence(versions)
            assert versions.size == n

    commit_rewritten(store, base, current, reencode)
    after = lance.dataset(uri).to_table(with_row_id=True)
    if kind == ri.ARRAY:  # row ids reversed within every fragment
        expected = []
        for frag in current.manifest.fragments:
            values = ri.decode_row_ids(frag.inline_row_ids)[::-1]
            if frag.HasField("deletion_file"):
                values = np.delete(values, dl.read_deletion_offsets(store, base, frag.id, frag.deletion_file))
            expected.append(values)
        np.testing.assert_array_equal(after["_rowid"].to_numpy(), np.concatenate(expected))
    else:
        assert after.equals(before)
    assert after["id"].equals(before["id"])


# --- addresses -------------------------------------------------------------------------------
def test_addresses():
    addr = ad.row_addresses(3, np.array([0, 1, 7]))
    assert addr.dtype == np.uint64 and addr.tolist() == [3 << 32, (3 << 32) + 1, (3 << 32) + 7]
    frags, offs = ad.split_row_addresses(addr)
    assert frags.tolist() == [3, 3, 3] and offs.tolist() == [0, 1, 7]
    assert ad.row_address(2**32 - 1, 2**32 - 1) == 2**64 - 1
    assert ad.row_addresses([1, 2], [5, 6]).tolist() == [(1 << 32) | 5, (2 << 32) | 6]
    groups = ad.group_by_fragment([(2 << 32) | 9, (0 << 32) | 4, (2 << 32) | 1, (2 << 32) | 9])
    assert list(groups) == [0, 2] and groups[2].tolist() == [1, 9] and groups[0].dtype == np.uint32
    assert ad.group_by_fragment([]) == {}
    assert ad.fragment_range(5, 3).tolist() == [(5 << 32) + i for i in range(3)]
    assert ad.fragment_ids_of(addr).tolist() == [3, 3, 3]
    assert ad.offsets_of(addr).tolist() == [0, 1, 7]
    with pytest.raises(ValueError):
        ad.row_addresses(2**32, 0)
    with pytest.raises(ValueError):
        ad.row_addresses(0, -1)


def test_addresses_match_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(int_table(0, 30), uri, data_storage_version="2.0", max_rows_per_file=10)
    ds = lance.dataset(uri)
    ds.delete("id = 11")
    got = lance.dataset(uri).to_table(with_row_address=True)["_rowaddr"].to_numpy()
    frags = np.repeat([0, 1, 2], 10)
    offs = np.tile(np.arange(10), 3)
    expected = np.delete(ad.row_addresses(frags, offs), 11)
    np.testing.assert_array_equal(got, expected)
