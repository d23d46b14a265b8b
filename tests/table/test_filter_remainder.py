"""SQL ``%`` compiles to Arrow's one-kernel ``remainder`` where pyarrow has it, with the results of
the ``a - trunc(a / b) * b`` expansion it replaces (truncated: the sign of the dividend)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lance_ops.table.filters.sql as sql
from lance_ops.table.filters import compile_filter

pytestmark = pytest.mark.skipif(not sql._HAS_REMAINDER, reason="this pyarrow has no remainder kernel")

_ints = st.lists(st.integers(-30_000, 30_000) | st.none(), min_size=1, max_size=30)


def _rows(table: pa.Table, predicate: str, remainder: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    monkeypatch.setattr(sql, "_HAS_REMAINDER", remainder)
    filt = compile_filter(predicate, table.schema)
    assert ("remainder" in str(filt.expression)) == remainder
    return table.filter(filt.expression).column("i").to_pylist()


@settings(max_examples=60, deadline=None)
@given(_ints, st.integers(-9, 9).filter(bool), st.integers(-9, 9))
def test_integer_remainder_equals_the_expansion(values: list, divisor: int, want: int) -> None:
    table = pa.table({"i": pa.array(values, pa.int64()), "s": pa.array(values, pa.int16())})
    with pytest.MonkeyPatch.context() as mp:
        for predicate in (f"i % {divisor} = {want}", f"s % {divisor} = {want}", f"i % s = {want}"):
            try:
                expanded = _rows(table, predicate, False, mp)
            except Exception as exc:  # noqa: BLE001 - both ways must fail alike (division by zero)
                with pytest.raises(type(exc)):
                    _rows(table, predicate, True, mp)
                continue
            assert _rows(table, predicate, True, mp) == expanded


def test_float_remainder_keeps_the_dividends_sign() -> None:
    table = pa.table({"i": [1, 2, 3, 4], "f": [-7.5, 7.5, 2.0, None]})
    with pytest.MonkeyPatch.context() as mp:
        assert _rows(table, "f % 2 = -1.5", True, mp) == [1] == _rows(table, "f % 2 = -1.5", False, mp)
        assert _rows(table, "f % 2 = 1.5", True, mp) == [2]


def test_decimals_keep_the_expansion() -> None:
    import decimal

    table = pa.table({"i": [1, 2], "d": pa.array([decimal.Decimal("7.50"), decimal.Decimal("-7.25")],
                                                   pa.decimal128(6, 2))})
    filt = compile_filter("d % 2 = 1.5", table.schema)
    assert "remainder" not in str(filt.expression)
    assert table.filter(filt.expression).column("i").to_pylist() == [1]
