"""Base pieces of the Lance 2.0 field encoders: the page type, the page queue and the leaf encoder.

:mod:`v2_0.fields` (struct/list encoders, ``build_encoder``) and :mod:`v2_0.blob` (the blob
leaf) both build on these; they live apart so neither of those two modules imports the other.
``v2_1.encode`` reuses the page type, the queue and :func:`compact`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops.format.buffers import Chunk
from lance_ops.format.v2_0 import encode as enc

__all__ = ["EncodedPage", "PageQueue", "compact", "FieldEncoder", "LeafEncoder"]


@dataclass
class EncodedPage:
    """One page ready to be written: its column, row count, buffers and encoding."""

    column_index: int
    num_rows: int
    buffers: list[list[Chunk]]
    encoding: pb.ArrayEncoding


class PageQueue:
    """Arrays waiting to become a page; ``insert`` returns them all once the budget is exceeded."""

    __slots__ = ("cache_bytes", "arrays", "size")

    def __init__(self, cache_bytes: int) -> None:
        self.cache_bytes = cache_bytes
        self.arrays: list = []
        self.size = 0

    def insert(self, item, size: int) -> list | None:
        self.arrays.append(item)
        self.size += size
        if self.size > self.cache_bytes:
            return self.take()
        return None

    def take(self) -> list | None:
        if not self.arrays:
            return None
        out, self.arrays, self.size = self.arrays, [], 0
        return out


# An array kept in a queue is copied when the memory it keeps alive exceeds its own size by this much.
_PIN_SLACK = 1 << 20


def _pinned_bytes(array: pa.Array) -> int:
    """Memory kept alive by ``array``'s buffers (whole parent allocations, each counted once)."""
    seen: dict[int, int] = {}
    for buf in array.buffers():
        if buf is None:
            continue
        owner = buf.parent if buf.parent is not None else buf
        seen[owner.address] = max(seen.get(owner.address, 0), owner.size)
    return sum(seen.values())


def compact(array: pa.Array, size: int) -> pa.Array:
    """``array`` itself, or a compact copy if it is a small view of much larger buffers.

    Upstream deep-copies every queued array for the same reason: a slice of a big table, or one
    column of a batch read from IPC (all columns share one body buffer), would otherwise keep
    the whole parent in memory until the page is flushed.
    """
    if _pinned_bytes(array) > 2 * size + _PIN_SLACK:
        return pa.concat_arrays([array])
    return array


class FieldEncoder:
    """Base class: ``maybe_encode`` per batch, ``flush`` at the end, ``finish`` for final pages."""

    def maybe_encode(self, array: pa.Array, external=None) -> list[EncodedPage]:
        """``external``: the batch's ``v2_1.blob.OutOfLineBuffers`` (blob fields only)."""
        raise NotImplementedError

    def flush(self) -> list[EncodedPage]:
        raise NotImplementedError

    def finish(self) -> list[EncodedPage]:
        return []

    def columns(self) -> Iterator[int]:
        raise NotImplementedError

    def blob_columns(self) -> Iterator[int]:
        """Columns holding blob descriptions (their column encoding is ``blob``)."""
        return iter(())


class LeafEncoder(FieldEncoder):
    """A field stored in exactly one column (Lance's "primitive" field encoder)."""

    def __init__(self, field: pa.Field, column_index: int, cache_bytes: int, max_page_bytes: int) -> None:
        self.field = field
        self.column_index = column_index
        self.max_page_bytes = max_page_bytes
        self.compression = enc.compression_from_metadata(field.metadata)
        self.queue = PageQueue(cache_bytes)

    def columns(self) -> Iterator[int]:
        yield self.column_index

    def maybe_encode(self, array: pa.Array, external=None) -> list[EncodedPage]:
        size = array.nbytes
        ready = self.queue.insert(array, size)
        if ready:
            return self._encode(ready)
        self.queue.arrays[-1] = compact(array, size)  # kept for a while: do not pin a big parent
        return []

    def flush(self) -> list[EncodedPage]:
        ready = self.queue.take()
        return self._encode(ready) if ready else []

    def _encode(self, arrays: list[pa.Array]) -> list[EncodedPage]:
        if len(arrays) == 1:
            array = arrays[0]
            parts = min(math.ceil(array.nbytes / self.max_page_bytes), len(array))
            if parts > 1:
                rows = math.ceil(len(array) / parts)
                return [self._page(array.slice(start, rows)) for start in range(0, len(array), rows)]
            return [self._page(array)]
        return [self._page(enc.concat_page_arrays(arrays))]

    def _page(self, array: pa.Array) -> EncodedPage:
        out = enc.encode_leaf_page(array, self.compression)
        return EncodedPage(self.column_index, out.num_rows, out.buffers, out.encoding)
