"""Datasets written by old Lance versions (tests/data/historical, see its README) and by pylance
14.0.2 in every storage version: lance_ops reads them as pylance does, and every write it makes
(append, delete, compaction, cleanup) leaves them readable by pylance, version by version.

pylance 14.0.2 is the oracle throughout; where it refuses a write, lance_ops must refuse it too.
"""
from __future__ import annotations

import datetime
import re
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from google.protobuf import unknown_fields

import lance_ops
from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, MixedFileVersionsError, UnsupportedError
from lance_ops.format.v2_0.reader import LanceFileReader
from lance_ops.table.index_files import FILES_FIELD
from lance_ops.table.manifest.codec import encode_manifest

HIST = Path(__file__).resolve().parent.parent / "data" / "historical"
MIXED = "The dataset contains a mixture of file versions"
STEPS = ("append", "delete", "compact", "cleanup")


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / "ds" / Path(name).name
    shutil.copytree(HIST / name, dst)
    return dst


def _fresh(version: str) -> Callable[[Path], Path]:
    """A dataset written by pylance 14 in ``version``, two fragments, strings and nulls."""
    def make(tmp_path: Path) -> Path:
        uri = tmp_path / "ds" / f"fresh_{version}.lance"
        table = pa.table({
            "id": pa.array(range(10), pa.int64()),
            "s": pa.array([None if i % 4 == 1 else "s" * i for i in range(10)], pa.string()),
            "v": pa.array([float(i) / 2 for i in range(10)], pa.float64()),
            "l": pa.array([[i, i + 1] if i % 3 else [] for i in range(10)], pa.list_(pa.int32())),
        })
        lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=6)
        return uri
    return make


@dataclass
class Case:
    id: str
    make: Callable[[Path], Path]
    version: str                      # storage version pylance reports when opening it
    written: Optional[str] = None     # ... after lance_ops's first commit (default: ``version``)
    append: Optional[pa.Table] = None  # rows to append (default: the first two rows)
    key: Optional[str] = None         # the column of the delete predicate (default: the first)
    #: step -> (lance_ops's error, its message, what pylance's OSError says or None if pylance does it)
    refused: dict = field(default_factory=dict)


_MIX = (MixedFileVersionsError, MIXED, MIXED)
_X = pa.table({"x": pa.array([7, 8, 9], pa.int64())})

CASES = [
    # pre-0.16: no data_format, inferred from the files / writer flags
    Case("0.15-v1-no-files", lambda p: _copy("v0.15.0/v1_no_files.lance", p), "0.1", append=_X),
    Case("0.15-v1-with-files", lambda p: _copy("v0.15.0/v1_with_files.lance", p), "0.1"),
    Case("0.15-v2-no-files", lambda p: _copy("v0.15.0/v2_no_files.lance", p), "2.2", append=_X),
    Case("0.15-v2-with-files", lambda p: _copy("v0.15.0/v2_with_files.lance", p), "2.0"),
    Case("0.13-legacy-strings", lambda p: _copy("v0.13.0/legacy_strings.lance", p), "0.1"),
    Case("0.13-v2-strings", lambda p: _copy("v0.13.0/v2_strings.lance", p), "2.0"),
    Case("0.13-v2-nested-strings", lambda p: _copy("v0.13.0/v2_nested_strings.lance", p), "2.0"),
    Case("0.13-wide-legacy", lambda p: _copy("v0.13.0/wide_legacy.lance", p), "0.1", key="u32"),
    Case("0.14-wide-v2", lambda p: _copy("v0.14.1/wide_v2.lance", p), "2.0", key="u32"),
    Case("0.15-wide-v2", lambda p: _copy("v0.15.0/wide_v2.lance", p), "2.0", key="u32"),
    # 0.16: 0.1 recorded over 2.0 files (repaired by the first commit), or over a mix (refused)
    Case("0.16-wrong-version-can-fix", lambda p: _copy("v0.16.0/wrong_data_version_can_fix.lance", p), "0.1",
         written="2.0", refused={"append": _MIX}),
    Case("0.16-wrong-version-no-fix", lambda p: _copy("v0.16.0/wrong_data_version_no_fix.lance", p), "0.1",
         # pylance's delete fails before its commit: it reads 2.0 files with its 0.1 reader
         refused={"append": _MIX, "delete": (MixedFileVersionsError, MIXED, "with the v1 reader"), "compact": _MIX}),
    # older index metadata: carried unchanged; lance_ops does not compact indexed datasets
    Case("0.18-index-no-details", lambda p: _copy("v0.18.2/index_no_details.lance", p), "2.0",
         refused={"compact": (UnsupportedError, "indices", None)}),
    # compaction remaps both indices (the BTREE from its old layout into today's, as pylance does)
    Case("0.20-old-btree-bitmap", lambda p: _copy("v0.20.0/old_btree_bitmap_indices.lance", p), "2.0"),
    # written by pylance 14 now
    *[Case(f"pylance-{v}", _fresh(v), v) for v in ("0.1", "2.0", "2.1", "2.2")],
]


def _rows(table: pa.Table) -> dict:
    return table.to_pydict()


def _check_every_version(uri: Path, expected: dict[int, pa.Table], storage_version: str) -> None:
    """Each version pylance lists: pylance's rows == lance_ops's rows == the expected rows."""
    py_versions = [v["version"] for v in lance.dataset(uri).versions()]
    ops_versions = [v["version"] for v in lance_ops.dataset(str(uri)).versions()]
    assert ops_versions == py_versions
    for v in py_versions:
        theirs = lance.dataset(uri, version=v).to_table()
        ours = lance_ops.dataset(str(uri), version=v).to_table()
        assert ours.schema.remove_metadata() == theirs.schema.remove_metadata(), f"version {v}"
        assert _rows(ours) == _rows(theirs), f"version {v}"
        assert _rows(theirs) == _rows(expected[v]), f"version {v}"
    latest_py, latest_ops = lance.dataset(uri), lance_ops.dataset(str(uri))
    assert latest_ops.data_storage_version == latest_py.data_storage_version == storage_version


def _run(step: str, uri: Path, batch: pa.Table, predicate: str) -> None:
    if step == "append":
        lance_ops.write_dataset(batch, str(uri), mode="append")
    elif step == "delete":
        lance_ops.dataset(str(uri)).delete(predicate)
    elif step == "compact":
        lance_ops.dataset(str(uri)).optimize.compact_files(materialize_deletions_threshold=0.01)
    else:
        lance_ops.dataset(str(uri)).cleanup_old_versions(older_than=datetime.timedelta(0), delete_unverified=True)


def _run_pylance(step: str, uri: Path, batch: pa.Table, predicate: str) -> None:
    if step == "append":
        lance.write_dataset(batch, uri, mode="append")
    elif step == "delete":
        lance.dataset(uri).delete(predicate)
    elif step == "compact":
        lance.dataset(uri).optimize.compact_files(materialize_deletions_threshold=0.01)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_writes_keep_dataset_readable_by_pylance(case: Case, tmp_path: Path) -> None:
    uri = case.make(tmp_path)
    original = lance.dataset(uri)
    assert lance_ops.dataset(str(uri)).data_storage_version == original.data_storage_version == case.version
    table = original.to_table()
    expected = {v["version"]: lance.dataset(uri, version=v["version"]).to_table() for v in original.versions()}
    _check_every_version(uri, expected, case.version)
    batch = case.append if case.append is not None else table.slice(0, 2)
    key = case.key or table.column_names[0]
    probe = table if table.num_rows else batch
    value = probe.column(key)[0].as_py()
    predicate = f"{key} = {value}"
    version = case.version
    for step in STEPS:
        before = lance_ops.dataset(str(uri)).version
        if step in case.refused:
            error, message, pylance_message = case.refused[step]
            if pylance_message:
                twin = tmp_path / f"pylance_{step}"
                shutil.copytree(uri, twin)
                with pytest.raises(OSError, match=pylance_message):
                    _run_pylance(step, twin, batch, predicate)
            with pytest.raises(error, match=message) as info:
                _run(step, uri, batch, predicate)
            if error is MixedFileVersionsError:
                assert isinstance(info.value, OSError)
            assert lance_ops.dataset(str(uri)).version == before  # nothing committed
        else:
            _run(step, uri, batch, predicate)
            latest = lance_ops.dataset(str(uri)).version
            current = expected[before]
            if step == "append":
                current = pa.concat_tables([current, batch.cast(current.schema)])
            elif step == "delete":
                current = current.filter(pc.invert(pc.equal(current[key], value)))
            if latest != before:
                version = case.written or version
            for v in range(before + 1, latest + 1):
                expected[v] = current
        _check_every_version(uri, expected, version)


# --- item 1: the storage version of datasets without data_format -----------------------------
@pytest.mark.parametrize("name", [
    "v0.15.0/v1_no_files.lance", "v0.15.0/v1_with_files.lance", "v0.15.0/v2_no_files.lance",
    "v0.15.0/v2_with_files.lance", "v0.13.0/legacy_strings.lance", "v0.13.0/v2_strings.lance",
])
def test_append_to_pre_016_dataset_writes_the_files_pylance_writes(name: str, tmp_path: Path) -> None:
    ours, theirs = _copy(name, tmp_path / "ours"), _copy(name, tmp_path / "theirs")
    assert lance_ops.dataset(str(ours)).manifest.HasField("data_format") is True  # inferred on read
    schema = lance.dataset(theirs).schema
    batch = pa.table({f.name: pa.nulls(2, f.type) if f.name != schema.names[0] else pa.array([1, 2], f.type)
                      for f in schema}, schema=schema)
    lance.write_dataset(batch, theirs, mode="append")
    lance_ops.write_dataset(batch, str(ours), mode="append")

    def file_versions(uri: Path) -> list[tuple[int, int]]:
        return [(f.file_major_version, f.file_minor_version)
                for frag in lance.dataset(uri).get_fragments() for f in frag.metadata.data_files()]

    assert file_versions(ours) == file_versions(theirs)
    assert lance.dataset(ours).data_storage_version == lance.dataset(theirs).data_storage_version
    assert _rows(lance.dataset(ours).to_table()) == _rows(lance.dataset(theirs).to_table())
    stored = lance_ops.dataset(str(ours)).manifest.data_format.version
    assert stored == lance.dataset(theirs).data_storage_version


def _committed_manifest(uri: Path) -> table_pb2.Manifest:
    """The latest manifest without what differs between any two commits (time, writer, file names
    and section offsets)."""
    m = table_pb2.Manifest()
    m.CopyFrom(lance_ops.dataset(str(uri)).manifest)
    for name in ("timestamp", "transaction_file", "writer_version", "index_section", "transaction_section",
                 "version_aux_data"):
        m.ClearField(name)
    return m


OLD = sorted(str(p.relative_to(HIST)) for p in HIST.glob("v*/*.lance") if "no_fix" not in p.name)


@pytest.mark.parametrize("name", OLD)
def test_first_commit_to_old_dataset_writes_pylance_manifest(name: str, tmp_path: Path) -> None:
    """The manifest of a first commit (a delete of nothing) is pylance's: storage version, fragments
    with the data-file sizes old Lance did not record, schema fields, flags, index metadata."""
    ours, theirs = _copy(name, tmp_path / "ours"), _copy(name, tmp_path / "theirs")
    lance.dataset(theirs).delete("false")
    lance_ops.dataset(str(ours)).delete("false")
    assert _committed_manifest(ours) == _committed_manifest(theirs)
    assert all(df.file_size_bytes > 0 for f in _committed_manifest(ours).fragments for df in f.files)
    assert _index_section(ours) == _index_section(theirs)


# --- item 2: Lance 0.16's wrong storage version ------------------------------------------------
def test_016_wrong_version_is_repaired_by_the_next_commit(tmp_path: Path) -> None:
    ours = _copy("v0.16.0/wrong_data_version_can_fix.lance", tmp_path / "ours")
    theirs = _copy("v0.16.0/wrong_data_version_can_fix.lance", tmp_path / "theirs")
    ds = lance_ops.dataset(str(ours))
    assert ds.data_storage_version == lance.dataset(theirs).data_storage_version == "0.1"
    ds.delete("false")
    lance.dataset(theirs).delete("false")
    assert lance_ops.dataset(str(ours)).data_storage_version == "2.0"
    assert lance.dataset(ours).data_storage_version == lance.dataset(theirs).data_storage_version == "2.0"
    assert _rows(lance.dataset(ours).to_table()) == {"foo": [1, 2, 3]}


def test_016_mixed_file_versions_refuse_every_commit(tmp_path: Path) -> None:
    ours = _copy("v0.16.0/wrong_data_version_no_fix.lance", tmp_path)
    with pytest.raises(OSError, match=MIXED):
        lance.dataset(ours).delete("false")
    with pytest.raises(OSError, match=MIXED) as info:
        lance_ops.dataset(str(ours)).delete("false")
    assert isinstance(info.value, MixedFileVersionsError)
    assert str(info.value) == (f"{MIXED}. You will need to rollback to an earlier version: All data files must "
                               "have the same version. Detected both 2.0 and 0.1")
    assert lance_ops.dataset(str(ours)).version == 2
    # an overwrite replaces every file: pylance allows it, and so do we
    lance_ops.write_dataset(pa.table({"foo": pa.array([5], pa.int64())}), str(ours), mode="overwrite")
    assert _rows(lance.dataset(ours).to_table()) == {"foo": [5]}
    assert lance.dataset(ours).data_storage_version == "0.1"


def test_mixed_file_versions_without_data_format_do_not_open(tmp_path: Path) -> None:
    """A manifest without data_format over files of two versions: pylance cannot open it (the
    version is inferred from the files), and neither can lance_ops; both raise ValueError."""
    uri = _copy("v0.16.0/wrong_data_version_no_fix.lance", tmp_path)
    path = uri / "_versions" / "2.manifest"
    data = path.read_bytes()
    pos = struct.unpack_from("<Q", data, len(data) - 16)[0]
    (length,) = struct.unpack_from("<I", data, pos)
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(data[pos + 4 : pos + 4 + length])
    manifest.ClearField("data_format")
    path.write_bytes(encode_manifest(manifest))
    (uri / "_latest.manifest").unlink()
    detail = "All data files must have the same version.  Detected both 2.0 and 0.1"
    with pytest.raises(ValueError, match=re.escape(detail)):
        lance.dataset(uri).to_table()
    with pytest.raises(ValueError, match=re.escape(detail)) as info:
        lance_ops.dataset(str(uri))
    assert isinstance(info.value, CorruptFileError)
    assert _rows(lance_ops.dataset(str(uri), version=1).to_table()) == _rows(lance.dataset(uri, version=1).to_table())


# --- item 3: indices with older metadata --------------------------------------------------------
def _index_section(uri: Path) -> list:
    """Each index's metadata, with its file list (field 10) apart and in name order: pylance lists
    a local index folder in directory order, lance_ops (and any object store) in name order."""
    section = lance_ops.dataset(str(uri))._manifest_file.index_section
    out = []
    for index in section.indices if section is not None else []:
        files = sorted(f.data for f in unknown_fields.UnknownFieldSet(index) if f.field_number == FILES_FIELD)
        known = table_pb2.IndexMetadata()
        known.CopyFrom(index)
        known.DiscardUnknownFields()
        out.append((known.SerializeToString(deterministic=True), files))
    return out


def _index_files(uri: Path) -> list[str]:
    return sorted(str(p.relative_to(uri)) for p in (uri / "_indices").rglob("*") if p.is_file())


@pytest.mark.parametrize("name", ["v0.18.2/index_no_details.lance", "v0.20.0/old_btree_bitmap_indices.lance"])
def test_old_index_metadata_kept_as_pylance_keeps_it(name: str, tmp_path: Path) -> None:
    ours, theirs = _copy(name, tmp_path / "ours"), _copy(name, tmp_path / "theirs")
    key = lance.dataset(theirs).schema.names[0]
    batch = lance.dataset(theirs).to_table().slice(0, 1)
    files = _index_files(theirs)
    steps = [
        (lambda u: lance.write_dataset(batch, u, mode="append"),
         lambda u: lance_ops.write_dataset(batch, str(u), mode="append")),
        (lambda u: lance.dataset(u).delete(f"{key} = 2"), lambda u: lance_ops.dataset(str(u)).delete(f"{key} = 2")),
        (lambda u: lance.dataset(u).delete(f"{key} >= 0"), lambda u: lance_ops.dataset(str(u)).delete(f"{key} >= 0")),
        (lambda u: lance.dataset(u).cleanup_old_versions(older_than=datetime.timedelta(0), delete_unverified=True),
         lambda u: lance_ops.dataset(str(u)).cleanup_old_versions(older_than=datetime.timedelta(0),
                                                                  delete_unverified=True)),
    ]
    for with_pylance, with_ops in steps:
        with_pylance(theirs)
        with_ops(ours)
        assert _index_section(ours) == _index_section(theirs)
        assert repr(lance.dataset(ours).describe_indices()) == repr(lance.dataset(theirs).describe_indices())
        for flt in (f"{key} > 2", f"{key} = 1"):
            assert _rows(lance.dataset(ours).to_table(filter=flt)) == _rows(lance.dataset(theirs).to_table(filter=flt))
            assert _rows(lance_ops.dataset(str(ours)).to_table(filter=flt)) == _rows(lance.dataset(ours).to_table(filter=flt))
    assert _index_files(ours) == _index_files(theirs) == files


# --- item 5: string/binary fields list-encoded by Lance 0.13 -----------------------------------
@pytest.mark.parametrize("name", ["v0.13.0/v2_strings.lance", "v0.13.0/v2_nested_strings.lance"])
def test_013_list_encoded_strings_read_as_pylance_reads_them(name: str) -> None:
    uri = HIST / name
    theirs, ours = lance.dataset(uri), lance_ops.dataset(str(uri))
    assert ours.to_table().equals(theirs.to_table())
    n = theirs.count_rows()
    rows = sorted({0, 1, n // 2, n - 1, min(1024, n - 1), min(2047, n - 1)})
    assert ours.take(rows).equals(theirs.take(rows))
    for col in theirs.schema.names:
        assert ours.to_table(columns=[col]).equals(theirs.to_table(columns=[col]))
    for frag in ours.manifest.fragments:
        reader = LanceFileReader(str(uri / "data" / frag.files[0].path))
        assert reader.metadata.footer.num_columns > len(theirs.schema)  # two columns per string field
        whole = reader.read_all()
        assert reader.read_range(1, whole.num_rows - 1).equals(whole.slice(1))
        picks = [whole.num_rows - 1, 0, whole.num_rows // 2]
        assert reader.take_rows(picks).equals(whole.take(picks))
