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

from lance_ops._proto import table_pb2
from lance_ops.io import ObjectStore
from lance_ops.table import deletion
from lance_ops.table.manifest.facts import fragment_facts, manifest_facts


def fill_fragment_stats(store: ObjectStore, base: str, manifest: table_pb2.Manifest, settled: int = 0) -> None:
    """In place: missing data-file sizes and deleted-row counts, and no fragment without live rows.

    ``settled``: the first ``settled`` fragments are known to need nothing (an Append's commit
    checked them on the previous manifest, :func:`lance_ops.table.manifest.facts.fragment_facts`);
    only the others are looked at to decide whether anything needs filling.
    """
    frags = manifest.fragments
    # the whole list: read from the serialised manifest (ADR 0053); the new fragments of an Append: one by one
    facts = fragment_facts(frags[settled:]) if settled else manifest_facts(manifest)
    if not facts.needs_stats:
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
