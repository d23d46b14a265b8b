"""Remap an INVERTED (full-text) index segment through a compaction, as pylance 14.0.2 does.

pylance's own remap (verified on 14.0.2 output, docs/adr/0014-fts-index-remap.md) is a true
remap, not a filter: per partition it maps ``part_<p>_docs.lance`` ``_rowid`` through the
compaction's address map and drops deleted documents, keeping the survivors in their old order;
doc ids are the row positions in that file, so the posting lists are renumbered, and every block
score, ``_max_score`` and impact entry is recomputed with the partition's new statistics (document
count, average length). Tokens whose posting lists become empty are dropped and the later token
ids shift down, so the token FST is rebuilt. ``metadata.lance`` is written again unchanged. This
module does the same and its files decode to pylance's bytes (posting blocks, impacts, positions,
FST); the Lance files around them are lance_ops's own 2.2 files.

With stable row ids the index stores row ids, which compaction does not change: the segment keeps
its uuid and files ("keep"); only its fragment bitmap is recalculated by the commit.

Only the layout pylance 14.0.2 writes is remapped: ``format_version`` 2, token set ``fst``,
``posting_tail_codec`` ``varint_delta_v1``, 128-document blocks, and with positions
``shared_stream_v2`` / ``packed_delta_v1``. :func:`segment_refusal` names anything else (legacy
single-partition files, format v1/v3, an arrow token set) so planning can hold it back before
anything is written.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.format.version import FileVersion
from lance_ops.format.registry import LanceFileWriter, open_file_reader
from lance_ops.io.base import ObjectStore
from lance_ops.maintenance.index_remap import fts_fst
from lance_ops.maintenance.index_remap import fts_postings as fp
from lance_ops.maintenance.index_remap.address_map import AddressMap
from lance_ops.maintenance.index_remap.base import RemapOutcome, RemapRequest
from lance_ops.table.indices import segment_uuid

KIND = "INVERTED"
METADATA_FILE = "metadata.lance"
#: the schema metadata of metadata.lance this module can remap (key -> accepted values)
SUPPORTED_LAYOUT: dict[str, tuple[str, ...]] = {
    "format_version": ("2",),
    "token_set_format": ("fst",),
    "posting_tail_codec": ("varint_delta_v1",),
    "posting_block_size": ("128",),
}
#: with positions, the position layout and codec this module can remap
SUPPORTED_POSITIONS: dict[str, tuple[str, ...]] = {
    "positions_layout": ("shared_stream_v2",),
    "positions_codec": ("packed_delta_v1",),
}
#: keys whose presence means a layout this module does not know (format v3 block rows, groups)
UNKNOWN_LAYOUT_KEYS = ("posting_block_layout", "posting_group_offsets_buf")


def can_remap(kind: str, stable_row_ids: bool) -> bool:
    """Whether this module handles segments of ``kind`` (on stable-row-id datasets: "keep").

    A planner asks this before binning; for a True answer it should still ask
    :func:`segment_refusal` per segment (a cheap read of one file's schema metadata), since
    INVERTED segments written by other lance versions may use layouts this module refuses.
    """
    return kind == KIND


def _meta(reader_schema: pa.Schema) -> dict[str, str]:
    raw = reader_schema.metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items()}


def _layout_problem(meta: dict[str, str]) -> str | None:
    for key, accepted in SUPPORTED_LAYOUT.items():
        if meta.get(key) not in accepted:
            return f"{key}={meta.get(key)!r} (remappable: {', '.join(accepted)})"
    for key in UNKNOWN_LAYOUT_KEYS:
        if key in meta:
            return f"{key}={meta[key]!r}"
    params = json.loads(meta.get("params") or "{}")
    if params.get("with_position") or any(k in meta for k in SUPPORTED_POSITIONS):
        for key, accepted in SUPPORTED_POSITIONS.items():
            if meta.get(key) not in accepted:
                return f"{key}={meta.get(key)!r} (remappable: {', '.join(accepted)})"
    return None


def segment_refusal(store: ObjectStore, base: str, index: table_pb2.IndexMetadata,
                    stable_row_ids: bool) -> str | None:
    """Why this INVERTED segment cannot be carried through a compaction (None when it can).

    Reads only ``metadata.lance``'s schema metadata. Stable-row-id segments are always kept.
    """
    if stable_row_ids:
        return None
    path = store.join(base, "_indices", segment_uuid(index), METADATA_FILE)
    try:
        meta = _meta(open_file_reader(path, store=store).schema)
    except FileNotFoundError:
        return "no metadata.lance (a legacy single-partition full-text index; pylance retrains those)"
    if "partitions" not in meta:
        return "no partition list in metadata.lance (legacy layout)"
    problem = _layout_problem(meta)
    return f"full-text index layout {problem} is not supported" if problem else None


@dataclass
class _Partition:
    """One partition's three tables as read."""

    docs: pa.Table
    invert: pa.Table
    tokens: pa.Table
    invert_path: str
    tokens_path: str


def _read(store: ObjectStore, path: str) -> pa.Table:
    return open_file_reader(path, store=store).read_all()


def _file_version(store: ObjectStore, path: str) -> FileVersion:
    """The format version of an index file (pylance writes a 2.0 dataset's index files as 2.0)."""
    return open_file_reader(path, store=store).version


def _write(request: RemapRequest, name: str, table: pa.Table, version: FileVersion) -> tuple[str, int]:
    """Write one index file under the new uuid in ``version``; (name, size)."""
    path = request.store.join(request.new_dir, name)
    storage_options = getattr(request.dataset, "storage_options", None)
    with LanceFileWriter(request.store.uri(path), table.schema, version=version,
                         storage_options=storage_options) as writer:
        writer.write_batch(table)
    return name, int(request.store.size(path))


def _token_rows(part: _Partition, new_ids: np.ndarray, keep_doc: np.ndarray,
                doc_lengths: np.ndarray, positions: bool) -> tuple[dict[str, list[Any]], np.ndarray]:
    """The remapped invert-file columns and a bool mask of the tokens that keep a posting."""
    inv = part.invert
    num_docs = len(doc_lengths)
    avgdl = fp.average_length(int(doc_lengths.sum(dtype=np.uint64)), num_docs)
    lengths = inv.column("_length").to_numpy()
    postings = inv.column("_posting").to_pylist()
    cols: dict[str, list[Any]] = {"_posting": [], "_max_score": [], "_length": [], "_impacts": []}
    if positions:
        cols["_compressed_position"] = []
        cols["_position_block_offset"] = []
        streams = inv.column("_compressed_position").to_pylist()
        offsets = inv.column("_position_block_offset").to_pylist()
    alive = np.zeros(inv.num_rows, dtype=bool)
    for t in range(inv.num_rows):
        docs, freqs = fp.decode_posting(postings[t], int(lengths[t]))
        if len(docs) and int(docs[-1]) >= len(keep_doc):
            raise CorruptFileError(part.invert_path,
                                   f"INVERTED posting names doc id {int(docs[-1])} of {len(keep_doc)} documents")
        kept = keep_doc[docs.astype(np.int64)]
        if not kept.any():
            continue
        alive[t] = True
        new_docs = new_ids[docs[kept].astype(np.int64)].astype(np.uint64)
        new_freqs = freqs[kept]
        dl = doc_lengths[new_docs.astype(np.int64)]
        scores = fp.block_scores(new_freqs, dl, num_docs, avgdl)
        cols["_posting"].append(fp.encode_posting(new_docs, new_freqs, scores))
        cols["_max_score"].append(float(scores.max()))
        cols["_length"].append(len(new_docs))
        cols["_impacts"].append(fp.encode_impacts(new_docs, new_freqs, dl))
        if positions:
            values = fp.decode_positions(streams[t], offsets[t], freqs)
            stream, block_offsets = fp.encode_positions(values[np.repeat(kept, freqs.astype(np.int64))], new_freqs)
            cols["_compressed_position"].append(stream)
            cols["_position_block_offset"].append(block_offsets)
    return cols, alive


def _remap_tokens(tokens: pa.Table, alive: np.ndarray, tokens_path: str) -> pa.Table:
    """The token table with dead tokens dropped and later ids shifted down (FST rebuilt)."""
    fst_bytes = tokens.column("_token_fst_bytes")[0].as_py()
    mapping = fts_fst.read_map(fst_bytes)
    if len(mapping) != len(alive):
        raise CorruptFileError(tokens_path,
                               f"INVERTED token FST has {len(mapping)} tokens, the posting file {len(alive)}")
    if alive.all():
        new_bytes = fst_bytes
        total = int(tokens.column("_token_total_length")[0].as_py())
    else:
        shift = np.cumsum(~alive) - (~alive)  # removed ids before each id
        kept = {key: int(tid - shift[tid]) for key, tid in mapping.items() if alive[tid]}
        new_bytes = fts_fst.build_map(kept.items())
        total = sum(len(key) for key in kept)
    columns = {"_token_fst_bytes": [new_bytes], "_token_next_id": [int(alive.sum())],
               "_token_total_length": [total]}
    return pa.Table.from_pydict(columns, schema=tokens.schema)


def _remap_partition(request: RemapRequest, pid: int, positions: bool,
                     version: FileVersion) -> list[tuple[str, int]]:
    """Remap one partition's docs, invert and tokens files into the new directory."""
    names = {k: f"part_{pid}_{k}.lance" for k in ("docs", "invert", "tokens")}
    paths = {k: request.store.join(request.old_dir, name) for k, name in names.items()}
    part = _Partition(docs=_read(request.store, paths["docs"]), invert=_read(request.store, paths["invert"]),
                      tokens=_read(request.store, paths["tokens"]), invert_path=paths["invert"],
                      tokens_path=paths["tokens"])
    amap: AddressMap = request.addresses
    rowids = part.docs.column("_rowid").to_numpy().astype(np.uint64)
    mapped, keep_doc = amap.apply(rowids)
    new_ids = np.cumsum(keep_doc) - 1
    doc_lengths = part.docs.column("_num_tokens").to_numpy()[keep_doc]
    docs_schema = part.docs.schema.with_metadata(
        {**(part.docs.schema.metadata or {}), b"total_tokens": str(int(doc_lengths.sum(dtype=np.uint64))).encode()})
    docs = pa.Table.from_arrays([pa.array(mapped[keep_doc], pa.uint64()), pa.array(doc_lengths, pa.uint32())],
                                schema=docs_schema)
    if keep_doc.all():  # nothing deleted: doc ids, statistics and so every posting stay as they are
        return [_write(request, names["docs"], docs, version),
                _write(request, names["invert"], part.invert, version),
                _write(request, names["tokens"], part.tokens, version)]
    try:
        cols, alive = _token_rows(part, new_ids, keep_doc, doc_lengths, positions)
    except CorruptFileError as e:  # the codecs do not know the file they decode
        raise CorruptFileError(part.invert_path, e.problem) from e
    invert = pa.Table.from_pydict(cols, schema=part.invert.schema)
    try:
        tokens = _remap_tokens(part.tokens, alive, part.tokens_path)
    except CorruptFileError as e:
        raise CorruptFileError(part.tokens_path, e.problem) from e
    return [_write(request, names["docs"], docs, version), _write(request, names["invert"], invert, version),
            _write(request, names["tokens"], tokens, version)]


def remap_inverted(request: RemapRequest) -> RemapOutcome:
    """Carry one INVERTED segment through a compaction (the registry's remapper for the kind)."""
    if request.kind != KIND:
        raise UnsupportedError(f"the INVERTED remapper was given a {request.kind} index")
    if request.stable_row_ids:
        return RemapOutcome("keep")
    reason = segment_refusal(request.store, request.base, request.index, False)
    if reason is not None:
        raise UnsupportedError(f"index {request.index.name!r} (INVERTED): {reason}")
    meta_path = request.store.join(request.old_dir, METADATA_FILE)
    metadata = _read(request.store, meta_path)
    version = _file_version(request.store, meta_path)
    meta = _meta(metadata.schema)
    partitions = [int(p) for p in json.loads(meta["partitions"])]
    positions = bool(json.loads(meta.get("params") or "{}").get("with_position"))
    files: list[tuple[str, int]] = []
    for pid in partitions:
        files.extend(_remap_partition(request, pid, positions, version))
    files.append(_write(request, METADATA_FILE, metadata, version))
    return RemapOutcome("remap", files=sorted(files))


def plan_action(stable_row_ids: bool) -> str:
    """What :func:`remap_inverted` does, for dry runs ("keep" on stable row ids: the index stores
    row ids, which compaction does not change)."""
    return "keep" if stable_row_ids else "remap"


setattr(remap_inverted, "plan_action", plan_action)
setattr(remap_inverted, "segment_refusal", segment_refusal)
