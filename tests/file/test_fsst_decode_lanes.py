"""FSST decoding by byte lanes (ADR 0058): exactly what a one-code-at-a-time reference decoder
gives and what the Arrow ``take`` path gives, for any symbol table, code stream (escapes, unused
long symbols, strings starting anywhere), block size and lane limit; a used symbol longer than
the lane limit falls back to the Arrow path; malformed streams raise as before."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops.format.v2_1.compression import fsst_decode as fd
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable


def _table(lens: list[int], seed: int) -> tuple[bytes, list[bytes]]:
    """A symbol table of ``len(lens)`` symbols (encoder switch on) and the symbols' bytes."""
    rng = np.random.default_rng(seed)
    n = len(lens)
    syms = [bytes(rng.integers(0, 256, ln, dtype=np.uint8)) for ln in lens]
    info = n | (1 << 24) | (0xF55D << 32)
    words = b"".join(s.ljust(8, b"\0") for s in syms)
    return info.to_bytes(8, "little") + words + bytes(lens), syms


def _reference(codes: bytes, syms: list[bytes]) -> bytes:
    out, i = bytearray(), 0
    while i < len(codes):
        if codes[i] == 255:
            out.append(codes[i + 1])
            i += 2
        else:
            out += syms[codes[i]]
            i += 1
    return bytes(out)


def _stream(rng: np.random.Generator, n_sym: int, n_codes: int, escapes: float, usable: np.ndarray) -> bytes:
    out = bytearray()
    for _ in range(n_codes):
        if rng.random() < escapes:
            out += bytes([255, int(rng.integers(0, 256))])
        else:
            out.append(int(rng.choice(usable)))
    return bytes(out)


def _split(rng: np.random.Generator, codes: bytes, k: int) -> np.ndarray:
    """String boundaries at random code positions (never between an escape and its literal)."""
    ok = [0]
    i = 0
    while i < len(codes):
        i += 2 if codes[i] == 255 else 1
        ok.append(i)
    cut = sorted(set(rng.choice(ok, size=min(k, len(ok)), replace=True).tolist()) | {0, len(codes)})
    return np.asarray(cut, np.int64)


def _decode_all(table: bytes, data: np.ndarray, offs: np.ndarray, lane_max: int, block: int,
                monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, bytes]:
    monkeypatch.setattr(fd, "LANE_MAX", lane_max)
    monkeypatch.setattr(fd, "_BLOCK", block)
    got_offs, got = FsstTable(table).decode(data, offs)
    assert got_offs.dtype == np.int64
    return got_offs, bytes(got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 8), min_size=1, max_size=255), st.integers(0, 2**32 - 1),
       st.integers(1, 400), st.sampled_from([0.0, 0.1, 0.5]), st.sampled_from([1, 3, 7, 64, 1 << 15]),
       st.integers(0, 5), st.booleans())
def test_lanes_equal_the_reference_and_the_arrow_path(monkeypatch: pytest.MonkeyPatch, lens: list[int], seed: int,
                                                      n_codes: int, escapes: float, block: int, lead: int,
                                                      short_only: bool) -> None:
    rng = np.random.default_rng(seed)
    table, syms = _table(lens, seed)
    la = np.asarray(lens)
    usable = np.flatnonzero(la <= 4) if short_only and bool((la <= 4).any()) else np.arange(len(lens))
    codes = _stream(rng, len(lens), n_codes, escapes, usable)
    cuts = _split(rng, codes, 1 + n_codes // 5)
    # the strings lie after ``lead`` unrelated bytes, with one spare byte after them (as read)
    data = np.frombuffer(bytes(rng.integers(0, 256, lead, dtype=np.uint8)) + codes + b"\x07", np.uint8)
    offs = cuts + lead
    want = [_reference(codes[a:b], syms) for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist())]
    for lane_max in (0, 4, 8):
        got_offs, got = _decode_all(table, data, offs, lane_max, block, monkeypatch)
        assert got_offs[0] == 0
        assert [got[a:b] for a, b in zip(got_offs[:-1].tolist(), got_offs[1:].tolist())] == want
        assert got == b"".join(want)


def test_long_used_symbol_falls_back_and_unused_ones_do_not_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    table, syms = _table([1, 2, 8, 3], 9)
    offs = np.array([0, 3, 5], np.int64)
    short = np.frombuffer(bytes([0, 1, 3, 1, 0]), np.uint8)  # symbol 2 (8 bytes) unused: lanes
    calls: list[int] = []
    real = FsstTable._lanes

    def spy(self, ids, base, keep):  # type: ignore[no-untyped-def]
        got = real(self, ids, base, keep)
        calls.append(got is not None)
        return got
    monkeypatch.setattr(FsstTable, "_lanes", spy)
    o, d = FsstTable(table).decode(short, offs)
    assert calls == [True]
    assert bytes(d) == syms[0] + syms[1] + syms[3] + syms[1] + syms[0] and o.tolist() == [0, 6, 9]
    long_ = np.frombuffer(bytes([0, 2, 3, 1, 0]), np.uint8)  # symbol 2 used: the Arrow path
    o, d = FsstTable(table).decode(long_, offs)
    assert calls == [True, False]
    assert bytes(d) == syms[0] + syms[2] + syms[3] + syms[1] + syms[0] and o.tolist() == [0, 12, 15]


def test_malformed_streams_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    table, _ = _table([1, 2], 1)
    with pytest.raises(ValueError, match="ends with an escape code"):
        FsstTable(table).decode(np.array([0, 255], np.uint8), np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="not in the table"):
        FsstTable(table).decode(np.array([0, 5], np.uint8), np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="not in the table"):
        FsstTable(table).decode(np.array([255, 9, 5], np.uint8), np.array([0, 3], np.int64))
