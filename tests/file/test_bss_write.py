"""Byte stream split (BSS) in the Lance 2.1 / 2.2 writer, checked against pylance 14.0.2.

pylance's rule (``v2_1.compression.bss``): only fixed-width 32/64-bit mini-block values of a field that
asks for a compression (``lance-encoding:compression`` zstd / lz4 / fsst); ``lance-encoding:bss``
``on`` / ``off`` / ``auto`` (default, unknown values too): auto picks BSS when the mean byte
entropy of the first 64 values is below 4 bits. BSS is tried before RLE and bitpacking; zstd / lz4
then wrap the chunks when that pays. Without a compression, floats are never split.
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.format.v2_1.compression import bss
from lance_ops.file import LanceFileWriter
from lance_ops.format.v2_1.reader import LanceFileReaderV21

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader as PyReader  # noqa: E402
from lance.file import LanceFileWriter as PyWriter  # noqa: E402

VERSIONS = ("2.1", "2.2")


def _gens():
    rng = np.random.default_rng(11)
    return {
        "f32_random": lambda n: pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64_random": lambda n: pa.array(rng.standard_normal(n)),
        "f32_small_ints": lambda n: pa.array(rng.integers(0, 100, n).astype(np.float32)),
        "f64_steps": lambda n: pa.array(np.arange(n, dtype=np.float64) * 0.5),
        "f64_cents": lambda n: pa.array(np.round(rng.standard_normal(n) * 100, 2)),
        "f16_random": lambda n: pa.array(rng.standard_normal(n).astype(np.float16)),
        "i32_random": lambda n: pa.array(rng.integers(-2**31, 2**31 - 1, n).astype(np.int32)),
        "i64_small": lambda n: pa.array(rng.integers(0, 1000, n)),
        "timestamps": lambda n: pa.array(1_700_000_000_000 + np.cumsum(rng.integers(0, 1000, n)), pa.timestamp("ms")),
        "f32_nulls": lambda n: pa.array(rng.standard_normal(n).astype(np.float32), mask=rng.random(n) < 0.2),
        "f64_fsl": lambda n: pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 4)), 4),
    }


METADATA = {
    "none": None,
    "zstd": {"lance-encoding:compression": "zstd"},
    "lz4": {"lance-encoding:compression": "lz4"},
    "zstd_bss_on": {"lance-encoding:compression": "zstd", "lance-encoding:bss": "on"},
    "lz4_bss_off": {"lance-encoding:compression": "lz4", "lance-encoding:bss": "off"},
    "fsst_bss_on": {"lance-encoding:compression": "fsst", "lance-encoding:bss": "on"},
    "zstd_bss_bogus": {"lance-encoding:compression": "zstd", "lance-encoding:bss": "bogus"},
    "bss_on_alone": {"lance-encoding:bss": "on"},
    "none_bss_on": {"lance-encoding:compression": "none", "lance-encoding:bss": "on"},
}


def data_regions(path: str) -> tuple[bytes, bytes]:
    """Page bytes and column metadata (the schema's metadata maps are hash-ordered by pylance)."""
    with open(path, "rb") as f:
        raw = f.read()
    cms, cmo, gbo = struct.unpack("<QQQ", raw[-40:-16])
    schema_pos = struct.unpack("<Q", raw[gbo:gbo + 8])[0]
    return raw[:schema_pos], raw[cms:cmo]


def write_both(tmp_path, arr: pa.Array, md, version: str) -> tuple[str, str]:
    schema = pa.schema([pa.field("x", arr.type, metadata=md)])
    t = pa.table({"x": arr}, schema=schema)
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    with LanceFileWriter(ours, schema, version=version) as w:
        w.write_batch(t)
    with PyWriter(theirs, schema, version=version) as w:
        w.write_batch(t)
    return ours, theirs


def layouts(path: str) -> list[str]:
    return sorted(set(LanceFileReaderV21(path).column_layouts(0)))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("gen", sorted(_gens()))
@pytest.mark.parametrize("md", sorted(METADATA))
@pytest.mark.parametrize("n", [63, 1024, 5000])
def test_bss_choice_and_bytes_like_pylance(tmp_path, version, gen, md, n):
    arr = _gens()[gen](n)
    ours, theirs = write_both(tmp_path, arr, METADATA[md], version)
    assert layouts(ours) == layouts(theirs)
    assert data_regions(ours) == data_regions(theirs)
    got = PyReader(ours).read_all().to_table().column(0).combine_chunks()
    assert got.equals(arr)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("md,gen,expected", [
    ("none", "f64_steps", "mini_block(flat(64))"),  # never without a compression
    ("bss_on_alone", "f64_random", "mini_block(flat(64))"),
    ("none_bss_on", "f64_steps", "mini_block(flat(64))"),
    ("zstd", "f64_random", "mini_block(general(zstd,flat(64)))"),  # auto: high byte entropy
    ("zstd", "f64_steps", "mini_block(general(zstd,byte_stream_split(flat(64))))"),  # auto: low entropy
    ("zstd", "f32_small_ints", "mini_block(general(zstd,byte_stream_split(flat(32))))"),  # before bitpacking
    ("zstd_bss_on", "i32_random", "mini_block(byte_stream_split(flat(32)))"),  # zstd did not pay
    ("fsst_bss_on", "f64_random", "mini_block(byte_stream_split(flat(64)))"),  # fsst: no general wrapper
    ("zstd_bss_on", "f16_random", "mini_block(general(zstd,flat(16)))"),  # 16-bit: never
    ("zstd_bss_on", "f64_fsl", "mini_block(fixed_size_list(4,flat(64)))"),  # fixed-size lists: never
])
def test_when_bss_is_written(tmp_path, version, md, gen, expected):
    arr = _gens()[gen](5000)
    ours, theirs = write_both(tmp_path, arr, METADATA[md], version)
    assert layouts(ours) == layouts(theirs) == [expected]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [7, 511, 512, 513, 1024, 1025, 3000])
def test_our_reader_reads_bss_pages(tmp_path, version, n):
    rng = np.random.default_rng(n)
    for arr in (pa.array(np.arange(n, dtype=np.float64) / 8), pa.array(rng.integers(0, 50, n).astype(np.float32),
                                                                     mask=rng.random(n) < 0.3)):
        md = {"lance-encoding:compression": "lz4", "lance-encoding:bss": "on"}
        ours, theirs = write_both(tmp_path, arr, md, version)
        for path in (ours, theirs):
            assert any("byte_stream_split" in lay for lay in layouts(path))
            assert LanceFileReaderV21(path).read_all().column(0).combine_chunks().equals(arr)
        assert data_regions(ours) == data_regions(theirs)


def test_bss_rule_units():
    # entropy of the first 64 values only, truncated per byte position to 1/1000 bit
    data = np.zeros(8 * 100, np.uint8)
    assert bss.byte_position_entropy(data, 100, 8).tolist() == [0] * 8
    alt = np.tile(np.array([0, 1], np.uint8), 32)  # one byte position, half 0 half 1: 1 bit
    assert bss.byte_position_entropy(alt, 64, 1).tolist() == [1000]
    noisy = np.random.default_rng(0).integers(0, 256, 4 * 64, dtype=np.uint8)
    assert not bss.should_use(noisy, 64, 32, "auto")
    assert bss.should_use(noisy, 64, 32, "on")
    assert not bss.should_use(np.zeros(32, np.uint8), 16, 16, "on")  # 16-bit values never
    assert not bss.should_use(np.zeros(64, np.uint8), 16, 32, "off")
    assert bss.parse_mode("ON") == "on" and bss.parse_mode("whatever") == "auto" and bss.parse_mode(None) == "auto"
    mb = bss.bss_miniblock(np.arange(1030, dtype="<u4").view(np.uint8), 1030, 32)
    assert mb.counts == [1024, 6] and mb.logs == [10, 0]
    tail = np.frombuffer(mb.bufs[1][0], np.uint8).reshape(4, 6)  # stream j = byte j of each value
    assert tail.T.copy().view("<u4").reshape(-1).tolist() == list(range(1024, 1030))
