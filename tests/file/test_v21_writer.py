"""Unit tests of the Lance 2.1 / 2.2 writer (lance_ops.format.v2_1.encode and helpers).

These check the pieces against the reverse-engineered decoders (v2_1.compression.bitpack_decode, v2_1.compression.decode,
v2_1.compression.fsst_decode) and the file-level contract (footer version, leaf-only columns, page priority, field
metadata validation) without pylance; interop with pylance is in test_v21_writer_interop.py.
"""
from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pytest

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops._proto import file2_pb2
from lance_ops.format.v2_1.compression import bitpack as bp
from lance_ops.format.v2_1.compression import fsst
from lance_ops.format.v2_1.layout import pages as lay
from lance_ops.format.v2_1.layout import shred as sh
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.v2_1.compression import bitpack_decode as ubp
from lance_ops.format.v2_1.fields import leaf_field_ids
from lance_ops.format.v2_1.compression.decode import _unpack_inline, _unpack_out_of_line, decode_block, decode_miniblock
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable
from lance_ops.errors import SchemaMismatchError, UnsupportedError
from lance_ops.file import LanceFileWriter
from lance_ops.format.container import PAGE_LAYOUT_URL
from lance_ops.format.v2_1.reader import LanceFileReaderV21
from lance_ops.schema import to_lance_fields
from tests.file.type_matrix import assert_tables_equal, make_table

VERSIONS = ("2.1", "2.2")


# --------------------------------------------------------------------------------------------
# FastLanes bit-packing
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t_bits", [8, 16, 32, 64])
def test_pack_blocks_inverts_the_readers_unpack(t_bits):
    rng = np.random.default_rng(t_bits)
    for width in range(1, t_bits + 1):
        mask = (1 << width) - 1
        vals = (rng.integers(0, 2**63, 2048, dtype=np.uint64) & np.uint64(mask)).astype(bp.UINT_TYPES[t_bits])
        packed = bp.pack_blocks(vals, t_bits, width)
        assert len(packed) == 2 * 1024 * width // t_bits
        np.testing.assert_array_equal(ubp.unpack_blocks(packed, t_bits, width), vals)


@pytest.mark.parametrize("t_bits", [8, 16, 32, 64])
@pytest.mark.parametrize("n", [1, 1000, 1024, 3001])
def test_inline_and_out_of_line_framing(t_bits, n):
    rng = np.random.default_rng(n)
    vals = rng.integers(0, 97, n).astype(bp.UINT_TYPES[t_bits])
    data, sizes = bp.inline_pack(vals, t_bits)
    assert sum(sizes) == len(data) and len(sizes) == (n + 1023) // 1024
    np.testing.assert_array_equal(_unpack_inline(data.tobytes(), t_bits, n), vals)
    for width in (7, 9):
        ool = bp.out_of_line_pack(vals, t_bits, width) if width <= t_bits else None
        if ool is None:
            continue
        assert len(ool) == bp.out_of_line_size(n, t_bits, width)
        words = np.frombuffer(ool.tobytes(), dtype=bp.UINT_TYPES[t_bits])
        np.testing.assert_array_equal(_unpack_out_of_line(words, t_bits, width, n), vals)


def test_block_widths():
    v = np.zeros(2500, np.uint32)
    v[5] = 1
    v[1500] = 1000
    np.testing.assert_array_equal(bp.block_widths(v), [1, 10, 0])
    assert bp.bit_width(np.array([0, 255], np.uint16)) == 8


# --------------------------------------------------------------------------------------------
# value compression (decoded with the reader's decoders)
# --------------------------------------------------------------------------------------------
def _decode_all(mb: ev.MiniBlocks):
    from lance_ops.format.v2_1.compression.decode import Vals

    return Vals.concat([decode_miniblock(mb.encoding, bufs, c) for bufs, c in zip(mb.bufs, mb.counts)])


def test_miniblock_compressors_round_trip():
    rng = np.random.default_rng(0)
    ints = rng.integers(0, 5000, 10_000).astype(np.uint32)
    for mb in (ev.bitpack_miniblock(ints, 32), ev.flat_miniblock(ints.view(np.uint8), len(ints), 32)):
        assert all(c & (c - 1) == 0 for c in mb.counts[:-1])  # power-of-two chunks
        np.testing.assert_array_equal(_decode_all(mb).as_uint(32), ints)
    runs = np.repeat(np.arange(40, dtype=np.uint64), 333)
    mb = ev.rle_miniblock(runs, 64)
    assert mb.encoding.WhichOneof("compression") == "rle"
    np.testing.assert_array_equal(_decode_all(mb).as_uint(64), runs)
    strs = pa.array([("w%d" % i) * (i % 9) for i in range(3000)])
    offs = np.frombuffer(strs.buffers()[1], np.int32, count=3001).astype(np.int64)
    data = np.frombuffer(strs.buffers()[2], np.uint8)
    mb = ev.variable_miniblock(offs, data, 32)
    got = _decode_all(mb)
    np.testing.assert_array_equal(got.offsets, offs)
    assert got.data.tobytes() == data[: offs[-1]].tobytes()
    assert all(len(b[0]) <= 8 * 1024 for b in mb.bufs)


def test_fsl_miniblock_with_item_validity():
    items = np.arange(40, dtype=np.float32)
    valid = np.ones(40, bool)
    valid[[3, 17]] = False
    mb = ev.fsl_miniblock(items.view(np.uint8), 10, 32, [4], [valid])
    got = _decode_all(mb)
    assert got.items_per_value == 4
    np.testing.assert_array_equal(got.item_validity, valid)
    np.testing.assert_array_equal(np.ascontiguousarray(got.data).view(np.float32).reshape(-1), items)


def test_general_wrap_and_dictionary_blocks():
    vals = np.tile(np.arange(100, dtype=np.uint64), 100)
    for scheme in ("lz4", "zstd"):
        mb = ev.general_wrap(ev.flat_miniblock(vals.view(np.uint8), len(vals), 64), scheme, None)
        assert mb.encoding.WhichOneof("compression") == "general"
        np.testing.assert_array_equal(_decode_all(mb).as_uint(64), vals)
    offs = np.array([0, 3, 8, 8, 12])
    raw = ev.variable_block(offs, np.frombuffer(b"redgreenblue", np.uint8), 32)
    got = decode_block(ev.enc_variable(32), raw, 4)
    assert got.data.tobytes() == b"redgreenblue" and list(got.offsets) == [0, 3, 8, 8, 12]


def test_fsst_round_trip_with_the_readers_decoder():
    words = [("lance columnar %d " % (i % 97)) * (1 + i % 5) for i in range(5000)]
    arr = pa.array(words)
    offs = np.frombuffer(arr.buffers()[1], np.int32, count=len(arr) + 1).astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    table, new_offs, cdata = fsst.compress(offs, data)
    assert len(table) == fsst.TABLE_SIZE
    assert len(cdata) < len(data) / 2
    o2, d2 = FsstTable(table).decode(cdata, new_offs)
    np.testing.assert_array_equal(o2, offs)
    assert d2.tobytes() == data.tobytes()
    # below 32 KiB the encoder switch is off and the strings are stored as they are
    table, o3, d3 = fsst.compress(offs[:11], data)
    assert int.from_bytes(table[:8], "little") == fsst.MAGIC
    assert d3.tobytes() == data[: offs[10]].tobytes()


# --------------------------------------------------------------------------------------------
# repetition / definition levels
# --------------------------------------------------------------------------------------------
def _shred(arr: pa.Array, leaf_index: int = 0) -> sh.Shredded:
    f = pa.field("a", arr.type)
    path, _ = sh.leaf_fields(f)[leaf_index]
    return sh.shred_leaf(arr, path)


def test_levels_of_a_list():
    s = _shred(pa.array([[1, 2], None, [], [5]], pa.list_(pa.int16())))
    assert s.layers == [pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULL_AND_EMPTY_LIST]
    assert s.rep.tolist() == [1, 0, 1, 1, 1]
    assert s.defs.tolist() == [0, 0, 1, 2, 0]
    assert s.values.to_pylist() == [1, 2, 5]
    assert s.max_visible_def == 0


def test_levels_of_nullable_structs_push_nulls_down():
    arr = pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}],
                   pa.struct([("x", pa.int32()), ("y", pa.string())]))
    x, y = _shred(arr, 0), _shred(arr, 1)
    assert x.layers == [pb.REPDEF_NULLABLE_ITEM, pb.REPDEF_NULLABLE_ITEM]
    assert x.defs.tolist() == [0, 2, 1]
    # y has no nulls of its own, but the struct's null is pushed down into it (as upstream)
    assert y.layers == [pb.REPDEF_NULLABLE_ITEM, pb.REPDEF_NULLABLE_ITEM]
    assert y.defs.tolist() == [0, 2, 0]
    assert y.valid.tolist() == [True, False, True]


def test_levels_of_nested_lists_and_structs():
    t = pa.list_(pa.struct([("l", pa.list_(pa.int8()))]))
    arr = pa.array([[{"l": [1]}, None, {"l": []}], None, [], [{"l": None}]], t)
    s = _shred(arr)
    assert s.max_rep == 2
    assert s.rep.tolist() == [2, 1, 1, 2, 2, 2]
    # layers (innermost first): item, inner list (null+empty), struct (null), outer list (null+empty)
    assert s.layers == [pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULL_AND_EMPTY_LIST, pb.REPDEF_NULLABLE_ITEM,
                        pb.REPDEF_NULL_AND_EMPTY_LIST]
    assert s.defs.tolist() == [0, 3, 2, 4, 5, 1]
    assert s.values.to_pylist() == [1]


def test_null_list_garbage_is_dropped():
    offsets = pa.array([0, 2, 4, 5], pa.int32())
    arr = pa.ListArray.from_arrays(offsets, pa.array([1, 2, 3, 4, 5]), mask=pa.array([False, True, False]))
    s = _shred(arr)
    assert s.values.to_pylist() == [1, 2, 5]
    assert s.rep.tolist() == [1, 0, 1, 1]


def test_repetition_index():
    chunks = [np.array([1, 0, 1, 0, 0]), np.array([0, 0, 1]), np.array([1, 0])]
    ri = lay.rep_index(chunks, 1)
    # chunk 0: row 0 ends, row 1 continues (3 trailing levels); chunk 1: row 1 ends, row 2 starts
    # and ends at the chunk boundary (chunk 2 starts a row); chunk 2: the last row ends
    assert ri.tolist() == [[1, 3], [2, 0], [1, 0]]


def test_level_codec_choice():
    assert lay.choose_level_codec(np.array([1, 2, 0, 1], np.uint16)).kind == "flat"
    ones = np.ones(5000, np.uint16)
    ones[::3] = 0
    assert lay.choose_level_codec(ones, "2.1").kind == "ool"
    runs = np.repeat(np.array([0, 1], np.uint16), 2500)
    assert lay.choose_level_codec(runs, "2.2").kind == "rle"
    assert lay.choose_level_codec(runs, "2.1").kind == "ool"
    assert decode_block(ev.enc_rle(16), lay.rle_block(runs), 5000).as_uint(16).tolist() == runs.tolist()


# --------------------------------------------------------------------------------------------
# the file writer
# --------------------------------------------------------------------------------------------
def _footer(path):
    with open(path, "rb") as f:
        data = f.read()
    return data, struct.unpack("<QQQIIHH4s", data[-40:])


@pytest.mark.parametrize("version", VERSIONS)
def test_footer_leaf_columns_and_priorities(tmp_path, version):
    t = pa.table({"x": pa.array(range(10), pa.int32()), "y": pa.array([[1.0]] * 10),
                  "z": pa.array([{"a": i, "b": str(i)} for i in range(10)])})
    path = tmp_path / "f.lance"
    with LanceFileWriter(str(path), t.schema, version=version) as w:
        w.write_batch(t.slice(0, 4))
        w.write_batch(t.slice(4))
    data, footer = _footer(path)
    assert footer[5:7] == (2, int(version[-1]))
    assert footer[4] == 4  # x, y.item, z.a, z.b
    assert w.num_columns == 4
    for col in w.pages:
        for p in col:
            assert p.row_start == 0 or True
    cmo = footer[1]
    pos, size = struct.unpack_from("<QQ", data, cmo)
    meta = file2_pb2.ColumnMetadata()
    meta.ParseFromString(data[pos:pos + size])
    from google.protobuf import any_pb2

    a = any_pb2.Any()
    a.ParseFromString(meta.pages[0].encoding.direct.encoding)
    assert a.type_url == PAGE_LAYOUT_URL
    assert_tables_equal(LanceFileReaderV21(str(path)).read_all(), t)


def test_page_priority_is_the_first_row(tmp_path):
    t = pa.table({"x": pa.array(np.arange(5000, dtype=np.int64))})
    path = tmp_path / "p.lance"
    with LanceFileWriter(str(path), t.schema, version="2.2", data_cache_bytes=8 * 1024) as w:
        for b in t.to_batches(max_chunksize=1000):
            w.write_batch(b)
    data, footer = _footer(path)
    pos, size = struct.unpack_from("<QQ", data, footer[1])
    meta = file2_pb2.ColumnMetadata()
    meta.ParseFromString(data[pos:pos + size])
    starts = np.cumsum([0] + [p.length for p in meta.pages])[:-1]
    assert len(meta.pages) > 1
    assert [p.priority for p in meta.pages] == starts.tolist()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", ["nulls", "no_nulls", "all_null"])
def test_our_reader_reads_our_files(tmp_path, version, mode):
    t = make_table(1000, seed=2, null_fraction=0.0 if mode == "no_nulls" else 0.2, all_null=mode == "all_null")
    path = str(tmp_path / "m.lance")
    with LanceFileWriter(path, t.schema, version=version) as w:
        w.write_batch(t)
    r = LanceFileReaderV21(path)
    assert r.version == version
    assert_tables_equal(r.read_all(), t)
    idx = np.array([0, 999, 500, 3])
    assert_tables_equal(r.take_rows(idx), t.take(idx))


def test_unsupported_versions_and_metadata_are_refused_before_writing(tmp_path):
    path = tmp_path / "no.lance"
    t = pa.table({"a": pa.array([1, 2])})
    with pytest.raises(UnsupportedError):
        LanceFileWriter(str(path), t.schema, version="2.3")
    bad = [
        pa.field("a", pa.int64(), metadata={"lance-encoding:compression": "brotli"}),
        pa.field("a", pa.int64(), metadata={"lance-encoding:structural-encoding": "zipped"}),
        pa.field("a", pa.binary(), metadata={"lance-encoding:blob": "true"}),
        pa.field("a", pa.int64(), metadata={"lance-encoding:compression-level": "high"}),
        pa.field("a", pa.struct([("s", pa.string())]), metadata={"lance-encoding:packed": "true"}),
    ]
    for f in bad:
        with pytest.raises(UnsupportedError):
            LanceFileWriter(str(path), pa.schema([f]), version="2.2")
        assert not os.path.exists(path)


def test_non_nullable_field_with_nulls_is_refused(tmp_path):
    schema = pa.schema([pa.field("a", pa.int32(), nullable=False)])
    w = LanceFileWriter(str(tmp_path / "n.lance"), schema, version="2.2")
    with pytest.raises(SchemaMismatchError):
        w.write_batch(pa.record_batch([pa.array([1, None], pa.int32())], schema=schema))
    w.abort()


def test_leaf_field_ids():
    schema = pa.schema([pa.field("x", pa.int32()), pa.field("y", pa.list_(pa.float32())),
                        pa.field("z", pa.struct([("a", pa.int8())])),
                        pa.field("p", pa.struct([("q", pa.int8())]), metadata={"lance-encoding:packed": "true"}),
                        pa.field("v", pa.list_(pa.field("item", pa.float32()), 4))])
    assert leaf_field_ids(to_lance_fields(schema)) == [0, 2, 4, 5, 7]


def test_packed_struct_children_cannot_be_null(tmp_path):
    st = pa.struct([("x", pa.int32()), ("y", pa.float64())])
    schema = pa.schema([pa.field("a", st, metadata={"lance-encoding:packed": "true"})])
    w = LanceFileWriter(str(tmp_path / "p.lance"), schema, version="2.2")
    with pytest.raises(UnsupportedError, match="packed struct"):
        w.write_batch(pa.table([pa.array([{"x": None, "y": 1.0}], st)], schema=schema))
    # a null struct (children null below it or not) is fine
    ok = pa.StructArray.from_arrays([pa.array([1, None], pa.int32()), pa.array([1.0, 2.0])], fields=list(st),
                                    mask=pa.array([False, True]))
    w.write_batch(pa.table([ok], schema=schema))
    w.close()
    assert_tables_equal(LanceFileReaderV21(str(tmp_path / "p.lance")).read_all(), pa.table([ok], schema=schema))
