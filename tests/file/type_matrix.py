"""A table covering every Arrow type the 2.0 format stores, with nulls and empties, at any size.

Shared by the writer, reader and round-trip tests so that all of them exercise the same matrix.
"""
from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _mask(rng: np.random.Generator, n: int, null_fraction: float) -> np.ndarray | None:
    if null_fraction <= 0:
        return None
    return rng.random(n) < null_fraction


def _strings(rng: np.random.Generator, n: int, max_len: int = 12) -> list[str]:
    lengths = rng.integers(0, max_len + 1, n)  # 0 -> empty strings are included
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzéß€"), dtype=object)
    chars = alphabet[rng.integers(0, len(alphabet), int(lengths.sum()))]
    out, pos = [], 0
    for length in lengths.tolist():
        out.append("".join(chars[pos:pos + length]))
        pos += length
    return out


def _lists(rng, n, values: pa.Array, mask, max_len=4, large=False) -> pa.Array:
    lengths = rng.integers(0, max_len + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = values.slice(0, int(offsets[-1]))
    cls = pa.LargeListArray if large else pa.ListArray
    mask_arr = pa.array(mask) if mask is not None else None
    return cls.from_arrays(pa.array(offsets), values, mask=mask_arr)


def make_table(n: int, seed: int = 0, null_fraction: float = 0.2, *, all_null: bool = False) -> pa.Table:
    """Build the full type matrix with ``n`` rows.

    ``null_fraction`` of each nullable column is null; ``all_null`` makes every nullable column
    entirely null (all-null pages).
    """
    rng = np.random.default_rng(seed)
    nf = 1.0 if all_null else null_fraction

    def m():
        return _mask(rng, n, nf) if not all_null else np.ones(n, dtype=bool)

    cols: dict[str, pa.Array] = {}
    cols["bool"] = pa.array(rng.random(n) < 0.5, mask=m())
    for bits in (8, 16, 32, 64):
        info = np.iinfo(f"int{bits}")
        cols[f"int{bits}"] = pa.array(rng.integers(info.min, info.max, n, dtype=f"int{bits}", endpoint=True), mask=m())
        uinfo = np.iinfo(f"uint{bits}")
        cols[f"uint{bits}"] = pa.array(rng.integers(0, uinfo.max, n, dtype=f"uint{bits}", endpoint=True), mask=m())
    cols["float16"] = pa.array(rng.standard_normal(n).astype(np.float16), mask=m())
    cols["float32"] = pa.array(rng.standard_normal(n).astype(np.float32), mask=m())
    cols["float64"] = pa.array(rng.standard_normal(n), mask=m())
    ints = rng.integers(-10**9, 10**9, n)
    mask = m()
    cols["decimal128"] = pa.array(
        [None if (mask is not None and mask[i]) else decimal.Decimal(int(v)).scaleb(-2) for i, v in enumerate(ints.tolist())],
        pa.decimal128(20, 2),
    )
    cols["decimal256"] = pc.cast(cols["decimal128"], pa.decimal256(40, 2))
    cols["date32"] = pa.array(rng.integers(0, 40000, n).astype(np.int32), pa.date32(), mask=m())
    cols["date64"] = pa.array(rng.integers(0, 40000, n) * 86_400_000, pa.date64(), mask=m())
    cols["time32s"] = pa.array(rng.integers(0, 86400, n).astype(np.int32), pa.time32("s"), mask=m())
    cols["time32ms"] = pa.array(rng.integers(0, 86_400_000, n).astype(np.int32), pa.time32("ms"), mask=m())
    cols["time64us"] = pa.array(rng.integers(0, 86_400_000_000, n), pa.time64("us"), mask=m())
    cols["time64ns"] = pa.array(rng.integers(0, 86_400_000_000_000, n), pa.time64("ns"), mask=m())
    for unit in ("s", "ms", "us", "ns"):
        raw = rng.integers(0, 2**40, n)
        cols[f"ts_{unit}"] = pa.array(raw, pa.timestamp(unit), mask=m())
        cols[f"ts_{unit}_tz"] = pa.array(raw, pa.timestamp(unit, "UTC" if unit != "ms" else "Europe/Paris"), mask=m())
        cols[f"dur_{unit}"] = pa.array(raw - 2**39, pa.duration(unit), mask=m())
    strs = _strings(rng, n)
    mask = m()
    cols["utf8"] = pa.array(strs, pa.string(), mask=mask)
    cols["large_utf8"] = pa.array(strs, pa.large_string(), mask=m())
    cols["binary"] = pa.array([s.encode() for s in strs], pa.binary(), mask=m())
    cols["large_binary"] = pa.array([s.encode() for s in strs], pa.large_binary(), mask=m())
    cols["fixed_binary"] = pa.array(
        [bytes(x) for x in rng.integers(0, 256, (n, 5), dtype=np.uint8)], pa.binary(5), mask=m()
    )
    cols["low_card_utf8"] = pa.array(
        np.array(["red", "green", "blue", ""], dtype=object)[rng.integers(0, 4, n)], pa.string(), mask=m()
    )
    fsl_values = pa.array(rng.standard_normal(n * 4).astype(np.float32))
    mask = m()
    cols["fsl_f32"] = pa.FixedSizeListArray.from_arrays(fsl_values, 4, mask=pa.array(mask) if mask is not None else None)
    cols["fsl_i64"] = pa.FixedSizeListArray.from_arrays(pa.array(rng.integers(0, 100, n * 3)), 3)
    item_vals = pa.array(rng.integers(-1000, 1000, n * 4).astype(np.int32), mask=_mask(rng, n * 4, 0 if all_null else nf))
    cols["list_i32"] = _lists(rng, n, item_vals, m())
    cols["large_list_str"] = _lists(rng, n, pa.array(_strings(rng, n * 4), mask=_mask(rng, n * 4, 0 if all_null else nf)), m(), large=True)
    inner_struct = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 50, n * 4), mask=_mask(rng, n * 4, 0 if all_null else nf)), pa.array(_strings(rng, n * 4, 6))],
        names=["k", "v"],
    )
    cols["list_struct"] = _lists(rng, n, inner_struct, m())
    inner_list = _lists(rng, n * 4, pa.array(rng.standard_normal(n * 16)), None, max_len=3)
    cols["list_list"] = _lists(rng, n, inner_list, m())
    cols["struct"] = pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(0, 10**6, n).astype(np.int32), mask=m()),
            pa.array(rng.standard_normal(n).astype(np.float32), mask=m()),
            pa.array(_strings(rng, n), mask=m()),
            _lists(rng, n, pa.array(rng.integers(0, 9, n * 4).astype(np.int16)), m()),
        ],
        names=["a", "b", "c", "d"],
    )
    dict_vals = pa.array(np.array(["x", "yy", "zzz", ""], dtype=object)[rng.integers(0, 4, n)], mask=m())
    cols["dict_utf8"] = pc.dictionary_encode(dict_vals).cast(pa.dictionary(pa.int32(), pa.string()))
    cols["dict_i8_utf8"] = pc.dictionary_encode(dict_vals).cast(pa.dictionary(pa.int8(), pa.string()))
    table = pa.table(cols)
    return table.replace_schema_metadata({"origin": "lance-ops type matrix"})


def _decode_dictionaries(table: pa.Table) -> pa.Table:
    cols = []
    for col in table.columns:
        cols.append(col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col)
    return pa.table(cols, names=table.column_names)


def assert_tables_equal(actual: pa.Table, expected: pa.Table) -> None:
    """Exact equality of schema (types, names, nullability) and values.

    Dictionary columns are compared by their decoded values: the dictionary itself (order, unused
    entries) is an encoding detail that differs between writers.
    """
    assert actual.schema.equals(expected.schema, check_metadata=False), f"{actual.schema}\n!=\n{expected.schema}"
    assert actual.num_rows == expected.num_rows
    a, e = _decode_dictionaries(actual), _decode_dictionaries(expected)
    for name in expected.column_names:
        assert a[name].equals(e[name]), f"column {name!r} differs"
