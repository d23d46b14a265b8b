"""Mini-block page assembly without per-chunk loops (ADR 0059), held to the bytes of the
straightforward per-chunk assembly: levels compressed chunk by chunk with ``compress_level_block``,
each chunk's header packed with ``struct`` and its buffers padded one by one. Also: the shredder's
fast list layer against its general layer, inline bitpacking against block-by-block packing, and the
dictionary decision of strings against the exact distinct count. Whole files against pylance: the
interop tests.
"""
from __future__ import annotations

import struct
from typing import Optional

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops.format.v2_1 import encode as enc
from lance_ops.format.v2_1 import leaf_values as lv
from lance_ops.format.v2_1.compression import bitpack as bp
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.v2_1.layout import pages as lay
from lance_ops.format.v2_1.layout import shred as sh
from lance_ops.format.version import FileVersion

FILL = b"\xfe"


def _pad(b: bytes) -> bytes:
    return b + FILL * ((-len(b)) % 8)


def _reference_page(mb: ev.MiniBlocks, rep: Optional[np.ndarray], defs: Optional[np.ndarray],
                    max_visible: Optional[int], large: bool) -> tuple[bytes, bytes]:
    """(metadata words, chunk bytes) of a mini-block page, one chunk at a time."""
    version = FileVersion.V2_2 if large else FileVersion.V2_1
    some = rep if rep is not None else defs
    counts = list(mb.counts)
    bounds = [0]
    if some is not None:
        visible = np.flatnonzero(defs <= max_visible) if (rep is not None and defs is not None
                                                          and max_visible is not None) else None
        seen = 0
        for c in counts[:-1]:
            seen += c
            bounds.append(int(visible[seen - 1]) + 1 if visible is not None else seen)
        bounds.append(len(some))
    rc = lay.choose_level_codec(rep, version) if rep is not None else None
    dc = lay.choose_level_codec(defs, version) if defs is not None else None
    words, body = [], b""
    for i, count in enumerate(counts):
        levels = []
        if rc is not None and rep is not None:
            levels.append(lay.compress_level_block(rc, rep[bounds[i]:bounds[i + 1]]))
        if dc is not None and defs is not None:
            levels.append(lay.compress_level_block(dc, defs[bounds[i]:bounds[i + 1]]))
        bufs = [bytes(b) for b in mb.bufs[i]]
        nlev = bounds[i + 1] - bounds[i] if some is not None else 0
        head = struct.pack("<H", nlev) + b"".join(struct.pack("<H", len(x)) for x in levels)
        head += b"".join(struct.pack("<I" if large else "<H", len(x)) for x in bufs)
        chunk = _pad(head) + b"".join(_pad(x) for x in levels + bufs)
        last = i == len(counts) - 1
        log = 0 if last and not mb.last_full else count.bit_length() - 1
        words.append(((len(chunk) // 8 - 1) << 4) | log)
        body += chunk
    return np.array(words, dtype="<u4" if large else "<u2").tobytes(), body


def _array(kind: str, n: int, rng: np.random.Generator, null_p: float) -> pa.Array:
    mask = rng.random(n) < null_p if null_p else None
    if kind == "ints":  # bitpacked
        return pa.array(rng.integers(0, 300, n).astype(np.int32), mask=mask)
    if kind == "random":  # flat
        return pa.array(rng.integers(-2**31, 2**31 - 1, n).astype(np.int32), mask=mask)
    if kind == "runs":  # RLE
        return pa.array(np.repeat(rng.integers(0, 4, n // 50 + 1), 50)[:n].astype(np.int64), mask=mask)
    if kind == "strings":  # variable / FSST
        lens = rng.integers(0, 30, n)
        return pa.array(["abcdefgh" * (int(k) // 8) + str(k) for k in lens.tolist()], pa.string(), mask=mask)
    flat = pa.array(rng.random(2 * n).astype(np.float32))
    return pa.FixedSizeListArray.from_arrays(flat, 2, mask=pa.array(mask) if mask is not None else None)


def _nest(rng: np.random.Generator, items: pa.Array, max_len: int, null_p: float, empty_p: float,
          garbage: bool) -> pa.Array:
    """A list array over ``items`` (null lists may own items when ``garbage``)."""
    lens = rng.integers(1, max_len + 1, len(items))
    lens[rng.random(len(lens)) < empty_p] = 0
    cum = np.cumsum(lens)
    rows = int(np.searchsorted(cum, len(items), side="right"))
    offs = np.concatenate([[0], cum[:rows]]).astype(np.int32)
    mask = rng.random(rows) < null_p
    if not garbage:
        lens2 = np.diff(offs)
        lens2[mask] = 0
        offs = np.concatenate([[0], np.cumsum(lens2)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offs), items, mask=pa.array(mask) if mask.any() else None)


PAGE = dict(
    kind=st.sampled_from(["ints", "random", "runs", "strings", "fsl"]),
    n=st.one_of(st.integers(1, 300), st.integers(1000, 9000)),
    seed=st.integers(0, 2**32 - 1),
    shape=st.sampled_from(["flat", "list", "list_list", "struct_list", "list_struct"]),
    null_p=st.sampled_from([0.0, 0.01, 0.3]),
    empty_p=st.sampled_from([0.0, 0.05, 0.9]),
    max_len=st.sampled_from([1, 3, 9, 60]),
    garbage=st.booleans(),
    offset=st.integers(0, 3),
    large=st.booleans(),
    compression=st.sampled_from([None, "lz4"]),
)


def _column(kind, n, seed, shape, null_p, empty_p, max_len, garbage, offset) -> pa.Array:
    rng = np.random.default_rng(seed)
    items = _array(kind, n, rng, null_p)
    if shape == "flat":
        arr = items
    elif shape == "list":
        arr = _nest(rng, items, max_len, null_p, empty_p, garbage)
    elif shape == "list_list":
        arr = _nest(rng, _nest(rng, items, max_len, null_p, empty_p, garbage), 4, null_p, empty_p, garbage)
    elif shape == "struct_list":
        inner = _nest(rng, items, max_len, null_p, empty_p, garbage)
        smask = pa.array(rng.random(len(inner)) < null_p) if null_p else None
        arr = pa.StructArray.from_arrays([inner], names=["l"], mask=smask)
    else:
        smask = pa.array(rng.random(n) < null_p) if null_p else None
        arr = _nest(rng, pa.StructArray.from_arrays([items], names=["v"], mask=smask), max_len, null_p, empty_p,
                    garbage)
    return arr.slice(min(offset, max(len(arr) - 1, 0)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PAGE)
def test_miniblock_page_bytes_equal_the_per_chunk_assembly(kind, n, seed, shape, null_p, empty_p, max_len, garbage,
                                                           offset, large, compression) -> None:
    _check_page(_column(kind, n, seed, shape, null_p, empty_p, max_len, garbage, offset), large, compression)


@pytest.mark.parametrize("kind", ["strings", "ints", "runs", "random", "fsl"])
@pytest.mark.parametrize("shape", ["flat", "list", "list_struct"])
@pytest.mark.parametrize("large", [False, True])
def test_many_chunk_pages_equal_the_per_chunk_assembly(kind: str, shape: str, large: bool) -> None:
    _check_page(_column(kind, 30000, 7, shape, 0.1, 0.1, 9, True, 1), large, None)


def _check_page(arr: pa.Array, large: bool, compression: Optional[str]) -> None:
    field = pa.field("c", arr.type)
    (path, _), = sh.leaf_fields(field)
    sd = sh.shred_leaf(arr, path)
    if len(sd.values) == 0:
        return
    mb = enc._values_miniblock(sd.values, enc.Params(compression=compression))
    page = lay.miniblock_page(mb, sd.rep, sd.defs, sd.layers, sd.max_visible_def, len(sd.values), large,
                              limit_21=not large)
    if page is None:
        return
    words, body = _reference_page(mb, sd.rep, sd.defs, sd.max_visible_def, large)
    assert bytes(page.buffers[0][0]) == words
    assert bytes(page.buffers[1][0]) == body


@pytest.mark.parametrize("kind", ["flat", "inline", "ool", "rle"])
@pytest.mark.parametrize("seed", range(8))
def test_level_column_equals_per_chunk_blocks(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    nch = int(rng.integers(1, 40)) if kind != "inline" else int(rng.integers(1, 6))
    top = 1024 // nch if kind == "inline" else int(rng.choice([5, 700, 1024, 1500, 5000]))
    lens = rng.integers(1, top + 1, nch)
    width = int(rng.integers(1, 16))
    levels = rng.integers(0, 1 << width, int(lens.sum())).astype(np.uint16)
    if seed % 2:
        levels = np.repeat(levels[: len(levels) // 300 + 1], 300)[: len(levels)]  # long runs
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    codec = lay.LevelCodec(kind, int(bp.bit_width(levels)) if kind == "ool" else 16)
    col = lay.level_column(codec, levels, bounds)
    want = [lay.compress_level_block(codec, levels[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    assert [col.chunk(i) for i in range(nch)] == want
    assert col.sizes().tolist() == [len(w) for w in want]
    assert lay.compress_level_chunks(codec, [levels[a:b] for a, b in zip(bounds[:-1], bounds[1:])]) == want


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**{k: v for k, v in PAGE.items() if k not in ("large", "compression")})
def test_fast_list_layer_equals_the_general_layer(kind, n, seed, shape, null_p, empty_p, max_len, garbage,
                                                  offset) -> None:
    arr = _column(kind, n, seed, shape, null_p, empty_p, max_len, garbage, offset)
    (path, _), = sh.leaf_fields(pa.field("c", arr.type))
    fast = sh.shred_leaf(arr, path)
    general = pytest.MonkeyPatch()
    general.setattr(sh, "_fresh_list", lambda *a: None)
    try:
        slow = sh.shred_leaf(arr, path)
    finally:
        general.undo()
    for name in ("rep", "defs", "valid"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert fast.layers == slow.layers and fast.max_visible_def == slow.max_visible_def
    assert fast.values.equals(slow.values)


@pytest.mark.parametrize("t_bits", [8, 16, 32, 64])
def test_inline_pack_equals_block_by_block(t_bits: int) -> None:
    rng = np.random.default_rng(t_bits)
    widths = rng.integers(0, t_bits + 1, 9)
    values = np.concatenate([rng.integers(0, 1 << int(w), 1024, dtype=np.uint64) if w < 64 else
                             rng.integers(0, 2**63, 1024, dtype=np.uint64) * 2 + 1 for w in widths])
    values = values[:-100].astype(bp.UINT_TYPES[t_bits])
    data, sizes = bp.inline_pack(values, t_bits)
    want, want_sizes = [], []
    for k in range(0, len(values), 1024):
        block = np.zeros(1024, values.dtype)
        block[:len(values[k:k + 1024])] = values[k:k + 1024]
        w = bp.bit_width(block)
        b = np.array([w], values.dtype).tobytes() + bp.pack_blocks(block, t_bits, w).tobytes()
        want.append(b)
        want_sizes.append(len(b))
    assert data.tobytes() == b"".join(want) and sizes == want_sizes


def _strings(n: int, card: int, seed: int, min_len: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    pool = [("%0*d" % (min_len, k)) + "x" * int(rng.integers(0, 12)) for k in range(card)]
    return pa.array([pool[i] for i in rng.integers(0, card, n)])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(100, 20000), frac=st.floats(0.05, 1.0), seed=st.integers(0, 2**31), min_len=st.sampled_from([1, 8]),
       ratio=st.sampled_from([0.8, 0.5, 1.0]))
def test_string_dictionary_decision_is_the_exact_one(n: int, frac: float, seed: int, min_len: int, ratio: float) -> None:
    arr = _strings(n, max(1, int(n * frac)), seed, min_len)
    offs, data, obits = lv.var_parts(arr)
    got = enc._dict_var(offs, data, obits, enc.Params(dict_size_ratio=ratio))
    card = len(set(arr.to_pylist()))
    avg = int(offs[-1] - offs[0]) // n
    est = card * avg + card * 4 + n * 4
    assert (got is not None) == (est / (int(offs[-1] - offs[0]) + (n + 1) * 4) < ratio)
    assert lv.distinct_lower_bound(offs, data) <= card


@pytest.mark.parametrize("n", [1, 100, 4095, 4096, 50000])
@pytest.mark.parametrize("card", [1, 300, 50000])
def test_digest_count_is_the_exact_count_of_distinct_digests(n: int, card: int) -> None:
    values = pa.array(["%08d" % (k % card) + "y" * (k % 3) for k in range(n)])
    offs, data, _ = lv.var_parts(values)
    want = len(np.unique(lv._digests(offs, data)))
    assert lv.distinct_lower_bound(offs, data) == want == len(set(values.to_pylist()))


@pytest.mark.parametrize("dims,item_bits", [([3], 32), ([2, 4], 16), ([128], 32), ([5], 8), ([1, 7], 64)])
@pytest.mark.parametrize("n", [1, 9, 1000, 4097])
def test_fsl_chunks_with_validity_equal_chunk_by_chunk_packing(dims: list[int], item_bits: int, n: int) -> None:
    rng = np.random.default_rng(n + len(dims))
    cums = list(np.cumprod(dims))
    validities = [rng.random(n * int(cm)) < 0.7 if j % 2 == 0 or len(dims) == 1 else None for j, cm in enumerate(cums)]
    data = rng.integers(0, 256, n * int(cums[-1]) * item_bits // 8, dtype=np.uint8)
    mb = ev.fsl_miniblock(data, n, item_bits, dims, validities)
    row = 0
    for i, c in enumerate(mb.counts):
        want = [np.packbits(v[row * int(cm):(row + c) * int(cm)], bitorder="little").tobytes()
                for cm, v in zip(cums, validities) if v is not None]
        want.append(data[row * int(cums[-1]) * item_bits // 8:((row + c) * int(cums[-1]) * item_bits + 7) // 8].tobytes())
        assert [bytes(b) for b in mb.bufs[i]] == want
        row += c
    assert row == n


def _rle_reference(values: np.ndarray, t_bits: int) -> tuple[list[int], list[list[bytes]]]:
    """RLE chunks one at a time: the rest when it fits, else the largest fitting power of two."""
    n, w = len(values), t_bits // 8

    def encode(a: int, b: int) -> tuple[bytes, bytes]:
        vals, lens = [], []
        for v in values[a:b].tolist():
            if vals and vals[-1] == v and lens[-1] < 255:
                lens[-1] += 1
            else:
                vals.append(v)
                lens.append(1)
        return np.array(vals, values.dtype).tobytes(), bytes(lens)

    counts, bufs, pos = [], [], 0
    while pos < n:
        rem = n - pos
        if rem <= ev.MAX_MINIBLOCK_VALUES:
            v, r = encode(pos, n)
            if len(r) * (w + 1) <= ev.MAX_MINIBLOCK_BYTES:
                counts.append(rem)
                bufs.append([v, r])
                break
        k = min(12, rem.bit_length() - 1)
        while True:
            v, r = encode(pos, pos + (1 << k))
            if len(r) * (w + 1) <= ev.MAX_MINIBLOCK_BYTES or k == 0:
                break
            k -= 1
        counts.append(1 << k)
        bufs.append([v, r])
        pos += 1 << k
    return counts, bufs


@pytest.mark.parametrize("t_bits", [8, 16, 32, 64])
@pytest.mark.parametrize("seed", range(5))
def test_rle_chunks_equal_one_chunk_at_a_time(t_bits: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30000))
    run = int(rng.choice([1, 2, 7, 300, 5000]))
    values = np.repeat(rng.integers(0, 5, n // run + 1), rng.integers(1, 2 * run + 1, n // run + 1))[:n]
    values = values.astype(bp.UINT_TYPES[t_bits])
    mb = ev.rle_miniblock(values, t_bits)
    counts, bufs = _rle_reference(values, t_bits)
    assert mb.counts == counts
    assert [[bytes(b) for b in mb.bufs[i]] for i in range(len(counts))] == bufs


def test_digest_count_over_the_table_limit_is_a_lower_bound() -> None:
    n = (1 << 20) + 5
    values = pa.array(np.arange(n) % 70000).cast(pa.string())
    offs, data, _ = lv.var_parts(values)
    assert lv.distinct_lower_bound(offs, data) == 70000


@pytest.mark.parametrize("seed", range(6))
def test_digests_equal_the_per_value_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lo = 8 if seed % 2 else 0  # every value has 8 bytes (Arrow cut) or not (in-place windows)
    vals = [bytes(rng.integers(0, 4, int(k), dtype=np.uint8)) for k in rng.integers(lo, 20, 3000)]
    arr = pa.array(vals, pa.binary()).slice(seed, 3000 - 2 * seed)
    offs, data, _ = lv.var_parts(arr)
    mix, mask = int(lv.MIX), (1 << 64) - 1
    want = [((int.from_bytes(v[:8].ljust(8, b"\0"), "little") ^ (len(v) * mix & mask)) * mix) & mask
            for v in arr.to_pylist()]
    assert lv._digests(offs, data).tolist() == want
