"""What a commit needs to know of a manifest's fragment list, gathered in one pass.

A commit on top of a manifest with thousands of fragments asked three questions of it, each in
its own pass over the fragment records (upb messages, whose every attribute access costs a
Python object): the fragment ids (next id, order), the data files' storage versions (a mix is
refused) and whether any fragment lacks statistics older writers did not record. An Append only
adds fragments, so the answers for the new manifest are those of the previous one plus those of
the new fragments: one pass over the previous manifest, not three over the new one (ADR 0052).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from typing import Any, Sequence

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from lance_ops._proto import table_pb2


@dataclass(frozen=True)
class FragmentFacts:
    """The facts of one fragment list (in list order)."""

    #: fragment ids (uint64, as stored)
    ids: np.ndarray
    #: the distinct (major, minor) storage versions of the data files; None when they are not
    #: known from one cheap pass (callers then ask the fragments themselves, as for a mix)
    version_pairs: set[tuple[int, int]] | None
    #: some fragment lacks a data-file size or deleted-row count, or has no live rows (the test
    #: of :func:`lance_ops.table.stats.fragments.fill_fragment_stats`)
    needs_stats: bool
    #: physical rows of each fragment (int64)
    physical_rows: np.ndarray
    #: deleted rows each fragment's record states (int64): 0 without a deletion file, and 0 beside
    #: one whose count very old writers did not record (``has_deletion`` tells them apart)
    deleted_rows: np.ndarray
    #: whether each fragment has a deletion file (bool)
    has_deletion: np.ndarray
    #: some data file names a base path (``base_id``): it may live outside the dataset's root
    other_bases: bool

    def uncounted(self) -> np.ndarray:
        """Positions of fragments with a deletion file whose count is not recorded (only the file tells)."""
        return np.flatnonzero(self.has_deletion & (self.deleted_rows == 0))


def _needs_stats(frag: table_pb2.DataFragment) -> bool:
    if any(df.file_size_bytes == 0 and not df.HasField("base_id") for df in frag.files):
        return True
    if frag.physical_rows == 0:
        return False  # unknown row count: nothing can be filled in
    has_deletions = frag.HasField("deletion_file")
    if has_deletions and frag.deletion_file.num_deleted_rows == 0:
        return True
    deleted = frag.deletion_file.num_deleted_rows if has_deletions else 0
    return frag.physical_rows - deleted <= 0


def fragment_facts(fragments: Sequence[table_pb2.DataFragment]) -> FragmentFacts:
    """The facts of ``fragments``: one pass reading each record's id, row counts, deletion file and data files."""
    rows = [(f.id, f.physical_rows, f.deletion_file.num_deleted_rows, f.files, f.HasField("deletion_file"))
            for f in fragments]
    n = len(rows)
    ids = np.fromiter((r[0] for r in rows), dtype=np.uint64, count=n)
    single = all(len(r[3]) == 1 for r in rows)
    pairs: set[tuple[int, int]] | None = None
    if single:
        files = [r[3][0] for r in rows]
        pairs = {(df.file_major_version, df.file_minor_version) for df in files}
        sizes_missing = 0 in [df.file_size_bytes for df in files]
    else:
        sizes_missing = 0 in [df.file_size_bytes for r in rows for df in r[3]]
    physical = np.fromiter((r[1] for r in rows), dtype=np.int64, count=n)
    deleted = np.fromiter((r[2] for r in rows), dtype=np.int64, count=n)
    has_deletion = np.fromiter((r[4] for r in rows), dtype=bool, count=n)
    other_bases = any(df.HasField("base_id") for r in rows for df in r[3])
    if sizes_missing:  # a data file of unknown size (rare: old writers), fragment by fragment
        needs = any(_needs_stats(f) for f in fragments)
    else:
        uncounted = (deleted == 0) & has_deletion  # (very old writers) a deletion file without its count
        needs = bool(((physical != 0) & (uncounted | (physical - deleted <= 0))).any())
    return FragmentFacts(ids, pairs, needs, physical, deleted, has_deletion, other_bases)


# =================================================================================================
# the same facts from the serialised fragment list (an Append's commit, ADR 0053)
# =================================================================================================
# Reading four or five attributes of each of thousands of upb messages makes as many Python objects
# (3-4 ms for 2,000 fragments). The facts are counts and a few columns, so they are read instead from
# the manifest's serialisation, re-parsed as "view" messages whose fields are all repeated: the
# fragment records' bodies, concatenated, parse into one message that holds every fragment's id,
# row count, data files and deletion file side by side (protobuf appends repeated fields met again).
# upb serialises canonically: a singular field at most once, a zero scalar without presence never,
# a message field once when set. So a count tells which values are absent (zero) and a column whose
# count equals the number of records lines up with the records. Every case the counts cannot settle
# (zero ids besides fragment 0, zero row counts, deletion files on some fragments only is settled by
# a marker, data files of several versions, zero sizes beside other base paths) takes the
# fragment-by-fragment path; both give the same facts (tests/table/test_manifest_facts.py).
#
# Two more shapes read most lists without joining any bytes in Python: a view whose field 2 is a
# *singular* message. A parser merges every occurrence of a singular message field into one
# message, concatenating its repeated fields, so one parse of the manifest puts every fragment's
# ids, row counts and data-file numbers side by side ("merged" views); the data files merge the
# same way one level down. What a merge cannot tell (which fragments hold the deletion files when
# only some do) takes the joined bodies above. Repeated numbers convert with ``np.array`` (upb's
# containers hand over their values at once, ~50x faster than iterating them).
_U64 = descriptor_pb2.FieldDescriptorProto.TYPE_UINT64
_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_SINGULAR = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL


def _view_classes() -> dict[str, Any]:
    """The view message classes, in a pool of their own (field numbers as in ``table.proto``).
    A field is (name, number, type): a type naming another view is a singular message (merged)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="lance_ops_fragment_facts_view.proto",
                                             package="lance_ops.facts_view", syntax="proto3")
    shapes: dict[str, list[tuple[str, int, Any]]] = {
        "Fragments": [("fragments", 2, _BYTES)],                      # Manifest.fragments, as bytes
        "Fragment": [("id", 1, _U64), ("files", 2, _BYTES), ("deletion_file", 3, _BYTES),
                     ("physical_rows", 4, _U64)],                     # DataFragment, every one at once
        "DataFile": [("major", 4, _U64), ("minor", 5, _U64), ("size", 6, _U64), ("base_id", 7, _U64)],
        "DeletionFile": [("num_deleted_rows", 4, _U64)],
        # merged views: Manifest -> every fragment -> every data file / deletion file
        "MergedDataFiles": [("path", 1, _BYTES), ("major", 4, _U64), ("minor", 5, _U64), ("size", 6, _U64),
                            ("base_id", 7, _U64)],
        "MergedDeletionFiles": [("read_version", 2, _U64), ("num_deleted_rows", 4, _U64)],
        "MergedFragments": [("id", 1, _U64), ("files", 2, "MergedDataFiles"),
                            ("deletion_file", 3, "MergedDeletionFiles"), ("physical_rows", 4, _U64)],
        "MergedManifest": [("fragments", 2, "MergedFragments")],
    }
    for name, fields in shapes.items():
        message = fdp.message_type.add(name=name)
        for field_name, number, kind in fields:
            if isinstance(kind, str):
                message.field.add(name=field_name, number=number, type=_MESSAGE, label=_SINGULAR,
                                  type_name=f".lance_ops.facts_view.{kind}")
            else:
                message.field.add(name=field_name, number=number, type=kind, label=_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"lance_ops.facts_view.{name}"))
            for name in shapes}


_VIEW = _view_classes()
#: a deletion-file record no serialised DeletionFile equals (a tag byte is never 0), put after
#: every fragment body so that the deletion files present line up with the fragments
_NO_FILE = b"\x00"
_DELETION_MARK = bytes([(3 << 3) | 2, 1]) + _NO_FILE


def _u64(values: Any) -> np.ndarray:
    """A repeated uint64 field's values (upb's container converts at once)."""
    return np.array(values, dtype=np.uint64).reshape(-1)


def manifest_facts(manifest: table_pb2.Manifest, serialised: bytes | None = None) -> FragmentFacts:
    """:func:`fragment_facts` of ``manifest``'s fragments, read from its serialisation (see above).

    ``serialised``: ``manifest.SerializeToString()`` when the caller has it (the manifest decoder
    makes it for its wire-type check); never bytes read from a file, which need not be canonical.
    """
    fast = _facts_from_bytes(manifest, serialised)
    return fast if fast is not None else fragment_facts(manifest.fragments)


def _facts_from_bytes(manifest: table_pb2.Manifest, serialised: bytes | None = None) -> FragmentFacts | None:
    """The facts of ``manifest``'s fragments, or None where the counts do not settle them."""
    frags = manifest.fragments
    n = len(frags)
    if n == 0:
        return None
    if serialised is None:
        serialised = manifest.SerializeToString()
    merged = _VIEW["MergedManifest"].FromString(serialised).fragments
    if len(merged.physical_rows) != n:  # some fragment of unknown (zero) row count
        return None
    physical = _u64(merged.physical_rows).astype(np.int64)
    if len(merged.id) == n:
        ids = _u64(merged.id)
    elif len(merged.id) == n - 1 and frags[0].id == 0:  # fragment 0 (its id not written), and only it
        ids = np.concatenate([np.zeros(1, np.uint64), _u64(merged.id)])
    else:
        return None
    deletions = _deletions(serialised, merged, n)
    if deletions is None:
        return None
    has_deletion, deleted = deletions
    files = merged.files
    nf = len(files.path)  # (a data file's path is never empty)
    pairs: set[tuple[int, int]] | None = None
    if nf:  # one pair of numbers (a number missing from some record is 0 there)
        majors, minors = _u64(files.major), _u64(files.minor)
        if len(majors) != nf:
            majors = np.append(majors, np.uint64(0))
        if len(minors) != nf:
            minors = np.append(minors, np.uint64(0))
        if majors.min() == majors.max() and minors.min() == minors.max():
            pairs = {(int(majors[0]), int(minors[0]))}
    unsized = len(files.size) != nf  # a data file of size 0
    if unsized and len(files.base_id):
        return None  # it may live in another base path (its size is not filled in): ask the files
    needs = unsized or bool((deleted >= physical).any())
    return FragmentFacts(ids, pairs, needs, physical, deleted, has_deletion, bool(len(files.base_id)))


def _deletions(serialised: bytes, merged: Any, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(has a deletion file, recorded deleted rows) of each of the ``n`` fragments (``merged``:
    their merged view); None when a deletion file does not record its count."""
    if not merged.HasField("deletion_file"):  # (a merge of even one empty deletion file sets it)
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    files = merged.deletion_file
    if len(files.read_version) == n:  # one on every fragment (each has at most one, with its version)
        if len(files.num_deleted_rows) != n:
            return None
        return np.ones(n, dtype=bool), _u64(files.num_deleted_rows).astype(np.int64)
    # some fragments only: each fragment body is followed by a mark, so the deletion files present
    # line up with the fragments
    bodies = _VIEW["Fragments"].FromString(serialised).fragments
    marks = list(_VIEW["Fragment"].FromString(_DELETION_MARK.join(bodies) + _DELETION_MARK).deletion_file)
    is_mark = np.fromiter(map(_NO_FILE.__eq__, marks), dtype=bool, count=len(marks))
    at = np.flatnonzero(is_mark)
    if len(at) != n:
        return None
    present = np.diff(at, prepend=-1) - 1
    if present.max() > 1:
        return None
    has_deletion = present == 1
    deletion_bodies = list(compress(marks, (~is_mark).tolist()))
    counted = _VIEW["DeletionFile"].FromString(b"".join(deletion_bodies)).num_deleted_rows
    if len(counted) != len(deletion_bodies):  # a deletion file without its count (very old writers)
        return None
    deleted = np.zeros(n, dtype=np.int64)
    deleted[has_deletion] = _u64(counted).astype(np.int64)
    return has_deletion, deleted
