"""SQL filter functions and literals of pylance 14.0.2 vs lance-ops (issue 24, slice 6)."""
from __future__ import annotations

from datetime import date, datetime

import lance
import pyarrow as pa
import pytest

from tests.parity.helper import same

TABLE = pa.table({
    "id": pa.array(range(6), pa.int64()),
    "name": ["apple", "banana", "cherry", "a_b", "a%b", None],
    "tags": pa.array([["t1", "t2"], ["t3"], [], ["t1", "t3"], None, ["t2"]], pa.list_(pa.string())),
    "flag": pa.array([True, False, None, True, False, True]),
    "d": pa.array([date(2024, 1, d) for d in range(1, 7)], pa.date32()),
    "ts": pa.array([datetime(2024, 1, d, 12, 30) for d in range(1, 7)], pa.timestamp("us")),
    "b": pa.array([b"\x01\x02", b"\xff", b"", b"ab", None, b"\x01"], pa.binary()),
})

FILTERS = [
    "regexp_match(name, '^a.*')",
    "regexp_match(name, 'an+')",
    "array_has_any(tags, ['t3'])",
    "array_has_any(tags, ['t2', 'x'])",
    "array_has_all(tags, ['t1', 't3'])",
    "array_contains(tags, 't2')",
    "d < current_date()",
    "ts < now()",
    "CAST(ts AS datetime(6)) > CAST('2024-01-03 00:00:00' AS datetime(6))",
    "ts > CAST('2024-01-03 00:00:00' AS timestamp(3))",
    "ts >= TIMESTAMP '2024-01-04 12:30:00'",
    "d = DATE '2024-01-02'",
    "d >= date '2024-01-05'",
    "b = X'FF'",
    "b = X'0102'",
    "flag IS TRUE",
    "flag IS NOT TRUE",
    "flag IS FALSE",
    "flag IS NOT FALSE",
    "starts_with(name, 'a')",
    "name LIKE 'a\\_b' ESCAPE '\\'",
    "regexp_match(name, '^a.*') IS NULL",
    "array_has_any(tags, [])",
    "array_has(tags, 't1')",
    "NOT array_has_all(tags, ['t2'])",
    "name LIKE 'a%'",
]


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    u = str(tmp_path_factory.mktemp("filters") / "ds.lance")
    lance.write_dataset(TABLE, u, max_rows_per_file=3)
    return u


@pytest.mark.parametrize("flt", FILTERS)
def test_filter(uri, flt):
    same(lambda lib: lib.dataset(uri).to_table(columns=["id"], filter=flt))
    same(lambda lib: lib.dataset(uri).count_rows(flt))


@pytest.mark.parametrize("escape, match", [
    ("'!'", "other than the backslash"), ("'%'", "other than the backslash"), ("'é'", "other than the backslash"),
    ("''", "expected a single character, got ''"), ("'!!'", "expected a single character, got '!!'"),
    ("NULL", "single quotes, got NULL")])
@pytest.mark.parametrize("op", ["LIKE", "NOT LIKE", "ILIKE"])
def test_like_escape_other_than_backslash_is_refused(uri, escape, match, op):
    """pylance 14 takes only the backslash as LIKE's escape; lance-ops refuses the same texts with
    the same error class (a ValueError) and a message naming the escape."""
    same(lambda lib: lib.dataset(uri).to_table(columns=["id"], filter=f"name {op} 'a!%b' ESCAPE {escape}"),
         error_match=match)
    same(lambda lib: lib.dataset(uri).to_table(columns={"m": f"name {op} 'a!%b' ESCAPE {escape}"}),
         error_match=match)


@pytest.mark.parametrize("op", ["LIKE", "NOT LIKE", "ILIKE"])
def test_like_escape_backslash(uri, op):
    same(lambda lib: lib.dataset(uri).to_table(columns=["id"], filter=f"name {op} 'a\\%b' ESCAPE '\\'"))


def test_a_list_filter_survives_pickling(uri):
    """Scan tasks carry compiled filters to Spark executors (pickled)."""
    import pickle

    import lance_ops
    from lance_ops.table.filters import compile_filter

    ds = lance_ops.dataset(uri)
    filt = pickle.loads(pickle.dumps(compile_filter("array_has_any(tags, ['t3'])", ds.schema)))
    assert ds.to_table(columns=["id"], filter=filt.expression).column("id").to_pylist() == [1, 3]


#: regexp_match as a computed column: pylance returns the first match's capture groups as a list
PROJECTIONS = [
    "regexp_match(name, 'a(.)')",
    "regexp_match(name, 'an+')",
    "regexp_match(name, '(a)(n|_)')",
    "regexp_match(name, '(x)?(a)')",
    "regexp_match(name, '(?P<first>a)(b)?')",
    "regexp_match(name, '[(]|(p+)')",
    "regexp_match(name, 'A(.)', 'i')",
    "regexp_match(name, 'a (n) # comment', 'ix')",
    "regexp_match(name, '^B', NULL)",
    "regexp_match(name, name)",
    "regexp_match('A_B apple', name, 'i')",
    "regexp_match(name, NULL)",
    "regexp_match(id, '1')",
    "regexp_match(name, 'a') IS NULL",
    "regexp_match(name, 'a') IS NOT NULL",
    "name IS NULL",
    "flag IS NOT TRUE",
]


@pytest.mark.parametrize("sql", PROJECTIONS)
def test_regexp_match_projection(uri, sql):
    same(lambda lib: lib.dataset(uri).to_table(columns={"m": sql}))


@pytest.mark.parametrize("flt", ["regexp_match(name, 'an')", "NOT regexp_match(name, 'an')",
                                 "regexp_match(name, 'an') AND id > 0", "regexp_match(name, 'x') OR id = 5",
                                 "regexp_match(name, 'A', 'i')", "regexp_match(name, 'b') IS NULL",
                                 "regexp_match(name, name)"])
def test_regexp_match_is_a_predicate_in_filters(uri, flt):
    """In a filter pylance coerces regexp_match to "matched" (never null: NOT keeps null names)."""
    same(lambda lib: lib.dataset(uri).to_table(columns=["id"], filter=flt))
    same(lambda lib: lib.dataset(uri).count_rows(flt))


@pytest.mark.parametrize("sql", ["regexp_match(name, 'b') = true", "regexp_match(name, 'b') IS TRUE",
                                 "regexp_match(name, 'a', 'g')", "regexp_match(name, '[')"])
def test_regexp_match_refusals(uri, sql):
    """pylance refuses these with a ValueError (ArrowInvalid for the last two; lance-ops' FilterError
    is a ValueError too)."""
    import lance_ops

    for lib in (lance, lance_ops):
        with pytest.raises(ValueError):
            lib.dataset(uri).to_table(columns=["id"], filter=sql)
