"""Damaged, foreign and unsupported files: the reader must fail with a lance_ops error that names
the file and the problem, never with a raw struct.error / IndexError / DecodeError / ArrowInvalid.

Valid files are written by real pylance; damage is applied byte-wise or by rewriting the metadata
section (``rewrite_file``) so that one specific field is wrong.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops._proto import file2_pb2
from lance_ops.errors import CorruptFileError, LanceOpsError, ObjectNotFoundError, UnsupportedError
from lance_ops.format.container import ARRAY_ENCODING_URL, FOOTER_SIZE, Footer
from lance_ops.format.v2_0.reader import LanceFileReader
from tests.file.type_matrix import make_table

lance = pytest.importorskip("lance")
import lance.file  # noqa: E402  (pylance: the oracle that writes the valid files)


# --------------------------------------------------------------------------------------------
# helpers (also used by test_reader.py)
# --------------------------------------------------------------------------------------------
def write_pylance(path, table: pa.Table, version: str = "2.0", batch: Optional[int] = None, **options) -> str:
    writer = lance.file.LanceFileWriter(str(path), table.schema, version=version, **options)
    for b in table.to_batches(max_chunksize=batch) if batch else [table]:
        writer.write_batch(b)
    writer.close()
    return str(path)


class Surgery:
    """A parsed file whose column metadata can be edited and new data buffers appended."""

    def __init__(self, data: bytes):
        self.data = data
        self.footer = Footer.unpack(data, len(data), "<test>")
        f = self.footer
        cmo = np.frombuffer(data[f.cmo_table_start : f.cmo_table_start + 16 * f.num_columns], "<u8").reshape(-1, 2)
        self.columns: list[file2_pb2.ColumnMetadata] = []
        for pos, size in cmo.tolist():
            cm = file2_pb2.ColumnMetadata()
            cm.ParseFromString(data[pos : pos + size])
            self.columns.append(cm)
        self.gbo = data[f.gbo_table_start : f.gbo_table_start + 16 * f.num_global_buffers]
        self.body = bytearray(data[: f.column_meta_start])
        self.raw_columns: dict[int, bytes] = {}

    def page_encoding(self, column: int, page: int = 0) -> pb.ArrayEncoding:
        a = any_pb2.Any()
        a.ParseFromString(self.columns[column].pages[page].encoding.direct.encoding)
        enc = pb.ArrayEncoding()
        enc.ParseFromString(a.value)
        return enc

    def set_page_encoding(self, column: int, page: int, enc: pb.ArrayEncoding | bytes,
                          type_url: str = ARRAY_ENCODING_URL) -> None:
        value = enc if isinstance(enc, bytes) else enc.SerializeToString()
        a = any_pb2.Any(type_url=type_url, value=value)
        self.columns[column].pages[page].encoding.direct.encoding = a.SerializeToString()

    def add_buffer(self, payload: bytes) -> int:
        """Append a (64-byte aligned) data buffer before the metadata; returns its offset."""
        self.body.extend(b"\0" * ((-len(self.body)) % 64))
        pos = len(self.body)
        self.body.extend(payload)
        return pos

    def build(self) -> bytes:
        out = bytearray(self.body)
        meta_start = len(out)
        positions = []
        for i, cm in enumerate(self.columns):
            blob = self.raw_columns.get(i, cm.SerializeToString())
            positions.append((len(out), len(blob)))
            out.extend(blob)
        cmo_start = len(out)
        for pos, size in positions:
            out.extend(struct.pack("<QQ", pos, size))
        gbo_start = len(out)
        out.extend(self.gbo)
        f = self.footer
        out.extend(Footer(meta_start, cmo_start, gbo_start, f.num_global_buffers, f.num_columns, f.major, f.minor).pack())
        return bytes(out)


def rewrite_file(src: str, dst, edit: Callable[[Surgery], None]) -> str:
    s = Surgery(Path(src).read_bytes())
    edit(s)
    Path(dst).write_bytes(s.build())
    return str(dst)


def assert_error(exc_info, path, *words: str) -> None:
    message = str(exc_info.value)
    assert str(path) in message, message
    for w in words:
        assert w.lower() in message.lower(), f"{w!r} not in {message!r}"


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_table() -> pa.Table:
    return make_table(60, seed=11, null_fraction=0.25)


@pytest.fixture(scope="module")
def valid_file(tmp_path_factory, small_table) -> str:
    return write_pylance(tmp_path_factory.mktemp("bad") / "valid.lance", small_table)


@pytest.fixture(scope="module")
def simple_file(tmp_path_factory) -> str:
    """Three plain columns: int32 (col 0), string (col 1), int64 list (cols 2, 3)."""
    t = pa.table({
        "i": pa.array(np.arange(1000, dtype=np.int32)),
        "s": pa.array([f"v{i}" for i in range(1000)]),
        "l": pa.array([[i, i + 1] for i in range(1000)]),
    })
    return write_pylance(tmp_path_factory.mktemp("bad") / "simple.lance", t)


def _bytes(path) -> bytes:
    return Path(path).read_bytes()


# --------------------------------------------------------------------------------------------
# container-level damage
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keep", [0, 10, 39, -1, -41, "half"])
def test_truncated_file(tmp_path, valid_file, keep):
    data = _bytes(valid_file)
    cut = len(data) // 2 if keep == "half" else (keep if keep >= 0 else len(data) + keep)
    p = tmp_path / "truncated.lance"
    p.write_bytes(data[:cut])
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p)
    if cut < FOOTER_SIZE:
        assert "too small" in str(ei.value)
    else:
        assert "magic" in str(ei.value) or "past the end" in str(ei.value)


def test_wrong_magic(tmp_path, valid_file):
    data = bytearray(_bytes(valid_file))
    data[-4:] = b"PAR1"
    p = tmp_path / "magic.lance"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "magic")


def test_not_a_lance_file(tmp_path):
    p = tmp_path / "text.lance"
    p.write_bytes(b"hello world, this is not a lance file at all" * 3)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "magic")


def _set_version(data: bytes, major: int, minor: int) -> bytes:
    return data[:-8] + struct.pack("<HH", major, minor) + data[-4:]


def test_unknown_version(tmp_path, valid_file):
    p = tmp_path / "v99.lance"
    p.write_bytes(_set_version(_bytes(valid_file), 9, 9))
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "unknown", "9.9")


def test_legacy_file(tmp_path, valid_file):
    p = tmp_path / "legacy.lance"
    p.write_bytes(_set_version(_bytes(valid_file), 0, 2))
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "legacy")


def test_newer_format_version_is_refused_clearly(tmp_path):
    p = write_pylance(tmp_path / "v21.lance", pa.table({"x": [1, 2, 3]}), version="2.1")
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(p)
    assert_error(ei, p, "2.1", "not supported")


def test_missing_file(tmp_path):
    p = tmp_path / "nope.lance"
    with pytest.raises(ObjectNotFoundError) as ei:
        LanceFileReader(str(p))
    assert str(p) in str(ei.value)


def test_footer_offsets_past_eof(tmp_path, valid_file):
    data = _bytes(valid_file)
    f = Footer.unpack(data, len(data), "x")
    bad = Footer(f.column_meta_start, f.cmo_table_start, len(data) + 100, f.num_global_buffers,
                 f.num_columns, f.major, f.minor)
    p = tmp_path / "footer.lance"
    p.write_bytes(data[:-FOOTER_SIZE] + bad.pack())
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "past the end")


def test_global_buffer_past_eof(tmp_path, valid_file):
    data = bytearray(_bytes(valid_file))
    f = Footer.unpack(bytes(data), len(data), "x")
    struct.pack_into("<QQ", data, f.gbo_table_start, len(data) + 5, 100)
    p = tmp_path / "gbo.lance"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "global buffer", "beyond")


def test_column_metadata_past_eof(tmp_path, valid_file):
    data = bytearray(_bytes(valid_file))
    f = Footer.unpack(bytes(data), len(data), "x")
    struct.pack_into("<QQ", data, f.cmo_table_start + 16, len(data) - 10, 1000)
    p = tmp_path / "cmo.lance"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "column metadata", "beyond")


def test_corrupt_file_descriptor(tmp_path, valid_file):
    data = bytearray(_bytes(valid_file))
    f = Footer.unpack(bytes(data), len(data), "x")
    pos, size = struct.unpack_from("<QQ", data, f.gbo_table_start)
    data[pos : pos + size] = b"\xff" * size
    p = tmp_path / "gb0.lance"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(str(p))
    assert_error(ei, p, "FileDescriptor")


def test_wrong_column_count(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        s.columns.append(s.columns[-1])
        s.footer = Footer(0, 0, 0, s.footer.num_global_buffers, s.footer.num_columns + 1,
                          s.footer.major, s.footer.minor)

    p = rewrite_file(simple_file, tmp_path / "cols.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p)
    assert_error(ei, p, "columns")


# --------------------------------------------------------------------------------------------
# metadata-level damage
# --------------------------------------------------------------------------------------------
def test_corrupt_column_metadata_protobuf(tmp_path, simple_file):
    p = rewrite_file(simple_file, tmp_path / "cm.lance", lambda s: s.raw_columns.__setitem__(1, b"\xff\xff\xff\x07garbage"))
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p)
    assert_error(ei, p, "column 1", "does not decode")


def test_corrupt_page_encoding_protobuf(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        s.columns[0].pages[0].encoding.direct.encoding = b"\x0a\xff\xff\xff\xff\x0f"

    p = rewrite_file(simple_file, tmp_path / "enc.lance", edit)
    r = LanceFileReader(p)
    with pytest.raises(CorruptFileError) as ei:
        r.read_all()
    assert_error(ei, p, "column 0", "'i'", "does not decode")
    # the other columns still read
    assert r.read_all(columns=["s"]).num_rows == 1000


def test_unknown_any_type_url(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        s.set_page_encoding(0, 0, s.page_encoding(0, 0), type_url="/lance.encodings.SomethingNew")

    p = rewrite_file(simple_file, tmp_path / "url.lance", edit)
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'i'", "/lance.encodings.SomethingNew")


def test_unknown_column_encoding_type_url(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        a = any_pb2.Any(type_url="/other.Thing", value=b"")
        s.columns[1].encoding.direct.encoding = a.SerializeToString()

    p = rewrite_file(simple_file, tmp_path / "colurl.lance", edit)
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(p).read_all(columns=["s"])
    assert_error(ei, p, "'s'", "/other.Thing")


@pytest.mark.parametrize("kind", ["rle", "byte_stream_split", "general_mini_block", "bitpacked_for_non_neg"])
def test_unknown_page_encoding(tmp_path, simple_file, kind):
    def edit(s: Surgery) -> None:
        enc = pb.ArrayEncoding()
        getattr(enc, kind).SetInParent()
        if kind == "rle":
            enc.rle.bits_per_value = 32
        s.set_page_encoding(0, 0, enc)

    p = rewrite_file(simple_file, tmp_path / f"{kind}.lance", edit)
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'i'", kind)


def test_empty_page_encoding(tmp_path, simple_file):
    p = rewrite_file(simple_file, tmp_path / "empty.lance", lambda s: s.set_page_encoding(0, 0, pb.ArrayEncoding()))
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'i'", "empty")


def test_page_buffer_past_eof(tmp_path, simple_file):
    size = len(_bytes(simple_file))

    def edit(s: Surgery) -> None:
        s.columns[0].pages[0].buffer_offsets[0] = size + 4096

    p = rewrite_file(simple_file, tmp_path / "pbuf.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "column 0", "beyond the end")


def test_buffer_shorter_than_needed(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        s.columns[0].pages[0].buffer_sizes[0] = 100  # 1000 int32 need 4000 bytes

    p = rewrite_file(simple_file, tmp_path / "short.lance", edit)
    r = LanceFileReader(p)
    with pytest.raises(CorruptFileError) as ei:
        r.read_all()
    assert_error(ei, p, "'i'", "shorter")
    with pytest.raises(CorruptFileError) as ei:
        r.take_rows([999])
    assert_error(ei, p, "'i'", "too short")


def test_binary_offsets_past_data(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        s.columns[1].pages[0].buffer_sizes[1] = 10

    p = rewrite_file(simple_file, tmp_path / "binshort.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all(columns=["s"])
    assert_error(ei, p, "'s'", "shorter")


def test_page_lengths_disagree_with_row_count(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        s.columns[0].pages[0].length = 999

    p = rewrite_file(simple_file, tmp_path / "len.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all(columns=["i"])
    assert_error(ei, p, "'i'", "999", "1000")


def test_list_items_disagree(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        enc = s.page_encoding(2, 0)
        enc.list.num_items = 5000
        enc.list.null_offset_adjustment = 5001
        s.set_page_encoding(2, 0, enc)

    p = rewrite_file(simple_file, tmp_path / "items.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all(columns=["l"])
    assert_error(ei, p, "'l.item'", "2000", "5000")


def test_buffer_index_out_of_range(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        enc = s.page_encoding(0, 0)
        enc.nullable.no_nulls.values.flat.buffer.buffer_index = 7
        s.set_page_encoding(0, 0, enc)

    p = rewrite_file(simple_file, tmp_path / "bidx.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'i'", "buffer 7")


def test_wrong_bits_per_value(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        enc = s.page_encoding(0, 0)
        enc.nullable.no_nulls.values.flat.bits_per_value = 24
        s.set_page_encoding(0, 0, enc)

    p = rewrite_file(simple_file, tmp_path / "bpv.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'i'", "24")


def test_bad_compression_scheme(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        enc = s.page_encoding(1, 0)
        enc.binary.bytes.flat.compression.scheme = "brotli"
        s.set_page_encoding(1, 0, enc)

    p = rewrite_file(simple_file, tmp_path / "comp.lance", edit)
    with pytest.raises(UnsupportedError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'s'", "brotli")


def test_garbage_compressed_data(tmp_path, simple_file):
    def edit(s: Surgery) -> None:
        enc = s.page_encoding(1, 0)
        enc.binary.bytes.flat.compression.scheme = "zstd"
        s.set_page_encoding(1, 0, enc)

    p = rewrite_file(simple_file, tmp_path / "zgarbage.lance", edit)
    with pytest.raises(CorruptFileError) as ei:
        LanceFileReader(p).read_all()
    assert_error(ei, p, "'s'", "zstd")


# --------------------------------------------------------------------------------------------
# fuzzing: random damage never escapes as a non-lance_ops exception
# --------------------------------------------------------------------------------------------
def _exercise(path: str) -> None:
    r = LanceFileReader(path)
    r.read_all()
    n = r.num_rows
    if n:
        rng = np.random.default_rng(0)
        r.take_rows(rng.integers(0, n, 7))
        r.read_range(n // 3, max(1, n // 4))
        for name in r.schema.names[:5]:
            r.take_rows([n - 1], columns=[name])


def _damage(data: bytes, rng: random.Random, footer: Footer) -> bytes:
    out = bytearray(data)
    mode = rng.choice(["truncate", "flip_meta", "flip_any", "tail", "zero_meta", "flip_gb0"])
    if mode == "truncate":
        return bytes(out[: rng.randrange(0, len(out))])
    if mode == "flip_meta":
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(footer.column_meta_start, len(out))
            out[i] ^= 1 << rng.randrange(8)
    elif mode == "flip_any":
        for _ in range(rng.randint(1, 3)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    elif mode == "tail":
        k = rng.randint(1, 200)
        out[-k:] = bytes(rng.randrange(256) for _ in range(k))
    elif mode == "zero_meta":
        i = rng.randrange(footer.column_meta_start, len(out) - 1)
        j = min(len(out), i + rng.randint(1, 64))
        out[i:j] = b"\0" * (j - i)
    else:
        gpos = struct.unpack_from("<Q", data, footer.gbo_table_start)[0]
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(gpos, footer.column_meta_start)
            out[i] = rng.randrange(256)
    return bytes(out)


def test_fuzz_damaged_copies(tmp_path, valid_file, simple_file):
    rng = random.Random(20240601)
    outcomes = {"ok": 0, "error": 0}
    for src in (valid_file, simple_file):
        data = _bytes(src)
        footer = Footer.unpack(data, len(data), "x")
        for i in range(150):
            damaged = _damage(data, rng, footer)
            p = tmp_path / f"fuzz_{i}.lance"
            p.write_bytes(damaged)
            try:
                _exercise(str(p))
                outcomes["ok"] += 1
            except LanceOpsError as exc:
                assert str(p) in str(exc), f"error does not name the file: {exc!r}"
                outcomes["error"] += 1
            except Exception as exc:  # pragma: no cover - this is what the test hunts for
                pytest.fail(f"damage case {i} of {Path(src).name} escaped as {type(exc).__name__}: {exc}")
    assert outcomes["error"] > 50 and outcomes["ok"] > 5, outcomes


def test_arguments_errors_are_not_corruption(valid_file, small_table):
    r = LanceFileReader(valid_file)
    with pytest.raises(ValueError, match="no column named"):
        r.read_all(columns=["nope"])
    with pytest.raises(IndexError):
        r.take_rows([0, small_table.num_rows])
    with pytest.raises(IndexError):
        r.take_rows([-1])
    with pytest.raises(IndexError):
        r.read_range(small_table.num_rows - 1, 2)
    with pytest.raises(IndexError):
        r.read_global_buffer(5)
    for exc in (ValueError, IndexError):
        assert not issubclass(exc, LanceOpsError)
