"""Column encoders of the Lance 2.1 / 2.2 writer (the writer's counterpart of ``v2_1.decode``).

In 2.1+ only *leaf* fields have columns (struct validity and list offsets live in every leaf's
repetition/definition levels, see ``v2_1.layout.shred``). A top-level field accumulates incoming
arrays until its budget is exceeded, then every leaf below it gets one page for those rows, its
``priority`` the first row. Per page the structural encoding is chosen as upstream does:

* no visible values, or every value null -> all-null layout (no buffers for plain nullable
  columns; raw u16 levels otherwise);
* 2.2: every valid value equal -> constant layout;
* Arrow dictionaries, and low-cardinality strings (and, in 2.2, 64/128-bit values) -> mini-block
  with a dictionary;
* values narrower than 256 bytes -> mini-block (inline bitpacking, RLE, FSST, variable or flat);
* wider values -> full-zip.

Field metadata honoured: ``lance-encoding:compression`` (``zstd`` / ``lz4`` wrap mini-block
chunks or full-zip values, ``fsst`` forces FSST, ``none`` disables compression),
``lance-encoding:compression-level``, ``lance-encoding:structural-encoding`` (``miniblock`` /
``fullzip``), ``lance-encoding:dict-size-ratio``, ``lance-encoding:rle-threshold``,
``lance-encoding:packed`` (fixed-width packed structs), ``lance-encoding:bss`` (byte stream split
of 32/64-bit mini-block values, only with a requested compression; ``auto`` by byte entropy, see
``v2_1.compression.bss``) and ``lance-encoding:blob`` (``large_binary`` values stored out of line, pages
of descriptions in a blob layout, see ``v2_1.blob``; top-level ``lance.blob.v2`` fields of
2.2 files are written by ``v2_1.blob_v2``). Anything else that would change the
bytes (blobs below lists, variable packed structs) is refused with ``UnsupportedError`` before a
byte is written.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.errors import UnsupportedError, UnsupportedTypeError
from lance_ops.format.container import PAGE_LAYOUT_URL
from lance_ops.format.v2_0.leaf_encoder import EncodedPage, PageQueue, compact
from lance_ops.format.v2_1 import blob
from lance_ops.format.v2_1 import leaf_values as lv
from lance_ops.format.v2_1.compression import bitpack as bp
from lance_ops.format.v2_1.compression import bss as bss_mod
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.v2_1.layout import pages as lay
from lance_ops.format.v2_1.layout import shred as sh
from lance_ops.format.version import FileVersion

COMPRESSION_META_KEY = b"lance-encoding:compression"
COMPRESSION_LEVEL_META_KEY = b"lance-encoding:compression-level"
STRUCTURAL_META_KEY = b"lance-encoding:structural-encoding"
DICT_SIZE_RATIO_META_KEY = b"lance-encoding:dict-size-ratio"
RLE_THRESHOLD_META_KEY = b"lance-encoding:rle-threshold"
BSS_META_KEY = b"lance-encoding:bss"
BLOB_META_KEY = b"lance-encoding:blob"
MINIBLOCK_MAX_BYTE_LENGTH_PER_VALUE = 256
DICT_TOO_SMALL = 100
FSST_LEAST_INPUT_SIZE = 32 * 1024
FSST_LEAST_INPUT_MAX_LENGTH = 5
WRITABLE_VERSIONS = (FileVersion.V2_1, FileVersion.V2_2)


@dataclass(frozen=True)
class PageJob:
    """The encoding of one queued page (or the pages one oversized queue is cut into): ``run()``
    returns them; ``nbytes`` is the Arrow size of its input (what it holds in memory)."""

    run: Callable[[], list["EncodedPageV21"]]
    nbytes: int


@dataclass
class EncodedPageV21(EncodedPage):
    """A 2.1+ page: its encoding is a ``PageLayout`` and its priority the first row."""

    priority: int = 0
    type_url: str = PAGE_LAYOUT_URL


# --------------------------------------------------------------------------------------------
# field parameters (field metadata)
# --------------------------------------------------------------------------------------------
@dataclass
class Params:
    """The encoding choices of one leaf field, parsed from its ``lance-encoding:*`` metadata."""

    compression: Optional[str] = None  # None | "none" | "zstd" | "lz4" | "fsst"
    level: Optional[int] = None
    structural: Optional[str] = None  # None | "miniblock" | "fullzip"
    dict_size_ratio: float = 0.8
    rle_threshold: Optional[float] = None
    bss: str = "auto"  # "auto" | "on" | "off" (lance-encoding:bss)

    @property
    def general(self) -> Optional[str]:
        """The general compression scheme requested ("zstd" or "lz4"), None otherwise."""
        return self.compression if self.compression in ("zstd", "lz4") else None


def field_meta(field: pa.Field, key: bytes) -> Optional[str]:
    """The text of the field metadata ``key``, or None."""
    md = field.metadata or {}
    if key in md:
        return md[key].decode(errors="replace").strip()
    return None


def params_of(field: pa.Field) -> Params:
    """Parse (and validate) the encoding metadata of a leaf field; UnsupportedError if unusable."""
    p = Params()
    comp = field_meta(field, COMPRESSION_META_KEY)
    if comp is not None:
        c = comp.lower()
        if c not in ("none", "zstd", "lz4", "fsst"):
            raise UnsupportedError(
                f"field {field.name!r}: lance-encoding:compression={comp!r} is not supported "
                "(supported: zstd, lz4, fsst, none)")
        p.compression = c
    lvl = field_meta(field, COMPRESSION_LEVEL_META_KEY)
    if lvl is not None:
        try:
            p.level = int(lvl)
        except ValueError:
            raise UnsupportedError(f"field {field.name!r}: lance-encoding:compression-level={lvl!r} is not an integer")
    st = field_meta(field, STRUCTURAL_META_KEY)
    if st is not None:
        s = st.lower()
        if s not in ("miniblock", "fullzip"):
            raise UnsupportedError(
                f"field {field.name!r}: lance-encoding:structural-encoding={st!r} (expected miniblock or fullzip)")
        p.structural = s
    ratio = field_meta(field, DICT_SIZE_RATIO_META_KEY)
    if ratio is not None:
        try:
            r = float(ratio)
        except ValueError:
            r = 0.8
        if not 0.0 < r <= 1.0:
            raise UnsupportedError(f"field {field.name!r}: dict-size-ratio is {ratio} which is not in (0, 1]")
        p.dict_size_ratio = r
    thr = field_meta(field, RLE_THRESHOLD_META_KEY)
    if thr is not None:
        try:
            p.rle_threshold = float(thr)
        except ValueError:
            pass
    p.bss = bss_mod.parse_mode(field_meta(field, BSS_META_KEY))
    return p


# --------------------------------------------------------------------------------------------
# leaf values as numpy
# --------------------------------------------------------------------------------------------
_fixed_bits = lv.fixed_bits
_fixed_bytes = lv.fixed_bytes
_var_parts = lv.var_parts
_is_var = lv.is_var
_distinct_lower_bound = lv.distinct_lower_bound
_differs_early = lv.differs_early
_constant_value = lv.constant_value


def _validity_np(arr: pa.Array) -> Optional[np.ndarray]:
    return sh.validity_of(arr)


# --------------------------------------------------------------------------------------------
# value compression choices
# --------------------------------------------------------------------------------------------
def _fixed_miniblock(data: np.ndarray, n: int, bits: int, params: Params) -> ev.MiniBlocks:
    if params.compression == "none" or bits not in (8, 16, 32, 64):
        mb = ev.flat_miniblock(data, n, bits)
    elif params.compression is not None and n and bss_mod.should_use(data, n, bits, params.bss):
        # byte stream split only with a requested compression, tried before RLE and bitpacking
        mb = bss_mod.bss_miniblock(data, n, bits)
    else:
        vals = bp.as_uint(data, bits) if n else np.zeros(0, bp.UINT_TYPES[bits])
        raw = n * bits // 8
        bitpack = ev.bitpack_estimate(vals, bits)
        chosen: Optional[ev.MiniBlocks] = None
        if n:
            runs_ok = True
            if params.rle_threshold is not None:
                runs = len(ev.run_starts(vals))
                runs_ok = runs < n * params.rle_threshold
            if runs_ok and ev.run_count(vals) * (bits // 8 + 1) < raw:
                rle = ev.rle_estimate(vals, bits)
                if rle < raw and (bitpack is None or bitpack >= rle):
                    chosen = ev.rle_miniblock(vals, bits)
        if chosen is None and bitpack is not None:
            chosen = ev.bitpack_miniblock(vals, bits)
        if chosen is None:
            chosen = ev.flat_miniblock(data, n, bits)
        mb = chosen
    if params.general:
        mb = ev.general_wrap(mb, params.general, params.level)
    return mb


def _var_stats(offs: np.ndarray, obits: int) -> tuple[int, int]:
    """(max value length, data size = bytes + offsets) of a variable-width page."""
    if len(offs) < 2:
        return 0, 0
    return int(np.diff(offs).max()), int(offs[-1] - offs[0]) + (obits // 8) * len(offs)


def _use_fsst(t: pa.DataType, offs: np.ndarray, obits: int, params: Params) -> bool:
    if params.compression == "fsst":
        return True
    if params.compression is not None:
        return False
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return False
    max_len, size = _var_stats(offs, obits)
    return max_len >= FSST_LEAST_INPUT_MAX_LENGTH and size >= FSST_LEAST_INPUT_SIZE


def _var_miniblock(t: pa.DataType, offs: np.ndarray, data: np.ndarray, obits: int, params: Params) -> ev.MiniBlocks:
    mb: Optional[ev.MiniBlocks] = None
    if params.compression != "none" and _use_fsst(t, offs, obits, params):
        from lance_ops.format.v2_1.compression import fsst

        table, coffs, cdata = fsst.compress(offs, data)
        inner = ev.variable_miniblock(coffs, cdata, obits)
        mb = ev.MiniBlocks(ev.enc_fsst(table, inner.encoding), inner.counts, inner.bufs, inner.num_buffers)
    if mb is None:
        mb = ev.variable_miniblock(offs, data, obits)
    if params.general:
        mb = ev.general_wrap(mb, params.general, params.level)
    return mb


# --------------------------------------------------------------------------------------------
# dictionary encoding
# --------------------------------------------------------------------------------------------
def _var_array(offs: np.ndarray, data: np.ndarray) -> pa.Array:
    """A large_binary array (no validity) over the raw values."""
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offs) - 1,
        [None, pa.py_buffer(np.ascontiguousarray(offs - offs[0], dtype=np.int64)),
         pa.py_buffer(np.ascontiguousarray(data[int(offs[0]):int(offs[-1])]))])


def _dict_var(offs: np.ndarray, data: np.ndarray, obits: int, params: Params) -> Optional[tuple]:
    n = len(offs) - 1
    if n < DICT_TOO_SMALL:
        return None
    data_size = int(offs[-1] - offs[0]) + (n + 1) * (obits // 8)
    avg = int(offs[-1] - offs[0]) // n
    if data_size == 0:
        return None

    def too_many(card: int) -> bool:
        est = card * avg + card * (obits // 8) + n * (obits // 8)
        return not est / data_size < params.dict_size_ratio

    # the distinct count of a prefix is a lower bound: when a prefix just long enough to exceed
    # the budget is all distinct, the full count (the expensive part) is not needed
    per = avg + obits // 8
    need = max(0, int((params.dict_size_ratio * data_size - n * (obits // 8)) / per) + 2) if per else n
    need += need // 64 + 16  # room for a few repeats in the prefix (a lower bound either way)
    if need < n:
        head = _distinct_lower_bound(offs[:need + 1], data)
        if too_many(head):
            return None
        # a prefix near the budget hints at a refusal: the digest bound of all values (a few
        # times cheaper than the dictionary) settles it first (ADR 0046; the decision is the same)
        if head * 2 > need and too_many(_distinct_lower_bound(offs, data)):
            return None
    # the dictionary's length is the distinct count: one hash pass decides and encodes
    enc = pc.dictionary_encode(_var_array(offs, data))  # dictionary in first-seen order, as upstream
    if too_many(len(enc.dictionary)):
        return None
    idx = np.asarray(enc.indices.to_numpy(zero_copy_only=False)).astype(np.uint32)
    d = enc.dictionary
    d_offs = np.frombuffer(d.buffers()[1], dtype=np.int64, count=len(d) + 1, offset=d.offset * 8)
    d_data = np.frombuffer(d.buffers()[2], dtype=np.uint8) if d.buffers()[2] is not None else np.zeros(0, np.uint8)
    return idx, d_offs, d_data, len(d)


def _distinct_u64(u: np.ndarray, budget: int) -> int:
    """The distinct count of ``u``, or a lower bound of it that is at least ``budget`` (the
    dictionary is then refused either way): values already in order (a BTREE's sorted values)
    are counted without a sort, and a prefix just long enough to exceed the budget is sorted first
    (all-distinct row ids stop there)."""
    if len(u) > 1:
        signed = u.view("<i8")
        if bool(np.all(u[1:] >= u[:-1])) or bool(np.all(signed[1:] >= signed[:-1])):
            return 1 + int(np.count_nonzero(u[1:] != u[:-1]))
    need = budget + budget // 64 + 16  # room for a few repeats in the prefix
    if need < len(u):
        head = np.sort(u[:need])
        if 1 + int(np.count_nonzero(head[1:] != head[:-1])) >= budget:
            return 1 + int(np.count_nonzero(head[1:] != head[:-1]))
    srt = np.sort(u)
    return 1 + int(np.count_nonzero(srt[1:] != srt[:-1])) if len(srt) else 0


def _dict_fixed(data: np.ndarray, n: int, bits: int, params: Params) -> Optional[tuple]:
    if n < DICT_TOO_SMALL or bits not in (64, 128):
        return None
    if bits == 64:
        u = data.view("<u8")
        card = _distinct_u64(u, int(n * (params.dict_size_ratio * 8 - 4) / 8) + 1)
        arr = pa.array(u, pa.uint64())
    else:
        arr = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(data.tobytes())])
        card = pc.count_distinct(arr).as_py()
    est = card * (bits // 8) + n * 4  # pylance 14: dictionary entries at their own width, u32 indices
    if not est / (n * bits // 8) < params.dict_size_ratio:
        return None
    enc = pc.dictionary_encode(arr)
    idx = np.asarray(enc.indices.to_numpy(zero_copy_only=False)).astype(np.uint32)
    d = enc.dictionary
    w = bits // 8
    dict_bytes = np.frombuffer(d.buffers()[1], dtype=np.uint8, count=len(d) * w, offset=d.offset * w).tobytes()
    return idx, dict_bytes, len(d)


def _fixed_dict_block(data: np.ndarray, card: int, bits: int, version: str) -> tuple[pb.CompressiveEncoding, bytes]:
    """Block compression of a fixed-width dictionary: bitpacking when it pays, else lz4 (2.2)."""
    if bits in (8, 16, 32, 64) and card:
        vals = bp.as_uint(data, bits)
        widths = bp.block_widths(vals)
        mx = int(widths.max())
        too_small = len(widths) == 1 and (1024 * int(widths[0]) + 7) // 8 >= card * bits // 8
        if mx < bits and not too_small:
            if card <= 1024:
                return ev.enc_inline_bitpacking(bits), bp.inline_pack(vals, bits)[0].tobytes()
            return ev.enc_out_of_line_bitpacking(bits, mx), bp.out_of_line_pack(vals, bits, mx).tobytes()
    return _dict_block(ev.enc_flat(bits), data.tobytes(), version)


def _dict_block(enc_inner: pb.CompressiveEncoding, raw: bytes, version: str) -> tuple[pb.CompressiveEncoding, bytes]:
    if version >= FileVersion.V2_2:
        comp = ev.buffer_compression("lz4", None)
        return ev.enc_general(comp, enc_inner), ev.general_compress("lz4", None, raw)
    return enc_inner, raw


# --------------------------------------------------------------------------------------------
# page encoding of one leaf
# --------------------------------------------------------------------------------------------
@dataclass
class LeafPage:
    """One encoded page of one leaf: layout message, buffers (lists of byte chunks) and row count."""

    layout: pb.PageLayout
    buffers: list[list]
    num_rows: int


def _fsl_layers(arr: pa.Array) -> tuple[list[int], list[Optional[np.ndarray]], pa.Array]:
    """Dimensions and child validities of FSL<...<FSL<x>>> rows, and the flattened items."""
    dims, vals = [], []
    cur = arr
    start, count = arr.offset, len(arr)
    while pa.types.is_fixed_size_list(cur.type):
        d = cur.type.list_size
        dims.append(d)
        child = cur.values.slice(start * d, count * d)
        vals.append(_validity_np(child))
        start, count = child.offset, len(child)
        cur = child
    return dims, vals, cur


def _max_len(values: pa.Array) -> int:
    t = values.type
    if _is_var(t):
        offs, _, _ = _var_parts(values)
        return int(np.diff(offs).max()) if len(offs) > 1 else 0
    if pa.types.is_fixed_size_list(t):
        dims, _, items = _fsl_layers(values.slice(0, 0))
        bits = _fixed_bits(items.type) or 8
        return (bits // 8) * int(np.prod(dims))
    scalar_bits = _fixed_bits(t)
    return (scalar_bits or 8) // 8


def encode_leaf(sd: sh.Shredded, params: Params, version: str) -> LeafPage:
    """Encode one page of a leaf column: all-null, constant (2.2), dictionary, mini-block or full-zip, chosen as
    pylance does from the values and ``params``."""
    values = sd.values
    n = len(values)
    layers = sd.layers
    rows = sd.num_rows
    large = version >= FileVersion.V2_2
    t = values.type
    valid = sd.valid
    nulls = n - int(valid.sum()) if valid is not None else 0
    # ---- all-null
    if n == 0 or nulls == n or (pa.types.is_struct(t) and t.num_fields == 0):
        if n > 0 and sd.is_simple_validity and sd.rep is None:
            out = lay.all_null_page(layers, None, None, simple=True)
        else:
            out = lay.all_null_page(layers, sd.rep, sd.defs, simple=False, version=version)
        return LeafPage(out.layout, out.buffers, rows)
    # ---- constant (2.2)
    if large and not pa.types.is_dictionary(t) and not pa.types.is_struct(t) and params.structural is None \
            and not _differs_early(sd):
        if sd.defs is not None:
            vis_defs = sd.defs if sd.max_visible_def is None else sd.defs[sd.defs <= sd.max_visible_def]
            full_valid = vis_defs == 0
        else:
            full_valid = valid
        const = _constant_value(values, full_valid)
        if const is not None:
            out = lay.constant_page(layers, sd.rep, sd.defs, const[0], const[1])
            return LeafPage(out.layout, out.buffers, rows)
    # ---- dictionary
    if pa.types.is_dictionary(t):
        return _dictionary_array_page(sd, params, version, valid)
    page = _maybe_dictionary_page(sd, params, version)
    if page is not None:
        return page
    # ---- mini-block or full-zip
    narrow = _max_len(values) < MINIBLOCK_MAX_BYTE_LENGTH_PER_VALUE
    use_mini = params.structural == "miniblock" or (params.structural is None and narrow)
    if use_mini:
        mb = _values_miniblock(values, params)
        mini = lay.miniblock_page(mb, sd.rep, sd.defs, layers, sd.max_visible_def, n, large,
                                  limit_21=not large)
        if mini is not None:
            return LeafPage(mini.layout, mini.buffers, rows)
    pv = _values_per_value(values, params)
    out = lay.fullzip_page(pv, sd.rep, sd.defs, valid, layers, sd.max_visible_def, n)
    return LeafPage(out.layout, out.buffers, rows)


def _values_miniblock(values: pa.Array, params: Params) -> ev.MiniBlocks:
    t = values.type
    n = len(values)
    if _is_var(t):
        offs, data, obits = _var_parts(values)
        return _var_miniblock(t, offs, data, obits, params)
    if pa.types.is_fixed_size_list(t):
        dims, vals, items = _fsl_layers(values)
        item_bits = _fixed_bits(items.type)
        if item_bits is None:
            raise UnsupportedTypeError(f"cannot encode values of type {t}")
        data = _fixed_bytes(items, item_bits)
        mb = ev.fsl_miniblock(data, n, item_bits, dims, vals)
        return mb
    if pa.types.is_struct(t):
        return _packed_struct_miniblock(values)
    bits = _fixed_bits(t)
    if bits is None:
        raise UnsupportedTypeError(f"cannot encode values of type {t}")
    data = _fixed_bytes(values, bits)
    return _fixed_miniblock(data, n, bits, params)


def _packed_struct_miniblock(values: pa.StructArray) -> ev.MiniBlocks:
    t = values.type
    n = len(values)
    widths, cols = [], []
    for i in range(t.num_fields):
        child = values.field(i)
        bits = _fixed_bits(child.type)
        if bits is None or bits % 8:
            raise UnsupportedTypeError(f"packed struct child {t.field(i).name!r} of type {child.type} is not fixed-width")
        widths.append(bits)
        cols.append(_fixed_bytes(child, bits).reshape(n, bits // 8))
    rowbytes = sum(widths) // 8
    mat = np.concatenate(cols, axis=1) if cols else np.zeros((n, 0), np.uint8)
    mb = ev.flat_miniblock(mat.reshape(-1), n, rowbytes * 8)
    e = pb.CompressiveEncoding()
    e.packed_struct.bits_per_value.extend(widths)
    e.packed_struct.values.CopyFrom(ev.enc_flat(rowbytes * 8))
    mb.encoding = e
    return mb


def _values_per_value(values: pa.Array, params: Params) -> ev.PerValue:
    t = values.type
    n = len(values)
    if _is_var(t):
        offs, data, obits = _var_parts(values)
        if params.compression == "none":
            return ev.PerValue(ev.enc_variable(obits), offsets=offs, data=data, offset_bits=obits)
        max_len, size = _var_stats(offs, obits)
        per_value_requested = params.compression is not None and params.compression != "fsst"
        if (max_len > 32 * 1024 or per_value_requested) and size >= FSST_LEAST_INPUT_SIZE:
            # every value compressed on its own (upstream: zstd unless configured otherwise)
            level = params.level if params.compression == "zstd" and params.level is not None else 0
            parts = []
            new_offs = np.zeros(n + 1, dtype=np.int64)
            for i in range(n):
                c = ev.general_compress("zstd", level, data[int(offs[i]):int(offs[i + 1])])
                parts.append(c)
                new_offs[i + 1] = new_offs[i] + len(c)
            cdata = np.frombuffer(b"".join(parts), dtype=np.uint8)
            enc = ev.enc_general(ev.buffer_compression("zstd", level), ev.enc_variable(obits))
            return ev.PerValue(enc, offsets=new_offs, data=cdata, offset_bits=obits)
        if _use_fsst(t, offs, obits, params):
            from lance_ops.format.v2_1.compression import fsst

            table, coffs, cdata = fsst.compress(offs, data)
            return ev.PerValue(ev.enc_fsst(table, ev.enc_variable(obits)), offsets=coffs, data=cdata, offset_bits=obits)
        return ev.PerValue(ev.enc_variable(obits), offsets=offs, data=data, offset_bits=obits)
    if pa.types.is_fixed_size_list(t):
        dims, vals, items = _fsl_layers(values)
        item_bits = _fixed_bits(items.type)
        if item_bits is None:
            raise UnsupportedTypeError(f"cannot encode values of type {t} per value")
        cum = int(np.prod(dims))
        data = _fixed_bytes(items, item_bits)
        row_bytes = cum * item_bits // 8
        cols: list[np.ndarray] = []
        per_row = 1
        for d, v in zip(dims, vals):
            per_row *= d
            if v is not None:
                nb = (per_row + 7) // 8
                bits_ = v.reshape(n, per_row)
                cols.append(np.packbits(bits_, axis=1, bitorder="little").reshape(n, nb))
        cols.append(np.ascontiguousarray(data[: n * row_bytes]).reshape(n, row_bytes))
        mat = np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0]
        enc = ev.enc_fsl(dims, [v is not None for v in vals], ev.enc_flat(item_bits))
        return ev.PerValue(enc, fixed_bytes=mat.shape[1], matrix=mat)
    if pa.types.is_struct(t):
        raise UnsupportedError("packed structs wider than 256 bytes per row (full-zip packed struct) are not supported")
    bits = _fixed_bits(t)
    if bits is None or bits % 8:
        raise UnsupportedTypeError(f"cannot encode values of type {t} per value")
    w = bits // 8
    mat = _fixed_bytes(values, bits).reshape(n, w)
    return ev.PerValue(ev.enc_flat(bits), fixed_bytes=w, matrix=mat)


def _maybe_dictionary_page(sd: sh.Shredded, params: Params, version: str) -> Optional[LeafPage]:
    values = sd.values
    t = values.type
    n = len(values)
    large = version >= FileVersion.V2_2
    if _is_var(t):
        if params.compression is not None or params.structural == "fullzip":
            return None  # explicit encoding requests keep strings out of dictionaries (as pylance)
        offs, data, obits = _var_parts(values)
        got = _dict_var(offs, data, obits, params)
        if got is None:
            return None
        idx, d_offs, d_data, card = got
        raw = ev.variable_block(d_offs, d_data, obits)
        denc, dbuf = _dict_block(ev.enc_variable(obits), raw, version)
    elif large:
        bits = _fixed_bits(t)
        if bits not in (64, 128) or pa.types.is_fixed_size_list(t):
            return None
        data = _fixed_bytes(values, bits)
        got = _dict_fixed(data, n, bits, params)
        if got is None:
            return None
        idx, dict_bytes, card = got
        denc, dbuf = _fixed_dict_block(np.frombuffer(dict_bytes, np.uint8), card, bits, version)
    else:
        return None
    mb = _fixed_miniblock(idx.view(np.uint8), n, 32,
                          Params(compression=params.compression, level=params.level, bss=params.bss))
    out = lay.miniblock_page(mb, sd.rep, sd.defs, sd.layers, sd.max_visible_def, n, large,
                             dictionary=(denc, dbuf, card), limit_21=not large)
    if out is None:
        return None
    return LeafPage(out.layout, out.buffers, sd.num_rows)


def _dictionary_array_page(sd: sh.Shredded, params: Params, version: str, valid: Optional[np.ndarray]) -> LeafPage:
    values = sd.values
    n = len(values)
    large = version >= FileVersion.V2_2
    dictionary = values.dictionary
    indices = values.indices
    ibits = indices.type.bit_width
    idata = _fixed_bytes(indices, ibits).copy()
    if valid is not None:
        # null entries (null index or null dictionary value) point at entry 0
        iv = np.frombuffer(idata.tobytes(), dtype=f"<u{ibits // 8}").copy()
        iv[~valid] = 0
        idata = iv.view(np.uint8)
    dt = dictionary.type
    card = len(dictionary)
    if _is_var(dt):
        offs, data, obits = _var_parts(dictionary)
        raw = ev.variable_block(offs, data, obits)
        denc, dbuf = _dict_block(ev.enc_variable(obits), raw, version)
    else:
        bits = _fixed_bits(dt)
        if bits is None or bits % 8:
            raise UnsupportedTypeError(f"dictionary of {dt} is not supported")
        denc, dbuf = _dict_block(ev.enc_flat(bits), _fixed_bytes(dictionary, bits).tobytes(), version)
    if card == 0:
        # every value null: handled as all-null above; a dictionary without entries needs no page data
        out = lay.all_null_page(sd.layers, sd.rep, sd.defs, simple=sd.is_simple_validity and sd.rep is None,
                                version=version)
        return LeafPage(out.layout, out.buffers, sd.num_rows)
    mb = _fixed_miniblock(idata, n, ibits, Params())
    mini = lay.miniblock_page(mb, sd.rep, sd.defs, sd.layers, sd.max_visible_def, n, large,
                              dictionary=(denc, dbuf, card), limit_21=False)
    assert mini is not None  # only the 2.1 chunk limit (off here) makes it give up
    return LeafPage(mini.layout, mini.buffers, sd.num_rows)


# --------------------------------------------------------------------------------------------
# field encoders
# --------------------------------------------------------------------------------------------
class FieldEncoderV21:
    """All leaf columns of one top-level field; pages cut when the field's budget is exceeded.

    Blob leaves (``v2_1.blob``) are replaced, as each batch arrives, by their descriptions
    (their bytes go to the batch's out-of-line buffers); a change of a blob leaf's rep/def layers
    between batches closes the pending page first, as pylance does."""

    def __init__(self, field: pa.Field, first_column: int, cache_bytes: int, max_page_bytes: int,
                 version: str) -> None:
        self.field = field
        self.version = version
        self.leaves = sh.leaf_fields(field)
        self.first_column = first_column
        self.blob_leaves = [i for i, (_, f) in enumerate(self.leaves) if blob.is_blob(f)]
        self.params = [Params() if i in self.blob_leaves else params_of(f) for i, (_, f) in enumerate(self.leaves)]
        self.blob_layers: Optional[tuple] = None  # per blob leaf: the layers of the queued batches
        self.queue = PageQueue(cache_bytes)
        self.max_page_bytes = max_page_bytes
        self.rows = 0

    def columns(self) -> Iterator[int]:
        """The column indices of this field's leaves."""
        yield from range(self.first_column, self.first_column + len(self.leaves))

    def maybe_encode(self, array: pa.Array, external: Optional[blob.OutOfLineBuffers] = None) -> list[EncodedPageV21]:
        """Queue ``array`` (blob leaves described first, bytes to ``external``); the pages once the field's budget
        is exceeded."""
        pages: list[EncodedPageV21] = []
        if self.blob_leaves:
            if external is None:
                raise ValueError("blob fields need the batch's out-of-line buffers")
            array, layers = self._describe_blobs(array, external)
            if self.queue.arrays and layers != self.blob_layers:
                queued = self.queue.take()
                assert queued is not None  # the queue holds arrays
                pages.extend(self._encode(queued))
            self.blob_layers = layers
        size = array.nbytes
        ready = self.queue.insert(array, size)
        if ready:
            return pages + self._encode(ready)
        self.queue.arrays[-1] = compact(array, size)
        return pages

    def _describe_blobs(self, array: pa.Array, external: blob.OutOfLineBuffers) -> tuple[pa.Array, tuple]:
        """``array`` with every blob leaf replaced by its descriptions (bytes go to ``external``)."""
        layers = []
        for i in self.blob_leaves:
            path, _ = self.leaves[i]
            sd = sh.shred_leaf(array, path)
            null_pos = sd.defs.astype(np.uint64) << np.uint64(16) if sd.defs is not None else 0
            desc = blob.describe(sd.values, sd.valid, null_pos, external)
            array = blob.replace_leaf(array, path, 0, blob.descriptions_array(desc))
            layers.append(tuple(sd.layers))
        return array, tuple(layers)

    def flush(self) -> list[EncodedPageV21]:
        """Pages of everything queued (the queue is emptied)."""
        ready = self.queue.take()
        return self._encode(ready) if ready else []

    def finish(self) -> list[EncodedPageV21]:
        """Nothing left at the end of the file (``flush`` wrote every page)."""
        return []

    def page_jobs(self, array: Optional[pa.Array]) -> tuple[list[PageJob], bool]:
        """Queue ``array`` (None: the end of the file, everything queued is due) of a field without
        blob leaves; the encode jobs of the pages that completes, in order, and whether one of them
        may cut a page inside an input array (a page over ``max_page_bytes``).

        A job depends only on its arrays and first row, so jobs (of one field too) may run in any
        thread and order; writing their pages in the order given gives the bytes of
        :meth:`maybe_encode` / :meth:`flush` (the writer's background encoding, ADR 0055)."""
        if array is None:
            ready = self.queue.take()
        else:
            size = array.nbytes
            ready = self.queue.insert(array, size)
            if not ready:
                self.queue.arrays[-1] = compact(array, size)
        if not ready:
            return [], False
        first_row, rows = self.rows, sum(len(a) for a in ready)
        self.rows += rows
        nbytes = sum(a.nbytes for a in ready)
        # concatenating can add a validity bitmap and offsets: the test errs towards "may cut"
        may_cut = nbytes + rows // 8 + (1 << 20) > self.max_page_bytes
        return [PageJob(functools.partial(self._encode_at, ready, first_row), nbytes)], may_cut

    def _encode(self, arrays: list[pa.Array]) -> list[EncodedPageV21]:
        first_row = self.rows
        self.rows += sum(len(a) for a in arrays)
        return self._encode_at(arrays, first_row)

    def _encode_at(self, arrays: list[pa.Array], first_row: int) -> list[EncodedPageV21]:
        """The pages of ``arrays`` (one or more when over ``max_page_bytes``), the first at row
        ``first_row``; reads no state that queueing changes."""
        array = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
        pages: list[EncodedPageV21] = []
        parts = min(max(1, math.ceil(array.nbytes / self.max_page_bytes)), max(1, len(array)))
        rows_per = math.ceil(len(array) / parts) if len(array) else 0
        for start in range(0, len(array), max(rows_per, 1)):
            piece = array.slice(start, rows_per) if parts > 1 else array
            pages.extend(self._page(piece, first_row + start))
            if parts == 1:
                break
        return pages

    def _page(self, array: pa.Array, first_row: int) -> list[EncodedPageV21]:
        out = []
        for i, ((path, _leaf), params) in enumerate(zip(self.leaves, self.params)):
            if i in self.blob_leaves:
                assert self.blob_layers is not None  # maybe_encode sets them before any page
                layers = self.blob_layers[self.blob_leaves.index(i)]
                bpage = blob.blob_page(blob.leaf_of(array, path), list(layers), self.version)
                out.append(EncodedPageV21(self.first_column + i, len(array), bpage.buffers, bpage.layout,
                                          priority=first_row))
                continue
            sd = sh.shred_leaf(array, path)
            page = encode_leaf(sd, params, self.version)
            out.append(EncodedPageV21(self.first_column + i, page.num_rows, page.buffers, page.layout,
                                      priority=first_row))
        return out


def build_encoder(field: pa.Field, next_column: list[int], cache_bytes: int, max_page_bytes: int,
                  version: str) -> FieldEncoderV21:
    """The 2.1+ encoder of ``field``; ``next_column`` is a one-element counter of column indices."""
    enc = FieldEncoderV21(field, next_column[0], cache_bytes, max_page_bytes, version)
    next_column[0] += len(enc.leaves)
    return enc
