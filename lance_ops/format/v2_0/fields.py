"""Field encoders of the Lance 2.0 writer: which columns a field gets and when pages are cut.

A schema field maps to columns in pre-order, as upstream 2.0 does:

* single-column ("leaf") fields: fixed-width types, booleans, null, binary/utf8 (and large),
  fixed_size_list of fixed-width items, Arrow dictionaries of those;
* struct: a header column (one ``SimpleStruct`` page without buffers, written at the end)
  followed by the columns of its children;
* list / large_list: an offsets column followed by the columns of the item field;
* blob (``large_binary`` with ``lance-encoding:blob``, ``v2_0.blob``): one column of
  descriptions, the values written out of line as the batch arrives (``maybe_encode``'s
  ``external`` buffers).

The page type, the page queue and the one-column ``LeafEncoder`` live in ``v2_0.leaf_encoder``
(shared with the blob encoder; re-exported here).

Every column accumulates incoming arrays (zero-copy references, compacted only when a small view
would pin a much larger parent) until their size exceeds the column's cache budget, then encodes and emits a page; a single oversized array is split into
``ceil(size / max_page_bytes)`` equal-row pages. An offsets page of a list always ends together
with a page of every column below it (a page of items never spans two offsets pages).

Sizes are measured on the *logical slice* (``pa.Array.nbytes``), not on the shared buffers
behind it, so slices of one big table still make pages of about the cache size.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

import pyarrow as pa

from lance_ops.errors import SchemaMismatchError, UnsupportedTypeError
from lance_ops.format.v2_0 import encode as enc
from lance_ops.format.v2_0.blob import BlobEncoderV20
from lance_ops.format.v2_0.leaf_encoder import EncodedPage, FieldEncoder, LeafEncoder, PageQueue, compact
from lance_ops.format.version import FileVersion

if TYPE_CHECKING:
    from lance_ops.format.v2_1.blob import OutOfLineBuffers

__all__ = [  # the base pieces are re-exported: the writer imports them here
    "EncodedPage", "FieldEncoder", "LeafEncoder", "PageQueue", "compact", "StructEncoder", "ListEncoder",
    "build_encoder", "check_writable", "check_values",
]

PACKED_LEGACY_META_KEY = b"packed"
PACKED_META_KEY = b"lance-encoding:packed"
BLOB_META_KEY = b"lance-encoding:blob"


class StructEncoder(FieldEncoder):
    """Header column (a single SimpleStruct page written by ``finish``) plus the children's columns."""

    def __init__(self, column_index: int, children: list[FieldEncoder]) -> None:
        self.column_index = column_index
        self.children = children
        self.num_rows = 0

    def columns(self) -> Iterator[int]:
        """The header column, then the children's columns."""
        yield self.column_index
        for child in self.children:
            yield from child.columns()

    def blob_columns(self) -> Iterator[int]:
        """The blob columns below the struct."""
        for child in self.children:
            yield from child.blob_columns()

    def maybe_encode(self, array: pa.StructArray, external: Optional[OutOfLineBuffers] = None) -> list[EncodedPage]:
        """Count the rows (for the header page) and pass each child its field's values."""
        self.num_rows += len(array)
        pages: list[EncodedPage] = []
        for i, child in enumerate(self.children):
            pages.extend(child.maybe_encode(array.field(i), external))  # field() applies the struct's offset
        return pages

    def flush(self) -> list[EncodedPage]:
        """The children's queued pages (the header has none until :meth:`finish`)."""
        pages: list[EncodedPage] = []
        for child in self.children:
            pages.extend(child.flush())
        return pages

    def finish(self) -> list[EncodedPage]:
        """The one ``SimpleStruct`` header page (all rows), then the children's final pages."""
        pages = [EncodedPage(self.column_index, self.num_rows, [], enc.simple_struct())]
        for child in self.children:
            pages.extend(child.finish())
        return pages


class ListEncoder(FieldEncoder):
    """Offsets column plus the item field's columns."""

    def __init__(self, column_index: int, items: FieldEncoder, cache_bytes: int) -> None:
        self.column_index = column_index
        self.items = items
        self.queue = PageQueue(cache_bytes)

    def columns(self) -> Iterator[int]:
        """The offsets column, then the item field's columns."""
        yield self.column_index
        yield from self.items.columns()

    @staticmethod
    def _offsets_sizes(array: pa.Array) -> tuple[int, int]:
        width = 8 if pa.types.is_large_list(array.type) else 4
        validity = (len(array) + 7) // 8 if array.buffers()[0] is not None else 0
        return (len(array) + 1) * width, validity

    def blob_columns(self) -> Iterator[int]:
        """The blob columns of the item field."""
        return self.items.blob_columns()

    def maybe_encode(self, array: pa.Array, external: Optional[OutOfLineBuffers] = None) -> list[EncodedPage]:
        """Queue the offsets, pass the items on; an offsets page cut also closes every column below."""
        offsets = array.offsets  # the slice's len+1 offsets (not rebased)
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        item_array = array.values.slice(start, end - start)
        # The offsets and the validity both count towards the budget, as upstream does.
        offsets_size, validity_size = self._offsets_sizes(array)
        ready = self.queue.insert(enc.list_offsets_piece(array), offsets_size + validity_size)
        pages = self._encode(ready) if ready else []
        item_pages = self.items.maybe_encode(item_array, external)
        if ready:
            # an items page must never span two offsets pages: close every column below
            item_pages.extend(self.items.flush())
        return pages + item_pages

    def flush(self) -> list[EncodedPage]:
        """The queued offsets page, then the items' queued pages."""
        ready = self.queue.take()
        pages = self._encode(ready) if ready else []
        return pages + self.items.flush()

    def finish(self) -> list[EncodedPage]:
        """The item field's final pages (the offsets column has none)."""
        return self.items.finish()

    def _encode(self, arrays: list[pa.Array]) -> list[EncodedPage]:
        page = enc.PageBuilder()
        encoding, rows = enc.encode_list_offsets(arrays, page)
        return [EncodedPage(self.column_index, rows, page.buffers, encoding)]


def _packed(field: pa.Field) -> bool:
    md = field.metadata or {}
    if PACKED_LEGACY_META_KEY in md:
        return md[PACKED_LEGACY_META_KEY].lower() == b"true"
    return PACKED_META_KEY in md


def check_writable(field: pa.Field, path: str = "") -> None:
    """Raise UnsupportedTypeError if the 2.0 writer cannot store ``field`` (checked before writing)."""
    name = f"{path}.{field.name}" if path else field.name
    dt = field.type
    md = field.metadata or {}
    if BLOB_META_KEY in md:
        from lance_ops.format.v2_1 import blob

        blob.check_blob_field(field, name, below_list=False, version=FileVersion.V2_0)  # large_binary only
        return
    if pa.types.is_struct(dt):
        if _packed(field):
            raise UnsupportedTypeError(f"field {name!r}: packed struct encoding is not supported by this writer")
        for i in range(dt.num_fields):
            check_writable(dt.field(i), name)
        return
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        check_writable(dt.value_field, name)
        return
    if not enc.leaf_page_encoder_supported(dt):
        raise UnsupportedTypeError(f"field {name!r}: Arrow type {dt} cannot be written in Lance file version 2.0")


def build_encoder(field: pa.Field, next_column: list[int], cache_bytes: int, max_page_bytes: int) -> FieldEncoder:
    """The encoder tree of ``field``; ``next_column`` is a one-element counter of column indices."""
    dt = field.type
    column = next_column[0]
    next_column[0] += 1
    if pa.types.is_struct(dt):
        children = [build_encoder(dt.field(i), next_column, cache_bytes, max_page_bytes) for i in range(dt.num_fields)]
        return StructEncoder(column, children)
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        items = build_encoder(dt.value_field, next_column, cache_bytes, max_page_bytes)
        return ListEncoder(column, items, cache_bytes)
    if BLOB_META_KEY in (field.metadata or {}):
        return BlobEncoderV20(field, column, cache_bytes, max_page_bytes)
    return LeafEncoder(field, column, cache_bytes, max_page_bytes)


def check_values(array: pa.Array, field: pa.Field, path: str = "") -> None:
    """Refuse data the 2.0 format cannot hold: null struct values and nulls in non-null fields."""
    name = f"{path}.{field.name}" if path else field.name
    dt = field.type
    if pa.types.is_struct(dt):
        nulls = array.null_count
        if nulls:
            raise UnsupportedTypeError(
                f"The struct field `{name}` contains {nulls} null value(s), but Lance file version 2.0 "
                "does not encode struct validity; use file version 2.1 or later")
        for i in range(dt.num_fields):
            check_values(array.field(i), dt.field(i), name)
        return
    if not field.nullable and array.null_count:
        raise SchemaMismatchError(
            f"The field `{name}` contained null values even though the field is marked non-null in the schema")
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        if _needs_value_check(dt.value_field):
            offsets = array.offsets
            start, end = offsets[0].as_py(), offsets[-1].as_py()
            check_values(array.values.slice(start, end - start), dt.value_field, name)


def _needs_value_check(field: pa.Field) -> bool:
    dt = field.type
    if pa.types.is_struct(dt) or not field.nullable:
        return True
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        return _needs_value_check(dt.value_field)
    return False
