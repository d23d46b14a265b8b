"""Files written by real pylance (the oracle) read by lance_ops: exact equality with the input and
with pylance's own reads, for the whole type matrix, multi-page columns, ranges, takes and
projections; plus proofs that projection / range / take fetch only the bytes they need.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_ops.format.v2_0.reader import LanceFileReader
from tests.file.test_bad_input import write_pylance
from tests.file.type_matrix import _decode_dictionaries, assert_tables_equal, make_table

lance = pytest.importorskip("lance")
import lance.file  # noqa: E402


def pylance_take(path: str, indices, columns=None) -> pa.Table:
    """pylance's take (it wants sorted indices), reordered to ``indices``; dictionaries decoded."""
    idx = np.asarray(indices, dtype=np.int64)
    uniq, inverse = np.unique(idx, return_inverse=True)
    reader = lance.file.LanceFileReader(path, columns=columns)
    return _decode_dictionaries(reader.take_rows(uniq).to_table()).take(pa.array(inverse.reshape(-1)))


def pylance_range(path: str, start: int, n: int, columns=None) -> pa.Table:
    return lance.file.LanceFileReader(path, columns=columns).read_range(start, n).to_table()


def assert_same(actual: pa.Table, expected: pa.Table) -> None:
    assert_tables_equal(_decode_dictionaries(actual), _decode_dictionaries(expected))


class RecordingStore:
    """Wraps a store and records every range the reader asks for (before coalescing)."""

    def __init__(self, store):
        self._store = store
        self.ranges: list[tuple[int, int]] = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def read_ranges(self, path, ranges):
        arr = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        self.ranges.extend(map(tuple, arr.tolist()))
        return self._store.read_ranges(path, arr)

    def reset(self) -> None:
        self.ranges.clear()
        self._store.metrics.reset()


def recording_reader(path: str) -> tuple[LanceFileReader, RecordingStore]:
    """A reader over a local store that never merges ranges across gaps (coalesce_gap=0), so the
    recorded ranges are exactly the bytes the reader wants (touching ranges still merge)."""
    from lance_ops.io import LocalStore

    rec = RecordingStore(LocalStore(coalesce_gap=0))
    reader = LanceFileReader(str(path), store=rec)
    rec.reset()
    return reader, rec


def page_spans(reader: LanceFileReader, columns, pages=None) -> list[tuple[int, int]]:
    spans = []
    for c in columns:
        for p in reader.column_pages(c):
            if pages is None or p.index in pages.get(c, ()):
                spans.extend((o, o + s) for o, s in zip(p.buffer_offsets, p.buffer_sizes))
    return spans


def inside(ranges, spans) -> bool:
    """Every range lies within the union of the spans."""
    merged: list[list[int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return all(any(s <= a and a + n <= e for s, e in merged) for a, n in ranges)


# --------------------------------------------------------------------------------------------
# the type matrix at several sizes and null modes
# --------------------------------------------------------------------------------------------
MODES = {"nulls": dict(null_fraction=0.2), "no_nulls": dict(null_fraction=0.0), "all_null": dict(all_null=True)}


@pytest.fixture(scope="module")
def matrix_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    out = {}
    for n in (0, 1, 1000, 5000):
        for mode, kwargs in MODES.items():
            table = make_table(n, seed=n + len(mode), **kwargs)
            out[(n, mode)] = (write_pylance(root / f"m_{n}_{mode}.lance", table), table)
    return out


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("n", [0, 1, 1000, 5000])
def test_type_matrix_read_all(matrix_files, n, mode):
    path, table = matrix_files[(n, mode)]
    reader = LanceFileReader(path)
    assert reader.num_rows == n
    assert reader.version == "2.0"
    got = reader.read_all()
    assert_tables_equal(got, table)
    assert_same(got, lance.file.LanceFileReader(path).read_all().to_table())
    assert got.schema.metadata == table.schema.metadata
    assert reader.schema.equals(table.schema, check_metadata=False)


@pytest.mark.parametrize("mode", list(MODES))
def test_type_matrix_take_and_range(matrix_files, mode):
    path, table = matrix_files[(5000, mode)]
    reader = LanceFileReader(path)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 5000, 300)
    idx[:10] = idx[10:20]  # duplicates
    got = reader.take_rows(idx)
    assert_tables_equal(got, table.take(pa.array(idx)))
    assert_same(got, pylance_take(path, idx))
    for start, count in [(0, 1), (4999, 1), (1234, 777), (0, 5000), (2500, 0)]:
        got = reader.read_range(start, count)
        assert_tables_equal(got, table.slice(start, count))
        assert_same(got, pylance_range(path, start, count))


def test_single_row_file_take(matrix_files):
    path, table = matrix_files[(1, "nulls")]
    reader = LanceFileReader(path)
    assert_tables_equal(reader.take_rows([0, 0, 0]), table.take(pa.array([0, 0, 0])))
    assert_tables_equal(reader.take_rows([]), table.slice(0, 0))


def test_projection_exact_columns_in_order(matrix_files):
    path, table = matrix_files[(1000, "nulls")]
    reader = LanceFileReader(path)
    cols = ["struct", "utf8", "list_list", "int8", "dict_utf8", "fsl_f32"]
    got = reader.read_all(columns=cols)
    assert got.column_names == cols
    assert_tables_equal(got, table.select(cols))
    assert_same(got, lance.file.LanceFileReader(path, columns=cols).read_all().to_table())
    got = reader.take_rows([999, 3, 3, 500], columns=["list_struct", "bool"])
    assert got.column_names == ["list_struct", "bool"]
    assert_tables_equal(got, table.select(["list_struct", "bool"]).take(pa.array([999, 3, 3, 500])))
    got = reader.read_range(10, 20, columns=["large_list_str"])
    assert_tables_equal(got, table.select(["large_list_str"]).slice(10, 20))


# --------------------------------------------------------------------------------------------
# multi-page files
# --------------------------------------------------------------------------------------------
def _multipage(tmp_path_factory, n: int, seed: int, batch: int = 3001, cache: int = 24 * 1024,
               max_page: int = 48 * 1024):
    table = make_table(n, seed=seed)
    path = write_pylance(tmp_path_factory.mktemp("multipage") / f"mp_{n}.lance", table, batch=batch,
                         data_cache_bytes=cache, max_page_bytes=max_page)
    return path, table


@pytest.fixture(scope="module")
def multipage(tmp_path_factory):
    return _multipage(tmp_path_factory, 30_000, seed=21)


def test_multipage_has_many_pages(multipage):
    path, _ = multipage
    reader = LanceFileReader(path)
    counts = [len(reader.column_pages(i)) for i in range(reader.num_columns)]
    assert sum(c > 1 for c in counts) > reader.num_columns // 2, counts
    # list offsets columns are split too, so item pages and offsets pages interleave
    offsets_col = reader.column_indices("list_i32")[0]
    assert len(reader.column_pages(offsets_col)) > 3


def test_multipage_read_all(multipage):
    path, table = multipage
    got = LanceFileReader(path).read_all()
    assert_tables_equal(got, table)
    assert_same(got, lance.file.LanceFileReader(path).read_all().to_table())


def _page_boundaries(reader: LanceFileReader, names) -> list[int]:
    out = set()
    for name in names:
        col = reader.column_indices(name)[-1] if name != "list_i32" else reader.column_indices(name)[0]
        for p in reader.column_pages(col)[1:]:
            out.add(p.row_start)
    return sorted(out)


def test_multipage_ranges_across_page_boundaries(multipage):
    path, table = multipage
    reader = LanceFileReader(path)
    n = table.num_rows
    bounds = _page_boundaries(reader, ["int32", "utf8", "list_i32", "bool", "fsl_f32", "dict_utf8"])
    assert bounds
    cases = {(0, 1), (n - 1, 1), (0, n), (n - 7, 7)}
    for b in bounds[:: max(1, len(bounds) // 12)]:
        cases |= {(b - 1, 2), (b, 1), (max(0, b - 5), 9), (max(0, b - 1000), 2500 if b + 1500 <= n else n - max(0, b - 1000))}
    for start, count in sorted(cases):
        got = reader.read_range(start, count)
        assert_tables_equal(got, table.slice(start, count))
    for start, count in sorted(cases)[:6]:
        assert_same(reader.read_range(start, count), pylance_range(path, start, count))


def test_multipage_take_random_unsorted_duplicates(multipage):
    path, table = multipage
    reader = LanceFileReader(path)
    rng = np.random.default_rng(99)
    for size in (1, 17, 600, 9000):
        idx = rng.integers(0, table.num_rows, size)
        if size > 1:
            idx[-1] = idx[0]
        got = reader.take_rows(idx)
        assert_tables_equal(got, table.take(pa.array(idx)))
        if size <= 600:
            assert_same(got, pylance_take(path, idx))


def test_multipage_take_sorted_runs_and_projection(multipage):
    path, table = multipage
    reader = LanceFileReader(path)
    idx = np.concatenate([np.arange(100, 4000), np.arange(20000, 20003), [29999]])
    cols = ["large_list_str", "list_struct", "uint16", "struct"]
    got = reader.take_rows(idx, columns=cols)
    assert_tables_equal(got, table.select(cols).take(pa.array(idx)))


@pytest.mark.slow
def test_multipage_200k(tmp_path_factory):
    path, table = _multipage(tmp_path_factory, 200_000, seed=4, batch=8192, cache=64 * 1024, max_page=256 * 1024)
    reader = LanceFileReader(path)
    got = reader.read_all()
    assert_tables_equal(got, table)
    assert_same(got, lance.file.LanceFileReader(path).read_all().to_table())
    idx = np.random.default_rng(3).integers(0, 200_000, 2000)
    assert_same(reader.take_rows(idx), pylance_take(path, idx))
    assert_same(reader.read_range(123_456, 50_000), pylance_range(path, 123_456, 50_000))


# --------------------------------------------------------------------------------------------
# encodings pylance only writes when asked (field metadata)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def encodings_file(tmp_path_factory):
    n = 4000
    rng = np.random.default_rng(7)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon" * 3, "zeta_\xff_long", "\u20ac\u20ac"], dtype=object)
    strings = pa.array(["".join(words[rng.integers(0, len(words), 3)]) for _ in range(n)], mask=rng.random(n) < 0.1)
    fields, cols = [], []
    for scheme in ("zstd", "lz4", "fsst", "none"):
        # pylance 14.0.2 panics writing FSST over 64-bit offsets, so fsst only gets utf8
        for t in (pa.string(),) if scheme == "fsst" else (pa.string(), pa.large_binary()):
            f = pa.field(f"{scheme}_{t}", t, metadata={"lance-encoding:compression": scheme})
            fields.append(f)
            cols.append(strings.cast(t))
    packed = pa.StructArray.from_arrays(
        [pa.array(np.arange(n, dtype=np.int32)), pa.array(rng.standard_normal(n)), pa.array(rng.integers(0, 9, n).astype(np.uint8))],
        names=["x", "y", "z"],
    )
    fields.append(pa.field("packed", packed.type, metadata={"packed": "true"}))
    cols.append(packed)
    table = pa.Table.from_arrays(cols, schema=pa.schema(fields))
    return write_pylance(tmp_path_factory.mktemp("enc") / "enc.lance", table), table


def test_compressed_fsst_and_packed_encodings(encodings_file):
    path, table = encodings_file
    reader = LanceFileReader(path)
    kinds = {reader.column_pages(i)[0].encoding_name.split("(")[0] for i in range(reader.num_columns)}
    assert {"binary", "fsst", "packed_struct"} <= kinds, kinds
    assert any("zstd" in p.encoding_name for i in range(reader.num_columns) for p in reader.column_pages(i))
    assert any("lz4" in p.encoding_name for i in range(reader.num_columns) for p in reader.column_pages(i))
    got = reader.read_all()
    assert_tables_equal(got, table)
    idx = np.random.default_rng(1).integers(0, table.num_rows, 50)
    assert_tables_equal(reader.take_rows(idx), table.take(pa.array(idx)))
    assert_tables_equal(reader.read_range(1000, 7), table.slice(1000, 7))


# --------------------------------------------------------------------------------------------
# I/O proofs: projection, ranges and takes fetch only what they need
# --------------------------------------------------------------------------------------------
def test_open_is_one_tail_read_plus_at_most_one(multipage):
    path, _ = multipage
    from lance_ops.io import open_store

    store, inner = open_store(path)
    rec = RecordingStore(store)
    LanceFileReader(inner, store=rec)
    assert store.metrics.get_requests <= 2


def test_projection_reads_only_chosen_columns(multipage):
    path, _ = multipage
    reader, rec = recording_reader(path)
    reader.read_all(columns=["int64", "utf8"])
    wanted = reader.column_indices("int64") + reader.column_indices("utf8")
    spans = page_spans(reader, wanted)
    assert rec.ranges and inside(rec.ranges, spans)
    requested = sum(n for _, n in rec.ranges)
    assert requested == sum(e - s for s, e in spans)
    others = page_spans(reader, [c for c in range(reader.num_columns) if c not in wanted])
    assert not any(s <= a < e for a, _ in rec.ranges for s, e in others if e > s)


def test_read_range_reads_only_overlapping_pages(multipage):
    path, _ = multipage
    reader, rec = recording_reader(path)
    col = reader.column_indices("int32")[0]
    pages = reader.column_pages(col)
    assert len(pages) >= 4
    start = pages[2].row_start - 10
    end = pages[2].row_start + pages[2].length + 10
    reader.read_range(start, end - start, columns=["int32"])
    touching = {p.index for p in pages if p.row_start < end and p.row_start + p.length > start}
    assert touching == {1, 2, 3}
    assert inside(rec.ranges, page_spans(reader, [col], {col: touching}))
    # only the 10 boundary rows of pages 1 and 3 are fetched (4 bytes each + validity bytes)
    requested = sum(n for _, n in rec.ranges)
    page2 = sum(pages[2].buffer_sizes)
    assert requested <= page2 + 2 * (10 * 4 + 3)


def test_take_reads_only_pages_holding_rows(multipage):
    path, table = multipage
    plain = LanceFileReader(path)
    cols = ["utf8", "list_i32", "fsl_f32"]
    idx = [5, 29_990]
    wanted = {}
    for name in cols:
        for c in plain.column_indices(name):
            rows = _rows_for(plain, c, name, idx)
            wanted[c] = {p.index for p in plain.column_pages(c)
                         if p.length and any(p.row_start <= r < p.row_start + p.length for r in rows)}
    reader, rec = recording_reader(path)
    got = reader.take_rows(idx, columns=cols)
    assert_tables_equal(got, table.select(cols).take(pa.array(idx)))
    spans = page_spans(reader, list(wanted), wanted)
    assert inside(rec.ranges, spans)
    assert sum(n for _, n in rec.ranges) < 0.05 * sum(e - s for s, e in page_spans(reader, list(wanted)))


def _rows_for(reader, column, name, idx):
    """Row (or item) numbers of ``column`` that top-level rows ``idx`` touch."""
    cols = reader.column_indices(name)
    if column == cols[0]:
        return idx
    # list item column: map through the offsets
    table = reader.read_all(columns=[name])[name].combine_chunks()
    offsets = table.offsets.to_numpy()
    out = []
    for r in idx:
        out.extend(range(offsets[r], offsets[r + 1]))
    return out


def test_take_fixed_width_reads_only_row_bytes(tmp_path):
    n = 100_000
    rng = np.random.default_rng(0)
    table = pa.table({
        "a": pa.array(np.arange(n, dtype=np.int64)),
        "b": pa.array(rng.standard_normal(n), mask=rng.random(n) < 0.3),
        "s": pa.array([f"row-{i}" for i in range(n)]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 8).astype(np.float32)), 8),
    })
    path = write_pylance(tmp_path / "fixed.lance", table)
    reader, rec = recording_reader(path)
    idx = np.array([3, 70_000, 40_000, 99_999, 12])
    for name, per_row in [("a", 8), ("v", 32)]:
        rec.reset()
        assert_tables_equal(reader.take_rows(idx, columns=[name]), table.select([name]).take(pa.array(idx)))
        assert sum(n for _, n in rec.ranges) == per_row * len(idx)
    rec.reset()
    assert_tables_equal(reader.take_rows(idx, columns=["b"]), table.select(["b"]).take(pa.array(idx)))
    assert sum(n for _, n in rec.ranges) == (8 + 1) * len(idx)  # value bytes + one validity byte
    rec.reset()
    assert_tables_equal(reader.take_rows(idx, columns=["s"]), table.select(["s"]).take(pa.array(idx)))
    string_bytes = sum(len(f"row-{i}") for i in idx)
    assert sum(n for _, n in rec.ranges) == 16 * len(idx) + string_bytes
    assert reader.store.metrics.bytes_read < 0.01 * table.nbytes


# --------------------------------------------------------------------------------------------
# S3 (moto on loopback)
# --------------------------------------------------------------------------------------------
def test_read_from_s3(tmp_path, moto_server, s3_bucket):
    table = make_table(3000, seed=8)
    local = write_pylance(tmp_path / "s3src.lance", table, batch=1000, data_cache_bytes=32 * 1024)
    key = "data/nested/file.lance"
    moto_server.client().put_object(Bucket=s3_bucket[len("s3://"):], Key=key, Body=open(local, "rb").read())
    uri = f"{s3_bucket}/{key}"
    reader = LanceFileReader(uri, storage_options=moto_server.storage_options)
    assert reader.store.metrics.get_requests <= 2
    assert_tables_equal(reader.read_all(), table)
    idx = np.random.default_rng(2).integers(0, 3000, 40)
    assert_tables_equal(reader.take_rows(idx), table.take(pa.array(idx)))
    assert_tables_equal(reader.read_range(999, 1002, columns=["utf8", "list_list"]),
                        table.select(["utf8", "list_list"]).slice(999, 1002))


def test_read_pylance_written_on_s3(moto_server, s3_bucket):
    table = make_table(500, seed=9)
    uri = f"{s3_bucket}/written-by-pylance.lance"
    options = moto_server.storage_options
    try:
        writer = lance.file.LanceFileWriter(uri, table.schema, version="2.0", storage_options=options)
        writer.write_batch(table)
        writer.close()
    except Exception as exc:  # pragma: no cover - depends on pylance's S3 option handling
        pytest.skip(f"pylance cannot write to the moto endpoint: {exc}")
    assert_tables_equal(LanceFileReader(uri, storage_options=options).read_all(), table)
