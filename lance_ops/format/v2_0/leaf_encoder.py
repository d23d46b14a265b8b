"""Base pieces of the Lance 2.0 field encoders: the page type, the page queue and the leaf encoder.

:mod:`v2_0.fields` (struct/list encoders, ``build_encoder``) and :mod:`v2_0.blob` (the blob
leaf) both build on these; they live apart so neither of those two modules imports the other.
``v2_1.encode`` reuses the page type, the queue and :func:`compact`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional, Union

import pyarrow as pa

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops._proto import encodings_v2_1_pb2 as pb21
from lance_ops.format.buffers import Chunk
from lance_ops.format.v2_0 import encode as enc

if TYPE_CHECKING:  # only named in signatures here (the 2.1 blob code owns the out-of-line buffers)
    from lance_ops.format.v2_1.blob import OutOfLineBuffers

__all__ = ["EncodedPage", "PageEncoding", "PageQueue", "compact", "FieldEncoder", "LeafEncoder"]

#: what describes a page: a 2.0 ``ArrayEncoding``, or a 2.1+ ``PageLayout`` (``v2_1.encode``)
PageEncoding = Union[pb.ArrayEncoding, pb21.PageLayout]


@dataclass
class EncodedPage:
    """One page ready to be written: its column, row count, buffers and encoding."""

    column_index: int
    num_rows: int
    buffers: list[list[Chunk]]
    encoding: PageEncoding


class PageQueue:
    """Arrays waiting to become a page; ``insert`` returns them all once the budget is exceeded."""

    __slots__ = ("cache_bytes", "arrays", "size")

    def __init__(self, cache_bytes: int) -> None:
        self.cache_bytes = cache_bytes
        self.arrays: list[Any] = []  # arrays, or the offsets pieces of a list column
        self.size = 0

    def insert(self, item: Any, size: int) -> list[Any] | None:
        """Queue ``item`` (``size`` bytes towards the budget); every queued item once the budget is exceeded."""
        self.arrays.append(item)
        self.size += size
        if self.size > self.cache_bytes:
            return self.take()
        return None

    def take(self) -> list[Any] | None:
        """Every queued item (emptying the queue), or None if it is empty."""
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

    def maybe_encode(self, array: pa.Array, external: Optional[OutOfLineBuffers] = None) -> list[EncodedPage]:
        """Queue one batch's ``array``; the pages it completes.

        ``external``: the batch's ``v2_1.blob.OutOfLineBuffers`` (blob fields only).
        """
        raise NotImplementedError

    def flush(self) -> list[EncodedPage]:
        """Pages of everything still queued (at close, or when a parent list cuts a page)."""
        raise NotImplementedError

    def finish(self) -> list[EncodedPage]:
        """Pages written once, after the last flush (struct header pages)."""
        return []

    def columns(self) -> Iterator[int]:
        """The column indices this field's encoder writes, in pre-order."""
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
        """The one column of this field."""
        yield self.column_index

    def maybe_encode(self, array: pa.Array, external: Optional[OutOfLineBuffers] = None) -> list[EncodedPage]:
        """Queue ``array`` (compacted if it pins a much larger parent); the pages cut once over budget."""
        size = array.nbytes
        ready = self.queue.insert(array, size)
        if ready:
            return self._encode(ready)
        self.queue.arrays[-1] = compact(array, size)  # kept for a while: do not pin a big parent
        return []

    def flush(self) -> list[EncodedPage]:
        """The queued arrays as pages (one, or several if the rows exceed ``max_page_bytes``)."""
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
