"""The two files of a pylance IVF vector index segment, read and written whole (index-facts §3).

A segment ``_indices/<uuid>/`` of IVF_FLAT / IVF_PQ / IVF_SQ / IVF_HNSW_* holds

* ``auxiliary.idx``: the quantized storage, one row per indexed vector (``_rowid`` u64 + the codes
  column ``flat`` / ``__pq_code`` / ``__sq_code``), rows grouped by IVF partition. Schema metadata
  ``lance:ivf`` names the global buffer holding the protobuf ``IVF`` message whose ``offsets`` (2)
  and ``lengths`` (3) give each partition's first row and row count; ``storage_metadata`` (JSON)
  describes the quantizer, PQ's codebook sits in another global buffer (``codebook_position``).
* ``index.idx``: the sub-index per partition. FLAT sub-index (IVF_FLAT/PQ/SQ): no rows (an empty
  ``__flat_marker`` column), its IVF buffer holds the centroids and zero offsets/lengths. HNSW:
  the graph rows of every partition (``__vector_id``, ``__neighbors``, ``_distance``), the IVF
  buffer's offsets/lengths index those rows, ``lance:hnsw`` holds one JSON metadata per partition.

:class:`IndexFile` is one such file as data (Arrow table with its schema metadata, the global
buffers after the file descriptor, the file version) so a remap can change rows and buffers and
write it back with the same layout. The ``IVF`` message is edited at the wire level
(:func:`ivf_partitions`, :func:`with_partitions`): every other field (centroids tensor, loss) is
kept byte for byte, and fields are written in field-number order as upstream's encoder does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from lance_ops.errors import CorruptFileError
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.format.proto_wire import encode_varint, read_varint, wire_records
from lance_ops.format.registry import open_file_reader
from lance_ops.format.version import FileVersion
from lance_ops.format.writer import V2FileWriter
from lance_ops.io.base import ObjectStore

#: schema metadata key naming the global buffer of the IVF protobuf (its value is the buffer index)
IVF_METADATA_KEY = "lance:ivf"
#: IVF message field numbers of the per-partition row offsets and lengths
_OFFSETS_FIELD = 2
_LENGTHS_FIELD = 3


@dataclass
class IndexFile:
    """One index file as data: rows (with schema metadata), global buffers 1.., file version."""

    table: pa.Table
    buffers: list[bytes]
    version: FileVersion

    @property
    def metadata(self) -> dict[str, str]:
        """The schema metadata as text."""
        raw = self.table.schema.metadata or {}
        return {k.decode(): v.decode() for k, v in raw.items()}

    def buffer_index(self, key: str, path: str) -> int:
        """Position in :attr:`buffers` of the global buffer whose number the metadata ``key`` holds."""
        raw = self.metadata.get(key)
        try:
            number = int(raw) if raw is not None else -1
        except ValueError:
            number = -1
        if not 1 <= number <= len(self.buffers):
            raise CorruptFileError(path, f"schema metadata {key}={raw!r} names no global buffer "
                                         f"(the file has {len(self.buffers)})")
        return number - 1


def read_index_file(store: ObjectStore, path: str) -> IndexFile:
    """Read every row, the schema metadata and the global buffers of the index file at ``path``."""
    reader = open_file_reader(path, store=store)
    if isinstance(reader, LegacyFileReader):
        raise CorruptFileError(store.uri(path), "vector index files are Lance v2 files; this one is a legacy (v0.1) file")
    table = reader.read_all()
    buffers = [bytes(reader.read_global_buffer(i)) for i in range(1, reader.num_global_buffers)]
    return IndexFile(table=table, buffers=buffers, version=reader.version)


def write_index_file(store: ObjectStore, path: str, file: IndexFile,
                     storage_options: Mapping[str, Any] | None = None) -> int:
    """Write ``file`` to ``path`` (buffers first, in order, so their numbers stay); returns its size.

    The global buffers keep their numbers (1..), so metadata that names them (``lance:ivf``,
    ``codebook_position``) stays true. Rows are written even when there are none.
    """
    schema = file.table.schema
    writer = V2FileWriter(store.uri(path), schema, version=file.version, storage_options=storage_options)
    try:
        for data in file.buffers:
            writer.add_global_buffer(data)
        if file.table.num_rows:
            writer.write_batch(file.table)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return store.size(path)


# --- the IVF protobuf at the wire level --------------------------------------------------------
def _records(data: bytes) -> list[tuple[int, int, bytes]]:
    """Top-level (field number, wire type, raw record bytes incl. the tag) of a message."""
    return [(number, wire, data[start:end]) for number, wire, start, _, _, end in wire_records(data)]


def _unpack_varints(record: bytes, wire: int) -> list[int]:
    """The values of one record of a repeated varint field (packed or not)."""
    _, pos = read_varint(record, 0)
    if wire == 0:
        return [read_varint(record, pos)[0]]
    length, pos = read_varint(record, pos)
    end = pos + length
    values = []
    while pos < end:
        value, pos = read_varint(record, pos)
        values.append(value)
    return values


def ivf_partitions(message: bytes, path: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``offsets`` (u64) and ``lengths`` (u32) of a serialized IVF message, as int64 arrays."""
    offsets: list[int] = []
    lengths: list[int] = []
    try:
        for number, wire, raw in _records(message):
            if number == _OFFSETS_FIELD:
                offsets.extend(_unpack_varints(raw, wire))
            elif number == _LENGTHS_FIELD:
                lengths.extend(_unpack_varints(raw, wire))
    except ValueError as exc:
        raise CorruptFileError(path, f"the IVF buffer does not decode: {exc}") from None
    if len(offsets) != len(lengths):
        raise CorruptFileError(path, f"the IVF buffer has {len(offsets)} offsets but {len(lengths)} lengths")
    return np.asarray(offsets, dtype=np.int64), np.asarray(lengths, dtype=np.int64)


def _packed(number: int, values: np.ndarray) -> bytes:
    if len(values) == 0:
        return b""  # an empty repeated field is not written
    body = b"".join(encode_varint(int(v)) for v in values)
    return encode_varint(number << 3 | 2) + encode_varint(len(body)) + body


def with_partitions(message: bytes, offsets: np.ndarray, lengths: np.ndarray) -> bytes:
    """``message`` with its ``offsets`` / ``lengths`` replaced; every other field kept as it was."""
    records = [(number, raw) for number, _, raw in _records(message)
               if number not in (_OFFSETS_FIELD, _LENGTHS_FIELD)]
    out = [raw for number, raw in records if number < _OFFSETS_FIELD]
    out.append(_packed(_OFFSETS_FIELD, offsets))
    out.append(_packed(_LENGTHS_FIELD, lengths))
    out.extend(raw for number, raw in records if number > _LENGTHS_FIELD)
    return b"".join(out)
