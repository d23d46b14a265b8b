"""versions() from manifest bytes (ADR 0036): equal to pylance's over appends, deletes, a
compaction and an overwrite; damage is still CorruptFileError; a split fragment list decodes whole."""
from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import CorruptFileError
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import decode_manifest
from lance_ops.table.manifest.summary import VersionSummarizer, fragment_counts


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "s": [f"v{i}" for i in range(n)]})


def test_versions_equal_pylance_over_every_kind_of_change(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 30), uri, max_rows_per_file=10)
    for i in range(1, 4):
        lance_ops.write_dataset(_rows(i * 30, 30), uri, mode="append", max_rows_per_file=10)
    lance_ops.dataset(uri).delete("id % 7 = 1")
    lance.write_dataset(_rows(500, 20), uri, mode="append", max_rows_per_file=10)
    lance_ops.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    lance_ops.write_dataset(_rows(900, 5), uri, mode="append")
    lance.dataset(uri).delete("id = 903")
    lance_ops.write_dataset(_rows(0, 3), uri, mode="overwrite")
    ours, theirs = lance_ops.dataset(uri).versions(), lance.dataset(uri).versions()
    assert len(ours) == 10
    assert ours == theirs


def _manifest_bytes(uri: str, version: int) -> tuple[str, bytes]:
    store, base = lance_ops.dataset(uri).store, lance_ops.dataset(uri).base
    loc = [loc for loc in naming.list_versions(store, base) if loc.version == version][0]
    return loc.path, store.read(loc.path)


def test_carried_counts_equal_a_whole_decode(tmp_path):
    uri = str(tmp_path / "t.lance")
    for i in range(4):
        lance_ops.write_dataset(_rows(i * 10, 10), uri, mode="create" if i == 0 else "append", max_rows_per_file=4)
    lance_ops.dataset(uri).delete("id < 12")
    summarizer = VersionSummarizer()
    for version in range(1, 6):
        path, data = _manifest_bytes(uri, version)
        got = summarizer.summarize(data, path)
        whole = decode_manifest(data, path).manifest
        totals = [sum(c) for c in zip(*(fragment_counts(f) for f in whole.fragments))]
        assert (got.fragments, list(got.totals)) == (len(whole.fragments), totals)
        assert got.manifest.version == version and len(got.manifest.fragments) == 0


def test_split_fragment_list_decodes_whole(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance_ops.write_dataset(_rows(0, 12), uri, max_rows_per_file=4)
    path, data = _manifest_bytes(uri, 1)
    mf = decode_manifest(data, path)
    frags = list(mf.manifest.fragments)
    body = mf.manifest.__class__()
    body.CopyFrom(mf.manifest)
    del body.fragments[:]
    # fragment 0, then the other fields, then the rest of the fragments: valid protobuf
    first = mf.manifest.__class__(fragments=frags[:1]).SerializeToString()
    rest = mf.manifest.__class__(fragments=frags[1:]).SerializeToString()
    blob = first + body.SerializeToString() + rest
    data2 = _wrap(blob)
    got = VersionSummarizer().summarize(data2, "split")
    assert got.fragments == 3 and got.totals[2] == 12


def _wrap(blob: bytes) -> bytes:
    import struct

    return struct.pack("<I", len(blob)) + blob + struct.pack("<qhh4s", 0, 0, 2, b"LANC")


def test_damage_is_corrupt_file_error(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance_ops.write_dataset(_rows(0, 12), uri, max_rows_per_file=4)
    path, data = _manifest_bytes(uri, 1)
    mf = decode_manifest(data, path)
    blob = mf.manifest.SerializeToString()
    at = blob.index(b"\x12")  # the first fragment record: cut its length short of its body
    with pytest.raises(CorruptFileError):
        VersionSummarizer().summarize(_wrap(blob[:at + 1] + b"\xff\x7f" + blob[at + 3:]), "cut")
    with pytest.raises(CorruptFileError):
        VersionSummarizer().summarize(data[:-3] + b"XYZ", "magic")
