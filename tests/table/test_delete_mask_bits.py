"""The delete predicate's mask read from its bitmaps equals Arrow's own conversion (null as false)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_ops.table.delete import _true_rows

_value = st.sampled_from([True, False, None])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_value, max_size=40), max_size=5), st.integers(0, 9), st.integers(0, 9))
def test_bits_equal_arrows_conversion(chunks: list[list[bool | None]], start: int, cut: int) -> None:
    column = pa.chunked_array([pa.array(c, type=pa.bool_()) for c in chunks], type=pa.bool_())
    column = column.slice(min(start, len(column)), max(0, len(column) - start - cut))  # chunks at offsets
    want = np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), dtype=bool)
    got = _true_rows(column)
    assert got.dtype == np.bool_
    assert got.tolist() == want.tolist()


def test_a_column_of_nulls_only_is_all_false() -> None:
    assert _true_rows(pa.chunked_array([pa.array([None, None], type=pa.bool_())])).tolist() == [False, False]
