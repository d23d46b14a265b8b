"""Blob v2 written by lance_ops at 2.2, checked against pylance 14.0.2.

pylance's ``write_dataset`` at 2.2 stores blob fields as ``lance.blob.v2``; lance_ops writes
the same bytes: data files (inline values, the full-zip variable-packed-struct descriptor page,
column metadata, the schema with its five id -1 descriptor children) and side files (packed
and dedicated, their names and contents). pylance reads what lance_ops writes, appends,
deletes and compacts on top; lance_ops appends to and compacts pylance's datasets.
"""
from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_ops
from lance_ops._proto import file_pb2
from lance_ops.errors import SchemaMismatchError, UnsupportedError, UnsupportedTypeError
from lance_ops.format import blob_v2

lance = pytest.importorskip("lance")
from lance.blob import Blob, blob_array, blob_field  # noqa: E402

BLOB = {"lance-encoding:blob": "true"}
MiB = 1024 * 1024


def legacy_blob_field(name: str = "b", nullable: bool = True) -> pa.Field:
    return pa.field(name, pa.large_binary(), nullable=nullable, metadata=BLOB)


def values_of(sizes, seed: int = 0, null_every: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 256, s, dtype=np.uint8).tobytes() for s in sizes]
    if null_every:
        out = [None if i % null_every == null_every - 1 else v for i, v in enumerate(out)]
    return out


def table_of(values: list, start: int = 0, field: pa.Field | None = None) -> pa.Table:
    field = field or legacy_blob_field()
    schema = pa.schema([pa.field("id", pa.int64()), field])
    col = pa.array(values, pa.large_binary()) if not isinstance(values, pa.Array) else values
    return pa.table({"id": pa.array(np.arange(start, start + len(col)), pa.int64()), field.name: col}, schema=schema)


def read_handles(files) -> list:
    return [None if f is None else f.read() for f in files]


def data_files(uri: str) -> list[str]:
    """Data file paths (relative to data/) in fragment order."""
    ds = lance_ops.dataset(uri)
    return [df.path for frag in ds.manifest.fragments for df in frag.files]


def side_files(uri: str, data_file: str) -> dict[str, bytes]:
    d = os.path.join(uri, "data", data_file[: -len(".lance")])
    if not os.path.isdir(d):
        return {}
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def file_parts(path: str) -> tuple[bytes, file_pb2.FileDescriptor, bytes]:
    """(bytes before the schema buffer, the parsed schema, bytes after it) of a 2.x data file.
    The schema is compared parsed: pylance serialises metadata maps in hash order."""
    raw = open(path, "rb").read()
    gbo = struct.unpack_from("<Q", raw, len(raw) - 40 + 16)[0]
    pos, size = struct.unpack_from("<QQ", raw, gbo)
    desc = file_pb2.FileDescriptor()
    desc.ParseFromString(raw[pos:pos + size])
    return raw[:pos], desc, raw[pos + size:]


def assert_same_files(ours: str, theirs: str) -> None:
    """Same manifest fields; fragment by fragment the same data file bytes and side files."""
    a, b = lance_ops.dataset(ours), lance_ops.dataset(theirs)
    assert list(a.manifest.fields) == list(b.manifest.fields)
    fa, fb = data_files(ours), data_files(theirs)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb):
        head_a, desc_a, tail_a = file_parts(os.path.join(ours, "data", x))
        head_b, desc_b, tail_b = file_parts(os.path.join(theirs, "data", y))
        assert head_a == head_b, f"{x} vs {y}: pages differ"
        assert desc_a == desc_b
        assert tail_a == tail_b, f"{x} vs {y}: column metadata differs"
        sa, sb = side_files(ours, x), side_files(theirs, y)
        assert list(sa) == list(sb)
        assert all(sa[k] == sb[k] for k in sa)


def write_both(tmp_path, data, **kwargs) -> tuple[str, str]:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance_ops.write_dataset(data() if callable(data) else data, ours, data_storage_version="2.2", **kwargs)
    lance.write_dataset(data() if callable(data) else data, theirs, data_storage_version="2.2", **kwargs)
    return ours, theirs


# --------------------------------------------------------------------------------------------
# the same bytes as pylance
# --------------------------------------------------------------------------------------------
BOUNDARY_SIZES = [5, 0, 70_000, 5 * MiB, 100, 65_536, 65_537, 4 * MiB, 4 * MiB + 1, 1, 200_000]


def test_kinds_at_the_default_thresholds(tmp_path):
    """<= 64 KiB inline, <= 4 MiB packed (one shared side file), larger dedicated; nulls and
    empties; the empty value takes the running inline position."""
    values = values_of(BOUNDARY_SIZES, seed=1, null_every=4)
    ours, theirs = write_both(tmp_path, table_of(values))
    assert_same_files(ours, theirs)
    got = lance.dataset(ours).to_table().column("b").to_pylist()
    assert [d and d["kind"] for d in got] == [0, 0, 1, None, 0, 0, 1, None, 2, 0, 1]
    assert [d and d["blob_id"] for d in got] == [0, 0, 1, None, 0, 0, 1, None, 2, 0, 1]
    assert got[1]["position"] == 64  # empty: after the first (64-byte padded) inline value
    assert read_handles(lance.dataset(ours).take_blobs("b", indices=list(range(11)))) == values
    assert lance_ops.dataset(ours).to_table(blob_handling="all_binary").column("b").to_pylist() == values


def test_thresholds_from_field_metadata_and_pack_rollover(tmp_path):
    """blob_field thresholds: inline <= 10 B, packed <= 1000 B, dedicated above; a pack is closed
    when the next value would take it past 1000 bytes (ids count packs and dedicated files)."""
    field = blob_field("b", inline_size_threshold=10, dedicated_size_threshold=1000, pack_file_size_threshold=1000)
    sizes = [10, 11, 989, 1000, 1001, 500, 500, 1, 0, 999]
    values = values_of(sizes, seed=2)

    def data():
        return pa.table({"id": pa.array(range(len(values)), pa.int64()), "b": blob_array(values)},
                        schema=pa.schema([pa.field("id", pa.int64()), field]))

    ours, theirs = write_both(tmp_path, data)
    assert_same_files(ours, theirs)
    desc = lance.dataset(ours).to_table().column("b").to_pylist()
    assert [(d["kind"], d["blob_id"], d["position"]) for d in desc] == [
        (0, 0, 0), (1, 1, 0), (1, 1, 11), (1, 2, 0), (2, 3, 0), (1, 4, 0), (1, 4, 500), (0, 0, 64), (0, 0, 128),
        (1, 5, 0)]
    schema = lance.dataset(ours).schema
    assert schema.field("b").metadata[b"lance-encoding:blob-pack-file-size-threshold"] == b"1000"
    assert read_handles(lance.dataset(ours).take_blobs("b", indices=list(range(len(values))))) == values


def test_two_blob_columns_share_the_side_files(tmp_path):
    """Columns in order, rows in order: one pack per data file, one id counter."""
    schema = pa.schema([legacy_blob_field("b"), legacy_blob_field("c")])
    b = values_of([70_000, 5_000_000, 1, 70_000], seed=3)
    c = values_of([70_000, 80_000, 1, 5_000_000], seed=4)
    t = pa.table({"b": pa.array(b, pa.large_binary()), "c": pa.array(c, pa.large_binary())}, schema=schema)
    ours, theirs = write_both(tmp_path, t)
    assert_same_files(ours, theirs)
    got = lance.dataset(ours).to_table().to_pylist()
    assert [(r["c"]["blob_id"], r["c"]["position"]) for r in got] == [(1, 140_000), (1, 210_000), (0, 64), (3, 0)]


def test_batches_files_and_non_nullable(tmp_path):
    """Several batches accumulate into one page; a file split restarts inline positions and
    side file ids; a non-nullable field has no definition levels."""
    field = legacy_blob_field(nullable=False)
    schema = pa.schema([field])
    sizes = [[5 * MiB, 100_000, 1], [3, 70_000, 0], [4, 5, 6]]

    def data():
        return pa.RecordBatchReader.from_batches(
            schema, [pa.record_batch([pa.array(values_of(s, seed=i), pa.large_binary())], schema=schema)
                     for i, s in enumerate(sizes)])

    ours, theirs = write_both(tmp_path, data, max_rows_per_file=5)
    assert_same_files(ours, theirs)
    assert len(data_files(ours)) == 2
    want = [v for i, s in enumerate(sizes) for v in values_of(s, seed=i)]
    assert lance.dataset(ours).to_table(blob_handling="all_binary").column("b").to_pylist() == want


def test_external_uris_and_ranges(tmp_path):
    """URIs (whole object, a range) are stored as references (kind 3) with the flag pylance
    requires; without it the write is refused before anything is written."""
    ext = tmp_path / "external.bin"
    ext.write_bytes(bytes(range(256)) * 8)
    uri = f"file://{ext}"
    values = [Blob.from_uri(uri), Blob.from_uri(uri, 10, 20), b"inline", None, Blob.empty(), b"x" * 70_000]

    def data():
        return pa.table({"id": pa.array(range(6), pa.int64()), "b": blob_array(values)})

    with pytest.raises(UnsupportedError, match="outside registered external bases"):
        lance_ops.write_dataset(data(), str(tmp_path / "refused"), data_storage_version="2.2")
    assert not (tmp_path / "refused").exists() or not list((tmp_path / "refused").rglob("*.lance"))
    ours, theirs = write_both(tmp_path, data, allow_external_blob_outside_bases=True)
    assert_same_files(ours, theirs)
    whole = bytes(range(256)) * 8
    want = [whole, whole[10:30], b"inline", None, b"", b"x" * 70_000]
    assert read_handles(lance.dataset(ours).take_blobs("b", indices=list(range(6)))) == want
    assert lance_ops.dataset(ours).to_table(blob_handling="all_binary").column("b").to_pylist() == want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.one_of(st.none(), st.integers(0, 40), st.tuples(st.just("uri"), st.integers(1, 120))),
                      min_size=1, max_size=30),
       inline=st.integers(0, 12), dedicated=st.integers(1, 30), pack=st.integers(1, 60))
def test_kind_rules_match_pylance(tmp_path_factory, sizes, inline, dedicated, pack):
    """Random sizes and URIs against random thresholds: same descriptors, pages (the repetition
    index width included) and side files as pylance."""
    tmp = tmp_path_factory.mktemp("prop")
    field = blob_field("b", inline_size_threshold=inline, dedicated_size_threshold=dedicated,
                       pack_file_size_threshold=pack)
    values = [None if s is None else Blob.from_uri("s3://bucket/" + "k" * s[1]) if isinstance(s, tuple)
              else bytes([i % 251]) * s for i, s in enumerate(sizes)]

    def data():
        return pa.table({"b": blob_array(values)}, schema=pa.schema([field]))

    ours, theirs = write_both(tmp, data, allow_external_blob_outside_bases=True)
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert_same_files(ours, theirs)


# --------------------------------------------------------------------------------------------
# pylance on top of lance_ops and the other way round
# --------------------------------------------------------------------------------------------
def test_pylance_appends_deletes_and_compacts_ours(tmp_path):
    uri = str(tmp_path / "ds")
    first = values_of([10, 100_000, 5 * MiB, 0], seed=5, null_every=3)
    lance_ops.write_dataset(table_of(first), uri, data_storage_version="2.2")
    second = values_of([70_000, 20, 4 * MiB + 5], seed=6)
    lance.write_dataset(table_of(second, 4), uri, mode="append")
    lance.dataset(uri).delete("id = 1")
    expected = [v for i, v in enumerate(first + second) if i != 1]
    assert lance.dataset(uri).to_table(blob_handling="all_binary").column("b").to_pylist() == expected
    lance.dataset(uri).optimize.compact_files()
    theirs = lance.dataset(uri)
    assert len(theirs.get_fragments()) == 1
    assert read_handles(theirs.take_blobs("b", indices=list(range(len(expected))))) == expected
    assert lance_ops.dataset(uri).to_table().equals(theirs.to_table())
    # and lance_ops again on top of pylance's compaction
    lance_ops.write_dataset(table_of(values_of([3, 200_000], seed=7), 10), uri, mode="append")
    lance_ops.dataset(uri).optimize.compact_files()
    final = lance.dataset(uri)
    assert len(final.get_fragments()) == 1
    assert final.to_table(blob_handling="all_binary").column("b").to_pylist() == expected + values_of([3, 200_000], seed=7)


def test_lance_ops_compaction_matches_pylance_compaction(tmp_path):
    """The same dataset compacted by each: identical data and side files afterwards."""
    values = values_of([10, 100_000, 5 * MiB, 0, 70_000, 30], seed=8, null_every=5)
    for name in ("a", "b"):
        uri = str(tmp_path / name)
        lance.write_dataset(table_of(values), uri, data_storage_version="2.2", max_rows_per_file=2)
        lance.dataset(uri).delete("id = 2")
    lance_ops.dataset(str(tmp_path / "a")).optimize.compact_files()
    lance.dataset(str(tmp_path / "b")).optimize.compact_files()
    a, b = lance.dataset(str(tmp_path / "a")), lance.dataset(str(tmp_path / "b"))
    assert a.to_table().equals(b.to_table())
    fa, fb = data_files(str(tmp_path / "a")), data_files(str(tmp_path / "b"))
    assert [side_files(str(tmp_path / "a"), f) for f in fa] == [side_files(str(tmp_path / "b"), f) for f in fb]


def test_external_references_survive_compaction(tmp_path):
    """Compaction copies stored bytes and keeps external URIs as references (nothing read)."""
    ext = tmp_path / "external.bin"
    ext.write_bytes(b"0123456789" * 10)
    uri = str(tmp_path / "ds")
    values = [Blob.from_uri(f"file://{ext}"), Blob.from_uri(f"file://{ext}", 5, 10), b"y" * 5 * MiB, None]
    for i in range(2):
        lance_ops.write_dataset(pa.table({"id": pa.array([2 * i, 2 * i + 1], pa.int64()),
                                          "b": blob_array(values[2 * i:2 * i + 2])}),
                                uri, mode="append" if i else "create", data_storage_version="2.2",
                                allow_external_blob_outside_bases=True)
    lance_ops.dataset(uri).optimize.compact_files()
    ext.write_bytes(b"abcdefghij" * 10)  # a reference, not a copy: reads see the new bytes
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) == 1
    desc = ds.to_table().column("b").to_pylist()
    assert [d and (d["kind"], d["position"], d["size"]) for d in desc] == [(3, 0, 0), (3, 5, 10), (2, 0, 5 * MiB), None]
    assert read_handles(ds.take_blobs("b", indices=[0, 1])) == [b"abcdefghij" * 10, b"fghijabcde"]


# --------------------------------------------------------------------------------------------
# bad input: a clear error, nothing written
# --------------------------------------------------------------------------------------------
def _nothing_written(path) -> bool:
    return not path.exists() or not [p for p in path.rglob("*") if p.is_file()]


def test_bad_blob_values_are_refused_before_writing(tmp_path):
    logical = pa.struct([("data", pa.large_binary()), ("uri", pa.utf8())])
    ranged = blob_v2.LOGICAL_RANGE_TYPE
    cases = [
        (pa.array([{"data": b"x", "uri": "s3://b/k"}], logical), "row 0: a blob cannot have both data and uri"),
        (pa.array([{"data": b"x", "uri": None}, {"data": None, "uri": None}], logical),
         "row 1: a blob must set data or uri"),
        (pa.array([{"data": None, "uri": "s3://b/k", "position": 3, "size": None}], ranged),
         "row 0: an external blob range sets both position and size"),
        (pa.array([{"data": None, "uri": "s3://b/k", "position": 3, "size": 0}], ranged),
         "row 0: an external blob range needs size > 0"),
        (pa.array([{"data": None, "uri": "relative/key.bin"}], logical), "is not an absolute URI"),
    ]
    for i, (arr, message) in enumerate(cases):
        path = tmp_path / f"case{i}"
        field = pa.field("b", arr.type, metadata={"ARROW:extension:name": "lance.blob.v2"})
        t = pa.Table.from_arrays([arr], schema=pa.schema([field]))
        with pytest.raises((SchemaMismatchError, UnsupportedError), match=message):
            lance_ops.write_dataset(t, str(path), data_storage_version="2.2", allow_external_blob_outside_bases=True)
        assert _nothing_written(path), message


def test_unsupported_blob_shapes_are_refused(tmp_path):
    nested = pa.schema([pa.field("s", pa.struct([legacy_blob_field("b")]))])
    t = pa.table({"s": pa.array([{"b": b"x"}], nested.field("s").type)}, schema=nested)
    with pytest.raises(UnsupportedError, match="'s' holds a blob field below the top level"):
        lance_ops.write_dataset(t, str(tmp_path / "nested"), data_storage_version="2.2")
    wrong = pa.schema([pa.field("b", pa.struct([("data", pa.binary()), ("uri", pa.utf8())]),
                                metadata={"ARROW:extension:name": "lance.blob.v2"})])
    t = pa.table({"b": pa.array([{"data": b"x", "uri": None}], wrong.field("b").type)}, schema=wrong)
    with pytest.raises(UnsupportedTypeError, match="stores struct<data: large_binary, uri: string"):
        lance_ops.write_dataset(t, str(tmp_path / "wrong"), data_storage_version="2.2")
    bad = blob_field("b").with_metadata({b"lance-encoding:blob-inline-size-threshold": b"lots"})
    t = pa.table({"b": blob_array([b"x"])}, schema=pa.schema([bad]))
    with pytest.raises(SchemaMismatchError, match="blob-inline-size-threshold must be an integer, got b'lots'"):
        lance_ops.write_dataset(t, str(tmp_path / "threshold"), data_storage_version="2.2")
    for name in ("nested", "wrong", "threshold"):
        assert _nothing_written(tmp_path / name)


def test_ranges_into_a_dataset_without_range_fields_are_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(table_of(values_of([5], seed=9)), uri, data_storage_version="2.2")
    before = sorted(p for p in (tmp_path / "ds").rglob("*"))
    t = pa.table({"id": pa.array([1], pa.int64()), "b": blob_array([Blob.from_uri("s3://b/k", 1, 2)])})
    with pytest.raises(SchemaMismatchError, match="has no position/size"):
        lance_ops.write_dataset(t, uri, mode="append", allow_external_blob_outside_bases=True)
    assert sorted(p for p in (tmp_path / "ds").rglob("*")) == before


def test_a_failed_write_leaves_no_side_files(tmp_path):
    """The second batch fails after the first batch's side files were written: the data file
    and every side file are removed, no version is committed."""
    uri = tmp_path / "ds"
    schema = pa.schema([pa.field("b", blob_v2.LOGICAL_TYPE, metadata={"ARROW:extension:name": "lance.blob.v2"})])

    def batches():
        yield pa.record_batch([pa.array([{"data": b"x" * 5 * MiB, "uri": None},
                                         {"data": b"y" * 100_000, "uri": None}], blob_v2.LOGICAL_TYPE)], schema=schema)
        yield pa.record_batch([pa.array([{"data": None, "uri": None}], blob_v2.LOGICAL_TYPE)], schema=schema)

    with pytest.raises(SchemaMismatchError, match="row 0: a blob must set data or uri"):
        lance_ops.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), str(uri),
                                data_storage_version="2.2")
    assert _nothing_written(uri)


def test_blob_v2_on_s3(moto_server, s3_bucket):
    """Side files go through the object store: pylance reads a lance_ops blob v2 dataset on S3."""
    opts = moto_server.storage_options
    uri = f"{s3_bucket}/blobs/ours-v2.lance"
    values = values_of([10, 70_000, 200_000, 4_500_000, 0], seed=10, null_every=4)
    lance_ops.write_dataset(table_of(values), uri, data_storage_version="2.2", storage_options=opts)
    theirs = lance.dataset(uri, storage_options=opts)
    assert [d and d["kind"] for d in theirs.to_table().column("b").to_pylist()] == [0, 1, 1, None, 0]
    assert read_handles(theirs.take_blobs("b", indices=list(range(5)))) == values
