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
from typing import Sequence

import numpy as np

from lance_ops._proto import table_pb2


@dataclass(frozen=True)
class FragmentFacts:
    """The facts of one fragment list (in list order)."""

    #: fragment ids (uint64, as stored)
    ids: np.ndarray
    #: the distinct (major, minor) storage versions of the data files; None when some fragment
    #: does not have exactly one data file (callers then ask the fragments themselves)
    version_pairs: set[tuple[int, int]] | None
    #: some fragment lacks a data-file size or deleted-row count, or has no live rows (the test
    #: of :func:`lance_ops.table.stats.fragments.fill_fragment_stats`)
    needs_stats: bool


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
    if sizes_missing:  # a data file of unknown size (rare: old writers), fragment by fragment
        return FragmentFacts(ids, pairs, any(_needs_stats(f) for f in fragments))
    physical = np.fromiter((r[1] for r in rows), dtype=np.int64, count=n)
    deleted = np.fromiter((r[2] for r in rows), dtype=np.int64, count=n)
    uncounted = deleted == 0  # no deletion file, or (very old writers) one without its count
    if uncounted.any():
        uncounted &= np.fromiter((r[4] for r in rows), dtype=bool, count=n)
    needs = bool(((physical != 0) & (uncounted | (physical - deleted <= 0))).any())
    return FragmentFacts(ids, pairs, needs)
