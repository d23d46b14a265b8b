"""Fragment statistics that older Lance versions did not record, filled in on commit as pylance does.

Datasets written by Lance before ~0.21 have data files without ``file_size_bytes`` (and the
oldest ones deletion files without ``num_deleted_rows``). When any fragment of the manifest being
committed lacks one of them, or has no live rows, pylance 14.0.2 fills in every missing value
(sizes from the store, deleted-row counts from the deletion files) and drops the fragments with
no live rows. lance_ops does the same, so the committed manifest matches pylance's.

Not done: ``physical_rows`` of fragments that lack it (Lance < 0.8) is left as it is (pylance
counts the rows of the data files), and so are fragments whose files live in other base paths.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from lance_ops._proto import table_pb2
from lance_ops.io import ObjectStore
from lance_ops.table import deletion, versions


def _needs_stats(frag: table_pb2.DataFragment) -> bool:
    if any(df.file_size_bytes == 0 and not df.HasField("base_id") for df in frag.files):
        return True
    if frag.physical_rows == 0:
        return False  # unknown row count: nothing this module can fill in
    has_deletions = frag.HasField("deletion_file")
    if has_deletions and frag.deletion_file.num_deleted_rows == 0:
        return True
    deleted = frag.deletion_file.num_deleted_rows if has_deletions else 0
    return frag.physical_rows - deleted <= 0


def _any_needs_stats(frags: Sequence[table_pb2.DataFragment]) -> bool:
    """``any(_needs_stats(f) for f in frags)``, in a few passes over plain values (thousands of
    fragments are common; with a data file of unknown size, fragment by fragment)."""
    if 0 in [df.file_size_bytes for df in versions.data_files(frags)]:
        return any(_needs_stats(f) for f in frags)
    physical = np.fromiter((f.physical_rows for f in frags), dtype=np.int64, count=len(frags))
    deleted = np.fromiter((f.deletion_file.num_deleted_rows for f in frags), dtype=np.int64, count=len(frags))
    uncounted = deleted == 0  # no deletion file, or (very old writers) one without its count
    if uncounted.any():
        has_file = np.fromiter((f.HasField("deletion_file") for f in frags), dtype=bool, count=len(frags))
        uncounted &= has_file
    return bool(((physical != 0) & (uncounted | (physical - deleted <= 0))).any())


def fill_fragment_stats(store: ObjectStore, base: str, manifest: table_pb2.Manifest) -> None:
    """In place: missing data-file sizes and deleted-row counts, and no fragment without live rows."""
    if not _any_needs_stats(list(manifest.fragments)):
        return
    kept = []
    for frag in manifest.fragments:
        for df in frag.files:
            if df.file_size_bytes == 0 and not df.HasField("base_id"):
                df.file_size_bytes = store.size(store.join(base, "data", df.path))
        if frag.HasField("deletion_file") and frag.deletion_file.num_deleted_rows == 0:
            offsets = deletion.read_deletion_offsets(store, base, frag.id, frag.deletion_file)
            frag.deletion_file.num_deleted_rows = len(offsets)
        deleted = frag.deletion_file.num_deleted_rows if frag.HasField("deletion_file") else 0
        if frag.physical_rows == 0 or frag.physical_rows > deleted:
            kept.append(frag)
    if len(kept) != len(manifest.fragments):
        copies = [table_pb2.DataFragment() for _ in kept]
        for copy, frag in zip(copies, kept):
            copy.CopyFrom(frag)
        del manifest.fragments[:]
        manifest.fragments.extend(copies)
