"""Key matching of a merge-insert: every (target row, source row) pair whose keys are equal.

The source's key columns are prepared once per merge (:func:`prepare_keys`); each target
fragment's key columns are then matched against them (:meth:`SourceKeys.match`), the cheapest
way that gives the exact answer:

* one integer-like key, and the fragment's keys strictly increasing without nulls (ids written
  in order, the common case): the sorted source keys inside the fragment's key range are
  binary-searched in the fragment's keys (``s log t`` for ``s`` source keys in range, instead of
  ``t log s`` for ``t`` target rows; a fragment whose range holds no source key costs nothing),
  or, when the fragment's keys are consecutive numbers, a key's position is its distance from the
  first;
* one key of a hashable type whose non-null source values are all different: a hash lookup
  (``pyarrow.compute.index_in``);
* otherwise (duplicate source keys, several key columns, floats, nested types): each target key
  binary-searched in the sorted source keys (one integer-like key), or a pyarrow hash join;
  both give every pair when keys repeat.

Nulls match nothing. Pairs come sorted by target position, then by source row, whatever the way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_POS, _SRC = "__lance_ops_target_pos", "__lance_ops_source_row"


def _integer_like(t: pa.DataType) -> bool:
    """Types whose values are int64 numbers (uint64 excluded: values past int64 would wrap)."""
    return ((pa.types.is_integer(t) and not pa.types.is_uint64(t)) or pa.types.is_date(t)
            or pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t))


def _hashable(t: pa.DataType) -> bool:
    """Types ``index_in`` compares exactly as the join does (no floats: NaN and -0.0)."""
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_boolean(t))


def _flat(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _as_int64(arr: pa.Array) -> np.ndarray:
    """An integer-like array's values as int64 (nulls as 0: callers mask them)."""
    if arr.null_count:
        arr = arr.fill_null(0)
    if arr.type != pa.int64():
        arr = arr.cast(pa.int64())
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _stable_sort(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` sorted and their positions, equal values in position order. Key and position
    are packed into one int64 and sorted as numbers when the key range allows it (a plain sort is
    several times faster than a stable argsort)."""
    n = values.size
    rows = np.arange(n, dtype=np.int64)
    if n == 0:
        return values, rows
    lo, hi = int(values.min()), int(values.max())
    bits = max(1, (n - 1).bit_length())
    if hi - lo < (1 << (62 - bits)):
        packed = ((values - lo) << bits) | rows
        packed.sort()
        return (packed >> bits) + lo, packed & ((1 << bits) - 1)
    order = np.argsort(values, kind="stable")
    return values[order], order


@dataclass
class SourceKeys:
    """The source's key columns, prepared for matching (see the module docstring)."""

    on: list[str]
    #: the key columns of the source
    keys: pa.Table
    #: one integer-like key: its non-null values sorted (equal values in row order), their rows
    sorted_values: np.ndarray | None = None
    sorted_rows: np.ndarray | None = None
    #: one hashable key: its non-null values and their rows, when the values are all different
    lookup_values: pa.Array | None = None
    lookup_rows: np.ndarray | None = None
    #: the non-null source keys are all different (so each target row matches one row at most)
    unique: bool = False
    #: one integer-like key not sorted yet: its non-null values as int64 and their rows (None: all)
    unsorted: tuple[np.ndarray, np.ndarray | None] | None = None

    def sorted_keys(self) -> np.ndarray | None:
        """One integer-like key: its non-null values, sorted (None for other keys). Sorted on first
        use, so that a merge sorts while the scan reads ahead its first fragments."""
        if self.unsorted is not None:
            values, rows = self.unsorted
            ordered, at = _stable_sort(values)
            self.sorted_rows = at if rows is None else rows[at]
            self.unique = ordered.size < 2 or bool((ordered[1:] != ordered[:-1]).all())
            self.sorted_values = ordered
            self.unsorted = None
        return self.sorted_values

    def match(self, target: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(target positions, source rows) of every pair of rows with equal keys; ``target``
        holds the key columns (named as the source's), in order. Sorted by position, then row."""
        if target.num_rows == 0 or self.keys.num_rows == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.sorted_keys() is not None:
            col = _flat(target.column(0))
            values = _as_int64(col)
            valid = _valid(col) if col.null_count else None
            if valid is None and bool((values[1:] > values[:-1]).all()):
                return self._search_in_target(values)
            if self.unique:
                return self._lookup(pa.array(values, mask=None if valid is None else ~valid))
            return self._search_in_source(values, valid)
        if self.lookup_values is not None and target.schema.field(0).type == self.lookup_values.type:
            return self._lookup(_flat(target.column(0)))
        return self._join(target)

    def _search_in_target(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Strictly increasing target keys: the source keys in their range searched in them."""
        keys, rows = self.sorted_values, self.sorted_rows
        assert keys is not None and rows is not None
        lo = int(np.searchsorted(keys, values[0], side="left"))
        hi = int(np.searchsorted(keys, values[-1], side="right"))
        inside = keys[lo:hi]
        if int(values[-1]) - int(values[0]) == values.size - 1:  # consecutive keys: a key is its position
            at = inside - values[0]
            return at, rows[lo:hi]
        at = np.searchsorted(values, inside)  # (< len(values): inside <= values[-1])
        hit = values[at] == inside
        return at[hit].astype(np.int64, copy=False), rows[lo:hi][hit]

    def _lookup(self, column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """A hash lookup of each target key among the (all different) source keys."""
        values = self.lookup_values
        if values is None:  # (integer-like key: the sorted values serve as the lookup set)
            self.lookup_rows = self.sorted_rows  # (rows first: a concurrent caller reads them second)
            values = self.lookup_values = pa.array(self.sorted_values)
        assert self.lookup_rows is not None
        found = pc.index_in(column, value_set=values, skip_nulls=True)
        if found.null_count == len(found):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pos = np.flatnonzero(_valid(found))
        at = np.asarray(found.fill_null(0).to_numpy(zero_copy_only=False))[pos]
        return pos.astype(np.int64, copy=False), self.lookup_rows[at]

    def _search_in_source(self, values: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Each target key binary-searched in the sorted source keys (any order, duplicates)."""
        keys, rows = self.sorted_values, self.sorted_rows
        assert keys is not None and rows is not None
        if not keys.size:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        lo = np.searchsorted(keys, values, side="left")
        counts = np.searchsorted(keys, values, side="right") - lo
        if valid is not None:
            counts[~valid] = 0
        total = int(counts.sum())
        pos = np.repeat(np.arange(len(values), dtype=np.int64), counts)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        return pos, rows[starts + np.arange(total, dtype=np.int64)]

    def _join(self, target: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """A pyarrow hash join of the key columns (nulls match nothing; target keys of another
        type, such as ``large_string`` for ``string``, are cast to the source's)."""
        if target.schema != self.keys.schema:
            target = target.cast(self.keys.schema)
        source = self.keys.append_column(_SRC, pa.array(np.arange(self.keys.num_rows, dtype=np.int64)))
        keys_t = target.append_column(_POS, pa.array(np.arange(target.num_rows, dtype=np.int64)))
        joined = keys_t.join(source, keys=self.on, join_type="inner", use_threads=False)
        pos = joined.column(_POS).to_numpy().astype(np.int64)
        src = joined.column(_SRC).to_numpy().astype(np.int64)
        order = np.lexsort((src, pos))
        return pos[order], src[order]


def prepare_keys(source: pa.Table, on: list[str]) -> SourceKeys:
    """The key columns ``on`` of ``source``, prepared for :meth:`SourceKeys.match`."""
    keys = source.select(on)
    out = SourceKeys(on, keys)
    if len(on) != 1 or keys.num_rows == 0:
        return out
    col = _flat(keys.column(0))
    rows: np.ndarray | None = None
    if col.null_count:
        rows = np.flatnonzero(_valid(col))
    if _integer_like(col.type):
        values = _as_int64(col)
        out.unsorted = (values if rows is None else values[rows], rows)
    elif _hashable(col.type):
        present = col if rows is None else col.take(pa.array(rows))
        if len(pc.unique(present)) == len(present):
            out.lookup_values = present
            out.lookup_rows = np.arange(len(col), dtype=np.int64) if rows is None else rows
            out.unique = True
    return out
