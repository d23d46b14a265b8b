"""Arrow assembly of Lance 2.1+ pages: decoded leaf values and repetition/definition levels -> Arrow arrays.

Split from :mod:`lance_ops.format.v2_1.decode` (which turns page bytes into values and levels); the
reader calls :func:`build_array` once the leaves of a field are decoded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.format.v2_1.compression.decode import EncodingCorrupt, EncodingUnsupported, Vals
from lance_ops.format.v2_1.compression.per_value import per_value_var
from lance_ops.format.v2_1.decode import placeholder_vals
from lance_ops.format.v2_1.layout import repdef as rd
from lance_ops.schema import FieldNode


# --------------------------------------------------------------------------------------------
# Arrow assembly
# --------------------------------------------------------------------------------------------
def _bitmap(valid: Optional[np.ndarray]) -> Optional[pa.Buffer]:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())


def leaf_array(dtype: pa.DataType, vals: Vals, valid: Optional[np.ndarray]) -> pa.Array:
    """The Arrow array of ``dtype`` for decoded leaf values ``vals`` with validity ``valid``."""
    n = vals.n
    if valid is not None and len(valid) != n:
        raise EncodingCorrupt(f"{len(valid)} validity entries for {n} values")
    nulls = None if valid is None else int(n - valid.sum())
    vb = _bitmap(valid)
    if nulls == 0:
        nulls = 0
    if pa.types.is_dictionary(dtype):
        inner = leaf_array(dtype.value_type, vals, valid)
        enc = pc.dictionary_encode(inner)
        return enc.cast(dtype) if enc.type != dtype else enc
    if pa.types.is_boolean(dtype):
        bits: np.ndarray | np.bool_
        if vals.kind == "bool":
            bits = vals.data
        else:
            bits = vals.data.reshape(n, -1).any(axis=1) if vals.width else np.zeros(n, bool)
        data = pa.py_buffer(np.packbits(bits, bitorder="little").tobytes())
        return pa.Array.from_buffers(dtype, n, [vb, data], null_count=nulls if vb is not None else 0)
    if pa.types.is_null(dtype):
        return pa.nulls(n)
    if (pa.types.is_string(dtype) or pa.types.is_binary(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_large_binary(dtype)):
        if vals.kind != "var":
            if n == 0 or vals.width == 0:
                vals = placeholder_vals("var", 0, n)
            else:
                raise EncodingCorrupt(f"{dtype} column decoded to fixed-width values")
        large = pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype)
        var_offs = vals.var_offsets()
        offs = var_offs.astype(np.int64 if large else np.int32)
        if not large and len(var_offs) and var_offs[-1] > np.iinfo(np.int32).max:
            raise EncodingUnsupported(f"{dtype} values exceed 2 GiB; read as large type")
        return pa.Array.from_buffers(dtype, n, [vb, pa.py_buffer(np.ascontiguousarray(offs)),
                                                pa.py_buffer(np.ascontiguousarray(vals.data))],
                                     null_count=nulls if vb is not None else 0)
    if pa.types.is_fixed_size_list(dtype):
        dim = dtype.list_size
        child_t = dtype.value_type
        if vals.kind == "bool":
            cvals = Vals("bool", n * dim, vals.data)
        else:
            w = vals.width // dim if dim else 0
            cvals = Vals("fixed", n * dim, np.ascontiguousarray(vals.data).reshape(n * dim, w) if w else np.zeros((n * dim, 0), np.uint8))
        child = leaf_array(child_t, cvals, vals.item_validity)
        return pa.FixedSizeListArray.from_arrays(child, dim,
                                                 mask=None if vb is None or valid is None else pa.array(~valid))
    if pa.types.is_struct(dtype) and vals.kind == "var":
        if n == 0:
            return pa.array([], type=dtype)
        return _variable_packed_struct(dtype, vals, valid)
    if pa.types.is_struct(dtype):  # packed struct: row-major fixed-width children
        widths = []
        for f in dtype:
            bw = f.type.bit_width if hasattr(f.type, "bit_width") else None
            if not bw or bw % 8:
                raise EncodingUnsupported(f"packed struct child {f.name}: {f.type}")
            widths.append(bw // 8)
        data = vals.data.reshape(n, -1)
        kids, pos = [], 0
        for f, w in zip(dtype, widths):
            kids.append(leaf_array(f.type, Vals("fixed", n, np.ascontiguousarray(data[:, pos:pos + w])), None))
            pos += w
        return pa.StructArray.from_arrays(kids, fields=list(dtype),
                                          mask=None if vb is None or valid is None else pa.array(~valid))
    bw = dtype.bit_width if hasattr(dtype, "bit_width") else None
    if vals.kind != "fixed":
        raise EncodingCorrupt(f"{dtype} column decoded to {vals.kind} values")
    width = vals.width
    if bw is not None and bw % 8 == 0 and width != bw // 8:
        if n == 0 or width == 0:
            vals = placeholder_vals("fixed", bw // 8, n)
        else:
            raise EncodingCorrupt(f"{dtype} needs {bw // 8}-byte values, page has {width}-byte values")
    data = pa.py_buffer(np.ascontiguousarray(vals.data))
    return pa.Array.from_buffers(dtype, n, [vb, data], null_count=nulls if vb is not None else 0)


def _variable_packed_struct(dtype: pa.StructType, vals: Vals, valid: Optional[np.ndarray]) -> pa.Array:
    """Rows of a 2.2 variable packed struct: per field, fixed bytes or a length then bytes."""
    if not vals.packed or len(vals.packed) != dtype.num_fields:
        raise EncodingCorrupt("variable packed struct rows without a matching field layout")
    n_all = vals.n
    buf = vals.data
    row_offs = vals.var_offsets()
    present = np.flatnonzero(row_offs[1:] > row_offs[:-1])  # null rows carry no bytes
    n = len(present)
    cur = row_offs[:-1][present].copy()
    end = row_offs[1:][present]
    kids = []
    for f, (kind, nb, enc) in zip(dtype, vals.packed):
        if kind == "fixed":
            if np.any(cur + nb > end):
                raise EncodingCorrupt("variable packed struct field runs past its row")
            raw = buf[cur[:, None] + np.arange(nb)[None, :]] if n else np.zeros((0, nb), np.uint8)
            full = np.zeros((n_all, nb), np.uint8)
            full[present] = raw
            child = Vals("fixed", n_all, full)
            cur = cur + nb
        else:
            if np.any(cur + nb > end):
                raise EncodingCorrupt("variable packed struct length runs past its row")
            ln = np.zeros(n, np.int64)
            for k in range(nb):
                ln |= buf[cur + k].astype(np.int64) << (8 * k)
            cur = cur + nb
            if np.any(cur + ln > end):
                raise EncodingCorrupt("variable packed struct value runs past its row")
            lens = np.zeros(n_all, np.int64)
            lens[present] = ln
            starts = np.zeros(n_all, np.int64)
            starts[present] = cur
            offs = np.zeros(n_all + 1, np.int64)
            np.cumsum(lens, out=offs[1:])
            src = np.repeat(starts - offs[:-1], lens) + np.arange(int(offs[-1]), dtype=np.int64)
            child = per_value_var(enc, Vals("var", n_all, buf[src], offs))
            cur = cur + ln
        kids.append(leaf_array(f.type, child, None))
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays(kids, fields=list(dtype), mask=mask)


_DESCRIPTION_TYPE = pa.struct([pa.field("position", pa.uint64()), pa.field("size", pa.uint64())])


def _descriptions(vals: Vals, valid: Optional[np.ndarray]) -> pa.Array:
    """Blob (position, size) descriptions; a null row is a null struct of null children (as pylance)."""
    n = vals.n
    raw = np.ascontiguousarray(vals.data).reshape(-1).view("<u8").reshape(n, 2) if n else np.zeros((0, 2), "<u8")
    vb = _bitmap(valid)
    nulls = 0 if vb is None or valid is None else int(n - valid.sum())
    kids = [pa.Array.from_buffers(pa.uint64(), n, [vb, pa.py_buffer(np.ascontiguousarray(raw[:, i]))], null_count=nulls)
            for i in (0, 1)]
    return pa.StructArray.from_arrays(kids, fields=list(_DESCRIPTION_TYPE),
                                      mask=None if vb is None or valid is None else pa.array(~valid))


@dataclass
class LeafState:
    """One decoded leaf of a field on its way to Arrow: levels, values and how far they are used."""
    levels: rd.Levels
    values: Vals
    canon: rd.Canonical
    positions: Optional[np.ndarray]  # bool mask of the level entries still in play (None: all)
    rep_threshold: int  # element starts: rep >= this
    layer: int  # index (innermost = 0) of the layer of the node being built
    limit: Optional[int] = None  # entries in play are those with def < limit (None: all)
    dmax: Optional[int] = None  # largest definition level (computed once)

    def any_defs(self, lo: int, skip: Optional[int] = None) -> bool:
        """Whether an entry in play has a definition level in ``[lo, limit)`` other than ``skip``."""
        d = self.levels.defs
        if d is None or not len(d):
            return False
        if self.dmax is None:
            self.dmax = int(d.max())
        hi = self.limit if self.limit is not None else self.dmax + 1
        if lo >= hi or self.dmax < lo:
            return False
        m = (d >= lo) & (d < hi)
        if skip is not None and lo <= skip < hi:
            m &= d != skip
        return bool(m.any())


def _start_mask(lv: rd.Levels, keep: Optional[np.ndarray], thr: int) -> Optional[np.ndarray]:
    """Element starts among the entries in play (None: every entry)."""
    if lv.rep is not None and thr > 0:
        m = lv.rep >= thr
        return m if keep is None else m & keep
    return keep


def _count(mask: Optional[np.ndarray], n: int) -> int:
    return n if mask is None else int(np.count_nonzero(mask))


def _at(arr: np.ndarray, mask: Optional[np.ndarray]) -> np.ndarray:
    return arr if mask is None else np.compress(mask, arr)  # (much faster than arr[mask])


def build_array(node: FieldNode, leaves: dict[int, LeafState], leaf_ids: Callable[[FieldNode], list[int]]) -> pa.Array:
    """Assemble the Arrow array of schema node ``node`` from its leaves' states.

    ``leaves`` maps leaf field id -> LeafState; ``leaf_ids(node)`` lists the leaf field ids under a node.
    """
    dtype = node.arrow.type
    ids = leaf_ids(node)
    s0: LeafState = leaves[ids[0]]
    lv = s0.levels
    keep = s0.positions
    smask = _start_mask(lv, keep, s0.rep_threshold)
    nstarts = _count(smask, lv.n)
    defs0 = lv.defs
    t = s0.canon.null_level(s0.layer)
    is_leaf_node = len(ids) == 1 and ids[0] == node.id
    if is_leaf_node:
        n_in_play = _count(keep, lv.n)
        valid = _at(defs0, keep) < t if defs0 is not None and s0.any_defs(t) else None
        if nstarts != n_in_play:
            raise EncodingCorrupt("leaf levels disagree with the repetition structure")
        if s0.values.n != n_in_play:
            raise EncodingCorrupt(f"{s0.values.n} values for {n_in_play} visible level entries")
        if dtype == _DESCRIPTION_TYPE and s0.values.kind == "fixed" and s0.values.width == 16:
            return _descriptions(s0.values, valid)
        return leaf_array(dtype, s0.values, valid)
    if pa.types.is_struct(dtype):
        valid = _at(defs0, smask) < t if defs0 is not None and s0.any_defs(t) else None
        for i in ids:
            leaves[i].layer -= 1
        kids = [build_array(c, leaves, leaf_ids) for c in node.children]
        if any(len(k) != nstarts for k in kids):
            raise EncodingCorrupt("struct children have different lengths")
        mask = None if valid is None or valid.all() else pa.array(~valid)
        return pa.StructArray.from_arrays(kids, fields=list(dtype), mask=mask)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        empty = s0.canon.empty_level(s0.layer)
        if defs0 is not None and s0.any_defs(t, skip=empty):
            d = _at(defs0, smask)
            valid = (d < t) | (d == empty)
        else:
            valid = None
        for i in ids:
            s = leaves[i]
            tt = s.canon.null_level(s.layer)
            s_defs = s.levels.defs
            if s_defs is not None and s.any_defs(tt):
                vis = s_defs < tt
                s.positions = vis if s.positions is None else s.positions & vis
            if s.levels.defs is not None:
                s.limit = tt if s.limit is None else min(s.limit, tt)
            s.rep_threshold -= 1
            s.layer -= 1
        # offsets: the number of child element starts before each of this list's starts
        child = _start_mask(lv, s0.positions, s0.rep_threshold)
        large = pa.types.is_large_list(dtype)
        odt = np.int64 if large or lv.n >= (1 << 31) - 1 else np.int32
        offs = np.empty(nstarts + 1, odt)
        spos = np.flatnonzero(smask) if keep is None and smask is not None and s0.rep_threshold == 0 else None
        if spos is not None and (not len(spos) or spos[0] == 0):
            # an outermost list of items: a row's entries are all its items, or one entry for a
            # null / empty list
            seg = np.diff(np.append(spos, lv.n))
            if s0.positions is not None:
                seg *= np.take(s0.positions, spos)
            offs[0] = 0
            np.cumsum(seg, out=offs[1:])
        elif child is None:
            offs[:-1] = np.arange(lv.n, dtype=odt) if smask is None else np.flatnonzero(smask)
            offs[-1] = lv.n
        else:
            before: np.ndarray = np.cumsum(child, dtype=odt)
            before -= child
            offs[:-1] = _at(before, smask)
            offs[-1] = np.count_nonzero(child)
        kid = build_array(node.children[0], leaves, leaf_ids)
        off_arr = pa.array(offs.astype(np.int64 if large else np.int32, copy=False))
        mask = None if valid is None or valid.all() else pa.array(~valid)
        cls = pa.LargeListArray if large else pa.ListArray
        return cls.from_arrays(off_arr, kid, type=dtype, mask=mask)
    raise EncodingUnsupported(f"cannot assemble {dtype}")
