"""Unit tests of the 2.0 reader and page decoders: API surface, every decoder on hand-built
encodings (including ones pylance 14 never writes at 2.0: bitpacked, constant, fixed-size binary,
compressed fixed-width values), FSST decompression against a reference, and the partial-read
paths checked against the full-page paths.
"""
from __future__ import annotations

import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops._proto import file_pb2
from lance_ops.format.v2_0 import decode as dec
from lance_ops.errors import CorruptFileError
from lance_ops.format.v2_0 import node_reads
from lance_ops.format.v2_0.reader import FileMetadata, LanceFileReader
from tests.file.test_bad_input import rewrite_file, write_pylance
from tests.file.type_matrix import assert_tables_equal, make_table

lance = pytest.importorskip("lance")
import lance.file  # noqa: E402

CTX = dec.DecodeContext("/some/file.lance", "column 0 ('x') page 0")


# --------------------------------------------------------------------------------------------
# helpers to build encodings
# --------------------------------------------------------------------------------------------
def flat(bits: int, index: int = 0, compression: str | None = None) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.flat.bits_per_value = bits
    enc.flat.buffer.buffer_index = index
    if compression:
        enc.flat.compression.scheme = compression
    return enc


def no_nulls(values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.nullable.no_nulls.values.CopyFrom(values)
    return enc


def some_nulls(validity_index: int, values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.nullable.some_nulls.validity.CopyFrom(flat(1, validity_index))
    enc.nullable.some_nulls.values.CopyFrom(values)
    return enc


def binary(indices_index: int, bytes_index: int, adjustment: int) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.binary.indices.CopyFrom(no_nulls(flat(64, indices_index)))
    enc.binary.bytes.CopyFrom(flat(8, bytes_index))
    enc.binary.null_adjustment = adjustment
    return enc


def bufs(*payloads: bytes) -> dec.PageBuffers:
    return dec.PageBuffers({(0, i): pa.py_buffer(p) for i, p in enumerate(payloads)})


def decode(enc, n, dtype, *payloads, full: bool = True) -> pa.Array:
    arr = dec.decode_array(enc, n, dtype, bufs(*payloads), CTX)
    arr.validate(full=full)
    return arr


def binary_payload(values: list) -> tuple[bytes, bytes, int]:
    """(u64 ends without leading zero, bytes, null_adjustment) as the 2.0 writer lays them out."""
    data = b"".join(v for v in values if v is not None)
    adj = len(data) + 1
    ends, pos = [], 0
    for v in values:
        if v is None:
            ends.append(pos + adj)
        else:
            pos += len(v)
            ends.append(pos)
    return np.array(ends, dtype="<u8").tobytes(), data, adj


# --------------------------------------------------------------------------------------------
# decoders
# --------------------------------------------------------------------------------------------
def test_flat_and_nullable():
    values = np.array([1, -2, 3, 4], dtype="<i4")
    assert decode(no_nulls(flat(32)), 4, pa.int32(), values.tobytes()).to_pylist() == [1, -2, 3, 4]
    got = decode(some_nulls(0, flat(32, 1)), 4, pa.int32(), bytes([0b1101]), values.tobytes())
    assert got.to_pylist() == [1, None, 3, 4]
    enc = pb.ArrayEncoding()
    enc.nullable.all_nulls.SetInParent()
    assert decode(enc, 3, pa.float64()).to_pylist() == [None] * 3
    bools = decode(no_nulls(flat(1)), 10, pa.bool_(), bytes([0b10100101, 0b10]))
    assert bools.to_pylist() == [True, False, True, False, False, True, False, True, False, True]


@pytest.mark.parametrize("dtype", [pa.float16(), pa.decimal128(20, 2), pa.decimal256(40, 3), pa.binary(3),
                                   pa.timestamp("us", "UTC"), pa.time32("ms"), pa.date64()])
def test_flat_fixed_width_types(dtype):
    width = dtype.bit_width // 8
    payload = bytes(range(256))[: 5 * width]
    got = decode(no_nulls(flat(dtype.bit_width)), 5, dtype, payload, full=False)
    assert got.type == dtype and len(got) == 5
    assert got.buffers()[1].to_pybytes()[: 5 * width] == payload


@pytest.mark.parametrize("scheme", ["zstd", "lz4"])
def test_compressed_flat_values(scheme):
    values = np.arange(1000, dtype="<i8") % 7
    raw = values.tobytes()
    codec = pa.Codec("zstd" if scheme == "zstd" else "lz4_raw")
    body = codec.compress(raw, asbytes=True)
    header = struct.pack("<Q", len(raw)) if scheme == "zstd" else struct.pack("<I", len(raw))
    got = decode(no_nulls(flat(64, 0, scheme)), 1000, pa.int64(), header + body)
    assert got.to_numpy().tolist() == values.tolist()
    with pytest.raises(CorruptFileError, match="claims"):
        decode(no_nulls(flat(64, 0, scheme)), 10, pa.int64(), header + body)


def test_binary_with_nulls_and_large_offsets():
    values = [b"a", None, b"ccc", b"", None, "\u20ac".encode()]
    ends, data, adj = binary_payload(values)
    for dtype in (pa.binary(), pa.large_binary()):
        assert decode(binary(0, 1, adj), 6, dtype, ends, data).to_pylist() == values
    got = decode(binary(0, 1, adj), 6, pa.string(), ends, data)
    assert got.to_pylist() == ["a", None, "ccc", "", None, "\u20ac"]
    assert got.type == pa.string() and got.buffers()[1].size == 7 * 4  # int32 offsets
    assert decode(binary(0, 1, adj), 6, pa.large_string(), ends, data).buffers()[1].size == 7 * 8


def test_binary_wrapped_in_some_nulls():
    ends, data, adj = binary_payload([b"x", b"yy", b"z"])
    enc = pb.ArrayEncoding()
    enc.nullable.some_nulls.validity.CopyFrom(flat(1, 2))
    enc.nullable.some_nulls.values.CopyFrom(binary(0, 1, adj))
    assert decode(enc, 3, pa.binary(), ends, data, bytes([0b101])).to_pylist() == [b"x", None, b"z"]


def test_dictionary_plain_output_zero_is_null():
    ends, data, adj = binary_payload([b"red", b"green", b""])
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(no_nulls(flat(8, 0)))
    enc.dictionary.items.CopyFrom(binary(1, 2, adj))
    enc.dictionary.num_dictionary_items = 3
    idx = bytes([1, 0, 2, 3, 1])
    assert decode(enc, 5, pa.string(), idx, ends, data).to_pylist() == ["red", None, "green", "", "red"]
    with pytest.raises(CorruptFileError, match="out of range"):
        decode(enc, 2, pa.string(), bytes([1, 4]), ends, data)


def test_dictionary_arrow_output_with_null_item():
    ends, data, adj = binary_payload([b"x", b"yy", None])
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(no_nulls(flat(16, 0)))
    enc.dictionary.items.CopyFrom(binary(1, 2, adj))
    enc.dictionary.num_dictionary_items = 3
    dtype = pa.dictionary(pa.int16(), pa.string())
    got = decode(enc, 4, dtype, np.array([1, 2, 0, 1], "<i2").tobytes(), ends, data)
    assert got.type == dtype
    assert got.to_pylist() == ["yy", None, "x", "yy"]
    assert got.dictionary.null_count == 0  # null items become null indices (dictionaries unify)


def test_fixed_size_list_and_nested():
    dtype = pa.list_(pa.float32(), 2)
    enc = pb.ArrayEncoding()
    enc.fixed_size_list.dimension = 2
    enc.fixed_size_list.items.CopyFrom(no_nulls(flat(32)))
    payload = np.arange(6, dtype="<f4").tobytes()
    got = decode(some_nulls(1, enc), 3, dtype, payload, bytes([0b110]))
    assert got.to_pylist() == [None, [2.0, 3.0], [4.0, 5.0]]
    with pytest.raises(CorruptFileError, match="dimension"):
        decode(enc, 3, pa.list_(pa.float32(), 3), payload)


@pytest.mark.parametrize("bits,signed", [(1, False), (3, False), (7, True), (12, True), (17, False), (33, True), (64, False)])
def test_bitpacked(bits, signed):
    rng = np.random.default_rng(bits)
    n = 77
    if signed:
        values = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), n)
    else:
        values = rng.integers(0, 2**bits - 1 if bits < 64 else 2**63, n, dtype=np.uint64)
    mask = (1 << bits) - 1
    stream = 0
    for i, v in enumerate(values.tolist()):
        stream |= (int(v) & mask) << (i * bits)
    payload = stream.to_bytes((n * bits + 7) // 8, "little")
    enc = pb.ArrayEncoding()
    enc.bitpacked.compressed_bits_per_value = bits
    enc.bitpacked.uncompressed_bits_per_value = 64
    enc.bitpacked.signed = signed
    dtype = pa.int64() if signed else pa.uint64()
    assert decode(no_nulls(enc), n, dtype, payload).to_pylist() == values.tolist()


def test_constant():
    enc = pb.ArrayEncoding()
    enc.constant.value = struct.pack("<i", -7)
    assert decode(enc, 4, pa.int32()).to_pylist() == [-7] * 4
    enc.constant.value = b"ab"
    assert decode(enc, 3, pa.string()).to_pylist() == ["ab"] * 3
    enc.constant.value = b"\x01"
    assert decode(enc, 2, pa.bool_()).to_pylist() == [True, True]


def test_fixed_size_binary_encoding_to_strings():
    enc = pb.ArrayEncoding()
    enc.fixed_size_binary.bytes.CopyFrom(flat(24))
    enc.fixed_size_binary.byte_width = 3
    assert decode(enc, 3, pa.string(), b"abcdefghi").to_pylist() == ["abc", "def", "ghi"]
    assert decode(enc, 2, pa.large_binary(), b"abcdef").to_pylist() == [b"abc", b"def"]


def test_packed_struct():
    dtype = pa.struct([("a", pa.int32()), ("b", pa.float64()), ("c", pa.uint8())])
    enc = pb.ArrayEncoding()
    for bits in (32, 64, 8):
        enc.packed_struct.inner.add().CopyFrom(no_nulls(flat(bits)))
    rows = b"".join(struct.pack("<idB", i, i / 2, i + 100) for i in range(4))
    got = decode(enc, 4, dtype, rows)
    assert got.to_pylist() == [{"a": i, "b": i / 2, "c": i + 100} for i in range(4)]


def test_short_buffers_are_corruption():
    with pytest.raises(CorruptFileError) as ei:
        decode(no_nulls(flat(32)), 10, pa.int32(), b"\0" * 39)
    assert "/some/file.lance" in str(ei.value) and "shorter" in str(ei.value)
    ends, data, adj = binary_payload([b"abc", b"de"])
    with pytest.raises(CorruptFileError, match="shorter"):
        decode(binary(0, 1, adj), 2, pa.string(), ends, data[:3])
    with pytest.raises(CorruptFileError, match="non-decreasing"):
        decode(binary(0, 1, 0), 2, pa.string(), np.array([3, 1], "<u8").tobytes(), data)


# --------------------------------------------------------------------------------------------
# FSST
# --------------------------------------------------------------------------------------------
def _fsst_table(symbols: list[bytes], enabled: bool = True) -> bytes:
    n = len(symbols)
    header = (0x46535354 << 32) | ((1 << 24) if enabled else 0) | n
    out = struct.pack("<Q", header)
    out += b"".join(s.ljust(8, b"\0") for s in symbols)
    out += bytes(len(s) for s in symbols)
    return out.ljust(8 + 256 * 9, b"\0")


def _fsst_reference(codes: bytes, symbols: list[bytes]) -> bytes:
    out, i = bytearray(), 0
    while i < len(codes):
        if codes[i] == 255:
            if i + 1 < len(codes):
                out.append(codes[i + 1])
            i += 2
        else:
            out += symbols[codes[i]] if codes[i] < len(symbols) else b""
            i += 1
    return bytes(out)


def test_fsst_decompress_matches_reference():
    rng = random.Random(3)
    symbols = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) for _ in range(40)]
    _, sym, lens = dec.parse_fsst_table(_fsst_table(symbols), CTX)
    strings, ends, pos = [], [], 0
    for _ in range(300):
        tokens = bytearray()
        for _ in range(rng.randint(0, 9)):
            r = rng.random()
            if r < 0.3:  # escaped literal, often 255 itself to create runs of 255
                tokens += bytes([255, 255 if rng.random() < 0.5 else rng.randrange(256)])
            else:
                tokens.append(rng.randrange(len(symbols)))
        strings.append(bytes(tokens))
        pos += len(tokens)
        ends.append(pos)
    data, new_ends = dec.fsst_decompress(np.frombuffer(b"".join(strings), np.uint8), np.array(ends), sym, lens)
    out = data.tobytes()
    starts = [0] + new_ends.tolist()[:-1]
    for s, a, b in zip(strings, starts, new_ends.tolist()):
        assert out[a:b] == _fsst_reference(s, symbols)


def test_fsst_page_and_disabled_table():
    symbols = [b"hello", b" ", b"world"]
    codes = [bytes([0, 1, 2]), bytes([2, 255, 33]), b""]
    ends = np.cumsum([len(c) for c in codes]).astype("<u8").tobytes()
    enc = pb.ArrayEncoding()
    enc.fsst.binary.CopyFrom(binary(0, 1, 0))
    enc.fsst.symbol_table = _fsst_table(symbols)
    assert decode(enc, 3, pa.string(), ends, b"".join(codes)).to_pylist() == ["hello world", "world!", ""]
    enc.fsst.symbol_table = _fsst_table(symbols, enabled=False)  # small inputs are stored raw
    assert decode(enc, 1, pa.binary(), np.array([3], "<u8").tobytes(), b"raw").to_pylist() == [b"raw"]
    enc.fsst.symbol_table = b"\0" * 16
    with pytest.raises(CorruptFileError, match="magic"):
        decode(enc, 1, pa.binary(), np.array([3], "<u8").tobytes(), b"raw")


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------
def test_expand_ranges_and_gather_bits():
    starts, ends = np.array([0, 5, 9]), np.array([2, 8, 10])
    assert dec.expand_ranges(starts, ends).tolist() == [0, 1, 5, 6, 7, 9]
    rng = np.random.default_rng(0)
    bitmap = rng.integers(0, 256, 64, dtype=np.uint8)
    bits = np.unpackbits(bitmap, bitorder="little")
    s = np.array([3, 17, 100, 101, 300])
    e = np.array([9, 40, 101, 130, 301])
    chunks = [bitmap[a // 8 : (b - 1) // 8 + 1].tobytes() for a, b in zip(s, e)]
    joined = np.frombuffer(b"".join(chunks), np.uint8)
    starts_b = np.cumsum([0] + [len(c) for c in chunks[:-1]])
    got = np.unpackbits(np.frombuffer(dec.gather_bits(joined, starts_b, s % 8, e - s), np.uint8), bitorder="little")
    want = np.concatenate([bits[a:b] for a, b in zip(s, e)])
    assert got[: len(want)].tolist() == want.tolist()


def test_referenced_buffers_and_describe():
    enc = some_nulls(0, flat(32, 1))
    assert dec.referenced_buffers(enc) == [(0, 0), (0, 1)]
    assert dec.describe(enc) == "nullable(some_nulls, flat(32))"
    ps = pb.ArrayEncoding()
    ps.packed_struct.buffer.buffer_index = 2
    ps.packed_struct.inner.add().CopyFrom(no_nulls(flat(8, 2)))
    assert dec.referenced_buffers(ps) == [(0, 2)]


# --------------------------------------------------------------------------------------------
# reader API on pylance-written files
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    table = make_table(2500, seed=31)
    path = write_pylance(tmp_path_factory.mktemp("api") / "m.lance", table, batch=700,
                         data_cache_bytes=16 * 1024, max_page_bytes=32 * 1024)
    return path, table


def test_api_surface(matrix):
    path, table = matrix
    with LanceFileReader(path) as r:
        assert r.num_rows == 2500 and r.version == "2.0"
        assert r.schema.equals(table.schema, check_metadata=False)
        assert r.schema.metadata == table.schema.metadata
        names = [f.name for f in r.lance_fields]
        assert names[:3] == ["bool", "int8", "uint8"] and "item" in names
        assert [f.id for f in r.lance_fields] == list(range(len(names)))
        assert path in repr(r)
        md = r.metadata
        assert isinstance(md, FileMetadata)
        assert (md.major_version, md.minor_version) == (0, 3)
        assert len(md.columns) == r.num_columns == md.footer.num_columns
        roles = {c.field_path: c.role for c in md.columns}
        assert roles["struct"] == "struct_header" and roles["list_i32"] == "list_offsets"
        assert roles["list_i32.item"] == "values" and roles["struct.a"] == "values"
        assert md.num_data_bytes > 0 and md.file_size > md.num_data_bytes
        struct_cols = r.column_indices("struct")
        assert [md.columns[c].field_path for c in struct_cols] == ["struct", "struct.a", "struct.b", "struct.c", "struct.d", "struct.d.item"]
        for c in range(r.num_columns):
            pages = r.column_pages(c)
            assert pages[0].row_start == 0
            for a, b in zip(pages, pages[1:]):
                assert b.row_start == a.row_start + a.length
            assert pages[0].encoding_name
        gb0 = file_pb2.FileDescriptor()
        gb0.ParseFromString(r.read_global_buffer(0))
        assert gb0.length == 2500
        with pytest.raises(IndexError):
            r.column_pages(r.num_columns)


def test_extra_global_buffers(tmp_path):
    table = pa.table({"x": [1, 2, 3]})
    writer = lance.file.LanceFileWriter(str(tmp_path / "gb.lance"), table.schema, version="2.0")
    writer.write_batch(table)
    idx = writer.add_global_buffer(b"my extension bytes" * 10)
    writer.close()
    r = LanceFileReader(str(tmp_path / "gb.lance"))
    assert r.num_global_buffers == 2
    assert r.read_global_buffer(idx) == b"my extension bytes" * 10
    assert_tables_equal(r.read_all(), table)


def test_take_accepts_many_index_forms(matrix):
    path, table = matrix
    r = LanceFileReader(path)
    expected = table.take(pa.array([4, 2, 4]))
    for idx in ([4, 2, 4], np.array([4, 2, 4], dtype=np.uint32), pa.array([4, 2, 4], pa.int64()), (4, 2, 4)):
        assert_tables_equal(r.take_rows(idx), expected)
    assert r.take_rows([]).num_rows == 0
    assert r.read_range(2500, 0).num_rows == 0
    with pytest.raises(TypeError):
        r.take_rows([0.5])


@pytest.mark.parametrize("fraction", [0.0, 2.0])
def test_partial_and_full_page_paths_agree(matrix, monkeypatch, fraction):
    """0.0 forces whole-page decoding, 2.0 forces ranged reads wherever a page allows them."""
    path, table = matrix
    monkeypatch.setattr(node_reads, "PARTIAL_READ_FRACTION", fraction)
    r = LanceFileReader(path)
    rng = np.random.default_rng(int(fraction * 10))
    idx = np.concatenate([rng.integers(0, 2500, 200), np.arange(690, 720), [0, 2499, 2499]])
    assert_tables_equal(r.take_rows(idx), table.take(pa.array(idx)))
    assert_tables_equal(r.read_range(699, 3), table.slice(699, 3))
    assert_tables_equal(r.read_range(13, 1400), table.slice(13, 1400))


# --------------------------------------------------------------------------------------------
# end to end with encodings pylance does not write at 2.0 (spliced into a pylance file)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_file(tmp_path_factory):
    table = pa.table({
        "i": pa.array(np.arange(-500, 500, dtype=np.int32)),
        "s": pa.array([f"s{i:03d}" for i in range(1000)]),
        "u": pa.array(np.arange(1000, dtype=np.uint16)),
    })
    return write_pylance(tmp_path_factory.mktemp("splice") / "plain.lance", table), table


def _splice(tmp_path, plain_file, column: int, enc: pb.ArrayEncoding, payloads: list[bytes]) -> str:
    def edit(s):
        page = s.columns[column].pages[0]
        del page.buffer_offsets[:]
        del page.buffer_sizes[:]
        for payload in payloads:
            page.buffer_offsets.append(s.add_buffer(payload))
            page.buffer_sizes.append(len(payload))
        s.set_page_encoding(column, 0, enc)

    return rewrite_file(plain_file, tmp_path / f"spliced_{column}.lance", edit)


def test_spliced_bitpacked_column(tmp_path, plain_file):
    path, table = plain_file
    values = np.arange(-500, 500)
    bits = 11
    stream = 0
    for i, v in enumerate(values.tolist()):
        stream |= (v & ((1 << bits) - 1)) << (i * bits)
    enc = pb.ArrayEncoding()
    enc.bitpacked.compressed_bits_per_value = bits
    enc.bitpacked.uncompressed_bits_per_value = 32
    enc.bitpacked.signed = True
    p = _splice(tmp_path, path, 0, no_nulls(enc), [stream.to_bytes((1000 * bits + 7) // 8, "little")])
    r = LanceFileReader(p)
    assert_tables_equal(r.read_all(), table)
    assert_tables_equal(r.take_rows([999, 0, 500]), table.take(pa.array([999, 0, 500])))


def test_spliced_constant_and_fixed_size_binary(tmp_path, plain_file):
    path, table = plain_file
    enc = pb.ArrayEncoding()
    enc.constant.value = struct.pack("<H", 7)
    p = _splice(tmp_path, path, 2, enc, [])
    assert LanceFileReader(p).read_all(columns=["u"])["u"].to_pylist() == [7] * 1000
    fsb = pb.ArrayEncoding()
    fsb.fixed_size_binary.bytes.CopyFrom(flat(32))
    fsb.fixed_size_binary.byte_width = 4
    payload = "".join(f"s{i:03d}" for i in range(1000)).encode()
    p = _splice(tmp_path, path, 1, fsb, [payload])
    r = LanceFileReader(p)
    assert_tables_equal(r.read_all(), table)
    assert_tables_equal(r.take_rows([3, 2, 1]), table.take(pa.array([3, 2, 1])))


def test_spliced_zstd_values_and_lz4_strings(tmp_path, plain_file):
    path, table = plain_file
    raw = np.arange(-500, 500, dtype="<i4").tobytes()
    body = struct.pack("<Q", len(raw)) + pa.Codec("zstd").compress(raw, asbytes=True)
    p = _splice(tmp_path, path, 0, no_nulls(flat(32, 0, "zstd")), [body])
    r = LanceFileReader(p)
    assert_tables_equal(r.read_all(columns=["i"]), table.select(["i"]))
    assert_tables_equal(r.take_rows([5, 6], columns=["i"]), table.select(["i"]).take(pa.array([5, 6])))


def test_global_buffer_0_far_from_column_metadata(tmp_path, plain_file):
    """A writer may leave data between GB0 and the column metadata: GB0 is then fetched on its own
    (in the same read_ranges call as the metadata) instead of reading everything in between."""
    path, table = plain_file
    p = rewrite_file(path, tmp_path / "far.lance", lambda s: s.add_buffer(b"\x48" * (3 << 20)))
    r = LanceFileReader(p)
    assert r.store.metrics.get_requests <= 3
    assert r.store.metrics.bytes_read < 1 << 20
    assert_tables_equal(r.read_all(), table)
