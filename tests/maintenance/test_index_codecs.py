"""Row-address codecs (RowAddrTreeMap, RoaringTreemap) and the index-file helpers of index_remap.

Round trips by hypothesis; byte equality with every bitmap, posting list and null bitmap pylance
14.0.2 writes (BITMAP, LABEL_LIST, NGRAM, ZONEMAP, BLOOMFILTER) at storage 2.0 and 2.2.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_ops.errors import CorruptFileError
from lance_ops.format.version import FileVersion
from lance_ops.io import open_store
from lance_ops.maintenance.index_remap import AddressMap, codecs
from tests.maintenance.index_remap_helpers import make_table
from tests.maintenance.test_index_remap_core import groups_strategy

lance = pytest.importorskip("lance")

_addresses = st.lists(
    st.tuples(st.integers(0, 6), st.one_of(st.integers(0, 70_000), st.integers(2**32 - 3, 2**32 - 1))),
    max_size=300,
).map(lambda pairs: np.unique(np.array([(f << 32) | o for f, o in pairs], dtype=np.uint64)))


def _dense(frag: int, start: int, stop: int) -> np.ndarray:
    return (np.uint64(frag) << np.uint64(32)) | np.arange(start, stop, dtype=np.uint64)


@settings(max_examples=150, deadline=None)
@given(_addresses, st.sets(st.integers(0, 8), max_size=3))
def test_row_addr_treemap_round_trip(addresses, whole):
    whole_arr = np.array(sorted(whole), dtype=np.uint32)
    data = codecs.encode_row_addr_treemap(addresses, whole_arr)
    back = codecs.decode_row_addr_treemap(data)
    expected = addresses[~np.isin(addresses >> np.uint64(32), whole_arr.astype(np.uint64))]
    assert back.addresses.tolist() == expected.tolist()
    assert back.whole_fragments.tolist() == whole_arr.tolist()
    assert codecs.encode_row_addr_treemap(back.addresses, back.whole_fragments) == data


@settings(max_examples=150, deadline=None)
@given(_addresses)
def test_roaring_treemap_round_trip(addresses):
    data = codecs.encode_roaring_treemap(addresses)
    assert codecs.decode_roaring_treemap(data).tolist() == addresses.tolist()
    assert int.from_bytes(data[:8], "little") == len(np.unique(addresses >> np.uint64(32)))


def test_dense_containers_and_layout():
    """Bitmap containers (> 4096 values) and the documented headers."""
    dense = np.concatenate([_dense(0, 0, 10_000), _dense(3, 5, 7)])
    data = codecs.encode_row_addr_treemap(dense)
    assert data[:4] == (2).to_bytes(4, "little")
    assert data[4:8] == (0).to_bytes(4, "little")  # fragment 0 first
    assert codecs.decode_row_addr_treemap(data).addresses.tolist() == dense.tolist()
    tree = codecs.encode_roaring_treemap(dense)
    assert codecs.decode_roaring_treemap(tree).tolist() == dense.tolist()


def test_run_containers_decode():
    """Bitmaps written with run containers (roaring-rs may emit them) decode; their size is known."""
    import pyroaring

    bm = pyroaring.BitMap(range(0, 5000))
    bm.run_optimize()
    body = bm.serialize()
    assert body[:2] == b";0"  # the run cookie
    data = (1).to_bytes(8, "little") + (2).to_bytes(4, "little") + body
    data += (3).to_bytes(4, "little") + pyroaring.BitMap([1, 9], optimize=False).serialize()
    tree = codecs.decode_roaring_treemap(data + b"")
    assert tree.tolist() == _dense(2, 0, 5000).tolist()
    two = (2).to_bytes(8, "little") + data[8:]
    assert codecs.decode_roaring_treemap(two).tolist() == _dense(2, 0, 5000).tolist() + [(3 << 32) | 1, (3 << 32) | 9]


def test_truncated_input_is_refused():
    data = codecs.encode_row_addr_treemap(_dense(1, 0, 10))
    with pytest.raises(CorruptFileError):
        codecs.decode_row_addr_treemap(data[:-3])
    with pytest.raises(CorruptFileError):
        codecs.decode_roaring_treemap(b"\x01\x00")


def test_remap_address_sets_expands_whole_fragments():
    amap = AddressMap.from_groups([([(1, np.array([0, 2], np.uint64))], [(7, 2)])])
    sets = [codecs.RowAddrSet(np.array([(1 << 32) | 1, (1 << 32) | 2, (4 << 32) | 3], np.uint64)),
            codecs.RowAddrSet(codecs.EMPTY, np.array([1, 4], np.uint32))]
    plain, whole = codecs.remap_address_sets(sets, amap)
    assert plain.addresses.tolist() == [(4 << 32) | 3, (7 << 32) | 1]
    assert whole.addresses.tolist() == [7 << 32, (7 << 32) | 1] and whole.whole_fragments.tolist() == [4]


@pytest.mark.parametrize("storage", ["2.0", "2.2"])
def test_bytes_equal_what_pylance_writes(tmp_path, storage):
    """Every row-address set in pylance's index files decodes and re-encodes to the same bytes."""
    from lance.indices import IndexConfig

    ds = lance.write_dataset(make_table(), str(tmp_path / "ds"), max_rows_per_file=700,
                             data_storage_version=storage)
    ds.delete("id % 7 = 1")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    ds.create_scalar_index("text", "NGRAM")
    ds.create_scalar_index("x", IndexConfig(index_type="zonemap", parameters={"rows_per_zone": 256}))
    ds.create_scalar_index("s", "BLOOMFILTER")
    store, base = open_store(str(tmp_path / "ds"))
    checked = {"bitmaps": 0, "posting_list": 0, "buffers": 0}
    for folder in (tmp_path / "ds" / "_indices").iterdir():
        for file in folder.iterdir():
            f = codecs.read_index_file(store, base, folder.name, file.name)
            assert f.version is (FileVersion.V2_0 if storage == "2.0" else FileVersion.V2_2)
            if "bitmaps" in f.table.column_names:
                for data in f.table.column("bitmaps").to_pylist():
                    s = codecs.decode_row_addr_treemap(data)
                    assert codecs.encode_row_addr_treemap(s.addresses, s.whole_fragments) == data
                    checked["bitmaps"] += 1
            if "posting_list" in f.table.column_names:
                for data in f.table.column("posting_list").to_pylist():
                    assert codecs.encode_roaring_treemap(codecs.decode_roaring_treemap(data)) == data
                    checked["posting_list"] += 1
            for key in ("lance:label_list_nulls", "null_bitmap"):
                data = f.buffer_for(key)
                if data is not None:
                    s = codecs.decode_row_addr_treemap(data)
                    assert codecs.encode_row_addr_treemap(s.addresses, s.whole_fragments) == data
                    checked["buffers"] += 1
    assert checked["bitmaps"] > 10 and checked["posting_list"] > 20 and checked["buffers"] == 3


@pytest.mark.parametrize("storage", ["2.0", "2.1", "2.2"])
def test_write_index_file_is_read_by_pylance(tmp_path, storage):
    """An index file written by the helper: pylance reads its table, metadata and named buffer."""
    from lance.file import LanceFileReader

    store, base = open_store(str(tmp_path))
    table = pa.table({"keys": pa.array(["a", None, "c"]), "bitmaps": pa.array([b"1", b"", b"33"])})
    name, size = codecs.write_index_file(store, base, "u", "f.lance", table,
                                         version=FileVersion.parse(storage), metadata={"k": "v"},
                                         buffers={"lance:label_list_nulls": b"\x00\x00\x00\x00"})
    reader = LanceFileReader(str(tmp_path / "_indices" / "u" / "f.lance"))
    assert (name, size) == ("f.lance", (tmp_path / "_indices" / "u" / "f.lance").stat().st_size)
    assert reader.read_all().to_table().equals(table)
    meta = reader.metadata()
    assert meta.schema.metadata == {b"k": b"v", b"lance:label_list_nulls": b"1"}
    assert (meta.major_version, meta.minor_version) == FileVersion.parse(storage).footer
    assert bytes(reader.read_global_buffer(1)) == b"\x00\x00\x00\x00"


def test_malformed_bitmap_body_is_refused():
    data = bytearray(codecs.encode_row_addr_treemap(np.array([5, 6, 7], np.uint64)))
    data[12:14] = b"\xff\xff"  # the portable cookie
    with pytest.raises(CorruptFileError, match="malformed row-address bitmap"):
        codecs.decode_row_addr_treemap(bytes(data))
