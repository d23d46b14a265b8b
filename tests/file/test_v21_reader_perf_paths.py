"""The fast paths of the 2.1+ reader, checked for exact results against pylance and for the bytes
they request: FSST pair decoding and escapes, mini-block pages decoded as one batch (including
lists whose rows span chunks), merged full-zip pages, the decode thread pool, and take_rows
reading only the chunks (or full-zip rows) that hold the rows.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance_file = pytest.importorskip("lance.file")

from lance_ops.format.v2_1.compression import bitpack_decode as bp  # noqa: E402
from lance_ops.format.v2_1.compression import fsst_decode as v21_fsst  # noqa: E402
from lance_ops.format.v2_1.decode import FullZipPage, MiniBlockPage  # noqa: E402
from lance_ops.format.v2_1 import reader as reader_v2_1  # noqa: E402
from lance_ops.format.v2_1.reader import LanceFileReaderV21  # noqa: E402
from lance_ops.io import LocalStore  # noqa: E402
from lance_ops.io.per_process import kept_pool  # noqa: E402
from tests.file.type_matrix import assert_tables_equal  # noqa: E402

VERSIONS = ("2.1", "2.2")


def write(path, table: pa.Table, version: str, batch: int | None = None, **kw) -> str:
    with lance_file.LanceFileWriter(str(path), table.schema, version=version, **kw) as w:
        for b in table.to_batches(max_chunksize=batch) if batch else [table]:
            w.write_batch(b)
    return str(path)


def pylance_take(path: str, idx) -> pa.Table:
    return lance_file.LanceFileReader(path).take_rows(np.asarray(idx)).to_table()


class Recording:
    """A local store (no gap coalescing) that records every byte range requested."""

    def __init__(self):
        self._store = LocalStore(coalesce_gap=0)
        self.ranges: list[tuple[int, int]] = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def read_ranges(self, path, ranges):
        arr = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        self.ranges.extend(map(tuple, arr.tolist()))
        return self._store.read_ranges(path, arr)


# --------------------------------------------------------------------------------------------
# FSST
# --------------------------------------------------------------------------------------------
def _reference_fsst(syms: list[bytes], codes: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(codes):
        if codes[i] == 255:
            out.append(codes[i + 1])
            i += 2
        else:
            out += syms[codes[i]]
            i += 1
    return bytes(out)


@pytest.mark.parametrize("n_codes", [0, 1, 7, 5000, 300_001, 300_002])
@pytest.mark.parametrize("escapes", [False, True])
def test_fsst_decode_matches_a_reference_decoder(n_codes, escapes):
    rng = np.random.default_rng(n_codes + escapes)
    nsym = 200
    lens = rng.integers(1, 9, nsym).astype(np.uint8)
    words = rng.integers(0, 2**63, nsym, dtype=np.uint64)
    table = np.array([nsym | (1 << 24)], "<u8").tobytes() + words.astype("<u8").tobytes() + lens.tobytes()
    syms = [words[i:i + 1].astype("<u8").tobytes()[:lens[i]] for i in range(nsym)]
    # codes as whole tokens (a symbol, or an escape and its literal), cut into strings at token starts
    tokens = [bytes([c]) for c in rng.integers(0, nsym, n_codes).tolist()]
    if escapes:
        for i in rng.integers(0, max(n_codes, 1), n_codes // 7 + 1).tolist():
            if i < len(tokens):
                tokens[i] = bytes([255, int(rng.choice([0, 7, 254, 255]))])
    cuts = np.unique(np.concatenate([[0, len(tokens)], rng.integers(0, len(tokens) + 1, 64)]))
    strings = [b"".join(tokens[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
    for pre, post in [(b"", b""), (b"\x05\x09", b"\xfe"), (b"\x01", b"\xff\xff")]:
        data = np.frombuffer(pre + b"".join(strings) + post, np.uint8)
        offs, out = v21_fsst.FsstTable(table).decode(data, offsets + len(pre))
        expected = [_reference_fsst(syms, s) for s in strings]
        assert offs[0] == 0
        assert [bytes(out[a:b]) for a, b in zip(offs[:-1], offs[1:])] == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_large_fsst_pages_with_and_without_escapes(tmp_path, version):
    """Pages with more than 2**18 codes take the pair path; non-ASCII text has escapes."""
    rng = np.random.default_rng(3)
    n = 40_000
    ascii_words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    a = [" ".join(rng.choice(ascii_words, int(k))) for k in rng.integers(1, 6, n)]
    b = ["".join(chr(c) for c in rng.integers(0x400, 0x4ff, int(k))) for k in rng.integers(0, 12, n)]
    table = pa.table({"a": pa.array(a), "b": pa.array(b, mask=rng.random(n) < 0.1)})
    path = write(tmp_path / "s.lance", table, version)
    r = LanceFileReaderV21(path)
    got = r.read_all()
    assert_tables_equal(got, table)
    assert_tables_equal(got, lance_file.LanceFileReader(path).read_all().to_table())
    idx = np.unique(rng.integers(0, n, 500))
    assert_tables_equal(r.take_rows(idx), pylance_take(path, idx))


# --------------------------------------------------------------------------------------------
# mini-block pages decoded as one batch
# --------------------------------------------------------------------------------------------
def _long_lists(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 700, n)  # rows longer than a chunk: rows span chunks
    lengths[rng.random(n) < 0.1] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    items = pa.array(rng.integers(-1000, 1000, int(offsets[-1])), pa.int64())
    lists = pa.ListArray.from_arrays(pa.array(offsets), items, mask=pa.array(rng.random(n) < 0.05))
    return pa.table({"l": lists, "k": pa.array(np.arange(n, dtype=np.int64))})


@pytest.mark.parametrize("version", VERSIONS)
def test_take_and_ranges_across_batched_list_pages(tmp_path, version):
    table = _long_lists(6000, seed=1)
    path = write(tmp_path / "l.lance", table, version, batch=300, data_cache_bytes=1 << 16)
    r = LanceFileReaderV21(path)
    pages = r._column_pages(0)
    assert len(pages) > 4 and all(isinstance(p, MiniBlockPage) for p in pages)
    assert len({p.batch_key for p in pages}) < len(pages)  # some pages decode together
    # rows at both sides of every page boundary and in the middle of pages
    firsts = [p.first_row for p in pages[1:]]
    idx = np.unique(np.concatenate([[0, table.num_rows - 1], np.array(firsts) - 1, np.array(firsts) + 3,
                                    np.array(firsts) + 57]).clip(0, table.num_rows - 1))
    got = r.take_rows(idx)
    assert_tables_equal(got, table.take(idx))
    assert_tables_equal(got, pylance_take(path, idx))
    for start, count in [(firsts[0] - 5, 10), (firsts[1] - 1, firsts[3] - firsts[1] + 2), (0, table.num_rows)]:
        assert_tables_equal(r.read_range(start, count), table.slice(start, count))
    assert_tables_equal(r.read_all(), lance_file.LanceFileReader(path).read_all().to_table())


# --------------------------------------------------------------------------------------------
# full-zip pages and take_rows I/O
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_back_to_back_full_zip_pages_read_as_one(tmp_path, version):
    rng = np.random.default_rng(5)
    n = 6000
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 128, dtype=np.float32)), 128)
    table = pa.table({"v": vec})
    path = write(tmp_path / "v.lance", table, version, batch=500, data_cache_bytes=1 << 18)
    r = LanceFileReaderV21(path)
    pages = r._column_pages(0)
    assert len(pages) > 1 and all(isinstance(p, FullZipPage) for p in pages)
    assert len(r._read_pages(0)) < len(pages)
    assert_tables_equal(r.read_all(), table)
    idx = np.array([0, 1, 499, 500, 2999, 3001, n - 1])
    assert_tables_equal(r.take_rows(idx), pylance_take(path, idx))
    assert_tables_equal(r.read_range(450, 1200), table.slice(450, 1200))


@pytest.mark.parametrize("version", VERSIONS)
def test_take_requests_only_the_chunks_and_rows_holding_the_rows(tmp_path, version):
    rng = np.random.default_rng(7)
    n = 50_000
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16)
    table = pa.table({"i": pa.array(rng.integers(0, 1 << 40, n)), "s": pa.array([f"row {i}" for i in range(n)]),
                      "v": vec})
    path = write(tmp_path / "t.lance", table, version)
    store = Recording()
    r = LanceFileReaderV21(path, store=store)
    idx = np.array([3, 20_000, 20_001, n - 1])
    r.take_rows(idx)  # loads the page metadata
    store.ranges.clear()
    assert_tables_equal(r.take_rows(idx), table.take(idx))
    expected = set()
    for c in range(r.num_columns):
        for p in r._column_pages(c):
            rows = idx[(idx >= p.first_row) & (idx < p.first_row + p.num_rows)] - p.first_row
            if isinstance(p, MiniBlockPage):
                for row in rows.tolist():
                    ch = int(np.searchsorted(p.chunk_first_row[1:], row, side="right"))
                    expected.add((p.data_pos + int(p.chunk_offsets[ch]), int(p.chunk_sizes[ch])))
            else:
                pos = p.offsets[0]
                expected.update((pos + row * p.stride, p.stride) for row in rows.tolist())
    # the requests cover exactly those chunks / rows (adjacent ones may come as one range)
    want = sorted(expected)
    merged: list[list[int]] = []
    for a, size in want:
        if merged and merged[-1][0] + merged[-1][1] == a:
            merged[-1][1] += size
        else:
            merged.append([a, size])
    assert sorted(store.ranges) == [tuple(m) for m in merged]


# --------------------------------------------------------------------------------------------
# the decode thread pool and the bit unpacker's two paths
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 3])
def test_decode_threads_give_the_same_tables(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(reader_v2_1, "DECODE_THREADS", threads)
    monkeypatch.setattr(reader_v2_1, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(reader_v2_1, "_POOL", kept_pool(threads, "lance-ops-decode"))  # a pool of this size
    table = _long_lists(3000, seed=2)
    table = table.append_column("s", pa.array([f"v{i % 97}-{i}" for i in range(table.num_rows)]))
    path = write(tmp_path / "p.lance", table, "2.2", batch=500, data_cache_bytes=1 << 16)
    r = LanceFileReaderV21(path)
    assert_tables_equal(r.read_all(), table)
    idx = np.arange(5, table.num_rows, 37)
    assert_tables_equal(r.take_rows(idx), pylance_take(path, idx))


@pytest.mark.parametrize("nblocks", [1, 5, 60])
@pytest.mark.parametrize("t_bits", [8, 16, 32, 64])
def test_unpack_blocks_against_bit_arithmetic(nblocks, t_bits):
    rng = np.random.default_rng(nblocks * t_bits)
    dtype = bp._UINT[t_bits]
    lanes = bp.BLOCK // t_bits
    for width in sorted({1, 3, t_bits // 2, t_bits - 1, t_bits}):
        values = (rng.integers(0, 2**63, (nblocks, bp.BLOCK), dtype=np.uint64) & ((1 << width) - 1)).astype(dtype)
        # pack by the definition: value r of lane l occupies bits [r*W, r*W + W) of the lane's words
        logical = bp.lane_positions(t_bits).reshape(t_bits, lanes)
        words = np.zeros((nblocks, width, lanes), dtype=object)
        for r in range(t_bits):
            v = values[:, logical[r]].astype(object)
            k, s = divmod(r * width, t_bits)
            words[:, k, :] |= (v << s) & ((1 << t_bits) - 1)
            if s + width > t_bits:
                words[:, k + 1, :] |= v >> (t_bits - s)
        packed = words.astype(dtype).reshape(-1)
        assert np.array_equal(bp.unpack_blocks(packed, t_bits, width, nblocks), values.reshape(-1))
