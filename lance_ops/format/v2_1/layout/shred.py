"""Shredding Arrow arrays into the leaf columns of a Lance 2.1+ file.

Every leaf (a field that is neither a struct nor a list; packed structs are leaves too) gets:

* the *visible* leaf values: one value slot per entry that is not a null/empty list (entries below a
  null struct keep their slot), as an Arrow array whose own validity is the leaf's validity;
* repetition levels (only when a list is on the path): an entry with repetition ``r`` starts a new
  element of every list whose level is ``<= r``; the outermost list has level ``max_rep``;
* definition levels (only when some layer has nulls or empty lists): 0 = valid all the way down,
  otherwise the level of the *outermost* layer that is null/empty. Levels are numbered from the
  innermost layer outwards, each layer taking only what it needs in this page (a nullable item or
  list takes one "null" level, a list with empty lists one "empty" level, after its null level);
* the page's layer descriptions (innermost first) as ``RepDefLayer`` enum values.

Layer nullability is decided per page from the data (a layer with no nulls is ``ALL_VALID``), as
upstream does. All of it is vectorised: one numpy pass per layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.errors import UnsupportedTypeError

PACKED_KEYS = (b"packed", b"lance-encoding:packed")
TRUE_VALUES = (b"true", b"1", b"yes", b"on")


def is_packed(field: pa.Field) -> bool:
    """Whether ``field`` asks for the packed struct encoding (metadata ``packed`` = true)."""
    md = field.metadata or {}
    for key in PACKED_KEYS:
        if key in md and md[key].strip().lower() in TRUE_VALUES:
            return True
    return False


def is_list(t: pa.DataType) -> bool:
    """Whether ``t`` is a list or large list type."""
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def is_leaf(field: pa.Field) -> bool:
    """Whether ``field`` is a leaf column: not a list, and a struct only when packed or without children."""
    t = field.type
    if pa.types.is_struct(t):
        return is_packed(field) or t.num_fields == 0
    return not is_list(t)


def leaf_fields(field: pa.Field, path: tuple = ()) -> list[tuple[tuple, pa.Field]]:
    """(path of fields from the top, leaf field) for every leaf below ``field``, in pre-order."""
    path = path + (field,)
    if is_leaf(field):
        return [(path, field)]
    t = field.type
    out = []
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            out.extend(leaf_fields(t.field(i), path))
    else:
        out.extend(leaf_fields(t.value_field, path))
    return out


@dataclass
class Shredded:
    """One page worth of one leaf column."""

    field: pa.Field
    values: pa.Array  # visible values (own validity = leaf validity)
    rep: Optional[np.ndarray]  # uint16 per entry, or None
    defs: Optional[np.ndarray]  # uint16 per entry, or None
    layers: list[int]  # RepDefLayer per layer, innermost first
    num_rows: int
    max_visible_def: Optional[int]  # entries with def <= this carry a value (None: all do)
    valid: Optional[np.ndarray] = None  # effective validity of the visible values (None: all valid)

    @property
    def num_entries(self) -> int:
        """Level entries of the page: rep/def length, else the number of values."""
        if self.rep is not None:
            return len(self.rep)
        if self.defs is not None:
            return len(self.defs)
        return len(self.values)

    @property
    def max_rep(self) -> int:
        """Repetition levels of the page: the number of list layers."""
        return sum(1 for k in self.layers if k in _LIST_LAYERS)

    @property
    def is_simple_validity(self) -> bool:
        """Whether the only layer is the leaf's own validity (no lists or nullable parents)."""
        return len(self.layers) == 1

    @property
    def max_def(self) -> int:
        """The largest definition level present (0 without definition levels)."""
        return int(self.defs.max()) if self.defs is not None and len(self.defs) else 0


_LIST_LAYERS = (pb.REPDEF_ALL_VALID_LIST, pb.REPDEF_NULLABLE_LIST, pb.REPDEF_EMPTYABLE_LIST,
                pb.REPDEF_NULL_AND_EMPTY_LIST)


def validity_of(arr: pa.Array) -> Optional[np.ndarray]:
    """Bool numpy array of the logical validity, or None when nothing is null."""
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), dtype=bool)
    if pa.types.is_dictionary(arr.type):
        if arr.null_count == 0 and arr.dictionary.null_count == 0:
            return None
        return np.asarray(pc.is_valid(arr.dictionary.take(arr.indices)).to_numpy(zero_copy_only=False)) & \
            np.asarray(pc.is_valid(arr.indices).to_numpy(zero_copy_only=False))
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


class _State:
    """Entries of the walk so far (one per future level entry).

    ``pos`` may be held implicitly as a ``run``: the live entries read consecutive slots from
    ``start`` and ``dead`` lists the dead entries (a top-level array and the items of a list
    directly below it); ``special``, when known, lists every entry whose code may be non-zero.
    Both let a list layer and the leaf skip passes over all entries (ADR 0059)."""

    __slots__ = ("_pos", "code", "rep", "n", "pushed", "run", "special")

    def __init__(self, pos: Optional[np.ndarray], code: np.ndarray, rep: Optional[np.ndarray],
                 pushed: Optional[np.ndarray] = None, run: Optional[tuple[int, np.ndarray]] = None,
                 special: Optional[np.ndarray] = None):
        self._pos = pos  # int64 index into the current node's array, -1 for dead (special) entries
        self.code = code  # int32: 0 valid, else 1 + 2*layer + (1 if empty list)
        self.rep = rep  # int32 / uint16 or None
        self.n = len(code)
        # entries below a null struct: upstream pushes struct nulls down into the children
        self.pushed = pushed
        self.run = run
        self.special = special

    @property
    def pos(self) -> np.ndarray:
        """Slot of every entry in the current node's array (-1 for dead entries)."""
        if self._pos is None:
            assert self.run is not None  # pos is implicit only as a run
            start, dead = self.run
            out = np.empty(self.n, dtype=np.int64)
            alive = self.alive()
            out[alive] = np.arange(start, start + self.n - len(dead), dtype=np.int64)
            out[dead] = -1
            self._pos = out
        return self._pos

    def alive(self) -> np.ndarray:
        """Whether each entry is live (has a slot)."""
        if self._pos is None and self.run is not None:
            out = np.ones(self.n, dtype=bool)
            out[self.run[1]] = False
            return out
        return self.pos >= 0


@dataclass
class _Layer:
    is_list: bool
    nullable: bool = False
    emptyable: bool = False


def _walk(arr: pa.Array, path: tuple, depth: int, st: _State, layers: list[_Layer],
          list_levels: list[int]) -> pa.Array:
    """Descend from path[depth] (whose array is ``arr``) to the leaf; returns the leaf array."""
    field = path[depth]
    t = field.type
    layer_idx = len(layers)
    if is_list(t) and not (depth == len(path) - 1):
        fast = _fresh_list(arr, st, layers, list_levels[layer_idx])
        if fast is not None:
            return _walk(arr.values, path, depth + 1, fast, layers, list_levels)
        alive = st.pos >= 0
        slots = st.pos[alive]
        lay = _Layer(True)
        layers.append(lay)
        rep_level = list_levels[layer_idx]
        offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        valid = validity_of(arr)
        lens = np.zeros(st.n, dtype=np.int64)
        lens[alive] = offs[slots + 1] - offs[slots]
        is_valid = np.ones(st.n, dtype=bool)
        if valid is not None:
            is_valid[alive] = valid[slots]
        if st.pushed is not None:
            is_valid &= ~st.pushed
        lay.nullable = bool((~is_valid[alive]).any()) if len(slots) else False
        ok = alive & (st.code == 0)
        new_null = ok & ~is_valid
        new_empty = ok & is_valid & (lens == 0)
        lay.emptyable = bool((alive & is_valid & (lens == 0)).any())
        expand = ok & is_valid & (lens > 0)
        code = st.code.copy()
        code[new_null] = 1 + 2 * layer_idx
        code[new_empty] = 2 + 2 * layer_idx
        counts = np.where(expand, lens, 1)
        total = int(counts.sum())
        first = np.zeros(st.n + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        starts = first[:-1]
        new_code = np.repeat(code, counts)
        # positions into the child array: an expanded entry's items are consecutive from its
        # list's first child; an entry that does not expand keeps one dead (-1) slot
        child_start = offs[np.maximum(st.pos, 0)]
        new_pos = np.repeat(child_start - starts, counts)
        new_pos += np.arange(total, dtype=np.int64)
        new_pos[starts[~expand]] = -1
        # repetition: the first entry of every old entry keeps/sets the list level, the rest get 0
        old_rep = st.rep if st.rep is not None else np.zeros(st.n, dtype=np.int32)
        head_rep = np.where(old_rep == 0, rep_level, old_rep)
        dead_before = ~alive
        head_rep = np.where(dead_before, old_rep, head_rep)
        new_rep = np.zeros(total, dtype=np.int32)
        new_rep[starts] = head_rep
        child = arr.values
        st2 = _State(new_pos, new_code, new_rep, None)
        return _walk(child, path, depth + 1, st2, layers, list_levels)
    # validity layer (struct or leaf)
    lay = _Layer(False)
    layers.append(lay)
    valid = validity_of(arr)
    if valid is None and st.pushed is None:  # nothing null here: no pass over the entries
        if depth == len(path) - 1:
            return arr, st
        return _walk(_child_on_path(arr, path[depth + 1]), path, depth + 1, st, layers, list_levels)
    alive = st.alive()
    eff = np.ones(st.n, dtype=bool)  # effective validity per entry (dead entries: True)
    if valid is not None and st.run is not None and st._pos is None:
        nlive = st.n - len(st.run[1])
        eff[alive] = valid[st.run[0]:st.run[0] + nlive]
    elif valid is not None:
        slots = st.pos[alive]
        if len(slots):
            eff[alive] = valid[slots]
    if st.pushed is not None:
        eff &= ~(st.pushed & alive)
    invalid_entries = alive & ~eff
    if invalid_entries.any():
        lay.nullable = True
        code = st.code.copy()
        idx = np.flatnonzero(invalid_entries & (code == 0))
        code[idx] = 1 + 2 * layer_idx
        st.code = code
        st.special = None
    if depth == len(path) - 1:
        st.pushed = invalid_entries  # the leaf's effective nulls
        return arr, st
    st.pushed = invalid_entries if invalid_entries.any() else None
    return _walk(_child_on_path(arr, path[depth + 1]), path, depth + 1, st, layers, list_levels)


def _fresh_list(arr: pa.Array, st: _State, layers: list[_Layer], rep_level: int) -> Optional[_State]:
    """The list layer over entries that are consecutive slots, all live, valid and without
    repetition (a top-level list): the items' state built from the list offsets alone, without
    passes over all items. None when that does not apply (then the general layer runs)."""
    if st.run is None or len(st.run[1]) or st.rep is not None or st.pushed is not None \
            or st.special is None or len(st.special):
        return None
    start, n = st.run[0], st.n
    offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)[start:start + n + 1]
    lens = np.diff(offs)
    valid = validity_of(arr)
    null_idx = np.flatnonzero(~valid[start:start + n]) if valid is not None else np.zeros(0, np.int64)
    if len(null_idx) and bool(lens[null_idx].any()):
        return None  # null lists that own items: their items are skipped (general layer)
    dead_idx = np.flatnonzero(lens == 0)
    layer_idx = len(layers)
    lay = _Layer(True, nullable=bool(len(null_idx)), emptyable=len(dead_idx) > len(null_idx))
    layers.append(lay)
    counts = np.maximum(lens, 1)
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    total = int(first[-1])
    dead = first[dead_idx]
    code = np.zeros(total, dtype=np.int32)
    code[dead] = 2 + 2 * layer_idx
    code[first[null_idx]] = 1 + 2 * layer_idx
    rep = np.zeros(total, dtype=np.uint16)
    rep[first[:-1]] = rep_level
    return _State(None, code, rep, None, run=(int(offs[0]) if n else 0, dead), special=dead)


def _child_on_path(arr: pa.Array, child_field: pa.Field) -> pa.Array:
    """The child array of struct ``arr`` for ``child_field`` (by name; by identity for duplicate names)."""
    t = arr.type
    child = arr.field(t.get_field_index(child_field.name)) if t.get_field_index(child_field.name) >= 0 else None
    if child is None:
        # duplicate names: fall back to position
        for i in range(t.num_fields):
            if t.field(i) is child_field or t.field(i).equals(child_field):
                child = arr.field(i)
                break
    return child


def _layer_enum(lay: _Layer) -> int:
    if lay.is_list:
        if lay.nullable and lay.emptyable:
            return pb.REPDEF_NULL_AND_EMPTY_LIST
        if lay.nullable:
            return pb.REPDEF_NULLABLE_LIST
        if lay.emptyable:
            return pb.REPDEF_EMPTYABLE_LIST
        return pb.REPDEF_ALL_VALID_LIST
    return pb.REPDEF_NULLABLE_ITEM if lay.nullable else pb.REPDEF_ALL_VALID_ITEM


def shred_leaf(arr: pa.Array, path: tuple) -> Shredded:
    """Shred the top-level array ``arr`` (of ``path[0]``) down to the leaf ``path[-1]``."""
    n = len(arr)
    n_lists = sum(1 for f in path[:-1] if is_list(f.type))
    list_levels = []
    lvl = n_lists
    for f in path:
        if is_list(f.type) and f is not path[-1]:
            list_levels.append(lvl)
            lvl -= 1
        else:
            list_levels.append(0)
    st = _State(None, np.zeros(n, dtype=np.int32), None, run=(0, np.zeros(0, np.int64)),
                special=np.zeros(0, np.int64))
    layers: list[_Layer] = []
    leaf_arr, st = _walk(arr, path, 0, st, layers, list_levels)
    # page-level def numbering, innermost layer first
    table = {}
    level = 1
    for i in range(len(layers) - 1, -1, -1):
        lay = layers[i]
        if lay.nullable:
            table[1 + 2 * i] = level
            level += 1
        if lay.is_list and lay.emptyable:
            table[2 + 2 * i] = level
            level += 1
    max_def = level - 1
    defs = None
    if max_def > 0:
        lut = np.zeros(2 * len(layers) + 2, dtype=np.uint16)
        for code, lv in table.items():
            lut[code] = lv
        if st.special is not None:  # only these entries may have a non-zero code
            defs = np.zeros(st.n, dtype=np.uint16)
            defs[st.special] = lut[st.code[st.special]]
        else:
            defs = lut[st.code]
    rep = st.rep.astype(np.uint16, copy=False) if st.rep is not None else None
    # max visible def level: def levels of the layers inside the innermost list
    max_visible = None
    if n_lists:
        inner_list = max(i for i, lay in enumerate(layers) if lay.is_list)
        max_visible = sum(1 for lay in layers[inner_list + 1:] if lay.nullable)
    # visible values
    if st.run is not None and st._pos is None:
        vstart, nvis = st.run[0], st.n - len(st.run[1])
        values = leaf_arr if vstart == 0 and nvis == len(leaf_arr) else leaf_arr.slice(vstart, nvis)
        alive: Optional[np.ndarray] = None
        return _shredded(path, values, rep, defs, layers, n, max_visible, st, alive)
    vis = st.pos[st.pos >= 0]
    if len(vis) == len(leaf_arr) and (len(vis) == 0 or (vis[0] == 0 and vis[-1] == len(vis) - 1)):
        values = leaf_arr
    elif len(vis) and vis[-1] - vis[0] + 1 == len(vis) and np.all(np.diff(vis) == 1):
        values = leaf_arr.slice(int(vis[0]), len(vis))
    else:
        values = _raw_take(leaf_arr, vis)
    return _shredded(path, values, rep, defs, layers, n, max_visible, st, st.pos >= 0)


def _shredded(path: tuple, values: pa.Array, rep: Optional[np.ndarray], defs: Optional[np.ndarray],
              layers: list[_Layer], n: int, max_visible: Optional[int], st: _State,
              alive: Optional[np.ndarray]) -> Shredded:
    enum_layers = [_layer_enum(lay) for lay in reversed(layers)]
    if st.pushed is not None and alive is None:
        alive = st.alive()
    leaf_invalid = st.pushed[alive] if st.pushed is not None else None
    valid = None if leaf_invalid is None or not leaf_invalid.any() else ~leaf_invalid
    return Shredded(path[-1], values, rep, defs, enum_layers, n, max_visible, valid)


def _raw_take(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """``arr.take(idx)`` that keeps the bytes of null slots of fixed-width values (as upstream does)."""
    t = arr.type
    try:
        bw = t.bit_width
    except ValueError:
        bw = None
    if bw and bw % 8 == 0 and not pa.types.is_dictionary(t) and arr.buffers()[1] is not None:
        w = bw // 8
        n = len(arr)
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=n * w, offset=arr.offset * w).reshape(n, w)
        picked = np.ascontiguousarray(data[idx]).reshape(-1)
        valid = validity_of(arr)
        bitmap = None
        nulls = 0
        if valid is not None:
            v = valid[idx]
            nulls = int(len(v) - v.sum())
            if nulls:
                bitmap = pa.py_buffer(np.packbits(v, bitorder="little").tobytes())
        return pa.Array.from_buffers(t, len(idx), [bitmap, pa.py_buffer(picked.tobytes())], null_count=nulls)
    return arr.take(pa.array(idx, pa.int64()))


def check_shreddable(field: pa.Field) -> None:
    """Refuse (before any byte is written) types the 2.1 writer cannot store."""
    t = field.type
    if pa.types.is_fixed_size_list(t):
        inner = t.value_type
        while pa.types.is_fixed_size_list(inner):
            inner = inner.value_type
        if not (pa.types.is_primitive(inner) or pa.types.is_fixed_size_binary(inner) or
                pa.types.is_decimal(inner)) or pa.types.is_boolean(inner):
            raise UnsupportedTypeError(
                f"field {field.name!r}: fixed_size_list of {inner} cannot be written to Lance 2.1+ by lance-ops")
        return
    if pa.types.is_struct(t):
        if is_packed(field):
            for i in range(t.num_fields):
                c = t.field(i).type
                if not (pa.types.is_primitive(c) and not pa.types.is_boolean(c)) and not pa.types.is_fixed_size_binary(c):
                    raise UnsupportedTypeError(
                        f"field {field.name!r}: packed struct child {t.field(i).name!r} of type {c} is not "
                        f"fixed-width; lance-ops writes only fixed-width packed structs")
            return
        for i in range(t.num_fields):
            check_shreddable(t.field(i))
        return
    if is_list(t):
        check_shreddable(t.value_field)
        return
    if pa.types.is_dictionary(t):
        v = t.value_type
        if not (pa.types.is_string(v) or pa.types.is_binary(v) or pa.types.is_large_string(v)
                or pa.types.is_large_binary(v) or pa.types.is_primitive(v)):
            raise UnsupportedTypeError(f"field {field.name!r}: dictionary of {v} is not supported")
