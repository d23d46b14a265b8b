"""Page statistics: values (spec rules), the _stats/ files, rebuild, coverage and scan pruning.

Oracles: brute force over the data for the statistics themselves; the same scan with pruning
turned off, and pylance 14.0.2, for every filtered result; recorded ranged reads for the claim
that pages and fragments are skipped.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import shutil
from decimal import Decimal
from types import SimpleNamespace

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_ops
from lance_ops.format.v2_0.reader import LanceFileReader
from lance_ops.format.registry import LanceFileWriter
from lance_ops.io import open_store
from lance_ops.maintenance import statistics as S
from lance_ops.table import stats as T
from lance_ops.table.stats import prune as stats_prune
from lance_ops.table.filters import compile_filter

N = 6000


# --- helpers --------------------------------------------------------------------------------------
@pytest.fixture
def small_pages(monkeypatch):
    """Single-batch files are cut into pages of at most 2 KiB (so a file has many pages)."""
    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "2048")


@contextlib.contextmanager
def pruning_disabled():
    """Within the block, scans read every page: the statistics lookup is replaced from the test
    (ADR 0007; lance_ops has no switch for it). Fails if no scan asked for statistics, so the
    replacement cannot silently stop taking effect."""
    calls = []

    def read_everything(ds, frag, filt):
        calls.append(frag.fragment_id)
        return None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stats_prune, "scan_ranges", read_everything)
        yield
    assert calls, "no scan consulted lance_ops.table.stats.prune.scan_ranges: pruning_disabled() took no effect"


def sample_table(n: int = N, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    rng = np.random.default_rng(start)
    v = rng.normal(size=n)
    v[::97] = np.nan
    v[5::101] = 0.0
    v[7::103] = -0.0
    v_mask = (ids % 89) == 0
    s = [None if i % 53 == 0 else f"k{i:05d}" + ("x" * 80 if i % 500 == 1 else "") for i in ids]
    ts = pa.array((ids * 1_000_000).astype("datetime64[us]"), pa.timestamp("us", "UTC"))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array(v, pa.float64(), mask=v_mask),
        "s": pa.array(s, pa.string()),
        "b": pa.array(ids % 7 == 0),
        "ts": ts,
        "st": pa.StructArray.from_arrays([pa.array(ids // 1000, pa.int32()), pa.array(ids % 3, pa.int8())],
                                         names=["x", "y"]),
        "lst": pa.array([[int(i)] if i % 11 else None for i in ids], pa.list_(pa.int64())),
    })


def write(tmp_path, name="ds", n=N, **kw):
    uri = str(tmp_path / name)
    kw.setdefault("max_rows_per_file", 2000)
    return lance_ops.write_dataset(sample_table(n), uri, **kw), uri


def by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id") if "id" in t.column_names and t.num_rows else t


def _norm(v):
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def same(a: pa.Table, b: pa.Table) -> bool:
    """Table equality with NaN equal to NaN (pa.Table.equals says NaN != NaN)."""
    return a.schema.equals(b.schema) and _norm(a.to_pylist()) == _norm(b.to_pylist())


def record_reads(ds):
    """Wrap the dataset store's ranged reads: returns a list of (path, [(start, length)...])."""
    store = ds._store
    calls: list[tuple[str, list[tuple[int, int]]]] = []
    original = store.read_ranges

    def spy(path, ranges):
        calls.append((path, [(int(a), int(b)) for a, b in np.asarray(ranges).reshape(-1, 2)]))
        return original(path, ranges)

    store.read_ranges = spy
    return calls


def data_reads(calls):
    return [(p, r) for p, r in calls if "/data/" in p.replace(os.sep, "/")]


def page_stats_brute(values: pa.ChunkedArray | pa.Array):
    vals = [x for x in values.to_pylist() if x is not None]
    return len(values) - len(vals), vals


# --- values: the spec's rules ------------------------------------------------------------------------
def test_truncate_min_max_strings_and_binary():
    assert T.truncate_min("abcd", 3) == "abc" and T.truncate_max("abcd", 3) == "abd"
    assert T.truncate_min("ab", 3) == "ab" and T.truncate_max("ab", 3) == "ab"
    assert T.truncate_min(b"\x01\x02\x03\x04", 2) == b"\x01\x02"
    assert T.truncate_max(b"\x01\x02\x03\x04", 2) == b"\x01\x03"
    assert T.truncate_max(b"\x01\xff\x03", 2) == b"\x02"  # trailing 0xff cannot grow: dropped
    assert T.truncate_max(b"\xff\xff\xff", 2) is None  # no upper bound exists
    # multi-byte characters are never split; the bound still holds byte-wise
    assert T.truncate_min("ééé", 3) == "é"
    assert T.truncate_max("ééé", 3) == "ê"
    top = "\U0010ffff" * 3
    assert T.truncate_max(top, 8) is None
    assert T.truncate_max("a" + "\U0010ffff" * 3, 8) == "b"
    assert T.truncate_max("\ud7ff" * 30, 6) in ("\ud7ff\ue000",)
    for text in ["zz" * 50, "a\U0010ffffb" * 20, "é" * 40, "abc" * 30]:
        lo, hi = T.truncate_min(text), T.truncate_max(text)
        assert len(lo.encode()) <= T.TRUNCATE_BYTES and lo <= text
        assert hi is None or (len(hi.encode()) <= T.TRUNCATE_BYTES and hi > text
                              and hi.encode() > text.encode())


def _stat(values, t):
    return T.compute_stat(pa.array(values, t), t)


def test_float_rules_nan_and_signed_zero():
    s = _stat([1.0, float("nan"), -2.0, None], pa.float64())
    assert (s.min.as_py(), s.max.as_py(), s.null_count, s.nan_count) == (-2.0, 1.0, 1, 1)
    s = _stat([0.0, 3.0], pa.float64())
    assert s.min.as_py() == 0 and math.copysign(1, s.min.as_py()) == -1  # min zero -> -0.0
    s = _stat([-5.0, -0.0], pa.float32())
    assert s.max.as_py() == 0 and math.copysign(1, s.max.as_py()) == 1  # max zero -> +0.0
    s = _stat([float("nan"), None], pa.float64())
    assert (s.min, s.max, s.null_count, s.nan_count) == (None, None, 1, 1)
    s = _stat([float("-inf"), float("inf")], pa.float64())
    assert (s.min.as_py(), s.max.as_py()) == (-math.inf, math.inf)
    s = T.compute_stat(pa.array(np.array([1.5, -2.5], np.float16)), pa.float16())
    assert (s.min.as_py(), s.max.as_py()) == (-2.5, 1.5) and s.min.type == pa.float32()


def test_integer_temporal_decimal_bool_and_unordered_types():
    s = _stat([3, None, -7], pa.int8())
    assert (s.min.as_py(), s.max.as_py(), s.null_count, s.nan_count) == (-7, 3, 1, None)
    s = _stat([None, None], pa.int64())
    assert (s.min, s.max, s.null_count) == (None, None, 2)  # all null: unknown bounds
    d1, d2 = dt.date(2020, 1, 2), dt.date(1999, 5, 6)
    s = _stat([d1, d2], pa.date32())
    assert (s.min.as_py(), s.max.as_py()) == (d2, d1)
    s = _stat([dt.timedelta(seconds=5), dt.timedelta(seconds=-1)], pa.duration("s"))
    assert (s.min.as_py(), s.max.as_py()) == (dt.timedelta(seconds=-1), dt.timedelta(seconds=5))
    s = _stat([Decimal("1.25"), Decimal("-3.50")], pa.decimal128(5, 2))
    assert (s.min.as_py(), s.max.as_py()) == (Decimal("-3.50"), Decimal("1.25"))
    s = _stat([True, None, True], pa.bool_())
    assert (s.min.as_py(), s.max.as_py()) == (True, True)
    s = T.compute_stat(pa.array(["b", "a", None]).dictionary_encode(), pa.dictionary(pa.int32(), pa.string()))
    assert (s.min.as_py(), s.max.as_py(), s.null_count) == ("a", "b", 1)
    s = _stat([[1], None], pa.list_(pa.int64()))
    assert (s.min, s.max, s.null_count) == (None, None, 1)
    s = _stat(["x" * 100, "y"], pa.string())
    assert s.min.as_py() == "x" * T.TRUNCATE_BYTES and s.max.as_py() == "y"
    s = _stat([b"\xff" * 100], pa.binary())
    assert s.min.as_py() == b"\xff" * T.TRUNCATE_BYTES and s.max is None  # unknown max


# --- files written with the data -----------------------------------------------------------------
def test_writer_writes_one_stats_file_per_data_file(tmp_path, small_pages):
    ds, uri = write(tmp_path)
    files = [df.path for f in ds.get_fragments() for df in f.data_files()]
    assert len(files) == 3
    assert sorted(os.listdir(os.path.join(uri, "_stats"))) == sorted(
        f[: -len(".lance")] + ".stats.lance" for f in files)
    assert S.statistics_coverage(ds) == {"data_files": 3, "with_stats": 3}
    # the stats file is a plain Lance file: pylance's own file reader opens it
    path = os.path.join(uri, "_stats", files[0][: -len(".lance")] + ".stats.lance")
    theirs = lance.file.LanceFileReader(path).read_all().to_table()
    ours = LanceFileReader(path).read_all()
    assert theirs.num_rows == ours.num_rows > 0
    assert theirs.column("field_id").to_pylist() == ours.column("field_id").to_pylist()


def test_written_stats_match_the_pages_and_a_rebuild(tmp_path, small_pages):
    ds, uri = write(tmp_path, data_storage_version="2.0")  # 2.0 pages (2.1/2.2: test_statistics_v21.py)
    data = sample_table()
    for frag in ds.get_fragments():
        df = frag.data_files()[0]
        reader = frag._reader(0)
        fs = T.load_file_stats(ds._store, ds._base, df.path, frag.physical_rows)
        # same statistics as computed from the file afterwards, page by page
        rebuilt = T.parse_stats_table(S.compute_file_statistics(reader, df, ds.manifest.fields, ds.schema))
        assert set(fs.fields) == set(rebuilt.fields)
        first_row = frag.fragment_id * 2000
        for fid, pages in fs.fields.items():
            other = rebuilt.fields[fid]
            assert pages.row_start.tolist() == other.row_start.tolist()
            assert pages.null_count == other.null_count and pages.nan_count == other.nan_count
            assert pages.mins == other.mins and pages.maxs == other.maxs
        by_fid = {sf.field_id: sf for sf in T.stat_fields(ds.manifest.fields, ds.schema)}
        assert {by_fid[f].name for f in fs.fields} == {"id", "v", "s", "b", "ts", "st.x", "st.y", "lst"}
        for fid, pages in fs.fields.items():
            sf = by_fid[fid]
            col = data.column(sf.path[0])
            for name in sf.path[1:]:
                col = pc.struct_field(col, [name])
            col = col.slice(first_row, frag.physical_rows)
            assert pages.num_rows.sum() == frag.physical_rows
            for i in range(len(pages)):
                piece = col.slice(int(pages.row_start[i]), int(pages.num_rows[i]))
                nulls, vals = page_stats_brute(piece)
                assert pages.null_count[i] == nulls
                vals = [v for v in vals if not (isinstance(v, float) and math.isnan(v))]
                lo, hi = pages.mins[i], pages.maxs[i]
                if sf.name == "lst":
                    assert lo is None and hi is None
                    continue
                if not vals:
                    assert lo is None and hi is None
                    continue
                assert lo is not None and lo <= min(vals)
                if hi is not None:
                    assert max(vals) <= hi
                if sf.name in ("id", "v", "b", "ts", "st.x", "st.y"):
                    assert lo == min(vals) and hi == max(vals)  # exact for non-truncated types
        assert len(fs.fields[by_fid_name(by_fid, "id")]) > 3  # many pages


def by_fid_name(by_fid, name):
    return next(f for f, sf in by_fid.items() if sf.name == name)


def test_collector_handles_pages_cut_across_batches(tmp_path, monkeypatch):
    """Pages that span several batches, and big batches split into pages, get exact stats."""
    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "1500")
    store, base = open_store(str(tmp_path))
    data = sample_table(3000).select(["id", "v", "s", "st"])
    path = str(tmp_path / "data" / "f.lance")
    os.makedirs(tmp_path / "data")
    inner = LanceFileWriter(path, data.schema, data_cache_bytes=4 * 3000)
    w = T.track_statistics(inner, store, base, "f.lance")
    sizes = [1, 7, 300, 5, 900, 13, 1000, 774]
    pos = 0
    for size in sizes:
        w.write_batch(data.slice(pos, size).to_batches()[0] if size else data.slice(pos, 0))
        pos += size
    assert w.close() == 3000
    reader = LanceFileReader(path)
    assert len(reader.column_pages(0)) > 3
    # the set-up covers both cases: pages made of several batches, and batches cut into pages
    bounds = set(np.cumsum([0] + sizes).tolist())
    starts = [p.row_start for c in range(reader.num_columns) for p in reader.column_pages(c)]
    assert any(s not in bounds for s in starts)
    ends = [p.row_start + p.length for p in reader.column_pages(0)]
    assert any(sum(1 for b in bounds if s < b < e) >= 1 for s, e in zip([0] + ends[:-1], ends))
    fs = T.load_file_stats(store, base, "f.lance", 3000)
    for sf in T.stat_fields(inner.lance_fields, data.schema):
        if sf.name == "st":
            continue
        pages = fs.fields[sf.field_id]
        col_pages = reader.column_pages(sf.position)
        assert [p.row_start for p in col_pages] == pages.row_start.tolist()
        for i, p in enumerate(col_pages):
            col = data.column(sf.path[0])
            for name in sf.path[1:]:
                col = pc.struct_field(col, [name])
            piece = col.slice(p.row_start, p.length)
            expect = T.compute_stat(piece, sf.type)
            assert pages.null_count[i] == expect.null_count
            assert pages.mins[i] == (expect.min.as_py() if expect.min is not None else None)
            assert pages.maxs[i] == (expect.max.as_py() if expect.max is not None else None)


# --- pruning ----------------------------------------------------------------------------------------
FILTERS = [
    "id > 5990",
    "id < 5 OR id > 5995",
    "id = 4321",
    "id BETWEEN 100 AND 180",
    "NOT (id >= 10)",
    "id >= 2000 AND id < 2100",
    "id IN (1, 2500, 5999)",
    "v > 2.5",
    "v < -2.5 AND id < 3000",
    "v = 0",
    "v IS NULL",
    "v IS NOT NULL AND id < 7",
    "s = 'k04242'",
    "s >= 'k05990'",
    "s < 'k00010'",
    "s IS NULL AND id > 5000",
    "b = true AND id < 100",
    "st.x = 3",
    "st.x = 3 AND st.y = 1",
    "ts > TIMESTAMP '1970-01-01 01:39:00'",
    "id > 1000000",
    "lst IS NULL AND id < 30",
    "(id < 50 OR id > 5950) AND v > 0",
]


@pytest.fixture(scope="module")
def pruned_dataset(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "2048")
    try:
        root = tmp_path_factory.mktemp("pruned")
        uri = str(root / "ds")
        # 2.0: 2 KiB pages, skipped one by one (2.1/2.2 prune 8192-row ranges: test_statistics_v21.py)
        lance_ops.write_dataset(sample_table(), uri, max_rows_per_file=2000, data_storage_version="2.0")
        ds = lance_ops.dataset(uri)
        ds.delete("id % 10 = 3 OR id = 5991")
        return uri
    finally:
        mp.undo()


@pytest.mark.parametrize("flt", FILTERS)
def test_pruned_results_equal_unpruned_and_pylance(pruned_dataset, flt):
    ds = lance_ops.dataset(pruned_dataset)
    got = ds.to_table(filter=flt)
    with pruning_disabled():
        plain = lance_ops.dataset(pruned_dataset).to_table(filter=flt)
    assert same(got, plain)
    theirs = lance.dataset(pruned_dataset).to_table(filter=flt)
    assert same(by_id(got), by_id(theirs.cast(got.schema)))
    assert ds.count_rows(flt) == got.num_rows
    ids = ds.to_table(columns=["id"], filter=flt, with_row_id=True)
    assert ids.column("id").to_pylist() == got.column("id").to_pylist()


def test_pages_and_fragments_are_skipped(pruned_dataset):
    ds = lance_ops.dataset(pruned_dataset)
    flt = "id BETWEEN 2500 AND 2520"
    ds.to_table(filter=flt)  # loads (and caches) the statistics
    calls = record_reads(ds)
    ds._store.metrics.reset()
    got = ds.to_table(filter=flt)
    pruned_calls = data_reads(calls)
    pruned_metrics = ds._store.metrics.snapshot()
    assert sorted(got.column("id").to_pylist()) == [i for i in range(2500, 2521) if i % 10 != 3]

    plain_ds = lance_ops.dataset(pruned_dataset)
    plain_calls = record_reads(plain_ds)
    with pruning_disabled():
        plain_ds._store.metrics.reset()
        assert same(plain_ds.to_table(filter=flt), got)
        plain_metrics = plain_ds._store.metrics.snapshot()
    plain_calls = data_reads(plain_calls)

    # only the fragment holding ids 2000..3999 was read at all (plus its deletion file) ...
    frag1 = ds.get_fragments()[1].data_files()[0].path
    assert {os.path.basename(p) for p, _ in pruned_calls} == {frag1}
    assert len({p for p, _ in plain_calls}) == 3
    # ... and from it only the pages covering the rows: a small share of its bytes
    pruned_bytes = sum(n for _, r in pruned_calls for _, n in r)
    plain_bytes = sum(n for _, r in plain_calls for _, n in r)
    assert pruned_bytes * 10 < plain_bytes
    assert pruned_metrics["bytes_read"] * 3 < plain_metrics["bytes_read"]
    assert pruned_metrics["get_requests"] <= plain_metrics["get_requests"]
    # every byte range read belongs to a page that overlaps the matching rows
    reader = ds.get_fragments()[1]._reader(0)
    wanted = (500, 521)  # rows of the fragment
    for _, ranges in pruned_calls:
        for start, length in ranges:
            owners = [p for c in range(reader.num_columns) for p in reader.column_pages(c)
                      if any(o <= start < o + s or start <= o < start + length
                             for o, s in zip(p.buffer_offsets, p.buffer_sizes))]
            if not owners:
                continue  # footer / metadata
            assert any(p.row_start < wanted[1] and wanted[0] < p.row_start + p.length for p in owners)


def test_fragment_level_skip_reads_nothing(pruned_dataset):
    ds = lance_ops.dataset(pruned_dataset)
    ds.count_rows("id > 1000000")
    calls = record_reads(ds)
    assert ds.count_rows("id > 1000000") == 0
    assert ds.to_table(filter="st.x = 99").num_rows == 0
    assert data_reads(calls) == []


def test_scan_offsets_contract(pruned_dataset):
    ds = lance_ops.dataset(pruned_dataset)
    frags = ds.get_fragments()
    f = compile_filter("id < 10", ds.schema)
    offs = T.scan_offsets(ds, frags[0], f)
    assert offs is not None and 10 <= offs.size < 300 and offs.max() < 300  # the first page(s) only
    assert 3 not in offs.tolist()  # deleted rows are not offered
    assert T.scan_offsets(ds, frags[1], f).size == 0  # fragment ruled out
    assert T.scan_offsets(ds, frags[0], compile_filter("isnan(v)", ds.schema)) is None  # no tree
    assert T.scan_offsets(ds, frags[0], compile_filter("id >= 0", ds.schema)) is None  # all match


def test_scans_without_stats_files_are_unchanged(tmp_path, small_pages):
    ds, uri = write(tmp_path)
    expect = {f: ds.to_table(filter=f) for f in FILTERS[:6]}
    shutil.rmtree(os.path.join(uri, "_stats"))
    fresh = lance_ops.dataset(uri)
    assert S.statistics_coverage(fresh) == {"data_files": 3, "with_stats": 0}
    for f, t in expect.items():
        assert same(fresh.to_table(filter=f), t)


def test_bad_stats_files_are_ignored(tmp_path, small_pages, caplog):
    ds, uri = write(tmp_path)
    names = sorted(os.listdir(os.path.join(uri, "_stats")))
    with open(os.path.join(uri, "_stats", names[0]), "wb") as fh:
        fh.write(b"not a lance file")
    # a stats file that claims other rows (a wrong file under the right name) is ignored too
    shutil.copy(os.path.join(uri, "_stats", names[2]), os.path.join(uri, "_stats", names[1]))
    fresh = lance_ops.dataset(uri)
    with pruning_disabled():
        expect = lance_ops.dataset(uri).to_table(filter="id > 10")
    assert same(fresh.to_table(filter="id > 10"), expect)
    assert fresh.count_rows("id < 3000") == 3000


def test_wrong_bounds_would_change_results_so_bounds_are_really_used(tmp_path, small_pages):
    """Sanity check of the test set-up: a stats file with a lying max makes rows vanish."""
    ds, uri = write(tmp_path, n=2000)
    frag = ds.get_fragments()[0]
    df = frag.data_files()[0]
    path = T.stats_path(ds._store, ds._base, df.path)
    table = LanceFileReader(path).read_all()
    lie = table.set_column(table.schema.get_field_index("max_0"), table.schema.field("max_0"),
                           pc.if_else(pc.is_valid(table.column("max_0")),
                                      pa.scalar(-1, table.schema.field("max_0").type),
                                      table.column("max_0")))
    assert table.schema.field("max_0").type == pa.int64()
    os.remove(path)
    with LanceFileWriter(path, lie.schema) as w:
        w.write_batch(lie)
    assert lance_ops.dataset(uri).count_rows("id >= 0 AND id > 5") == 0
    with pruning_disabled():
        assert lance_ops.dataset(uri).count_rows("id >= 0 AND id > 5") == 1994


# --- rebuild and coverage -----------------------------------------------------------------------------
def test_rebuild_fills_in_pylance_files(tmp_path):
    uri = str(tmp_path / "pl")
    lance.write_dataset(sample_table().drop_columns(["lst"]), uri, max_rows_per_file=2000,
                        data_storage_version="2.0")
    ds = lance_ops.dataset(uri)
    assert S.statistics_coverage(ds) == {"data_files": 3, "with_stats": 0}
    dry = S.rebuild_statistics(ds, dry_run=True)
    assert dry["written"] == 3 and dry["dry_run"] and not os.path.exists(os.path.join(uri, "_stats"))
    seen = []
    res = S.rebuild_statistics(ds, progress=lambda d, t: seen.append((d, t)))
    assert res["written"] == 3 and res["failed"] == 0 and seen[-1] == (3, 3)
    assert S.statistics_coverage(ds) == {"data_files": 3, "with_stats": 3}
    again = S.rebuild_statistics(ds)
    assert again["written"] == 0 and again["already_present"] == 3
    forced = S.rebuild_statistics(ds, fragments=[1], force=True)
    assert forced["written"] == 1
    fresh = lance_ops.dataset(uri)
    for flt in FILTERS[:19]:
        if "lst" in flt:
            continue
        got = fresh.to_table(filter=flt)
        with pruning_disabled():
            assert same(got, lance_ops.dataset(uri).to_table(filter=flt)), flt
    calls = record_reads(fresh)
    assert fresh.count_rows("id > 100000") == 0 and data_reads(calls) == []
    # the rebuilt statistics are right: compare with brute force over the whole file
    frag = fresh.get_fragments()[2]
    fs = T.load_file_stats(fresh._store, fresh._base, frag.data_files()[0].path, frag.physical_rows)
    ids = {sf.name: sf.field_id for sf in T.stat_fields(fresh.manifest.fields)}
    agg = fs.fields[ids["id"]].aggregate()
    assert (agg.min, agg.max, agg.null_count) == (4000, 5999, 0)
    agg = fs.fields[ids["s"]].aggregate()
    assert agg.null_count == sum(1 for i in range(4000, 6000) if i % 53 == 0)


def test_rebuild_covers_2_1_files(tmp_path):
    """2.1+ files get statistics per row range (tests/maintenance/test_statistics_v21.py has the rest)."""
    uri = str(tmp_path / "v21")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri, data_storage_version="2.1")
    ds = lance_ops.dataset(uri)
    res = S.rebuild_statistics(ds)
    assert (res["written"], res["failed"], res["unsupported"], res["status"]) == (1, 0, 0, "ok")
    assert S.statistics_coverage(ds)["with_stats"] == 1
    assert lance_ops.dataset(uri).count_rows("id > 100") == 0


def test_rebuild_limited_to_fragments(tmp_path, small_pages):
    ds, uri = write(tmp_path)
    shutil.rmtree(os.path.join(uri, "_stats"))
    res = S.rebuild_statistics(ds, fragments=[ds.get_fragments()[0]])
    assert res["written"] == 1 and res["data_files"] == 1
    assert S.statistics_coverage(ds)["with_stats"] == 1


# --- pylance is unaffected ------------------------------------------------------------------------------
def test_pylance_reads_compacts_and_cleans_up_with_stats_present(tmp_path, small_pages):
    ds, uri = write(tmp_path, max_rows_per_file=1000)
    ours = ds.to_table()
    theirs = lance.dataset(uri)
    assert same(theirs.to_table(), ours.cast(theirs.schema))
    theirs.delete("id < 100")
    theirs.optimize.compact_files(target_rows_per_fragment=3000)
    theirs = lance.dataset(uri)
    assert theirs.count_rows() == N - 100
    theirs.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    assert same(lance.dataset(uri).to_table(), lance_ops.dataset(uri).to_table().cast(theirs.schema))
    # pylance leaves our area alone: the stats of its removed files are still there ...
    fresh = lance_ops.dataset(uri)
    cov = S.statistics_coverage(fresh)
    n_files = len(fresh.manifest.fragments)
    assert cov == {"data_files": n_files, "with_stats": 0}
    assert len(os.listdir(os.path.join(uri, "_stats"))) == 6
    # ... until our cleanup removes them, and a rebuild covers pylance's new files
    S.rebuild_statistics(fresh)
    assert S.statistics_coverage(fresh) == {"data_files": n_files, "with_stats": n_files}
    stats = fresh.cleanup_old_versions(dt.timedelta(0), delete_unverified=True)
    assert stats.statistics_files_removed == 6
    assert len(os.listdir(os.path.join(uri, "_stats"))) == n_files
    assert fresh.to_table(filter="id > 5900").num_rows == 99
    assert lance.dataset(uri).count_rows("id > 5900") == 99


def test_our_compaction_writes_stats_for_new_files(tmp_path, small_pages):
    from lance_ops.maintenance.compaction import compact_files

    ds, uri = write(tmp_path, max_rows_per_file=500)
    ds.delete("id % 4 = 0")
    compact_files(ds, target_rows_per_fragment=1500)
    fresh = lance_ops.dataset(uri)
    assert len(fresh.manifest.fragments) == 3
    assert S.statistics_coverage(fresh) == {"data_files": 3, "with_stats": 3}
    for flt in FILTERS[:8]:
        if "lst" in flt:
            continue
        got = fresh.to_table(filter=flt)
        assert same(by_id(got), by_id(lance.dataset(uri).to_table(filter=flt).cast(got.schema))), flt


# --- property: random data, random filters ----------------------------------------------------------------
_values = st.one_of(st.none(), st.integers(-50, 50))
_floats = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, -1.5, float("nan"), float("inf"), 3.0, -7.25]))
_strings = st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "zz", "é", "a" * 70, "a" * 69 + "b"]))
_ops = st.sampled_from(["=", "<", "<=", ">", ">=", "!="])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_values, _floats, _strings), min_size=1, max_size=300),
       cut=st.integers(1, 120),
       preds=st.lists(st.tuples(st.sampled_from(["i", "f", "s"]), _ops, st.integers(-55, 55)), min_size=1,
                      max_size=3),
       join=st.sampled_from([" AND ", " OR "]),
       data=st.data())
def test_property_pruning_never_changes_results(tmp_path_factory, monkeypatch, rows, cut, preds, join, data):
    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "64")
    uri = str(tmp_path_factory.mktemp("prop") / "ds")
    t = pa.table({"i": pa.array([r[0] for r in rows], pa.int32()),
                  "f": pa.array([r[1] for r in rows], pa.float64()),
                  "s": pa.array([r[2] for r in rows], pa.string())})
    ds = lance_ops.write_dataset(t, uri, max_rows_per_file=cut)
    terms = []
    for col, op, val in preds:
        if col == "s":
            lit = "'" + data.draw(st.sampled_from(["a", "ab", "b", "", "a" * 69 + "c", "é"])) + "'"
        elif col == "f":
            lit = repr(val / 4)
        else:
            lit = str(val)
        terms.append(data.draw(st.sampled_from([f"{col} {op} {lit}", f"{col} IS NULL",
                                                f"NOT ({col} {op} {lit})"])))
    flt = join.join(terms)
    got = ds.to_table(filter=flt)
    with pruning_disabled():
        plain = lance_ops.dataset(uri).to_table(filter=flt)
    assert same(got, plain), flt
    # and the statistics bound every page
    for frag in ds.get_fragments():
        fs = T.load_file_stats(ds._store, ds._base, frag.data_files()[0].path, frag.physical_rows)
        for sf in T.stat_fields(ds.manifest.fields):
            pages = fs.fields[sf.field_id]
            col = t.column(sf.name).slice(frag.fragment_id * cut, frag.physical_rows)
            for i in range(len(pages)):
                piece = col.slice(int(pages.row_start[i]), int(pages.num_rows[i])).to_pylist()
                vals = [v for v in piece if v is not None and not (isinstance(v, float) and math.isnan(v))]
                assert pages.null_count[i] == piece.count(None)
                if vals:
                    assert pages.mins[i] is not None and pages.mins[i] <= min(vals)
                    assert pages.maxs[i] is None or pages.maxs[i] >= max(vals)


# --- many fragments, S3 ------------------------------------------------------------------------------------
def test_many_fragments_list_stats_once(tmp_path, small_pages):
    ds, uri = write(tmp_path, max_rows_per_file=400)  # 15 fragments
    assert len(ds.manifest.fragments) > T.LIST_THRESHOLD
    gone = sorted(os.listdir(os.path.join(uri, "_stats")))[::3]
    for name in gone:
        os.remove(os.path.join(uri, "_stats", name))
    fresh = lance_ops.dataset(uri)
    assert S.statistics_coverage(fresh) == {"data_files": 15, "with_stats": 15 - len(gone)}
    fresh._store.metrics.reset()
    got = fresh.to_table(filter="id BETWEEN 4410 AND 4420")
    m = fresh._store.metrics.snapshot()
    assert m["list_requests"] == 1
    with pruning_disabled():
        assert same(got, lance_ops.dataset(uri).to_table(filter="id BETWEEN 4410 AND 4420"))
    # files without statistics are read, the others are skipped: fewer bytes than a full scan
    fresh._store.metrics.reset()
    assert same(fresh.to_table(filter="id BETWEEN 4410 AND 4420"), got)
    warm = fresh._store.metrics.snapshot()
    assert warm["list_requests"] == 0  # statistics (and their absence) are cached per dataset
    with pruning_disabled():
        plain = lance_ops.dataset(uri)
        plain._store.metrics.reset()
        plain.to_table(filter="id BETWEEN 4410 AND 4420")
        assert warm["bytes_read"] * 2 < plain._store.metrics.bytes_read


def test_statistics_on_s3(s3_bucket, moto_server, monkeypatch):
    monkeypatch.setenv("LANCE_FILE_WRITER_MAX_PAGE_BYTES", "2048")
    uri = f"{s3_bucket}/stats-ds"
    opts = moto_server.storage_options
    lance_ops.write_dataset(sample_table(3000), uri, max_rows_per_file=1000, storage_options=opts)
    ds = lance_ops.dataset(uri, storage_options=opts)
    assert S.statistics_coverage(ds) == {"data_files": 3, "with_stats": 3}
    flt = "id BETWEEN 1200 AND 1210"
    ds.to_table(filter=flt)
    ds._store.metrics.reset()
    got = ds.to_table(filter=flt)
    pruned = ds._store.metrics.snapshot()
    with pruning_disabled():
        plain_ds = lance_ops.dataset(uri, storage_options=opts)
        plain_ds._store.metrics.reset()
        assert same(plain_ds.to_table(filter=flt), got)
        plain = plain_ds._store.metrics.snapshot()
    assert got.column("id").to_pylist() == list(range(1200, 1211))
    # S3 reads whole small files in one tail request: here the win is the two skipped fragments
    assert pruned["bytes_read"] * 2 < plain["bytes_read"]
    theirs = lance.dataset(uri, storage_options=opts).to_table(filter=flt)
    assert same(got, theirs.cast(got.schema))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 250), min_size=1, max_size=8), cache=st.integers(200, 6000),
       page=st.integers(256, 4000), seed=st.integers(0, 1000))
def test_property_written_stats_equal_stats_read_back(tmp_path_factory, sizes, cache, page, seed):
    """Whatever the batch sizes and page cuts, the writer's statistics are the file's statistics."""
    root = tmp_path_factory.mktemp("coll")
    store, base = open_store(str(root))
    n = sum(sizes)
    data = sample_table(max(n, 1), start=seed).slice(0, n)
    os.makedirs(root / "data")
    inner = LanceFileWriter(str(root / "data" / "f.lance"), data.schema, data_cache_bytes=cache,
                            max_page_bytes=page)
    w = T.track_statistics(inner, store, base, "f.lance")
    pos = 0
    for size in sizes:
        if size:
            w.write_batch(data.slice(pos, size).combine_chunks().to_batches()[0])
        pos += size
    w.close()
    written = T.load_file_stats(store, base, "f.lance", n)
    assert written is not None
    reader = LanceFileReader(str(root / "data" / "f.lance"))
    df = SimpleNamespace(path="f.lance", fields=[f.id for f in inner.lance_fields],
                         column_indices=list(range(inner.num_columns)))
    back = T.parse_stats_table(S.compute_file_statistics(reader, df, inner.lance_fields, data.schema))
    assert set(written.fields) == set(back.fields)
    for fid, pages in written.fields.items():
        other = back.fields[fid]
        assert pages.row_start.tolist() == other.row_start.tolist()
        assert pages.null_count == other.null_count and pages.nan_count == other.nan_count
        assert _norm(pages.mins) == _norm(other.mins) and _norm(pages.maxs) == _norm(other.maxs)
        for a, b in zip(pages.mins + pages.maxs, other.mins + other.maxs):
            if isinstance(a, float):
                assert math.copysign(1, a) == math.copysign(1, b)  # -0.0 / +0.0 rules too
