"""Remap IVF vector index segments (IVF_FLAT, IVF_PQ, IVF_SQ, IVF_HNSW_FLAT/PQ/SQ) through a compaction.

What pylance 14.0.2's eager remap writes for a vector segment (index-facts §2a, §3; the tests
compare with its ``compact_files`` output): both files again under the new uuid,

* ``auxiliary.idx``: per IVF partition the surviving rows in their order, ``_rowid`` mapped to the
  new addresses, codes carried along (PQ codes re-transposed per partition), the IVF buffer's
  ``offsets`` / ``lengths`` recounted; schema metadata (``storage_metadata`` JSON, distance type)
  and the other global buffers (PQ codebook) unchanged (:mod:`.ivf_storage`);
* ``index.idx``: for a FLAT sub-index (IVF_FLAT/PQ/SQ) the same content (centroids, zero partition
  lengths, empty marker column), so it is copied byte for byte; for HNSW the graphs are remapped
  to the new storage positions (:mod:`.hnsw_graph`; pylance rebuilds them instead).

Index details and version stay as they were (pylance keeps the old entry's). With stable row ids
the files hold row ids, which compaction does not change: the segment keeps its uuid and files and
only its fragment bitmap is recalculated ("keep", index-facts §2b).

Refused with :class:`~lance_ops.errors.UnsupportedError` before anything is written: a segment in
another base (``base_id``), one without ``auxiliary.idx`` (the legacy v1 vector layout, a single
``index.idx``), a sub-index or quantizer other than FLAT/HNSW with FLAT/PQ/SQ (RQ, ...).
"""
from __future__ import annotations

import json

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.maintenance.index_remap.hnsw_graph import remap_graph
from lance_ops.maintenance.index_remap.ivf_files import IndexFile, read_index_file, write_index_file
from lance_ops.maintenance.index_remap.ivf_storage import ROW_ID_COLUMN, remap_storage
from lance_ops.table.indices import segment_uuid

#: the vector kinds :func:`remap_vector` handles (the registry's keys)
VECTOR_KINDS = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ")
INDEX_FILE = "index.idx"
AUXILIARY_FILE = "auxiliary.idx"
#: the codes column of each quantizer's storage
_CODE_COLUMNS = {"FLAT": "flat", "PQ": "__pq_code", "SQ": "__sq_code"}


def _index_type(index: IndexFile, path: str) -> str:
    """The ``type`` of ``index.idx``'s ``lance:index`` metadata (IVF_PQ, IVF_HNSW_SQ, ...)."""
    raw = index.metadata.get("lance:index")
    try:
        kind = json.loads(raw).get("type") if raw else None
    except (ValueError, AttributeError):
        kind = None
    if not kind:
        raise CorruptFileError(path, "index.idx has no lance:index metadata naming the index type")
    return str(kind).upper()


def _check_layout(request: RemapRequest, index_type: str, aux: IndexFile, aux_path: str) -> None:
    """Refuse a layout this remapper does not know, before anything is written."""
    if index_type not in VECTOR_KINDS:
        raise UnsupportedError(
            f"index {request.index.name!r} ({index_type}): lance_ops remaps IVF_FLAT, IVF_PQ, IVF_SQ and "
            f"IVF_HNSW_FLAT/PQ/SQ vector indices only; nothing was written")
    if request.kind in VECTOR_KINDS and request.kind != index_type:
        raise CorruptFileError(aux_path, f"the manifest says {request.kind} but index.idx says {index_type}")
    code = _CODE_COLUMNS[index_type.rsplit("_", 1)[1]]
    names = aux.table.column_names
    if ROW_ID_COLUMN not in names or code not in names:
        raise CorruptFileError(aux_path, f"{index_type} storage needs columns {ROW_ID_COLUMN} and {code}; "
                                         f"it has {names}")


def remap_vector(request: RemapRequest) -> RemapOutcome:
    """Carry one IVF vector segment through a compaction (see the module docstring)."""
    if request.stable_row_ids:
        return RemapOutcome("keep")
    if request.index.HasField("base_id"):
        raise UnsupportedError(
            f"index {request.index.name!r} ({request.kind}) lives in another base (base_id "
            f"{request.index.base_id}); lance_ops does not remap indices outside the dataset root; nothing was written")
    store = request.store
    old_index = f"{request.old_dir}/{INDEX_FILE}"
    old_aux = f"{request.old_dir}/{AUXILIARY_FILE}"
    if not store.exists(old_aux):
        raise UnsupportedError(
            f"index {request.index.name!r} ({request.kind}) has no {AUXILIARY_FILE}: it is in the legacy "
            f"(v1) vector index layout, which lance_ops does not remap; rebuild it with pylance "
            f"(create_index replace=True); nothing was written")
    index = read_index_file(store, old_index)
    index_type = _index_type(index, store.uri(old_index))
    aux = read_index_file(store, old_aux)
    _check_layout(request, index_type, aux, store.uri(old_aux))

    mapped, keep = request.addresses.apply(aux.table.column(ROW_ID_COLUMN).to_numpy())
    storage = remap_storage(aux, mapped, keep, store.uri(old_aux))
    new_graph = remap_graph(index, storage, store.uri(old_index)) if "_HNSW_" in index_type else None

    options = request.dataset.storage_options if request.dataset is not None else None
    new_aux = f"{request.new_dir}/{AUXILIARY_FILE}"
    new_index = f"{request.new_dir}/{INDEX_FILE}"
    aux_size = write_index_file(store, new_aux, storage.file, options)
    if new_graph is not None:
        index_size = write_index_file(store, new_index, new_graph, options)
    else:  # FLAT sub-index: nothing in it depends on the rows
        store.copy(old_index, new_index)
        index_size = store.size(new_index)
    return RemapOutcome("remap", [(AUXILIARY_FILE, aux_size), (INDEX_FILE, index_size)])


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`remap_vector` does, for dry runs: keep with stable row ids (the files hold row ids), else remap."""
    return "keep" if stable_row_ids else "remap"


def segment_refusal(store: ObjectStore, base: str, index: table_pb2.IndexMetadata,
                    stable_row_ids: bool) -> str | None:
    """Why :func:`remap_vector` would refuse this segment (None when it can carry it), checked by
    the planner so such fragments are held back before anything is committed."""
    if stable_row_ids:
        return None
    if index.HasField("base_id"):
        return f"the index lives in another base (base_id {index.base_id})"
    if not store.exists(store.join(base, "_indices", segment_uuid(index), AUXILIARY_FILE)):
        return f"no {AUXILIARY_FILE}: the legacy (v1) vector index layout"
    return None


setattr(remap_vector, "plan_action", plan_action)
setattr(remap_vector, "segment_refusal", segment_refusal)
