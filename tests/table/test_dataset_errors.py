"""Bad input and failures: each raises the documented error and never commits anything."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops.errors import (
    CorruptFileError,
    DatasetExistsError,
    DatasetNotFoundError,
    FilterError,
    LanceOpsError,
    ObjectNotFoundError,
    SchemaMismatchError,
    UnsupportedError,
)
from lance_ops.io import open_store
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest, write_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def numbers(n: int, start: int = 0) -> pa.Table:
    return pa.table({"a": np.arange(start, start + n, dtype=np.int64), "b": [f"b{i}" for i in range(start, start + n)]})


def snapshot(uri: str) -> dict[str, frozenset]:
    """Every file under the dataset, per top-level directory (to prove nothing was written)."""
    out = {}
    for sub in ("data", "_versions", "_transactions", "_deletions", "_refs"):
        path = os.path.join(uri, sub)
        found = []
        for root, _, files in os.walk(path):
            found += [os.path.relpath(os.path.join(root, f), path) for f in files]
        out[sub] = frozenset(found)
    return out


def without_hint(snap: dict) -> dict:
    return {k: frozenset(f for f in v if f != naming.VERSION_HINT_NAME) for k, v in snap.items()}


@pytest.fixture
def two_versions(tmp_path) -> str:
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(numbers(10), uri, max_rows_per_file=5)
    lance_ops.dataset(uri).delete("a = 3")
    return uri


def manifest_path(uri: str, version: int) -> str:
    return os.path.join(uri, "_versions", naming.manifest_name(version, True))


# --- missing things ---------------------------------------------------------------------------------
def test_missing_dataset(tmp_path):
    uri = str(tmp_path / "nothing-here")
    with pytest.raises(DatasetNotFoundError, match=uri):
        lance_ops.dataset(uri)
    os.makedirs(os.path.join(uri, "_versions"))
    with pytest.raises(DatasetNotFoundError, match=uri):
        lance_ops.dataset(uri)
    with pytest.raises(FileNotFoundError):  # DatasetNotFoundError is also a FileNotFoundError
        lance_ops.dataset(uri)


def test_missing_version_and_tag(two_versions):
    with pytest.raises(DatasetNotFoundError, match=f"{two_versions}: version 9 does not exist"):
        lance_ops.dataset(two_versions, version=9)
    with pytest.raises(DatasetNotFoundError, match="tag 'nope' does not exist"):
        lance_ops.dataset(two_versions, version="nope")


def test_create_over_an_existing_dataset(two_versions):
    before = snapshot(two_versions)
    with pytest.raises(DatasetExistsError, match=f"Dataset already exists: {two_versions}"):
        lance_ops.write_dataset(numbers(1), two_versions)
    assert snapshot(two_versions) == before


# --- corrupt files --------------------------------------------------------------------------------
def _truncate(data: bytes) -> bytes:
    return data[:-5]


def _empty(data: bytes) -> bytes:
    return b""


def _bad_magic(data: bytes) -> bytes:
    return data[:-4] + b"XXXX"


def _garbled_manifest(data: bytes) -> bytes:
    pos = int.from_bytes(data[-16:-8], "little")
    return data[: pos + 4] + b"\xff" * (len(data) - 16 - pos - 4) + data[-16:]


def _cut_in_the_middle(data: bytes) -> bytes:
    return data[:40] + data[-16:]


@pytest.mark.parametrize("damage, problem", [
    (_truncate, "bad magic"),
    (_empty, "truncated manifest: 0 bytes"),
    (_bad_magic, "bad magic b'XXXX'"),
    (_garbled_manifest, "Manifest protobuf does not decode"),
    (_cut_in_the_middle, "is outside the file"),
], ids=["truncated", "empty", "bad_magic", "garbled_protobuf", "cut_in_the_middle"])
def test_corrupt_latest_manifest(two_versions, damage, problem):
    path = manifest_path(two_versions, 2)
    with open(path, "rb") as fh:
        data = fh.read()
    with open(path, "wb") as fh:
        fh.write(damage(data))
    before = snapshot(two_versions)
    with pytest.raises(CorruptFileError, match=problem) as info:
        lance_ops.dataset(two_versions)
    assert info.value.path == path and str(info.value).startswith(path)
    # writes refuse before writing anything
    with pytest.raises(CorruptFileError, match=path):
        lance_ops.write_dataset(numbers(2, 50), two_versions, mode="append")
    with pytest.raises(CorruptFileError, match=path):
        lance_ops.write_dataset(numbers(2, 50), two_versions, mode="overwrite")
    assert snapshot(two_versions) == before
    # the version before it is intact
    assert lance_ops.dataset(two_versions, version=1).count_rows() == 10


def test_corrupt_data_and_deletion_files_are_named(two_versions):
    ds = lance_ops.dataset(two_versions)
    frag = ds.get_fragments()[0]
    data_path = os.path.join(two_versions, "data", frag.data_files()[0].path)
    del_path = os.path.join(two_versions, "_deletions", os.listdir(os.path.join(two_versions, "_deletions"))[0])
    with open(del_path, "wb") as fh:
        fh.write(b"garbage")
    with pytest.raises(CorruptFileError, match=del_path):
        lance_ops.dataset(two_versions).to_table()
    with open(data_path, "rb") as fh:
        data = fh.read()
    with open(data_path, "wb") as fh:
        fh.write(data[:-10])
    with pytest.raises(CorruptFileError, match=data_path):
        lance_ops.dataset(two_versions, version=1).to_table()
    os.remove(data_path)
    with pytest.raises(ObjectNotFoundError, match=data_path):
        lance_ops.dataset(two_versions, version=1).to_table()


# --- feature flags ----------------------------------------------------------------------------------
def _add_flagged_version(uri: str, reader: int, writer: int) -> None:
    store, base = open_store(uri, None)
    mf = read_manifest(store, naming.latest_version(store, base).path)
    m = mf.manifest
    m.version += 1
    m.reader_feature_flags |= reader
    m.writer_feature_flags |= writer
    write_manifest(store, store.join(base, naming.manifest_path(m.version, True)), m, mf.transaction)


def test_unknown_reader_flag_is_refused(two_versions):
    _add_flagged_version(two_versions, 4096, 4096)
    with pytest.raises(UnsupportedError, match="unsupported reader feature flags 4096") as info:
        lance_ops.dataset(two_versions)
    assert manifest_path(two_versions, 3) in str(info.value)
    with pytest.raises(ValueError, match="cannot be read by this version of Lance"):  # pylance agrees
        lance.dataset(two_versions)
    before = snapshot(two_versions)
    with pytest.raises(UnsupportedError, match="unsupported reader feature flags"):
        lance_ops.write_dataset(numbers(1), two_versions, mode="append")
    assert snapshot(two_versions) == before
    assert lance_ops.dataset(two_versions, version=2).count_rows() == 9


def test_unknown_writer_flag_is_refused_for_writes(two_versions):
    _add_flagged_version(two_versions, 0, 4096)
    ds = lance_ops.dataset(two_versions)
    assert ds.count_rows() == 9  # reading is fine
    before = snapshot(two_versions)
    writes = {
        "append": lambda: lance_ops.write_dataset(numbers(1, 90), two_versions, mode="append"),
        "overwrite": lambda: lance_ops.write_dataset(numbers(1, 90), two_versions, mode="overwrite"),
        "delete": lambda: lance_ops.dataset(two_versions).delete("a = 1"),
        "restore": lambda: lance_ops.dataset(two_versions, version=1).restore(),
    }
    for name, write in writes.items():
        with pytest.raises(UnsupportedError, match="unsupported writer feature flags 4096"):
            write()
        assert snapshot(two_versions) == before, name


# --- schema mismatches ------------------------------------------------------------------------------
@pytest.mark.parametrize("data, message", [
    (pa.table({"a": [1]}), r"missing fields \['b'\]"),
    (pa.table({"a": [1], "b": [2]}), r"field 'b' has type int64, the dataset has string"),
    (pa.table({"a": [1], "b": ["x"], "c": [1.0]}), r"fields not in the dataset \['c'\]"),
    (pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}), r"field 'a' has type int32, the dataset has int64"),
    (pa.table({"z": [1], "b": ["x"]}), r"missing fields \['a'\]; fields not in the dataset \['z'\]"),
], ids=["missing", "wrong_type", "extra", "narrower_int", "renamed"])
def test_append_with_a_mismatched_schema(two_versions, data, message):
    before = snapshot(two_versions)
    with pytest.raises(SchemaMismatchError, match=message) as info:
        lance_ops.write_dataset(data, two_versions, mode="append")
    assert two_versions in str(info.value)
    assert snapshot(two_versions) == before
    assert lance_ops.dataset(two_versions).version == lance.dataset(two_versions).version == 2


# --- bad predicates ---------------------------------------------------------------------------------
@pytest.mark.parametrize("predicate, message", [
    ("a >", "Syntax error in filter 'a >' at position 4: expected a value after '>', found end of input"),
    ("a = 1 AND", "Syntax error in filter"),
    ("zz = 1", "unknown column 'zz'; available columns: a, b"),
    ("b + 1 = 2", "cannot evaluate b \\+ 1"),
    (42, "a filter must be a SQL string or a pyarrow.compute.Expression"),
], ids=["incomplete", "dangling_and", "unknown_column", "type_error", "not_a_filter"])
def test_invalid_predicate(two_versions, predicate, message):
    before = snapshot(two_versions)
    ds = lance_ops.dataset(two_versions)
    with pytest.raises(FilterError, match=message) as info:
        ds.delete(predicate)
    if isinstance(predicate, str):
        lines = str(info.value).splitlines()
        assert lines[-2].strip() == predicate and "^" in lines[-1]  # shows where
    with pytest.raises(FilterError):
        ds.to_table(filter=predicate)
    with pytest.raises(FilterError):
        ds.count_rows(predicate)
    assert ds.version == 2
    assert snapshot(two_versions) == before


def test_unknown_columns(two_versions):
    with pytest.raises(LanceOpsError, match=r"unknown column\(s\) \['nope'\]"):
        lance_ops.dataset(two_versions).to_table(columns=["a", "nope"])
    with pytest.raises(LanceOpsError, match=r"unknown column\(s\) \['nope'\]"):
        lance_ops.dataset(two_versions).take([0], columns=["nope"])


# --- a crash between writing data and committing ------------------------------------------------------
CRASH_APPEND = textwrap.dedent("""
    import os, sys
    import numpy as np, pyarrow as pa
    import lance_ops, lance_ops.table.write as write_mod

    def crash(*args, **kwargs):
        os._exit(1)  # the process dies after the data files are written, before the commit

    write_mod.commit_transaction = crash
    lance_ops.write_dataset(pa.table({"a": np.arange(100, 110), "b": ["x"] * 10}), sys.argv[1], mode="append",
                            max_rows_per_file=4)
    sys.exit(0)
""")

CRASH_DELETE = textwrap.dedent("""
    import os, sys
    import lance_ops, lance_ops.table.dataset as dataset_mod

    def crash(*args, **kwargs):
        os._exit(1)

    dataset_mod.commit_transaction = crash
    lance_ops.dataset(sys.argv[1]).delete("a < 8")
    sys.exit(0)
""")


def _run_crashing(script: str, uri: str) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", script, uri], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr


@pytest.mark.parametrize("script, new_dir", [(CRASH_APPEND, "data"), (CRASH_DELETE, "_deletions")],
                         ids=["append", "delete"])
def test_crash_before_commit_leaves_the_last_version_readable(two_versions, script, new_dir):
    expected = lance.dataset(two_versions).to_table()
    before = snapshot(two_versions)
    _run_crashing(script, two_versions)
    after = snapshot(two_versions)
    orphans = after[new_dir] - before[new_dir]
    assert orphans  # work was written ...
    assert without_hint(after) == {**without_hint(before), new_dir: after[new_dir]}  # ... but not committed
    for mod in (lance, lance_ops):
        ds = mod.dataset(two_versions)
        assert ds.version == 2
        assert ds.to_table().equals(expected)
    # the orphans are not referenced, and the next write commits version 3 normally
    ds = lance_ops.write_dataset(numbers(1, 500), two_versions, mode="append")
    assert ds.version == 3
    referenced = {df.path for f in ds.manifest.fragments for df in f.files}
    assert not (referenced & orphans)
    assert lance.dataset(two_versions).to_table().equals(
        pa.concat_tables([expected, numbers(1, 500)]).combine_chunks())
