"""Blob columns of the Lance 2.0 writer (see ``v2_1.blob`` for what pylance writes).

A 2.0 blob field (``large_binary`` with ``lance-encoding:blob``, also as a list item) is one
column whose column encoding is ``ColumnEncoding{blob{inner{values{}}}}`` and whose pages hold
the descriptions: one buffer of ``(position u64, size u64)`` rows (``(0, 0)`` empty, ``(1, 0)``
null) under ``packed_struct{inner: [nullable{no_nulls{flat(64)}}] * 2, buffer 0}``. The bytes are
written out of line when the batch arrives; the page budget counts the descriptions (16 bytes a
row), as upstream's description encoder does.
"""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops.format.container import COLUMN_ENCODING_URL
from lance_ops.format.v2_0 import encode as enc
from lance_ops.format.v2_0.leaf_encoder import EncodedPage, LeafEncoder
from lance_ops.format.v2_1 import blob

NULL_POSITION = 1


def page_encoding() -> pb.ArrayEncoding:
    """The encoding of every 2.0 blob page: a packed struct of two non-null u64 (position, size)."""
    e = pb.ArrayEncoding()
    for _ in range(2):
        e.packed_struct.inner.append(enc.nullable_no_nulls(enc.flat(64, 0)))
    e.packed_struct.buffer.SetInParent()
    return e


def column_encoding_bytes() -> bytes:
    """The ``Any``-wrapped ``ColumnEncoding`` of a 2.0 blob column."""
    ce = pb.ColumnEncoding()
    ce.blob.inner.values.SetInParent()
    return any_pb2.Any(type_url=COLUMN_ENCODING_URL, value=ce.SerializeToString()).SerializeToString()


class BlobEncoderV20(LeafEncoder):
    """One blob column: descriptions queued per batch, bytes written out of line at once."""

    def __init__(self, field: pa.Field, column_index: int, cache_bytes: int, max_page_bytes: int) -> None:
        super().__init__(field, column_index, cache_bytes, max_page_bytes)
        self.compression = None  # descriptions are stored flat

    def blob_columns(self) -> Iterator[int]:
        """This column (its column encoding is ``blob``)."""
        yield self.column_index

    def maybe_encode(self, array: pa.Array, external: Optional[blob.OutOfLineBuffers] = None) -> list[EncodedPage]:
        """Store the values in ``external`` (required) and queue their descriptions as the page rows."""
        if external is None:
            raise ValueError("blob fields need the batch's out-of-line buffers")
        valid = None
        if array.null_count:
            valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        desc = blob.describe(array, valid, NULL_POSITION, external)
        return super().maybe_encode(blob.descriptions_array(desc))

    def _page(self, array: pa.Array) -> EncodedPage:
        return EncodedPage(self.column_index, len(array), [[blob.descriptions_bytes(array)]], page_encoding())
