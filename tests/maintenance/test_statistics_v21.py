"""Statistics of Lance 2.1/2.2 data files (pylance's default): rebuild, pruning, failures, interop.

Oracles: pylance 14.0.2 (test-only) for the data and every filtered result (exact equality);
brute force over the rows pylance reads for the statistics themselves; the scan planner's tasks
(:func:`lance_ops.table.scan.plan`) and recorded ranged reads for the claim that ranges are skipped.
"""
from __future__ import annotations

import decimal
from datetime import timedelta
import json
import os
import shutil

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_ops
from lance_ops.cli import main
from lance_ops.errors import UnsupportedError
from lance_ops.maintenance import statistics as S
from lance_ops.table import scan
from lance_ops.table import stats as T
from lance_ops.table.stats import prune as stats_prune
from lance_ops.table.stats.ranges import RANGE_ROWS, row_ranges

ROWS = 200_000
PER_FILE = 40_000
NULLS = (150_000, 151_000)  # ids whose x is null


# --- helpers --------------------------------------------------------------------------------------
def record_reads(ds):
    """Wrap the dataset store's ranged reads (a test-side wrapper): returns the list of
    ``(path, [(start, length), ...])`` calls made to data files from now on."""
    store = ds.store
    calls: list[tuple[str, list[tuple[int, int]]]] = []
    original = store.read_ranges

    def spy(path, ranges):
        if "/data/" in str(path).replace(os.sep, "/"):
            calls.append((path, [(int(a), int(b)) for a, b in np.asarray(ranges).reshape(-1, 2)]))
        return original(path, ranges)

    store.read_ranges = spy
    return calls


def read_everything(mp):
    """Scans of the block read every row (the statistics lookup replaced from the test, ADR 0007)."""
    mp.setattr(stats_prune, "scan_ranges", lambda ds, frag, filt: None)


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def planned(ds, flt):
    """Per planned task: (fragment id, ranges or None = whole fragment)."""
    return [(t.fragment_id, None if t.ranges is None else t.ranges.tolist()) for t in scan.plan(ds, ["id"], flt)]


# --- a default-version pylance dataset ----------------------------------------------------------------
@pytest.fixture(scope="module")
def default_dataset(tmp_path_factory):
    """200 000 rows in 5 fragments written by pylance with its default storage version; ``x`` is
    sorted (``2 * id``) with ids 150 000..150 999 null, ``s`` and ``f`` come along."""
    uri = str(tmp_path_factory.mktemp("stats21") / "default.lance")
    ids = np.arange(ROWS)
    x_null = (ids >= NULLS[0]) & (ids < NULLS[1])
    t = pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array(ids * 2, pa.int64(), mask=x_null),
        "s": pa.array([f"row-{i:06d}" for i in ids]),
        "f": pa.array(np.sin(ids), pa.float64()),
    })
    ds = lance.write_dataset(t, uri, max_rows_per_file=PER_FILE)
    assert ds.data_storage_version == "2.2"  # pylance 14.0.2's default
    assert len(ds.get_fragments()) == ROWS // PER_FILE
    return uri


@pytest.fixture(scope="module")
def rebuilt(default_dataset, tmp_path_factory):
    """``default_dataset`` after ``lance-ops rebuild-stats`` (a copy, so other tests see it bare)."""
    uri = str(tmp_path_factory.mktemp("stats21r") / "rebuilt.lance")
    shutil.copytree(default_dataset, uri)
    assert main(["rebuild-stats", uri, "--json"]) == 0
    return uri


def test_before_the_rebuild_nothing_is_pruned(default_dataset):
    ds = lance_ops.dataset(default_dataset)
    assert S.statistics_coverage(ds) == {"data_files": 5, "with_stats": 0}
    assert planned(ds, "x = 246810") == [(i, None) for i in range(5)]


def test_rebuild_stats_writes_range_statistics(default_dataset, tmp_path, capsys):
    uri = str(tmp_path / "copy.lance")
    shutil.copytree(default_dataset, uri)
    code, out, _ = run_cli(capsys, "rebuild-stats", uri, "--json")
    res = json.loads(out)
    assert code == 0 and res["status"] == "ok" and res["failures"] == []
    assert (res["written"], res["failed"], res["unsupported"], res["coverage"]) == (5, 0, 0, "5/5")
    ds = lance_ops.dataset(uri)
    frag = ds.get_fragments()[3]
    fs = T.load_file_stats(ds.store, ds.base, frag.data_files()[0].path, frag.physical_rows)
    ids = {sf.name: sf.field_id for sf in T.stat_fields(ds.manifest.fields)}
    x = fs.fields[ids["x"]]
    # one record per 8192-row range of the file, the same ranges for every field
    assert [(int(a), int(n)) for a, n in zip(x.row_start, x.num_rows)] == row_ranges(PER_FILE)
    assert len(x) == -(-PER_FILE // RANGE_ROWS) == 5
    for fid in fs.fields.values():
        assert fid.row_start.tolist() == x.row_start.tolist()
    # bounds and null counts are those of the rows (brute force over what pylance reads)
    rows = lance.dataset(uri).get_fragment(frag.fragment_id).to_table(columns=["x"]).column("x")
    for i, (start, n) in enumerate(row_ranges(PER_FILE)):
        part = rows.slice(start, n)
        stat = x.page(i)
        assert stat.null_count == part.null_count
        mm = pc.min_max(part)
        assert (stat.min, stat.max) == (mm["min"].as_py(), mm["max"].as_py())
    assert sum(x.null_count) == NULLS[1] - NULLS[0]  # fragment 3 holds ids 120000..159999
    again = json.loads(run_cli(capsys, "rebuild-stats", uri, "--json")[1])
    assert again["written"] == 0 and again["already_present"] == 5 and again["status"] == "ok"


#: filter -> the (fragment, [start, end) ranges) the planner must leave; fragment k holds ids
#: 40000k .. 40000k + 39999, ranges are 8192 rows
PRUNING = {
    "x = 246810": [(3, [[0, 8192]])],                                       # id 123405 -> row 3405
    "x < 30000": [(0, [[0, 8192], [8192, 16384]])],                         # ids 0..14999
    "x BETWEEN 100000 AND 120000": [(1, [[8192, 16384], [16384, 24576]])],  # ids 50000..60000
    "x IN (10, 200000, 399998)": [(0, [[0, 8192]]), (2, [[16384, 24576]]), (4, [[32768, 40000]])],
    "x IS NULL": [(3, [[24576, 32768]])],                                   # ids 150000..150999
    "x > 399990": [(4, [[32768, 40000]])],
}


@pytest.mark.parametrize("flt", sorted(PRUNING))
def test_pruning_skips_ranges_and_results_equal_pylance(rebuilt, flt):
    ds = lance_ops.dataset(rebuilt)
    assert planned(ds, flt) == PRUNING[flt]
    got = ds.to_table(filter=flt)
    theirs = lance.dataset(rebuilt).to_table(filter=flt)
    assert got.sort_by("id").equals(theirs.sort_by("id").cast(got.schema)), flt
    assert ds.count_rows(flt) == lance.dataset(rebuilt).count_rows(flt)
    with pytest.MonkeyPatch.context() as mp:
        read_everything(mp)
        assert lance_ops.dataset(rebuilt).to_table(filter=flt).equals(got)


def test_skipped_ranges_figures(rebuilt):
    """How much pruning leaves, in ranges: 25 ranges (5 fragments x 5) in all."""
    ds = lance_ops.dataset(rebuilt)
    total = sum(len(row_ranges(f.physical_rows)) for f in ds.get_fragments())
    assert total == 25
    for flt, expect in PRUNING.items():
        left = planned(ds, flt)
        assert left == expect and sum(len(rr) for _, rr in left) <= 3  # at least 22 of 25 skipped
    # a filter nothing can rule out plans every fragment whole
    assert planned(ds, "x IS NOT NULL OR x IS NULL") == [(i, None) for i in range(5)]


def test_pruned_scan_reads_a_fraction_of_the_bytes(rebuilt):
    flt = "x = 246810"
    ds = lance_ops.dataset(rebuilt)
    ds.to_table(filter=flt)  # loads and caches the statistics
    calls = record_reads(ds)
    got = ds.to_table(filter=flt)
    assert got.column("id").to_pylist() == [123405]
    plain = lance_ops.dataset(rebuilt)
    plain_calls = record_reads(plain)
    with pytest.MonkeyPatch.context() as mp:
        read_everything(mp)
        assert plain.to_table(filter=flt).equals(got)
    frag3 = ds.get_fragments()[3].data_files()[0].path
    assert {os.path.basename(p) for p, _ in calls} == {frag3}  # four fragments not read at all
    assert len({p for p, _ in plain_calls}) == 5
    pruned_bytes = sum(n for _, r in calls for _, n in r)
    plain_bytes = sum(n for _, r in plain_calls for _, n in r)
    assert pruned_bytes * 10 < plain_bytes  # 27 KB against 468 KB when written


# --- every encoding pylance 2.1/2.2 uses ---------------------------------------------------------------
def encodings_table(n: int) -> pa.Table:
    """Columns that pylance stores with different encodings (bit packing, flat, RLE, constant,
    dictionary, FSST, full-zip, fixed-size list, all-null, zstd + byte-stream-split)."""
    rng = np.random.default_rng(7)
    ids = np.arange(n)
    words = np.array(["alpha", "beta", "gamma", "delta"])
    t = pa.table({
        "id": pa.array(ids, pa.int64()),
        "i8": pa.array(rng.integers(-100, 100, n), pa.int8(), mask=ids % 37 == 0),
        "u32": pa.array(rng.integers(0, 1 << 31, n), pa.uint32()),
        "runs": pa.array(ids // 5000, pa.int32()),
        "const": pa.array(np.full(n, 7), pa.int64()),
        "f32": pa.array(rng.normal(size=n), pa.float32()),
        "f64": pa.array(np.where(ids % 101 == 0, np.nan, rng.normal(size=n)), pa.float64(), mask=ids % 53 == 0),
        "b": pa.array(ids % 3 == 0, mask=ids % 41 == 0),
        "lowcard": pa.array(words[ids % 4]),
        "fsst": pa.array([f"https://example.com/path/{i:07d}/item?q={i % 13}" for i in ids]),
        "big": pa.array([("%06d" % i) * 50 if i % 2 else None for i in ids], pa.large_string()),
        "bin": pa.array([bytes([i % 256, (i * 7) % 256]) for i in ids], pa.binary()),
        "dict": pa.array(words[(ids // 100) % 4]).dictionary_encode(),
        "d32": pa.array(ids.astype("datetime64[D]"), pa.date32()),
        "ts": pa.array((ids * 1_000_000).astype("datetime64[us]"), pa.timestamp("us", "UTC")),
        "dec": pa.array([decimal.Decimal(int(i)) / 100 for i in ids], pa.decimal128(12, 2)),
        "fsb": pa.array([int(i).to_bytes(8, "big") for i in ids], pa.binary(8)),
        "st": pa.StructArray.from_arrays([pa.array(ids // 1000, pa.int32()),
                                          pa.array([f"s{i % 10}" for i in ids])], names=["a", "b"]),
        "lst": pa.array([[int(i), int(i) + 1] if i % 11 else None for i in ids], pa.list_(pa.int64())),
        "vec": pa.array([[float(i)] * 8 for i in ids], pa.list_(pa.float32(), 8)),
        "allnull": pa.nulls(n, pa.int64()),
        "zstd": pa.array(ids * 3, pa.int64()),
    })
    i = t.schema.get_field_index("zstd")
    return t.cast(t.schema.set(i, t.schema.field(i).with_metadata({"lance-encoding:compression": "zstd"})))


ENC_ROWS = 30_000


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def encodings_dataset(request, tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("enc") / f"enc{request.param}.lance")
    lance.write_dataset(encodings_table(ENC_ROWS), uri, data_storage_version=request.param, max_rows_per_file=12_000)
    res = S.rebuild_statistics(lance_ops.dataset(uri))
    assert (res["written"], res["failed"], res["status"]) == (3, 0, "ok"), res["failures"]
    return uri


def _expected(values: pa.ChunkedArray, t: pa.DataType):
    """Null count and bounds of ``values`` by brute force (None bounds: none kept)."""
    vals = [v for v in values.to_pylist() if v is not None and not (isinstance(v, float) and v != v)]
    if T.stats_type(t) is None or not vals:
        return values.null_count, None, None
    return values.null_count, min(vals), max(vals)


def test_every_encoding_gets_statistics(encodings_dataset):
    ds = lance_ops.dataset(encodings_dataset)
    theirs = lance.dataset(encodings_dataset)
    fields = {sf.name: sf for sf in T.stat_fields(ds.manifest.fields, ds.schema) if T.is_tracked(sf)}
    covered = set()
    for frag in ds.get_fragments():
        rows = theirs.get_fragment(frag.fragment_id).to_table()
        fs = T.load_file_stats(ds.store, ds.base, frag.data_files()[0].path, frag.physical_rows)
        assert fs is not None
        for name, sf in fields.items():
            pages = fs.fields.get(sf.field_id)
            assert pages is not None, name
            covered.add(name)
            col = T.field_values(rows, sf.path)
            for i, (start, n) in enumerate(row_ranges(frag.physical_rows)):
                stat = pages.page(i)
                nulls, lo, hi = _expected(col.slice(start, n), sf.type)
                assert stat.null_count == nulls, (name, i)
                if lo is None:
                    assert stat.min is None and stat.max is None, (name, i)
                    continue
                if isinstance(lo, (str, bytes)):  # truncated bounds: a prefix below, above the max
                    assert stat.min <= lo and stat.max >= hi, (name, i)
                else:
                    assert (stat.min, stat.max) == (lo, hi), (name, i)
    assert covered == set(fields) and {"lst", "vec", "st.a", "st.b", "allnull", "dict"} <= covered


ENCODING_FILTERS = [
    "i8 = 5", "i8 IS NULL", "u32 < 1000000", "runs = 3", "runs BETWEEN 1 AND 2", "const = 8", "const = 7",
    "f32 > 2.5", "f64 < -2.0", "f64 IS NULL", "b = true", "b IS NULL", "lowcard = 'beta'",
    "fsst = 'https://example.com/path/0012345/item?q=8'", "big IS NULL", "dict = 'gamma'",
    "d32 < date '1970-01-20'", "ts >= timestamp '1970-01-01 08:00:00'", "dec > 250", "dec < CAST(0.50 AS DECIMAL(12,2))",
    "st.a = 12", "st.b = 's3'", "lst IS NULL", "allnull IS NULL", "allnull = 1", "zstd IN (3, 60000, 89997)",
    "id BETWEEN 12000 AND 12100",
]


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal rows, NaN equal to NaN (``Table.equals`` says NaN != NaN)."""
    def norm(v):
        return "NaN" if isinstance(v, float) and v != v else v
    return a.column_names == b.column_names and all(
        [norm(v) for v in a.column(c).to_pylist()] == [norm(v) for v in b.column(c).to_pylist()]
        for c in a.column_names)


@pytest.mark.parametrize("flt", ENCODING_FILTERS)
def test_encodings_pruned_results_equal_pylance(encodings_dataset, flt):
    ds = lance_ops.dataset(encodings_dataset)
    columns = list(dict.fromkeys(["id", flt.split()[0].split(".")[0]]))
    got = ds.to_table(columns=columns, filter=flt)
    with pytest.MonkeyPatch.context() as mp:
        read_everything(mp)
        assert _same(lance_ops.dataset(encodings_dataset).to_table(columns=columns, filter=flt), got), flt
    theirs = lance.dataset(encodings_dataset).to_table(columns=columns, filter=flt).sort_by("id")
    assert _same(got.sort_by("id"), theirs.cast(got.schema)), flt


def test_encodings_prune_ranges(encodings_dataset):
    ds = lance_ops.dataset(encodings_dataset)
    assert planned(ds, "id BETWEEN 12000 AND 12100") == [(1, [[0, 8192]])]
    assert planned(ds, "runs = 3") == [(1, [[0, 8192]])]  # ids 15000..19999
    assert planned(ds, "const = 8") == [] and planned(ds, "allnull = 1") == []
    assert planned(ds, "lst IS NULL") == [(i, None) for i in range(3)]  # every range has some


# --- failures are reported -----------------------------------------------------------------------------
def test_a_file_that_cannot_be_read_fails_the_rebuild(default_dataset, tmp_path, capsys):
    uri = str(tmp_path / "broken.lance")
    shutil.copytree(default_dataset, uri)
    ds = lance_ops.dataset(uri)
    bad = ds.get_fragments()[2].data_files()[0].path
    with open(os.path.join(uri, "data", bad), "r+b") as f:  # same size, no Lance footer
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        f.write(b"\0" * size)
    code, out, _ = run_cli(capsys, "rebuild-stats", uri, "--json")
    res = json.loads(out)
    assert code == 1 and res["ok"] is False  # the command failed (lance_ops.cli_output.EXIT_FAILED)
    assert (res["status"], res["written"], res["failed"], res["unsupported"], res["coverage"]) == (
        "failed", 4, 1, 0, "4/5")
    (failure,) = res["failures"]
    assert failure["data_file"] == bad and failure["fragment_id"] == 2 and failure["file_version"] == "2.2"
    assert failure["error"].startswith("CorruptFileError") and bad in failure["error"]
    assert failure["retryable"] is False
    # text output says so too, and the files that could be read keep their statistics
    code, out, _ = run_cli(capsys, "rebuild-stats", uri)
    assert code == 1 and "status" in out and "failed" in out and bad in out
    assert S.statistics_coverage(lance_ops.dataset(uri)) == {"data_files": 5, "with_stats": 4}


def test_an_unsupported_file_version_fails_the_rebuild(tmp_path, capsys):
    uri = str(tmp_path / "next.lance")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri, data_storage_version="2.3")
    code, out, _ = run_cli(capsys, "rebuild-stats", uri, "--json")
    res = json.loads(out)
    assert code == 1 and res["status"] == "failed" and (res["failed"], res["unsupported"]) == (1, 1)
    assert res["failures"][0]["error"].startswith("UnsupportedError") and "2.3" in res["failures"][0]["error"]
    assert "could not be written" in S.failure_summary(res)


def test_an_unsupported_encoding_is_counted_as_unsupported(tmp_path, monkeypatch):
    uri = str(tmp_path / "enc.lance")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri)

    def refuse(*args, **kwargs):
        raise UnsupportedError("page layout 'future_layout' is not supported")

    monkeypatch.setattr(S, "compute_range_statistics", refuse)  # fault injected from the test
    res = S.rebuild_statistics(lance_ops.dataset(uri))
    assert (res["status"], res["failed"], res["unsupported"], res["written"]) == ("failed", 1, 1, 0)
    assert "future_layout" in res["failures"][0]["error"]


def test_dry_run_reads_nothing_and_succeeds(default_dataset, capsys):
    code, out, _ = run_cli(capsys, "rebuild-stats", default_dataset, "--dry-run", "--json")
    res = json.loads(out)
    assert code == 0 and res["written"] == 5 and res["status"] == "ok"
    assert not os.path.exists(os.path.join(default_dataset, "_stats"))


# --- pylance is not disturbed --------------------------------------------------------------------------
def test_pylance_opens_validates_compacts_and_cleans_up_after_rebuild(default_dataset, tmp_path):
    from lance_ops.maintenance.cleanup import cleanup_old_versions

    uri = str(tmp_path / "interop.lance")
    shutil.copytree(default_dataset, uri)
    assert S.rebuild_statistics(lance_ops.dataset(uri))["written"] == 5
    stats_dir = os.path.join(uri, "_stats")
    assert len(os.listdir(stats_dir)) == 5
    theirs = lance.dataset(uri)
    theirs.validate()
    assert theirs.count_rows("x = 246810") == 1 and theirs.count_rows() == ROWS
    # pylance rewrites the fragment with deletions; our cleanup then removes the statistics of the
    # data files only the old versions use, and keeps the others
    before = {f.data_files()[0].path for f in theirs.get_fragments()}
    theirs.delete("id < 100")
    theirs.optimize.compact_files(target_rows_per_fragment=PER_FILE, materialize_deletions_threshold=0.0)
    theirs = lance.dataset(uri)
    theirs.validate()
    after = {f.data_files()[0].path for f in theirs.get_fragments()}
    kept = before & after
    assert kept and before - after
    ours = lance_ops.dataset(uri)
    cleanup_old_versions(ours, older_than=timedelta(0), retain_versions=1, delete_unverified=True)
    names = set(os.listdir(stats_dir))
    assert names == {T.stats_file_name(p) for p in kept}
    # the statistics of the kept files still prune, and pylance still reads and validates
    ours = lance_ops.dataset(uri)
    assert ours.to_table(filter="x = 246810").equals(lance.dataset(uri).to_table(filter="x = 246810"))
    lance.dataset(uri).validate()
    S.rebuild_statistics(ours)  # the new files get theirs too
    assert S.statistics_coverage(lance_ops.dataset(uri))["with_stats"] == len(after)
    lance.dataset(uri).validate()
    assert lance.dataset(uri).count_rows() == ROWS - 100
