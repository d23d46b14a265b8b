"""The vectorised FSST encoder (ADRs 0046, 0057): greedy longest match within 511-byte segments
(checked against a one-position-at-a-time reference), decodable by our reader, and written files
read by pylance 14.0.2 exactly (empty strings, nulls, non-ASCII, long strings, large_string,
binary, all 256 byte values, many 8-byte symbols, random letters: tables of 1- and 2-byte
symbols, encoded without terminators); the sync-point parse equals the greedy walk."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops.file import LanceFileWriter
from lance_ops.format.v2_1 import leaf_values as lv
from lance_ops.format.v2_1.compression import fsst, fsst_match
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable
from lance_ops.format.v2_1.reader import LanceFileReaderV21


def _parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    offs, data, _ = lv.var_parts(arr)
    return np.asarray(offs, dtype=np.int64), np.asarray(data, dtype=np.uint8)


def _symbols(table: bytes) -> dict[bytes, int]:
    info = int.from_bytes(table[:8], "little")
    n = info & 0xFF
    vals = np.frombuffer(table, "<u8", count=n, offset=8)
    lens = np.frombuffer(table, np.uint8, count=n, offset=8 + 8 * n)
    return {int(v).to_bytes(8, "little")[:ln]: i for i, (v, ln) in enumerate(zip(vals.tolist(), lens.tolist()))}


def _reference(strings: list[bytes], table: bytes) -> bytes:
    """Greedy longest match, one position at a time, never past a 511-byte segment's end."""
    syms = _symbols(table)
    out = bytearray()
    for s in strings:
        for a in range(0, len(s), 511):
            seg = s[a:a + 511]
            i = 0
            while i < len(seg):
                for ln in range(min(8, len(seg) - i), 0, -1):
                    code = syms.get(seg[i:i + ln])
                    if code is not None:
                        out.append(code)
                        i += ln
                        break
                else:
                    out += bytes([255, seg[i]])
                    i += 1
    return bytes(out)


def _check(strings: list[bytes]) -> bytes:
    arr = pa.array(strings, pa.binary())
    offs, data = _parts(arr)
    table, new_offs, out = fsst.compress(offs, data)
    assert len(table) == fsst.TABLE_SIZE
    got_offs, got = FsstTable(table).decode(np.asarray(out, np.uint8), np.asarray(new_offs, np.int64))
    assert [bytes(got[int(a):int(b)]) for a, b in zip(got_offs[:-1], got_offs[1:])] == strings
    if int.from_bytes(table[:8], "little") >> 24 & 1:
        assert bytes(out) == _reference(strings, table)
    return table


def _words(rng: np.random.Generator, n: int) -> list[bytes]:
    words = [b"alpha", b"beta", b"gamma", b"delta", b"http://", b"www.", b".com", b"/index.html", b"\xc3\xa9t\xc3\xa9"]
    pick = rng.integers(0, len(words), (n, 4))
    return [b"".join(words[j] for j in row) for row in pick.tolist()]


def test_greedy_longest_match_like_the_reference() -> None:
    rng = np.random.default_rng(3)
    strings = _words(rng, 3000) + [b""] * 50 + [bytes(rng.integers(97, 100, 1500, dtype=np.uint8))] * 3
    table = _check(strings)
    assert max(len(s) for s in _symbols(table)) == 8


def test_all_256_byte_values_and_many_8_byte_symbols() -> None:
    rng = np.random.default_rng(4)
    # every byte value in the sample (the terminator cannot be a missing byte) ...
    noise = [bytes(rng.integers(0, 256, 40, dtype=np.uint8)) for _ in range(600)]
    # ... and ~255 distinct frequent 8-byte symbols (the hash tables must size themselves)
    keys = [bytes(rng.integers(0, 256, 8, dtype=np.uint8)) for _ in range(255)]
    dense = [b"".join(keys[j] for j in rng.integers(0, 255, 6).tolist()) for _ in range(4000)]
    _check(noise + dense)
    _check(dense)


def test_255_symbols_of_one_length_are_all_found() -> None:
    # 255 keys in one hash table: the table sizes itself (a fixed 4,096 slots found no
    # collision-free multiplier for so many keys and raised)
    rng = np.random.default_rng(1)
    vals = np.unique(rng.integers(1, 255, (255, 8), dtype=np.uint8).view("<u8").reshape(-1))
    table = fsst_match.Table(vals, np.full(len(vals), 8), term=0)
    pick = rng.integers(0, len(vals), 500)
    data = vals[pick].view(np.uint8).copy()
    buf, st, en = fsst_match.expand(data, np.array([0]), np.array([len(data)]), 0)
    code, lens = fsst_match.match(buf, table)
    at = np.arange(0, len(data), 8)
    assert lens[at].tolist() == [8] * len(at)
    assert code[at].tolist() == pick.tolist()


def _letters(rng: np.random.Generator, n: int, low: int, high: int, alphabet: int = 26) -> list[bytes]:
    lens = rng.integers(low, high + 1, n)
    data = rng.integers(97, 97 + alphabet, int(lens.sum()), dtype=np.uint8).tobytes()
    ends = np.cumsum(lens).tolist()
    return [data[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _max_symbol(table: bytes) -> int:
    return max(len(s) for s in _symbols(table))


def test_short_symbols_without_terminators_like_the_reference() -> None:
    # random letters (the bench's "name" and "info.c"): 1- and 2-byte symbols only, so the
    # encoder works on the input bytes and re-matches each segment's last byte to one byte;
    # with empty strings, multi-segment strings (> 511 bytes) and escaped bytes
    rng = np.random.default_rng(7)
    strings = _letters(rng, 4000, 0, 30) + _letters(rng, 6, 600, 1600) + [b""] * 20
    strings += [s + bytes([200 + i % 50]) + s for i, s in enumerate(_letters(rng, 300, 1, 10))]
    order = rng.permutation(len(strings))
    strings = [strings[i] for i in order.tolist()]
    table = _check(strings)
    assert _max_symbol(table) == 2
    table = _check(_letters(rng, 6000, 5, 15))
    assert _max_symbol(table) == 2


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 26), st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_random_letters_round_trip(alphabet: int, high: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = max(1, 40_000 // max(1, high // 2 + 1))
    strings = _letters(rng, n, 0, high, alphabet) + _letters(rng, 2, 0, 1200, alphabet)
    _check(strings)


def _tokens_like_the_walk(raw: list[int], max_len: int) -> None:
    n = len(raw)
    lens = np.array([min(v, max_len, n - i) for i, v in enumerate(raw)], dtype=np.uint8)
    want = np.zeros(n, dtype=bool)
    p = 0
    while p < n:
        want[p] = True
        p += int(lens[p])
    assert fsst_match.tokens(lens, max_len).tolist() == want.tolist()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=300), st.integers(1, 8))
def test_tokens_is_the_greedy_walk(raw: list[int], max_len: int) -> None:
    # tokens() from sync points equals the walk from the segment's start, for any match lengths
    # (at most max_len, none running past the end)
    _tokens_like_the_walk(raw, max_len)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 2), min_size=1, max_size=2000))
def test_short_tokens_from_bits_is_the_greedy_walk(raw: list[int]) -> None:
    # matches of 1-2 bytes: the tokens come from carries over the positions' bits
    _tokens_like_the_walk(raw, 2)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=60), st.integers(0, 2**32 - 1))
def test_random_binary_round_trips(pieces: list[bytes], seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = max(1, 34_000 // max(1, sum(map(len, pieces))))
    strings = [pieces[i] for i in rng.integers(0, len(pieces), n * len(pieces)).tolist()]
    _check(strings)


lance = pytest.importorskip("lance")
from lance.file import LanceFileReader as PyReader  # noqa: E402


def _table(rng: np.random.Generator) -> pa.Table:
    n = 20_000
    words = [w.decode() for w in _words(rng, n)]
    nulls = [None if i % 7 == 0 else ("" if i % 11 == 0 else f"{w}{i}") for i, w in enumerate(words)]
    uni = ["日本語テキスト" + w + "ß" * (i % 5) for i, w in enumerate(words)]
    long_ = [(w * 40)[: 200 + (i % 900)] for i, w in enumerate(words)]
    raw = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) + b"constant-tail" for _ in range(n)]
    letters = [None if i % 13 == 0 else s.decode() for i, s in enumerate(_letters(rng, n, 0, 25))]
    letters[5] = "q" * 1500  # a multi-segment string
    fsst_md = {b"lance-encoding:compression": b"fsst"}
    return pa.table({
        "nulls": pa.array(nulls, pa.string()),
        "unicode": pa.array(uni, pa.string()),
        "long": pa.array(long_, pa.string()),
        "large": pa.array(nulls, pa.large_string()),
        "binary": pa.array(raw, pa.binary()),
        "letters": pa.array(letters, pa.string()),
    }, schema=pa.schema([
        pa.field("nulls", pa.string()), pa.field("unicode", pa.string()), pa.field("long", pa.string()),
        pa.field("large", pa.large_string()), pa.field("binary", pa.binary(), metadata=fsst_md),
        pa.field("letters", pa.string()),
    ]))


def test_files_read_by_pylance(tmp_path) -> None:
    table = _table(np.random.default_rng(5))
    path = str(tmp_path / "f.lance")
    with LanceFileWriter(path, table.schema, version="2.2") as w:
        w.write_batch(table)
    got = PyReader(path).read_all().to_table()
    for name in table.column_names:
        assert got.column(name).to_pylist() == table.column(name).to_pylist(), name
    kinds = [sorted(set(LanceFileReaderV21(path).column_layouts(c))) for c in range(table.num_columns)]
    assert all(any("fsst" in k for k in ks) for ks in kinds), kinds


def test_token_counts_without_numpy_bitwise_count(monkeypatch):
    """numpy 1.26 has no ``np.bitwise_count``: the table lookup gives the same compressed bytes."""
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 30, 6000)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    data = rng.integers(97, 123, int(offs[-1]), dtype=np.uint8)
    want = fsst.compress(offs, data)
    monkeypatch.setattr(fsst, "_bits_set", fsst.table_bits_set)
    got = fsst.compress(offs, data)
    assert got[0] == want[0] and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    assert np.array_equal(fsst.table_bits_set(np.arange(256, dtype=np.uint8)),
                          [bin(i).count("1") for i in range(256)])
