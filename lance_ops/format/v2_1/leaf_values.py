"""Leaf values as numpy for the Lance 2.1+ writer: value buffers of fixed- and variable-width
arrays, and the cheap whole-page questions the encoder asks before choosing an encoding (is
every valid value the same, a lower bound of the distinct count)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.format.v2_1.layout import pages as lay
from lance_ops.format.v2_1.layout import shred as sh


def fixed_bits(t: pa.DataType) -> Optional[int]:
    """Bits per value of a fixed-width type (1 for booleans), None for other types."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        return t.byte_width * 8
    try:
        bw = t.bit_width
    except ValueError:
        return None
    return bw if bw and bw % 8 == 0 else None


def fixed_bytes(arr: pa.Array, bits: int) -> np.ndarray:
    """The value buffer of a fixed-width array slice (bits LSB-first for booleans)."""
    n = len(arr)
    buf = arr.buffers()[1]
    if bits == 1:
        if buf is None or n == 0:
            return np.zeros((n + 7) // 8, np.uint8)
        raw = np.frombuffer(buf, dtype=np.uint8)
        off = arr.offset
        if off % 8 == 0:
            out = raw[off // 8: off // 8 + (n + 7) // 8].copy()
        else:
            bits_ = np.unpackbits(raw, bitorder="little")[off:off + n]
            out = np.packbits(bits_, bitorder="little")
        if n % 8:
            out[-1] &= (1 << (n % 8)) - 1
        return out
    w = bits // 8
    if buf is None or n == 0:
        return np.zeros(n * w, np.uint8)
    return np.frombuffer(buf, dtype=np.uint8, count=n * w, offset=arr.offset * w)


def var_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, int]:
    """(int64 offsets (n+1, not rebased), data bytes, offset bits) of a binary/string slice."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    n = len(arr)
    bufs = arr.buffers()
    odt = np.int64 if large else np.int32
    if bufs[1] is None:
        offs = np.zeros(n + 1, np.int64)
    else:
        offs = np.frombuffer(bufs[1], dtype=odt, count=n + 1, offset=arr.offset * np.dtype(odt).itemsize).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and len(bufs) > 2 else np.zeros(0, np.uint8)
    return offs, data, 64 if large else 32


def is_var(t: pa.DataType) -> bool:
    """Whether ``t`` is a (large) string or binary type."""
    return (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t))


#: odd 64-bit constant mixing a value's length into its digest
MIX = np.uint64(0x9E3779B97F4A7C15)


def _digests(offs: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each value ``data[offs[i]:offs[i+1]]`` (its first 8 bytes mixed with its
    length, then times an odd constant): equal values have equal digests."""
    n = len(offs) - 1
    data = np.ascontiguousarray(data, dtype=np.uint8)
    start = offs[:-1]
    lens_i = np.diff(offs)
    # 8-byte windows read in place; only values starting in the last 8 bytes of ``data`` read a
    # zero-padded copy of that tail (no copy of the whole buffer)
    inside = int(np.searchsorted(start, len(data) - 8, side="right")) if len(data) >= 8 else 0
    head = np.empty(n, dtype="<u8")
    if inside:
        # an unaligned u64 view at every byte: one 8-byte item per value taken (not 8 bytes)
        win = np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
        head[:inside] = win[start[:inside]]
    if inside < n:
        t0 = max(0, len(data) - 8)
        tail = np.zeros(len(data) - t0 + 8, dtype=np.uint8)
        tail[:len(data) - t0] = data[t0:]
        twin = np.lib.stride_tricks.as_strided(tail, shape=(len(tail) - 7, 8), strides=(1, 1))
        head[inside:] = np.ascontiguousarray(twin[np.minimum(start[inside:] - t0, len(tail) - 8)]).view("<u8").reshape(-1)
    lens = lens_i.astype(np.uint64)
    if n and int(lens_i.min()) < 8:  # bytes past a short value belong to the next one: mask them
        short = np.flatnonzero(lens_i < 8)
        head[short] &= (np.uint64(1) << (lens[short] * np.uint64(8))) - np.uint64(1)
    digest = head ^ (lens * MIX)
    digest *= MIX
    return digest


#: below this many values the digests are counted by a sort (the bucket table would not pay)
TABLE_MIN_VALUES = 4096
#: the bucket table of the digest count holds at most 2**22 int32 (16 MiB)
TABLE_MAX_BITS = 22


def distinct_lower_bound(offs: np.ndarray, data: np.ndarray) -> int:
    """A lower bound of the distinct count of the values ``data[offs[i]:offs[i+1]]``: the distinct
    count of a 64-bit digest of each value (equal values have equal digests, so it never exceeds
    the true count); over 2**20 values, of the digests' top 32 bits (sorted, as before).

    Up to 2**20 values the digests are counted without sorting them all (ADR 0059): every value
    writes its index into a table slot chosen by the top bits of its digest (8-16 slots per
    value); each written slot keeps one *owner*, and every digest that differs from its slot
    owner's digest is one of the few colliding ones, which a sort of only those counts.
    Distinct digests = owners + distinct non-owner digests."""
    n = len(offs) - 1
    if n <= 0:
        return 0
    digest = _digests(offs, data)
    if n < TABLE_MIN_VALUES:
        srt = np.sort(digest)
        return 1 + int(np.count_nonzero(srt[1:] != srt[:-1]))
    if (n - 1).bit_length() + 2 > TABLE_MAX_BITS:
        # over 2**20 values the table would be crowded: their top 32 bits counted by a sort (a
        # lower bound too; less memory than the table)
        folded = np.sort((digest >> np.uint64(32)).astype(np.uint32))
        return 1 + int(np.count_nonzero(folded[1:] != folded[:-1]))
    bits = min((n - 1).bit_length() + 3, TABLE_MAX_BITS)
    slot = (digest >> np.uint64(64 - bits)).view(np.int64)
    owner = np.empty(1 << bits, dtype=np.int32)  # only written slots are read
    ids = np.arange(n, dtype=np.int32)
    owner[slot] = ids  # one of the writers of each slot stays: its owner
    mine = owner[slot]
    owners = int(np.count_nonzero(mine == ids))
    other = np.sort(digest[digest[mine] != digest])
    return owners + (1 + int(np.count_nonzero(other[1:] != other[:-1])) if len(other) else 0)


def constant_value(values: pa.Array, valid: Optional[np.ndarray]) -> Optional[tuple[Optional[bytes], Optional[bytes]]]:
    """(inline bytes, value buffer) if every valid value is the same (2.2 constant layout)."""
    t = values.type
    n = len(values)
    if n == 0:
        return None
    idx = np.flatnonzero(valid) if valid is not None else None
    if idx is not None and len(idx) == 0:
        return None
    if pa.types.is_boolean(t):
        flags = np.unpackbits(fixed_bytes(values, 1), count=n, bitorder="little")
        sel = flags if idx is None else flags[idx]
        if sel.min() != sel.max():
            return None
        return bytes([int(sel[0])]), None
    bits = fixed_bits(t)
    if bits is not None and not pa.types.is_fixed_size_list(t) and not pa.types.is_dictionary(t):
        w = bits // 8
        m = fixed_bytes(values, bits).reshape(n, w)
        # a prefix of the valid values rejects most columns before anything is copied
        head = m[:64] if idx is None else m[idx[:64]]
        if not (head == head[0]).all():
            return None
        sel = m if idx is None else m[idx]
        if not (sel == sel[0]).all():
            return None
        return sel[0].tobytes(), None
    if is_var(t):
        offs, data, obits = var_parts(values)
        lens = np.diff(offs)
        sel_i = np.arange(n) if idx is None else idx
        l0 = int(lens[sel_i[0]])
        if not (lens[sel_i[:64]] == l0).all() or not (lens[sel_i] == l0).all():
            return None
        starts = offs[:-1][sel_i]
        if l0:
            vm = data[starts[:, None] + np.arange(l0)[None, :]] if len(sel_i) * l0 <= 64 * 1024 * 1024 else None
            if vm is None or not (vm == vm[0]).all():
                return None
            v = vm[0].tobytes()
        else:
            v = b""
        odt = "<i8" if obits == 64 else "<i4"
        return None, lay.scalar_value_buffer([np.array([0, len(v)], dtype=odt).tobytes(), v])
    return None


def differs_early(sd: sh.Shredded, k: int = 64) -> bool:
    """True when two valid values among the first ``k`` visible slots differ: the page is then not
    constant, decided without a pass over the whole page (most columns stop here)."""
    values = sd.values
    t = values.type
    head = min(k, len(values))
    if sd.defs is not None:
        d = sd.defs[:4 * k]
        if sd.max_visible_def is not None:
            d = d[d <= sd.max_visible_def]
        visible_ok = d[:head] == 0
        head = len(visible_ok)
        ok: Optional[np.ndarray] = visible_ok
    else:
        ok = sd.valid[:head] if sd.valid is not None else None
    if head < 2:
        return False
    part = values.slice(0, head)
    bits = fixed_bits(t)
    if bits is not None and bits % 8 == 0 and not pa.types.is_fixed_size_list(t) and not pa.types.is_boolean(t):
        m = fixed_bytes(part, bits).reshape(head, bits // 8)
        sel = m if ok is None else m[ok]
        return len(sel) > 1 and not bool((sel == sel[0]).all())
    if is_var(t):
        vals = part.to_pylist() if ok is None else [v for v, keep in zip(part.to_pylist(), ok.tolist()) if keep]
        return len(set(vals)) > 1
    return False
