"""NGRAM remap: re-serialise each token's posting list (a roaring-rs RoaringTreemap of row addresses).

``ngram_postings.lance`` holds ``tokens`` (u32) and ``posting_list`` (binary, field metadata
``lance-encoding:compression: none``; index-facts.md §3). As pylance 14.0.2's ``remap``, every
token is kept in its order (an emptied posting list stays, empty), deleted rows of rewritten
fragments are dropped and survivors take their new addresses. With stable row ids the postings
hold row ids, which compaction keeps: the outcome is "keep".
"""
from __future__ import annotations

import pyarrow as pa

from lance_ops.maintenance.index_remap import codecs
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.table.indices import segment_uuid

#: the one file of an NGRAM index
POSTINGS_FILE = "ngram_postings.lance"


def remap_ngram(request: RemapRequest) -> RemapOutcome:
    """Remap an NGRAM segment into ``_indices/<new_uuid>/`` (or keep it with stable row ids)."""
    if request.stable_row_ids:
        return RemapOutcome("keep", [])
    old = codecs.read_index_file(request.store, request.base, segment_uuid(request.index), POSTINGS_FILE)
    field = old.table.schema.field("posting_list")
    postings = old.table.column("posting_list").combine_chunks().to_pylist()
    sets = [codecs.RowAddrSet(codecs.decode_roaring_treemap(b) if b is not None else codecs.EMPTY)
            for b in postings]
    remapped = codecs.remap_address_sets(sets, request.addresses)
    encoded = pa.array([codecs.encode_roaring_treemap(s.addresses) for s in remapped], type=field.type)
    table = old.table.set_column(old.table.schema.get_field_index("posting_list"), field, encoded)
    version = codecs.index_file_version(request.dataset, old.version)
    written = codecs.write_index_file(request.store, request.base, request.new_uuid, POSTINGS_FILE, table,
                                      version=version, metadata=old.metadata,
                                      storage_options=codecs.storage_options_of(request.dataset))
    return RemapOutcome("remap", [written])


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`remap_ngram` does, for dry runs: keep with stable row ids, else remap."""
    return "keep" if stable_row_ids else "remap"


setattr(remap_ngram, "plan_action", plan_action)
