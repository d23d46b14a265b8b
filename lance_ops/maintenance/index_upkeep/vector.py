"""Bring an IVF vector index (IVF_FLAT, IVF_PQ, IVF_SQ) up to date with new fragments.

What pylance 14.0.2's ``optimize_indices`` writes for a vector segment (checked against its output;
the tests compare partition contents and codes):

* the new rows are the **live** rows of the new fragments with a non-null vector, read in fragment
  order with the identifier the index stores (row address, or the stable row id on a dataset with
  stable row ids); each is assigned to the nearest existing centroid and encoded with the existing
  quantizer (:mod:`.ivf_assign`): no retraining, centroids, codebook and SQ bounds unchanged;
* each partition of the new ``auxiliary.idx`` holds the rows of that partition of every merged
  segment, in the order the segments are given and as they are stored (rows deleted since are
  **kept**: pylance drops them only in a compaction's remap), then the new rows in scan order; PQ
  codes are transposed per partition again; the IVF buffer's offsets/lengths are recounted;
* ``index.idx`` (FLAT sub-index: centroids, no rows) is the template segment's with the IVF
  ``loss`` set to the new rows' summed distance, as pylance's shuffle loss;
* with no merged segment the result is a delta segment over the new fragments only (pylance's
  ``num_indices_to_merge=0``, and its default when no partition needs a split or join); a merged
  segment keeps the oldest merged ``dataset_version``.

Not done (refused or left to pylance): ``retrain=True``; HNSW sub-indices (new rows would need
graph insertion); RQ and other quantizers; multivector columns; pylance's partition split (a
partition above 4x the target size) and join (below 25%), which move centroids: lance-ops keeps the
centroids, so its segment stays valid but can differ from pylance's in those cases (ADR 0020).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.format.registry import open_file_reader
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap.ivf_files import (IVF_METADATA_KEY, IndexFile, read_index_file,
                                                         with_partitions, write_index_file)
from lance_ops.maintenance.index_remap.ivf_storage import ROW_ID_COLUMN, exclusive_cumsum, partition_layout
from lance_ops.maintenance.index_remap.vector import AUXILIARY_FILE, INDEX_FILE
from lance_ops.maintenance.index_upkeep import ivf_assign
from lance_ops.maintenance.index_upkeep.base import UpkeepOutcome, UpkeepRequest
from lance_ops.table.indices import field_paths, fragment_ids, segment_uuid

#: the kinds :func:`update_vector` brings up to date (the registry's keys)
UPDATABLE_KINDS = ("IVF_FLAT", "IVF_PQ", "IVF_SQ")
#: new rows read per batch (each batch is assigned and encoded on its own)
READ_BATCH_ROWS = 1 << 16


def _segment_files(request: UpkeepRequest, index: table_pb2.IndexMetadata) -> tuple[str, str]:
    if index.HasField("base_id"):
        raise UnsupportedError(f"index {request.index_name!r} ({request.kind}): a segment lives in another base "
                               f"(base_id {index.base_id}); lance_ops does not update it; nothing was written")
    folder = f"{request.base}/_indices/{segment_uuid(index)}"
    aux = f"{folder}/{AUXILIARY_FILE}"
    if not request.store.exists(aux):
        raise UnsupportedError(f"index {request.index_name!r} ({request.kind}) has no {AUXILIARY_FILE}: the "
                               "legacy (v1) vector layout, which lance_ops does not update; nothing was written")
    return f"{folder}/{INDEX_FILE}", aux


def _read_header(store: ObjectStore, path: str) -> IndexFile:
    """An index file's schema (with its metadata), global buffers and version, without its rows
    (the template's storage gives the quantizer and layout only; its rows are read when merged)."""
    reader = open_file_reader(path, store=store)
    if isinstance(reader, LegacyFileReader):
        raise CorruptFileError(store.uri(path), "vector index files are Lance v2 files; this one is a legacy (v0.1) file")
    buffers = [bytes(reader.read_global_buffer(i)) for i in range(1, reader.num_global_buffers)]
    return IndexFile(table=reader.schema.empty_table(), buffers=buffers, version=reader.version)


def _index_meta(index: IndexFile, path: str) -> tuple[str, str]:
    """(type, distance type) of ``index.idx``'s ``lance:index`` metadata."""
    try:
        meta = json.loads(index.metadata.get("lance:index") or "{}")
    except ValueError:
        meta = {}
    kind, distance = str(meta.get("type", "")).upper(), str(meta.get("distance_type", "")).lower()
    if not kind or not distance:
        raise CorruptFileError(path, "index.idx has no lance:index metadata naming the type and distance")
    return kind, distance


def _check(request: UpkeepRequest, kind: str, distance: str, path: str) -> None:
    if request.retrain:
        raise UnsupportedError(
            f"index {request.index_name!r} ({request.kind}): optimize_indices(retrain=True) retrains the "
            "IVF centroids and the quantizer; lance_ops only adds new rows to the existing ones (use "
            "pylance's optimize_indices(retrain=True) or create_index(replace=True)); nothing was written")
    if kind not in UPDATABLE_KINDS:
        raise UnsupportedError(
            f"index {request.index_name!r} ({kind}): lance_ops brings IVF_FLAT, IVF_PQ and IVF_SQ indices "
            "up to date only (HNSW graphs would need new nodes inserted); nothing was written")
    if request.kind in UPDATABLE_KINDS and request.kind != kind:
        raise CorruptFileError(path, f"the manifest says {request.kind} but index.idx says {kind}")
    if distance not in ivf_assign.DISTANCE_TYPES:
        raise UnsupportedError(f"index {request.index_name!r} ({kind}): distance type {distance!r} is not "
                               "one lance_ops encodes (l2, cosine, dot); nothing was written")


def _column(request: UpkeepRequest) -> str:
    fields = list(request.template.fields)
    if len(fields) != 1:
        raise UnsupportedError(f"index {request.index_name!r} covers {len(fields)} columns; nothing was written")
    paths = field_paths(request.dataset.manifest)
    if fields[0] not in paths:
        raise CorruptFileError(request.dataset.uri, f"index {request.index_name!r} names field id {fields[0]}, "
                                                    "which the schema does not have")
    return paths[fields[0]]


def _vectors(column: pa.ChunkedArray | pa.Array, dim: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows x dim float32 values of the non-null vectors, their validity mask) of a vector column."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_fixed_size_list(arr.type) or not pa.types.is_floating(arr.type.value_type):
        raise UnsupportedError(f"column {name!r} is {arr.type}: lance_ops adds fixed-size lists of floats to a "
                               "vector index (not multivectors or integer vectors); nothing was written")
    if arr.type.list_size != dim:
        raise CorruptFileError(name, f"vectors of {arr.type.list_size} values for an index of dimension {dim}")
    valid = np.ones(len(arr), dtype=bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
    flat = arr.filter(pa.array(valid)) if arr.null_count else arr
    values = flat.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return values.reshape(-1, dim), valid


def _new_rows(request: UpkeepRequest, column: str, dim: int,
              ids: Sequence[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of (stored row identifiers, vectors) of the live rows of fragments ``ids``, in order."""
    ids = list(ids)
    if not ids:
        return
    stable = bool(request.dataset.has_stable_row_ids)
    key = "_rowid" if stable else "_rowaddr"
    for batch in request.dataset.to_batches(columns=[column], with_row_id=stable, with_row_address=not stable,
                                            fragments=ids, batch_size=READ_BATCH_ROWS):
        if not batch.num_rows:
            continue
        vectors, valid = _vectors(batch.column(column), dim, column)
        yield batch.column(key).to_numpy(zero_copy_only=False).astype(np.uint64)[valid], vectors


def _stored_rows(aux: IndexFile, q: ivf_assign.Quantizer, path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row ids, row-major codes, partition of each row) of a merged segment's storage."""
    _, _, lengths = partition_layout(aux, path)
    column = ivf_assign.CODE_COLUMNS[q.kind]
    codes = aux.table.column(column).combine_chunks()
    if codes.type != q.code_type or codes.null_count:
        raise UnsupportedError(f"{path}: codes column {codes.type} differs from the template's {q.code_type}; "
                               "segments of different quantizers cannot be merged; nothing was written")
    width = q.code_type.list_size
    values = codes.flatten().to_numpy(zero_copy_only=False)
    if q.transposed:
        matrix = ivf_assign.untranspose_codes(values, width, lengths)
    else:
        matrix = values.reshape(-1, width)
    rows = aux.table.column(ROW_ID_COLUMN).to_numpy().astype(np.uint64)
    return rows, matrix, np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def _live_row_ids(request: UpkeepRequest) -> np.ndarray:
    """Every live row id of the dataset at the read version (sorted), to drop deleted rows of a merge."""
    ids = [batch.column("_rowid").to_numpy(zero_copy_only=False).astype(np.uint64)
           for batch in request.dataset.to_batches(columns=[], with_row_id=True)]
    return np.sort(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.uint64)


def _same_quantizer(template: IndexFile, other: IndexFile, q: ivf_assign.Quantizer, path: str) -> None:
    """Refuse to merge a segment whose quantizer (storage metadata, codebook) differs from the template's."""
    same = template.metadata.get("storage_metadata") == other.metadata.get("storage_metadata")
    if same and q.kind == "PQ":
        meta = json.loads(json.loads(template.metadata["storage_metadata"])[0])
        position = int(meta["codebook_position"]) - 1
        same = len(other.buffers) > position and other.buffers[position] == template.buffers[position]
    if not same:
        raise UnsupportedError(f"{path}: this segment was built with another quantizer than the newest one "
                               "(retrained); lance_ops merges segments sharing one quantizer only; nothing was written")


@dataclass(frozen=True)
class _Model:
    """The IVF model and quantizer of the template segment (read once per updater / encoder)."""

    index: IndexFile
    index_path: str
    template_aux: IndexFile
    aux_path: str
    distance: str
    centres: np.ndarray
    q: ivf_assign.Quantizer


def _model(request: UpkeepRequest) -> _Model:
    store = request.store
    index_path, aux_path = _segment_files(request, request.template)
    index = read_index_file(store, index_path)
    kind, distance = _index_meta(index, store.uri(index_path))
    _check(request, kind, distance, store.uri(index_path))
    template_aux = _read_header(store, aux_path)
    centres = ivf_assign.centroids(index, store.uri(index_path))
    q = ivf_assign.Quantizer.of(template_aux, kind.rsplit("_", 1)[1], distance, centres.shape[1], store.uri(aux_path))
    return _Model(index, index_path, template_aux, aux_path, distance, centres, q)


def vector_reads(request: UpkeepRequest) -> list[int]:
    """The fragments whose rows a vector segment gains: the new fragments, in manifest order."""
    return [int(f.id) for f in request.new_fragments]


#: schema metadata key of an encoding's summed IVF loss (a float64 as text)
LOSS_KEY = b"lance_ops.loss"


def encode_vector(request: UpkeepRequest, fragments: Sequence[int], model: _Model | None = None) -> pa.Table:
    """The live rows of ``fragments`` with a vector, in scan order, assigned to the template's
    centroids and encoded with its quantizer: ``row`` (the stored identifier), ``part``
    (partition), ``code`` (the code column's type); the summed IVF loss in the schema metadata."""
    model = model or _model(request)
    q, centres = model.q, model.centres
    rows_out: list[np.ndarray] = []
    parts_out: list[np.ndarray] = []
    codes_out: list[np.ndarray] = []
    loss = 0.0
    for rows, vectors in _new_rows(request, _column(request), centres.shape[1], fragments):
        x = ivf_assign.prepare(vectors, model.distance)
        parts, batch_loss = ivf_assign.assign(x, centres, model.distance)
        rows_out.append(rows)
        parts_out.append(parts)
        codes_out.append(ivf_assign.encode(q, x, parts, centres))
        loss += batch_loss
    width = q.code_type.list_size
    codes = np.concatenate(codes_out) if codes_out else np.zeros((0, width), q.code_type.value_type.to_pandas_dtype())
    values = pa.array(np.ascontiguousarray(codes).ravel(), type=q.code_type.value_type)
    schema = pa.schema([("row", pa.uint64()), ("part", pa.int64()), ("code", q.code_type)],
                       metadata={LOSS_KEY: repr(float(loss)).encode()})
    return pa.Table.from_arrays([
        pa.array(np.concatenate(rows_out) if rows_out else np.zeros(0, np.uint64), pa.uint64()),
        pa.array(np.concatenate(parts_out) if parts_out else np.zeros(0, np.int64), pa.int64()),
        pa.FixedSizeListArray.from_arrays(values, type=q.code_type)], schema=schema)


def _decoded(table: pa.Table, q: ivf_assign.Quantizer, path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(rows, row-major codes, partitions, loss) of an :func:`encode_vector` table."""
    code = table.column("code").combine_chunks()
    if code.type != q.code_type:
        raise CorruptFileError(path, f"encoded codes are {code.type}, the index stores {q.code_type}")
    width = q.code_type.list_size
    codes = code.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    loss = float((table.schema.metadata or {}).get(LOSS_KEY, b"0"))
    return (table.column("row").to_numpy().astype(np.uint64, copy=False), codes,
            table.column("part").to_numpy().astype(np.int64, copy=False), loss)


def update_vector(request: UpkeepRequest) -> UpkeepOutcome:
    """Write one IVF segment covering the merged segments and the new fragments (module docstring)."""
    store = request.store
    model = _model(request)
    index, index_path, aux_path, q, centres = model.index, model.index_path, model.aux_path, model.q, model.centres
    template_aux = model.template_aux
    partitions = len(centres)

    row_parts: list[np.ndarray] = []
    code_parts: list[np.ndarray] = []
    part_parts: list[np.ndarray] = []
    live = _live_row_ids(request) if request.merged and request.dataset.has_stable_row_ids else None
    for segment in request.merged:
        seg_index_path, seg_aux_path = _segment_files(request, segment)
        seg_aux = read_index_file(store, seg_aux_path)
        seg_centres = ivf_assign.centroids(read_index_file(store, seg_index_path), store.uri(seg_index_path))
        if seg_centres.shape != centres.shape or not np.array_equal(seg_centres, centres):
            raise UnsupportedError(f"{store.uri(seg_index_path)}: this segment's IVF centroids differ from the "
                                   "newest segment's; lance_ops merges segments sharing one IVF model only; "
                                   "nothing was written")
        _same_quantizer(template_aux, seg_aux, q, store.uri(seg_aux_path))
        rows, codes, parts = _stored_rows(seg_aux, q, store.uri(seg_aux_path))
        if live is not None:  # stable row ids: pylance leaves deleted rows out of a merge
            keep = np.isin(rows, live)
            rows, codes, parts = rows[keep], codes[keep], parts[keep]
        row_parts.append(rows)
        code_parts.append(codes)
        part_parts.append(parts)

    loss = 0.0
    encoded = (list(request.encoded) if request.encoded is not None
               else [encode_vector(request, vector_reads(request), model)])
    for table in encoded:
        rows, codes, parts, part_loss = _decoded(table, q, store.uri(aux_path))
        row_parts.append(rows)
        code_parts.append(codes)
        part_parts.append(parts)
        loss += part_loss

    file, lengths = _storage_file(template_aux, q, row_parts, code_parts, part_parts, partitions, store.uri(aux_path))
    position = index.buffer_index(IVF_METADATA_KEY, store.uri(index_path))
    index_buffers = list(index.buffers)
    index_buffers[position] = ivf_assign.with_loss(index_buffers[position], loss)
    new_index = IndexFile(index.table, index_buffers, index.version)

    options = request.dataset.storage_options
    aux_size = write_index_file(store, f"{request.new_dir}/{AUXILIARY_FILE}", file, options)
    index_size = write_index_file(store, f"{request.new_dir}/{INDEX_FILE}", new_index, options)
    covered = sorted({i for seg in request.merged for i in fragment_ids(seg)} |
                     {int(f.id) for f in request.new_fragments})
    version = min(int(seg.dataset_version) for seg in request.merged) if request.merged else None
    return UpkeepOutcome(files=[(AUXILIARY_FILE, aux_size), (INDEX_FILE, index_size)],
                         fragment_ids=covered, dataset_version=version)


def _storage_file(template: IndexFile, q: ivf_assign.Quantizer, rows: Sequence[np.ndarray],
                  codes: Sequence[np.ndarray], parts: Sequence[np.ndarray], partitions: int,
                  path: str) -> tuple[IndexFile, np.ndarray]:
    """``auxiliary.idx`` holding ``rows`` grouped by partition (sources in order within each)."""
    width = q.code_type.list_size
    all_rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.uint64)
    all_codes = np.concatenate(codes) if codes else np.zeros((0, width))
    all_parts = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(all_parts) and (all_parts.min() < 0 or all_parts.max() >= partitions):
        raise CorruptFileError(path, f"a stored row names a partition outside 0..{partitions - 1}")
    order = np.argsort(all_parts, kind="stable")
    lengths = np.bincount(all_parts, minlength=partitions).astype(np.int64)
    sorted_codes = all_codes[order]
    value_type = q.code_type.value_type
    if q.transposed:
        flat_values = ivf_assign.transpose_codes(sorted_codes, lengths)
    else:
        flat_values = np.ascontiguousarray(sorted_codes).ravel()
    code_array = pa.FixedSizeListArray.from_arrays(pa.array(flat_values, type=value_type), type=q.code_type)
    schema = template.table.schema
    columns = {ROW_ID_COLUMN: pa.array(all_rows[order], type=schema.field(ROW_ID_COLUMN).type),
               ivf_assign.CODE_COLUMNS[q.kind]: code_array}
    missing = [f.name for f in schema if f.name not in columns]
    if missing:
        raise UnsupportedError(f"{path}: storage columns {missing} are not ones lance_ops writes; nothing was written")
    table = pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
    position = template.buffer_index(IVF_METADATA_KEY, path)  # template: header only (_read_header)
    buffers = list(template.buffers)
    buffers[position] = with_partitions(buffers[position], exclusive_cumsum(lengths), lengths)
    return IndexFile(table, buffers, template.version), lengths


def plan_refusal(request: UpkeepRequest) -> str | None:
    """Why :func:`update_vector` would refuse this request (None when it can write it), before writing."""
    try:
        index_path, _ = _segment_files(request, request.template)
        for segment in request.merged:
            _segment_files(request, segment)
        kind, distance = _index_meta(read_index_file(request.store, index_path), request.store.uri(index_path))
        _check(request, kind, distance, request.store.uri(index_path))
    except (UnsupportedError, CorruptFileError) as exc:
        return str(exc)
    return None
