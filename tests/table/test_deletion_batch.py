"""Deletion vectors of many fragments read together (ADR 0045): the same offsets, and the same
errors, as reading them one file at a time; symlinks and damage take the one-file path."""
from __future__ import annotations

import os
import shutil

import lance
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import lance_ops
from lance_ops.errors import CorruptFileError, ObjectNotFoundError, UnsafePathError
from lance_ops.table import deletion as dl
from lance_ops.table.fragment import load_deletions
from lance_ops.table.manifest import naming
from tests.table import int_table

FRAGS, PER = 12, 100


@pytest.fixture(scope="module")
def many_ds(tmp_path_factory):
    """12 fragments of 100 rows written by pylance, each with an ``.arrow`` deletion file (of two
    lengths: 20 offsets in fragments 0-2, 10 in the others)."""
    uri = str(tmp_path_factory.mktemp("delbatch") / "ds")
    lance.write_dataset(int_table(0, FRAGS * PER), uri, data_storage_version="2.0", max_rows_per_file=PER)
    ds = lance.dataset(uri)
    ds.delete("id % 10 = 3")
    ds.delete("id < 300 AND id % 10 = 5")
    return uri


def _one_by_one(ds):
    return [dl.read_deletion_offsets(ds.store, ds.base, f.fragment_id, f.proto.deletion_file, f.physical_rows)
            for f in ds.get_fragments()]


def test_batch_equals_one_by_one(many_ds, monkeypatch):
    ds = lance_ops.dataset(many_ds)
    frags = ds.get_fragments()
    dl._LAYOUTS.clear()  # the first file of each length is decoded by the IPC reader, the rest together
    calls = []
    one = dl.decode_arrow_deletions
    monkeypatch.setattr(dl, "decode_arrow_deletions", lambda *a: calls.append(a) or one(*a))
    got = dl.read_deletion_vectors(ds.store, ds.base, [f.proto for f in frags])
    # the IPC reader decodes the 20-offset vectors of fragments 0-2 (pylance's files of a second
    # delete: no learnt layout) and one 10-offset vector; the other 8 are decoded together
    assert len(calls) == 4
    monkeypatch.undo()
    want = _one_by_one(ds)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    assert all(not g.flags.writeable for g in got)
    load_deletions(frags)
    assert [f.deleted_offsets.tolist() for f in frags] == [w.tolist() for w in want]
    assert ds.to_table() == lance.dataset(many_ds).to_table()


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _deletion_path(uri, frag):
    return os.path.join(uri, naming.deletion_file_path(frag.fragment_id, frag.proto.deletion_file))


def test_symlinked_deletion_file_outside_is_refused(many_ds, tmp_path):
    uri = _copy(many_ds, str(tmp_path / "ds"))
    frag = lance_ops.dataset(uri).get_fragments()[5]
    path = _deletion_path(uri, frag)
    outside = tmp_path / "outside.arrow"
    shutil.move(path, outside)
    os.symlink(outside, path)
    with pytest.raises(UnsafePathError, match=r"deletion file of fragment 5 .* resolves \(through a symlink\)"):
        lance_ops.dataset(uri).to_table()


def test_symlinked_deletion_file_inside_is_read(many_ds, tmp_path):
    uri = _copy(many_ds, str(tmp_path / "ds"))
    frag = lance_ops.dataset(uri).get_fragments()[5]
    path = _deletion_path(uri, frag)
    inside = os.path.join(uri, "_deletions", "moved.arrow")
    shutil.move(path, inside)
    os.symlink(inside, path)
    assert lance_ops.dataset(uri).to_table() == lance.dataset(many_ds).to_table()


def test_missing_deletion_file_names_file_and_manifest(many_ds, tmp_path):
    uri = _copy(many_ds, str(tmp_path / "ds"))
    frag = lance_ops.dataset(uri).get_fragments()[7]
    os.remove(_deletion_path(uri, frag))
    with pytest.raises(ObjectNotFoundError, match=r"object not found: .*7-.*\.arrow \(deletion file of fragment 7 "
                                                  r"in manifest .*_versions"):
        lance_ops.dataset(uri).to_table()


def _ipc(values):
    sink = pa.BufferOutputStream()
    schema = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    with ipc.new_file(sink, schema) as w:
        w.write_batch(pa.record_batch([pa.array(values, pa.uint32())], schema=schema))
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("values, message", [
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12], "holds 11 offsets but the manifest .* records 10 deleted rows"),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 500], "deletes offset 500, past the 100 rows"),
])
def test_damaged_vector_in_a_batch_keeps_its_error(many_ds, tmp_path, values, message):
    """A vector of the learnt layout that disagrees with the manifest is refused with the one-file
    path's message, wherever it sits in the batch."""
    uri = _copy(many_ds, str(tmp_path / "ds"))
    frags = lance_ops.dataset(uri).get_fragments()
    frag = frags[9]  # 10 deleted rows (id % 10 = 3)
    assert frag.num_deletions == 10
    with open(_deletion_path(uri, frag), "wb") as f:
        f.write(_ipc(values))
    with pytest.raises(CorruptFileError, match=message):
        lance_ops.dataset(uri).to_table()


def test_duplicate_offsets_are_read_as_the_one_file_path_reads_them(many_ds, tmp_path):
    uri = _copy(many_ds, str(tmp_path / "ds"))
    frag = lance_ops.dataset(uri).get_fragments()[9]
    want = frag.deleted_offsets.tolist()
    with open(_deletion_path(uri, frag), "wb") as f:
        f.write(_ipc(np.array(want[:-1] + [want[0]], np.uint32)))
    with pytest.raises(CorruptFileError, match="holds 9 offsets but"):
        lance_ops.dataset(uri).to_table()


def test_symlinked_deletions_directory_outside_is_refused_per_file(many_ds, tmp_path):
    """A ``_deletions`` directory that is a symlink leading out is refused with the one-file
    path's message (naming the first fragment's file), not a message about the directory."""
    uri = _copy(many_ds, str(tmp_path / "ds"))
    outside = tmp_path / "outside"
    os.rename(os.path.join(uri, "_deletions"), outside)
    os.symlink(outside, os.path.join(uri, "_deletions"))
    with pytest.raises(UnsafePathError, match=r"deletion file of fragment 0 '_deletions/0-2-\d+\.arrow' resolves"):
        lance_ops.dataset(uri).to_table()
