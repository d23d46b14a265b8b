"""Remap the quantized storage of an IVF segment (``auxiliary.idx``): drop deleted rows, map addresses.

What pylance 14.0.2 does per partition (upstream ``IvfIndexBuilder::remap`` with each storage's
``remap``; checked against its ``compact_files`` output): rows keep their partition and their order
within it; a row whose address was deleted is dropped; the others get their new address; the IVF
``lengths`` become the surviving counts and ``offsets`` their running sum. The codes follow their
rows. FLAT (``flat``) and SQ (``__sq_code``) codes are row-major; PQ codes (``__pq_code``, with
``"transposed": true`` in ``storage_metadata``) are stored transposed per partition: a partition of
L rows and W code bytes per row is W runs of L bytes (index-facts §3), rebuilt here for the
surviving L' rows. Centroids, codebook, quantizer metadata and every other buffer are kept as they
are (pylance does not retrain on remap).

Everything is vectorised over rows; PQ codes are re-transposed one partition at a time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_ops.errors import CorruptFileError
from lance_ops.maintenance.index_remap.ivf_files import (IVF_METADATA_KEY, IndexFile, ivf_partitions,
                                                         with_partitions)

#: the row-id column of every IVF storage file
ROW_ID_COLUMN = "_rowid"
#: the PQ code column, stored transposed per partition when the storage metadata says so
PQ_CODE_COLUMN = "__pq_code"


@dataclass(frozen=True)
class StorageRemap:
    """The remapped storage file and how its rows moved (the HNSW graph remap needs the latter).

    ``keep``: per old row, whether it survived; ``old_offsets`` / ``new_offsets``: each partition's
    first row before and after; ``old_lengths`` / ``new_lengths``: each partition's rows before and after.
    """

    file: IndexFile
    keep: np.ndarray
    old_offsets: np.ndarray
    old_lengths: np.ndarray
    new_offsets: np.ndarray
    new_lengths: np.ndarray


def exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    """Start of each run given the run lengths (int64)."""
    out = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def partition_layout(file: IndexFile, path: str) -> tuple[int, np.ndarray, np.ndarray]:
    """(IVF buffer position in ``file.buffers``, partition offsets, partition lengths), checked.

    The partitions must tile the rows of the file in order (offsets = running sum of lengths).
    """
    position = file.buffer_index(IVF_METADATA_KEY, path)
    offsets, lengths = ivf_partitions(file.buffers[position], path)
    if not np.array_equal(offsets, exclusive_cumsum(lengths)) or int(lengths.sum()) != file.table.num_rows:
        raise CorruptFileError(
            path, f"IVF partitions (offsets {offsets.tolist()[:8]}..., lengths summing to {int(lengths.sum())}) "
                  f"do not tile the file's {file.table.num_rows} rows")
    return position, offsets, lengths


def _is_transposed(file: IndexFile) -> bool:
    """Whether the storage metadata says the PQ codes are stored transposed per partition."""
    raw = file.metadata.get("storage_metadata")
    if not raw:
        return False
    try:
        entries = json.loads(raw)
        first = json.loads(entries[0]) if isinstance(entries, list) and entries else {}
    except (ValueError, TypeError):
        return False
    return bool(isinstance(first, dict) and first.get("transposed"))


def _transposed_codes(values: np.ndarray, width: int, keep: np.ndarray, offsets: np.ndarray,
                      lengths: np.ndarray, new_offsets: np.ndarray) -> np.ndarray:
    """Code bytes of the kept rows, transposed per partition again (W runs of L' bytes each).

    One pass per partition (a few hundred at most), each a reshape and a column selection."""
    out = np.empty(int(keep.sum()) * width, dtype=values.dtype)
    for start, length, new_start in zip(offsets.tolist(), lengths.tolist(), new_offsets.tolist()):
        if not length:
            continue
        block = values[start * width:(start + length) * width].reshape(width, length)
        kept = block[:, keep[start:start + length]]
        out[new_start * width:new_start * width + kept.size] = kept.ravel()
    return out


def remap_storage(file: IndexFile, mapped: np.ndarray, keep: np.ndarray, path: str) -> StorageRemap:
    """``auxiliary.idx`` with deleted rows dropped, addresses mapped and the IVF partitions updated.

    ``mapped`` / ``keep`` are the new address and survival of each stored ``_rowid``, in row order
    (``AddressMap.apply`` of the column).
    """
    position, offsets, lengths = partition_layout(file, path)
    table = file.table
    if ROW_ID_COLUMN not in table.column_names:
        raise CorruptFileError(path, f"vector index storage has no {ROW_ID_COLUMN} column")
    keep = np.asarray(keep, dtype=bool)
    if len(keep) != table.num_rows or len(mapped) != table.num_rows:
        raise ValueError(f"{len(mapped)} mapped addresses / {len(keep)} flags for {table.num_rows} rows")
    partition = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    new_lengths = np.bincount(partition[keep], minlength=len(lengths)).astype(np.int64)
    new_offsets = exclusive_cumsum(new_lengths)
    columns = []
    for field, column in zip(table.schema, table.columns):
        if field.name == ROW_ID_COLUMN:
            columns.append(pa.array(np.asarray(mapped, dtype=np.uint64)[keep], type=field.type))
        elif field.name == PQ_CODE_COLUMN and _is_transposed(file):
            codes = column.combine_chunks()
            if not pa.types.is_fixed_size_list(codes.type) or codes.null_count:
                raise CorruptFileError(path, f"{PQ_CODE_COLUMN} is not a non-null fixed-size list of bytes")
            width = codes.type.list_size
            values = codes.flatten().to_numpy(zero_copy_only=False)
            out = _transposed_codes(values, width, keep, offsets, lengths, new_offsets)
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(out, type=codes.type.value_type),
                                                             type=codes.type))
        else:
            columns.append(column.filter(pa.array(keep)))
    new_table = pa.Table.from_arrays(columns, schema=table.schema)
    buffers = list(file.buffers)
    buffers[position] = with_partitions(buffers[position], new_offsets, new_lengths)
    return StorageRemap(IndexFile(new_table, buffers, file.version), keep, offsets, lengths, new_offsets, new_lengths)
