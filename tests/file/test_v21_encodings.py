"""Every page layout and compressive encoding pylance 14 emits for 2.1 / 2.2 files.

Each case writes one column with pylance (field metadata / data shapes chosen to force the
encoding), checks that the page really uses the expected layout/encoding, and compares our read
(whole file, a range, and a take) with the source and with pylance's read. Unit tests of the
low-level decoders (FastLanes, FSST, RLE blocks, general compression) follow.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance_file = pytest.importorskip("lance.file")

from lance_ops._proto import encodings_v2_1_pb2 as pb  # noqa: E402
from lance_ops.format.v2_1.compression import bitpack_decode as bp  # noqa: E402
from lance_ops.format.v2_1.compression import decode as comp  # noqa: E402
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable  # noqa: E402
from lance_ops.format.v2_1.reader import LanceFileReaderV21  # noqa: E402
from tests.file.type_matrix import assert_tables_equal  # noqa: E402

N = 3000
RNG = np.random.default_rng(5)
WORDS = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"], dtype=object)
MASK = RNG.random(N) < 0.1
LONG = [" ".join(WORDS[RNG.integers(0, 8, 60)]) for _ in range(N)]


def _md(**kw):
    return {f"lance-encoding:{k.replace('_', '-')}": v for k, v in kw.items()}


# name -> (array, field metadata, expected substring of the page description per version {2.1, 2.2})
CASES = {
    "zstd_i64": (pa.array(RNG.integers(0, 1 << 40, N)), _md(compression="zstd"), "general"),
    "lz4_str": (pa.array([f"s{i % 97}-{i}" for i in range(N)]), _md(compression="lz4"), "general"),
    "zstd_str_null": (pa.array([f"v{i % 13}" for i in range(N)], mask=MASK), _md(compression="zstd"), "mini_block"),
    "fsst_str": (pa.array([" ".join(WORDS[RNG.integers(0, 8, 5)]) for _ in range(N)]), _md(compression="fsst"), "fsst"),
    "plain_str": (pa.array([f"x{i}" for i in range(N)]), _md(compression="none"), "variable"),
    "rle_i32": (pa.array(np.repeat(np.arange(N // 50 + 1), 50)[:N].astype(np.int32)), _md(rle_threshold="0.9"), "rle"),
    "rle_nullable": (pa.array(np.repeat(np.arange(N // 50 + 1), 50)[:N].astype(np.int64), mask=MASK),
                     _md(rle_threshold="0.9"), "rle"),
    "bss_f32": (pa.array(RNG.standard_normal(N).astype(np.float32)), _md(compression="zstd", bss="on"), "byte_stream_split"),
    "bss_f64": (pa.array(RNG.standard_normal(N), mask=MASK), _md(compression="lz4", bss="on"), "byte_stream_split"),
    "fullzip_i32": (pa.array(RNG.integers(0, 100, N).astype(np.int32), mask=MASK), _md(structural_encoding="fullzip"), "full_zip"),
    "fullzip_str": (pa.array([f"hello{i}" for i in range(N)], mask=MASK), _md(structural_encoding="fullzip"), "full_zip"),
    "long_str": (pa.array(LONG, mask=MASK), {}, "full_zip(fsst"),
    "long_str_zstd": (pa.array(LONG), _md(compression="zstd"), "full_zip(general"),
    "fullzip_list": (pa.array([list(range(i % 100)) if i % 7 else None for i in range(N)], pa.list_(pa.int64())),
                     _md(structural_encoding="fullzip"), ""),
    "big_fsl": (pa.FixedSizeListArray.from_arrays(pa.array(RNG.standard_normal(N * 128).astype(np.float32)), 128,
                                                  mask=pa.array(MASK)), {}, "full_zip(fixed_size_list"),
    "big_fsl_null_items": (pa.FixedSizeListArray.from_arrays(
        pa.array(RNG.standard_normal(N * 128).astype(np.float32), mask=RNG.random(N * 128) < 0.1), 128), {}, "full_zip"),
    "fsl_null_items": (pa.FixedSizeListArray.from_arrays(
        pa.array(RNG.standard_normal(N * 4).astype(np.float32), mask=RNG.random(N * 4) < 0.1), 4), {}, "fixed_size_list"),
    "packed": (pa.StructArray.from_arrays([pa.array(RNG.integers(0, 1000, N).astype(np.int32)), pa.array(RNG.standard_normal(N))],
                                          names=["a", "b"]), _md(packed="true"), "packed_struct"),
    "packed_nullable": (pa.StructArray.from_arrays([pa.array(RNG.integers(0, 1000, N).astype(np.int32)),
                                                    pa.array(RNG.standard_normal(N))], names=["a", "b"], mask=pa.array(MASK)),
                        _md(packed="true"), "packed_struct"),
    "dict_i64": (pa.array(RNG.choice([10**12, 5, -7, 99], N)), {}, "mini_block"),
    "dict_str": (pa.array(np.array([f"category-{i}" for i in range(50)], dtype=object)[RNG.integers(0, 50, N)]), {}, "dictionary"),
    "const_i32": (pa.array(np.full(N, 42, np.int32)), {}, ""),
    "const_str": (pa.array(["same"] * N), {}, ""),
    "const_bool": (pa.array(np.ones(N, bool)), {}, ""),
    "bitpacked_u64": (pa.array(np.arange(N, dtype=np.uint64) * 3 + 1000), {}, "inline_bitpacking"),
    "bool": (pa.array(RNG.random(N) < 0.5, mask=MASK), {}, "flat"),
    "blob": (pa.array([bytes(RNG.integers(0, 255, i % 50 * 100, dtype=np.uint8)) if i % 9 else None for i in range(N)],
                      pa.large_binary()), {"lance-encoding:blob": "true"}, "blob"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("v21enc")
    out = {}
    for version in ("2.1", "2.2"):
        for name, (arr, md, _) in CASES.items():
            schema = pa.schema([pa.field(name, arr.type, metadata=md or None)])
            table = pa.table({name: arr}).cast(schema)
            path = str(d / f"{name}_{version}.lance")
            with lance_file.LanceFileWriter(path, schema, version=version) as w:
                w.write_batch(table)
            out[(name, version)] = (path, table)
    return out


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", list(CASES))
def test_forced_encoding(files, name, version):
    path, table = files[(name, version)]
    r = LanceFileReaderV21(path)
    layouts = " ".join(r.column_layouts(0))
    assert CASES[name][2] in layouts, layouts
    got = r.read_all()
    assert_tables_equal(got, table)
    ref = lance_file.LanceFileReader(path)
    assert_tables_equal(got, ref.read_all().to_table())
    assert_tables_equal(r.read_range(1000, 777), table.slice(1000, 777))
    idx = np.unique(np.random.default_rng(1).integers(0, N, 200))
    assert_tables_equal(r.take_rows(idx), ref.take_rows(idx).to_table())


def test_encodings_seen(files):
    """The cases above cover every layout and compressive encoding pylance produced."""
    seen = set()
    for (name, version), (path, _) in files.items():
        seen.add(" ".join(LanceFileReaderV21(path).column_layouts(0)))
    text = " ".join(seen)
    for word in ("mini_block", "full_zip", "constant", "blob", "flat", "variable", "inline_bitpacking", "fsst",
                 "dictionary", "rle", "byte_stream_split", "general", "fixed_size_list", "packed_struct"):
        assert word in text, word


# --------------------------------------------------------------------------------------------
# low-level decoders
# --------------------------------------------------------------------------------------------
def _reference_pack(values: np.ndarray, t_bits: int, width: int) -> np.ndarray:
    """A slow, obviously-correct FastLanes packer (one 1024-value block)."""
    lanes = 1024 // t_bits
    words = [0] * (lanes * width)
    for lane in range(lanes):
        stream = 0
        for row in range(t_bits):
            idx = bp.FL_ORDER[row // 8] * 16 + (row % 8) * 128 + lane
            stream |= (int(values[idx]) & ((1 << width) - 1)) << (row * width)
        for k in range(width):
            words[k * lanes + lane] = (stream >> (k * t_bits)) & ((1 << t_bits) - 1)
    return np.array(words, dtype=f"u{t_bits // 8}")


@pytest.mark.parametrize("t_bits,width", [(8, 3), (16, 1), (16, 11), (32, 17), (32, 32), (64, 5), (64, 63)])
def test_fastlanes_unpack_matches_reference(t_bits, width):
    rng = np.random.default_rng(width)
    vals = rng.integers(0, 1 << width, 2048, dtype=np.uint64).astype(f"u{t_bits // 8}")
    packed = np.concatenate([_reference_pack(vals[:1024], t_bits, width), _reference_pack(vals[1024:], t_bits, width)])
    assert np.array_equal(bp.unpack_blocks(packed, t_bits, width, 2), vals)


def test_fsst_decode_with_escapes():
    syms = [b"ab", b"cde", b"x"]
    table = bytearray((len(syms) | (1 << 24) | (0xF5F5 << 32)).to_bytes(8, "little"))
    for s in syms:
        table += s.ljust(8, b"\0")
    table += bytes(len(s) for s in syms)
    st = FsstTable(bytes(table))
    # "abcde" + "\xff" literal + "x", then "" then "z" (escaped), then "\xff\xff"
    data = np.frombuffer(bytes([0, 1, 255, 255, 2, 255, ord("z"), 255, 255, 255, 255]), np.uint8)
    offs = np.array([0, 5, 5, 7, 11])
    new_offs, out = st.decode(data, offs)
    strings = [out[new_offs[i]:new_offs[i + 1]].tobytes() for i in range(4)]
    assert strings == [b"abcde\xffx", b"", b"z", b"\xff\xff"]


def test_rle_block_and_general_compression():
    enc = pb.CompressiveEncoding()
    enc.rle.values.flat.bits_per_value = 16
    enc.rle.run_lengths.flat.bits_per_value = 8
    values = np.array([3, 0, 7], "<u2").tobytes()
    raw = len(values).to_bytes(8, "little") + values + bytes([2, 255, 1])
    lv = comp.decode_levels(enc, raw, 258)
    assert lv.tolist() == [3, 3] + [0] * 255 + [7]
    payload = bytes(range(200)) * 5
    z = pb.BufferCompression(scheme=pb.COMPRESSION_ALGORITHM_ZSTD)
    zbody = pa.Codec("zstd").compress(payload, asbytes=True)
    assert comp.general_decompress(z, len(payload).to_bytes(8, "little") + zbody) == payload
    assert comp.general_decompress(z, zbody) == payload  # bare frame with its content size
    l4 = pb.BufferCompression(scheme=pb.COMPRESSION_ALGORITHM_LZ4)
    body = pa.Codec("lz4_raw").compress(payload, asbytes=True)
    assert comp.general_decompress(l4, len(payload).to_bytes(4, "little") + body) == payload


def test_unknown_encoding_is_unsupported():
    enc = pb.CompressiveEncoding()
    enc.dictionary.num_dictionary_items = 3
    with pytest.raises(comp.EncodingUnsupported, match="dictionary"):
        comp.decode_miniblock(enc, [b""], 1)


def test_variable_packed_struct_2_2(tmp_path):
    """2.2 packs a struct with variable-width children row by row (full-zip, per-field encodings)."""
    n = 3000
    rng = np.random.default_rng(0)
    arr = pa.StructArray.from_arrays(
        [pa.array(np.arange(n, dtype=np.int32)), pa.array([f"s{i}" * (i % 5) for i in range(n)]),
         pa.array(rng.standard_normal(n))], names=["a", "s", "f"], mask=pa.array(rng.random(n) < 0.1))
    schema = pa.schema([pa.field("vp", arr.type, metadata={"lance-encoding:packed": "true"})])
    table = pa.table({"vp": arr}).cast(schema)
    path = str(tmp_path / "vp.lance")
    with lance_file.LanceFileWriter(path, schema, version="2.2") as w:
        w.write_batch(table)
    r = LanceFileReaderV21(path)
    assert "variable_packed_struct" in r.column_layouts(0)[0]
    ref = lance_file.LanceFileReader(path)
    assert_tables_equal(r.read_all(), ref.read_all().to_table())
    idx = np.unique(rng.integers(0, n, 100))
    assert_tables_equal(r.take_rows(idx), ref.take_rows(idx).to_table())


def test_file_format_2_3_is_refused_with_the_reason(tmp_path):
    """2.3 is pylance 14's unstable 'next' format (planar layouts): refused at open, saying why."""
    import warnings

    import lance

    from lance_ops.errors import UnsupportedError
    from lance_ops.file import LanceFileReader

    table = pa.table({"a": pa.array(np.arange(100, dtype=np.int64))})
    path = str(tmp_path / "v23.lance")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with lance_file.LanceFileWriter(path, table.schema, version="2.3") as w:
            w.write_batch(table)
        lance.write_dataset(table, str(tmp_path / "ds"), data_storage_version="next")
    with pytest.raises(UnsupportedError, match=r"v23\.lance: Lance file version 2\.3 is pylance's unstable 'next'"):
        LanceFileReader(path)
    import lance_ops

    with pytest.raises(UnsupportedError, match=r"\.lance: Lance file version 2\.3 is pylance's unstable"):
        lance_ops.dataset(str(tmp_path / "ds")).to_table()
