"""Remap the HNSW graphs of an IVF_HNSW_* segment (``index.idx``) after its storage was remapped.

Layout (pylance 14.0.2, checked): ``index.idx`` holds one graph per IVF partition, one after the
other; the IVF buffer's ``offsets`` / ``lengths`` give each partition's graph rows. A graph is its
levels in order, level 0 first: one row per node on that level, nodes in id order, with columns
``__vector_id`` (u32), ``__neighbors`` (list<u32>) and ``_distance`` (list<f32>, the distance to
each neighbour). Node ids are **positions in the partition's storage** (``auxiliary.idx``), not row
ids. ``lance:hnsw`` is a JSON list of one metadata JSON per partition: ``entry_point``, the build
``params`` and ``level_offsets`` (the start row of each level in the partition's graph, plus the end).

pylance rebuilds each partition's graph from the remapped storage (upstream ``HNSW::remap`` calls
``index_vectors``). A rebuild needs HNSW insertion, sequential by nature; lance-ops instead keeps
the graph and removes the deleted nodes from it, which a vectorised pass can do:

* a node whose storage row was deleted loses its row on every level;
* every edge to a deleted node is removed (with its distance); the other edges and their
  distances stay true, as neither end moved in vector space (new edges follow them in each list);
* node ids are renumbered to the surviving rows' new positions (order kept);
* ``level_offsets`` are recounted; the entry point is renumbered, or, when deleted, replaced by
  the first surviving node of the highest level that still has nodes;
* each edge to a deleted node is replaced, where possible, by an edge to a surviving neighbour of
  that deleted node on the same level (nearest first by the 2-hop bound, the larger of the two hop
  distances, which is what ``_distance`` then holds), so a node keeps its degree and deleting a hub
  does not strand the nodes only it connected.

The result is a valid graph over the same vectors: search quality stays close to the original one
(the recall tests compare it with pylance's rebuilt graph).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from lance_ops.errors import CorruptFileError
from lance_ops.maintenance.index_remap.ivf_files import IndexFile, with_partitions
from lance_ops.maintenance.index_remap.ivf_storage import StorageRemap, exclusive_cumsum, partition_layout

#: schema metadata key of the per-partition HNSW metadata (JSON list of JSON strings)
HNSW_METADATA_KEY = "lance:hnsw"
VECTOR_ID_COLUMN = "__vector_id"
NEIGHBORS_COLUMN = "__neighbors"
DISTANCE_COLUMN = "_distance"


def _partition_metadata(file: IndexFile, partitions: int, path: str) -> list[dict[str, Any]]:
    raw = file.metadata.get(HNSW_METADATA_KEY)
    try:
        entries = [json.loads(e) for e in json.loads(raw or "")]
    except (ValueError, TypeError):
        raise CorruptFileError(path, f"{HNSW_METADATA_KEY} is not a JSON list of metadata") from None
    if len(entries) != partitions or not all(isinstance(e, dict) and "level_offsets" in e for e in entries):
        raise CorruptFileError(path, f"{HNSW_METADATA_KEY} has {len(entries)} entries for {partitions} partitions")
    return entries


def _row_levels(entries: list[dict[str, Any]], lengths: np.ndarray, path: str) -> tuple[np.ndarray, int]:
    """Level of every graph row (partition by partition) and the number of levels."""
    levels = max(len(e["level_offsets"]) - 1 for e in entries) if entries else 0
    out = []
    for p, entry in enumerate(entries):
        offs = np.asarray(entry["level_offsets"], dtype=np.int64)
        counts = np.diff(offs) if len(offs) > 1 else np.zeros(0, dtype=np.int64)
        if int(lengths[p]) == 0:
            continue
        if (counts < 0).any() or int(counts.sum()) != int(lengths[p]) or offs[0] != 0:
            raise CorruptFileError(path, f"partition {p}: level_offsets {offs.tolist()} do not tile its "
                                         f"{int(lengths[p])} graph rows")
        out.append(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
    return (np.concatenate(out) if out else np.zeros(0, dtype=np.int64)), levels


def _list_parts(column: pa.ChunkedArray, path: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(per-row lengths, flat values) of a non-null list column."""
    arr = column.combine_chunks()
    if arr.null_count:
        raise CorruptFileError(path, f"{name} has null lists")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    return np.diff(offsets), arr.flatten().to_numpy(zero_copy_only=False)


def remap_graph(index: IndexFile, storage: StorageRemap, path: str) -> IndexFile:
    """``index.idx`` of an IVF_HNSW segment with the graph remapped to ``storage``'s rows."""
    position, _, lengths = partition_layout(index, path)
    partitions = len(lengths)
    if partitions != len(storage.new_lengths):
        raise CorruptFileError(path, f"{partitions} graph partitions but {len(storage.new_lengths)} storage partitions")
    entries = _partition_metadata(index, partitions, path)
    table = index.table
    row_level, levels = _row_levels(entries, lengths, path)
    row_part = np.repeat(np.arange(partitions, dtype=np.int64), lengths)
    old_off, new_off = storage.old_offsets, storage.new_offsets
    keep = storage.keep
    new_position = np.cumsum(keep, dtype=np.int64) - 1  # new global storage row of each kept old row

    node = table.column(VECTOR_ID_COLUMN).to_numpy().astype(np.int64)
    node_global = old_off[row_part] + node
    if ((node < 0) | (node >= storage.old_lengths[row_part])).any():
        raise CorruptFileError(path, "an HNSW node id is outside its partition's storage")
    row_keep = keep[node_global]
    new_node = new_position[node_global] - new_off[row_part]

    nb_counts, nb = _list_parts(table.column(NEIGHBORS_COLUMN), path, NEIGHBORS_COLUMN)
    dist_counts, dist = _list_parts(table.column(DISTANCE_COLUMN), path, DISTANCE_COLUMN)
    if not np.array_equal(nb_counts, dist_counts):
        raise CorruptFileError(path, f"{NEIGHBORS_COLUMN} and {DISTANCE_COLUMN} lists differ in length")
    edge_row = np.repeat(np.arange(len(nb_counts), dtype=np.int64), nb_counts)
    edge_global = old_off[row_part[edge_row]] + nb.astype(np.int64)
    if (nb.astype(np.int64) >= storage.old_lengths[row_part[edge_row]]).any():
        raise CorruptFileError(path, "an HNSW neighbour id is outside its partition's storage")
    edge_keep = keep[edge_global] & row_keep[edge_row]
    new_edge = new_position[edge_global] - new_off[row_part[edge_row]]

    extra_row, extra_nb, extra_dist = _bridge_edges(
        row_level, row_part, node_global, row_keep, edge_row, edge_global, dist, edge_keep, keep)
    kept_edge_row = np.concatenate([edge_row[edge_keep], extra_row])
    kept_nb = np.concatenate([new_edge[edge_keep], new_position[extra_nb] - new_off[row_part[extra_row]]])
    kept_dist = np.concatenate([dist[edge_keep], extra_dist]).astype(np.float32)
    order = np.argsort(kept_edge_row, kind="stable")  # original edges first, then bridges, per row
    kept_edge_row, kept_nb, kept_dist = kept_edge_row[order], kept_nb[order], kept_dist[order]
    counts = np.bincount(kept_edge_row, minlength=len(row_keep))[row_keep]
    list_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    nb_type = table.schema.field(NEIGHBORS_COLUMN).type
    dist_type = table.schema.field(DISTANCE_COLUMN).type
    columns = {
        VECTOR_ID_COLUMN: pa.array(new_node[row_keep], type=table.schema.field(VECTOR_ID_COLUMN).type),
        NEIGHBORS_COLUMN: pa.ListArray.from_arrays(
            pa.array(list_offsets), pa.array(kept_nb, type=nb_type.value_type), type=nb_type),
        DISTANCE_COLUMN: pa.ListArray.from_arrays(
            pa.array(list_offsets), pa.array(kept_dist, type=dist_type.value_type), type=dist_type),
    }
    new_table = pa.Table.from_arrays([columns[f.name] for f in table.schema], schema=table.schema)

    kept_parts, kept_levels = row_part[row_keep], row_level[row_keep]
    per_level = np.zeros((partitions, max(levels, 1)), dtype=np.int64)
    np.add.at(per_level, (kept_parts, kept_levels), 1)
    graph_lengths = per_level.sum(axis=1)
    new_entries = _new_metadata(entries, per_level, kept_parts, kept_levels, new_node[row_keep],
                                storage, keep, new_position)
    metadata = dict(table.schema.metadata or {})
    metadata[HNSW_METADATA_KEY.encode()] = json.dumps(
        [json.dumps(e, separators=(",", ":")) for e in new_entries], separators=(",", ":")).encode()
    new_table = new_table.replace_schema_metadata(metadata)
    buffers = list(index.buffers)
    buffers[position] = with_partitions(buffers[position], exclusive_cumsum(graph_lengths), graph_lengths)
    return IndexFile(new_table, buffers, index.version)


def _new_metadata(entries: list[dict[str, Any]], per_level: np.ndarray, kept_parts: np.ndarray,
                  kept_levels: np.ndarray, kept_nodes: np.ndarray, storage: StorageRemap,
                  keep: np.ndarray, new_position: np.ndarray) -> list[dict[str, Any]]:
    """Per-partition metadata with recounted level offsets and a surviving entry point."""
    out = []
    for p, entry in enumerate(entries):
        entry = dict(entry)
        width = len(entry["level_offsets"]) - 1
        counts = per_level[p, :width] if width else per_level[p, :0]
        entry["level_offsets"] = [0, *np.cumsum(counts).tolist()] if width else entry["level_offsets"]
        old_ep = int(entry.get("entry_point", 0))
        old_length = int(storage.old_lengths[p])
        ep_global = int(storage.old_offsets[p]) + old_ep
        if int(storage.new_lengths[p]) == 0:
            entry["entry_point"] = 0
        elif 0 <= old_ep < old_length and keep[ep_global]:
            entry["entry_point"] = int(new_position[ep_global] - storage.new_offsets[p])
        else:  # deleted: the first surviving node of the highest level that still has nodes
            mine = kept_parts == p
            top = int(kept_levels[mine].max())
            entry["entry_point"] = int(kept_nodes[mine & (kept_levels == top)].min())
        out.append(entry)
    return out


def _bridge_edges(row_level: np.ndarray, row_part: np.ndarray, node_global: np.ndarray, row_keep: np.ndarray,
                  edge_row: np.ndarray, edge_global: np.ndarray, dist: np.ndarray, edge_keep: np.ndarray,
                  keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replacement edges for the edges to deleted nodes, on every level.

    A surviving node that lost k edges gets up to k new ones, to the surviving neighbours (same
    level) of the deleted nodes it lost, nearest first by the 2-hop bound max(d1, d2), skipping
    itself and nodes it is already linked to. Returns (graph row, neighbour global storage row,
    distance bound) per new edge; ``edge_row`` must be sorted (edges are stored row by row).
    """
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    lost = row_keep[edge_row] & ~keep[edge_global]  # surviving row -> deleted neighbour
    if not lost.any():
        return empty
    nodes = np.int64(len(keep))
    # graph row of each (level, global node), to find a deleted neighbour's own edges on that level
    row_keys = row_level * nodes + node_global
    key_order = np.argsort(row_keys, kind="stable")
    sorted_keys = row_keys[key_order]
    src_row, d1 = edge_row[lost], dist[lost]
    via_key = row_level[src_row] * nodes + edge_global[lost]
    at = np.minimum(np.searchsorted(sorted_keys, via_key), len(sorted_keys) - 1)
    found = sorted_keys[at] == via_key
    src_row, d1, via_row = src_row[found], d1[found], key_order[at[found]]
    starts = np.searchsorted(edge_row, via_row, side="left")
    sizes = np.searchsorted(edge_row, via_row, side="right") - starts
    total = int(sizes.sum())
    if not total:
        return empty
    rep = np.repeat(np.arange(len(via_row)), sizes)
    idx = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes) + np.repeat(starts, sizes)
    cand_row, cand = src_row[rep], edge_global[idx]
    cand_dist = np.maximum(d1[rep], dist[idx])
    linked = np.isin(cand_row * nodes + cand, edge_row[edge_keep] * nodes + edge_global[edge_keep])
    good = keep[cand] & (cand != node_global[cand_row]) & ~linked
    cand_row, cand, cand_dist = cand_row[good], cand[good], cand_dist[good]
    if not len(cand_row):
        return empty
    order = np.lexsort((cand_dist, cand, cand_row))
    cand_row, cand, cand_dist = cand_row[order], cand[order], cand_dist[order]
    first = np.ones(len(cand_row), dtype=bool)
    first[1:] = (cand_row[1:] != cand_row[:-1]) | (cand[1:] != cand[:-1])  # one edge per (row, node)
    cand_row, cand, cand_dist = cand_row[first], cand[first], cand_dist[first]
    order = np.lexsort((cand_dist, cand_row))
    cand_row, cand, cand_dist = cand_row[order], cand[order], cand_dist[order]
    rank = np.arange(len(cand_row)) - np.searchsorted(cand_row, cand_row, side="left")
    lost_count = np.bincount(edge_row[lost], minlength=len(row_keep))
    take = rank < lost_count[cand_row]
    return cand_row[take], cand[take], cand_dist[take].astype(np.float32)
