"""Page encoders of the Lance 2.0 file format.

Each function turns one Arrow array (the rows of one page, possibly a zero-copy slice) into the
page's buffers plus the ``lance.encodings.ArrayEncoding`` message that describes them, choosing the
same encodings as upstream Lance's 2.0 writer:

* fixed-width values (ints, floats, temporal, decimals, fixed_size_binary, booleans as bits):
  ``Nullable`` (no_nulls / some_nulls with an LSB-first validity bitmap / all_nulls) around ``Flat``;
* utf8/binary/large_*: ``Binary`` with u64 end offsets (no leading 0, nulls stored as
  ``end + null_adjustment`` where ``null_adjustment = total_bytes + 1``) and the bytes buffer,
  optionally block-compressed (zstd/lz4) from field metadata;
* utf8 pages with at least 100 rows and fewer than 100 distinct values: ``Dictionary`` with u8
  indices (0 = null, entries numbered from 1 in first-seen order) and Binary items;
* Arrow dictionary arrays: ``Dictionary`` keeping the key width (null keys point at an extra null
  dictionary entry);
* fixed_size_list of fixed-width items (nested lists too): ``Nullable`` around ``FixedSizeList``;
* list offsets pages: ``List`` with u64 end offsets and ``null_offset_adjustment = num_items + 1``;
* struct header pages: ``SimpleStruct`` without buffers.

Buffers are numbered in the order they are appended to a :class:`PageBuilder` (validity before
values, indices before items), which is the order they are written to the file.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops.errors import UnsupportedTypeError
from lance_ops.format import buffers as bufs
from lance_ops.format.buffers import Chunk

# Field metadata keys that change the 2.0 string encoding.
COMPRESSION_META_KEY = "lance-encoding:compression"
COMPRESSION_LEVEL_META_KEY = "lance-encoding:compression-level"

# A utf8 page is dictionary encoded when it has at least this many rows and fewer distinct values.
DICT_THRESHOLD = 100
# Distinct values are first counted on a prefix so that high-cardinality pages are rejected cheaply.
_DICT_PREFIX = 4096
ZSTD_DEFAULT_LEVEL = 3


@dataclass
class PageBuilder:
    """Collects the buffers of one page; ``add`` returns the buffer's index in the page."""

    buffers: list[list[Chunk]] = field(default_factory=list)

    def add(self, chunks: Sequence[Chunk]) -> int:
        """Append one buffer (its chunks written back to back); its index in the page."""
        self.buffers.append(list(chunks))
        return len(self.buffers) - 1


@dataclass
class EncodedArray:
    """The buffers (each a list of chunks written back to back) and encoding of one page."""

    buffers: list[list[Chunk]]
    encoding: pb.ArrayEncoding
    num_rows: int


# --- protobuf helpers --------------------------------------------------------------------------


def flat(bits: int, buffer_index: int, compression: pb.Compression | None = None) -> pb.ArrayEncoding:
    """``Flat``: ``bits`` bits per value in page buffer ``buffer_index``, optionally block-compressed."""
    enc = pb.ArrayEncoding()
    enc.flat.bits_per_value = bits
    enc.flat.buffer.buffer_index = buffer_index
    enc.flat.buffer.SetInParent()
    if compression is not None:
        enc.flat.compression.CopyFrom(compression)
    return enc


def nullable_no_nulls(values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    """``Nullable.no_nulls`` around ``values`` (upstream wraps even non-null buffers in it)."""
    enc = pb.ArrayEncoding()
    enc.nullable.no_nulls.values.CopyFrom(values)
    return enc


def nullable_some_nulls(validity_index: int, values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    """``Nullable.some_nulls``: a 1-bit validity bitmap in buffer ``validity_index``, then ``values``."""
    enc = pb.ArrayEncoding()
    enc.nullable.some_nulls.validity.CopyFrom(flat(1, validity_index))
    enc.nullable.some_nulls.values.CopyFrom(values)
    return enc


def nullable_all_nulls() -> pb.ArrayEncoding:
    """``Nullable.all_nulls``: every row is null, the page has no buffers."""
    enc = pb.ArrayEncoding()
    enc.nullable.all_nulls.SetInParent()
    return enc


def simple_struct() -> pb.ArrayEncoding:
    """``SimpleStruct``: the encoding of a struct header page (no buffers)."""
    enc = pb.ArrayEncoding()
    getattr(enc, "struct").SetInParent()
    return enc


# --- block compression of the binary bytes buffer ----------------------------------------------


@dataclass(frozen=True)
class CompressionConfig:
    """Block compression of a binary bytes buffer, from field metadata (zstd, lz4 or none)."""

    scheme: str  # "zstd", "lz4" or "none"
    level: int | None = None

    def proto(self) -> pb.Compression:
        """The ``Compression`` message the page's ``Flat`` carries, so readers know to decompress."""
        msg = pb.Compression(scheme=self.scheme)
        if self.level is not None:
            msg.level = self.level
        return msg

    def compress(self, chunks: Sequence[Chunk]) -> list[Chunk]:
        """The chunks as upstream stores them: a size prefix then one zstd frame or lz4 block."""
        if self.scheme == "none":
            return list(chunks)
        raw = bufs.join_chunks(chunks)
        if self.scheme == "zstd":
            # no level given: zstd's own default (3), as upstream; pyarrow would pick 1
            codec = pa.Codec("zstd", compression_level=self.level if self.level is not None else ZSTD_DEFAULT_LEVEL)
            # u64 LE uncompressed size, then one zstd frame
            return [struct.pack("<Q", len(raw)), codec.compress(raw, asbytes=True)]
        # lz4: u32 LE uncompressed size, then one raw lz4 block
        return [struct.pack("<I", len(raw)), pa.Codec("lz4_raw").compress(raw, asbytes=True)]


def compression_from_metadata(metadata: Mapping[bytes, bytes] | None) -> CompressionConfig | None:
    """The block compression asked for by ``lance-encoding:compression`` (zstd, lz4, none).

    Unknown schemes are ignored, as upstream does. ``fsst`` is not implemented: such fields are
    written uncompressed (still readable by any Lance reader).
    """
    if not metadata:
        return None
    raw_scheme = metadata.get(COMPRESSION_META_KEY.encode())
    if raw_scheme is None:
        return None
    scheme = raw_scheme.decode().strip().lower()
    if scheme not in ("zstd", "lz4", "none"):
        return None
    level_raw = metadata.get(COMPRESSION_LEVEL_META_KEY.encode())
    level = None
    if level_raw is not None:
        try:
            level = int(level_raw.decode())
        except ValueError:
            level = None
    return CompressionConfig(scheme, level)


# --- encoders ----------------------------------------------------------------------------------


def encode_fixed(arr: pa.Array, bits: int, page: PageBuilder) -> pb.ArrayEncoding:
    """Nullable around Flat (booleans bit-packed); the null type is always all-null."""
    n = len(arr)
    nulls = arr.null_count
    if nulls == n:  # includes empty arrays and the null type
        return nullable_all_nulls()
    if nulls == 0:
        index = page.add(bufs.value_chunks(arr, bits))
        return nullable_no_nulls(flat(bits, index))
    validity = page.add(bufs.validity_chunks(arr))
    index = page.add(bufs.value_chunks(arr, bits))
    return nullable_some_nulls(validity, flat(bits, index))


def encode_fixed_size_list(arr: pa.FixedSizeListArray, page: PageBuilder) -> pb.ArrayEncoding:
    """Nullable around FixedSizeList, the items encoded recursively (has_validity is always false)."""
    n = len(arr)
    nulls = arr.null_count
    if nulls == n:
        return nullable_all_nulls()
    validity = page.add(bufs.validity_chunks(arr)) if nulls else None
    dim = arr.type.list_size
    child = arr.values.slice(arr.offset * dim, n * dim)
    inner = pb.ArrayEncoding()
    inner.fixed_size_list.dimension = dim
    inner.fixed_size_list.items.CopyFrom(_encode_fsl_items(child, page))
    return nullable_no_nulls(inner) if validity is None else nullable_some_nulls(validity, inner)


def _encode_fsl_items(child: pa.Array, page: PageBuilder) -> pb.ArrayEncoding:
    if pa.types.is_fixed_size_list(child.type):
        return encode_fixed_size_list(child, page)
    bits = bufs.fixed_width_bits(child.type)
    if bits is None and not pa.types.is_null(child.type):
        raise UnsupportedTypeError(f"fixed_size_list of {child.type} cannot be written in Lance 2.0")
    return encode_fixed(child, bits or 0, page)


def encode_binary(arr: pa.Array, page: PageBuilder, compression: CompressionConfig | None = None) -> pb.ArrayEncoding:
    """Binary: u64 end offsets (nulls + null_adjustment) and the concatenated bytes."""
    offsets = bufs.offsets_array(arr)
    start, end = int(offsets[0]), int(offsets[-1])
    total = end - start
    # upstream leaves the adjustment at 0 for an empty page
    null_adjustment = total + 1 if len(arr) else 0
    valid = bufs.valid_mask(arr) if arr.null_count else None
    ends = bufs.end_offsets_u64(offsets, 0, valid, null_adjustment)
    data = arr.buffers()[2]
    byte_chunks: list[Chunk] = [data.slice(start, total)] if (data is not None and total) else []
    indices_index = page.add([ends] if len(ends) else [])
    if compression is not None:
        byte_chunks = compression.compress(byte_chunks)
    bytes_index = page.add(byte_chunks)
    enc = pb.ArrayEncoding()
    enc.binary.indices.CopyFrom(nullable_no_nulls(flat(64, indices_index)))
    enc.binary.bytes.CopyFrom(flat(8, bytes_index, compression.proto() if compression is not None else None))
    enc.binary.null_adjustment = null_adjustment
    return enc


def _dictionary(indices: pb.ArrayEncoding, items: pb.ArrayEncoding, num_items: int) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(indices)
    enc.dictionary.items.CopyFrom(items)
    enc.dictionary.num_dictionary_items = num_items
    return enc


def low_cardinality_dictionary(arr: pa.Array) -> pa.DictionaryArray | None:
    """Dictionary-encode a utf8 page if upstream would (>= 100 rows, < 100 distinct values)."""
    n = len(arr)
    if n < DICT_THRESHOLD:
        return None
    if arr.null_count < n:
        prefix = arr.slice(0, _DICT_PREFIX) if n > _DICT_PREFIX else arr
        if pc.count_distinct(prefix, mode="only_valid").as_py() >= DICT_THRESHOLD:
            return None
    encoded = pc.dictionary_encode(arr)  # codes in first-seen order, nulls stay null
    if len(encoded.dictionary) >= DICT_THRESHOLD:
        return None
    return encoded


def encode_low_cardinality(encoded: pa.DictionaryArray, page: PageBuilder) -> pb.ArrayEncoding:
    """u8 indices (0 = null, k = k-th distinct value) and the distinct values as Binary items."""
    codes = encoded.indices
    if codes.null_count:
        codes = pc.fill_null(codes, -1)
    indices = (np.asarray(codes) + 1).astype(np.uint8)
    items = encoded.dictionary
    if len(items) == 0:  # all null: one null entry keeps the items page decodable
        items = pa.nulls(1, pa.string())
    index = page.add([indices] if len(indices) else [])
    items_enc = encode_binary(items, page)
    return _dictionary(nullable_no_nulls(flat(8, index)), items_enc, len(items))


def encode_arrow_dictionary(arr: pa.DictionaryArray, page: PageBuilder) -> pb.ArrayEncoding:
    """Arrow dictionary array: keys keep their width, null keys point at an extra null entry."""
    key_type = arr.type.index_type
    value_type = arr.type.value_type
    n = len(arr)
    nulls = arr.null_count
    if nulls == n:
        keys: pa.Array = pa.array(np.zeros(n, dtype=key_type.to_pandas_dtype()), key_type)
        dictionary = pa.nulls(1, value_type)
    else:
        keys = arr.indices
        dictionary = arr.dictionary
        if nulls:
            keys = pc.fill_null(keys, pa.scalar(len(dictionary), key_type))
            dictionary = pa.concat_arrays([dictionary, pa.nulls(1, value_type)])
    bits = key_type.bit_width
    index = page.add(bufs.value_chunks(keys, bits))
    if _is_binary_like(value_type):
        items_enc = encode_binary(dictionary, page)
    else:
        value_bits = bufs.fixed_width_bits(value_type)
        if value_bits is None:
            raise UnsupportedTypeError(f"dictionary of {value_type} cannot be written in Lance 2.0")
        items_enc = encode_fixed(dictionary, value_bits, page)
    return _dictionary(nullable_no_nulls(flat(bits, index)), items_enc, len(dictionary))


def list_offsets_piece(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """The part of a list array an offsets page needs: its len+1 offsets and its validity (or None).

    Both are copies, so a queued piece never keeps the list's items (or a larger parent) alive.
    """
    offsets = bufs.offsets_array(arr).copy()
    valid = bufs.valid_mask(arr) if arr.null_count else None
    return offsets, valid


def encode_list_offsets(pieces: Sequence[tuple[np.ndarray, np.ndarray | None]],
                        page: PageBuilder) -> tuple[pb.ArrayEncoding, int]:
    """The offsets page of a (large) list column from one or more :func:`list_offsets_piece`.

    Returns the encoding and the number of rows (lists) in the page.
    """
    spans = [int(o[-1]) - int(o[0]) for o, _ in pieces]
    num_items = sum(spans)
    adjustment = num_items + 1
    ends = []
    base = 0
    for (offsets, valid), span in zip(pieces, spans):
        ends.append(bufs.end_offsets_u64(offsets, base, valid, adjustment))
        base += span
    out = ends[0] if len(ends) == 1 else np.concatenate(ends)
    index = page.add([out] if len(out) else [])
    enc = pb.ArrayEncoding()
    enc.list.offsets.CopyFrom(nullable_no_nulls(flat(64, index)))
    enc.list.null_offset_adjustment = adjustment
    enc.list.num_items = num_items
    return enc, len(out)


def _same_array(a: pa.Array, b: pa.Array) -> bool:
    if a is b:
        return True
    if len(a) != len(b) or a.offset != b.offset:
        return False
    return all((x is None and y is None) or (x is not None and y is not None and x.address == y.address)
               for x, y in zip(a.buffers(), b.buffers()))


def concat_dictionary_arrays(arrays: Sequence[pa.DictionaryArray]) -> pa.DictionaryArray:
    """Concatenate dictionary arrays the way upstream does: dictionaries are appended, not merged.

    Arrays sharing one dictionary keep it; if the appended dictionary would not fit the key type
    the dictionaries are unified instead.
    """
    first = arrays[0].dictionary
    if all(_same_array(a.dictionary, first) for a in arrays[1:]):
        return pa.concat_arrays(arrays)
    key_type = arrays[0].type.index_type
    total = sum(len(a.dictionary) for a in arrays)
    if total > np.iinfo(key_type.to_pandas_dtype()).max:
        return pa.concat_arrays(arrays)
    keys = []
    base = 0
    for a in arrays:
        k = a.indices
        keys.append(pc.add(k, pa.scalar(base, key_type)) if base else k)
        base += len(a.dictionary)
    return pa.DictionaryArray.from_arrays(
        pa.concat_arrays(keys), pa.concat_arrays([a.dictionary for a in arrays]))


def concat_page_arrays(arrays: Sequence[pa.Array]) -> pa.Array:
    """One array with the rows of all ``arrays`` (the page's accumulated input)."""
    if len(arrays) == 1:
        return arrays[0]
    if pa.types.is_dictionary(arrays[0].type):
        return concat_dictionary_arrays(arrays)
    return pa.concat_arrays(arrays)


#: Arrow type ids of string and binary types (one set lookup: asked per column and page)
_BINARY_LIKE_IDS = frozenset(t.id for t in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()))


def _is_binary_like(dt: pa.DataType) -> bool:
    return dt.id in _BINARY_LIKE_IDS


def leaf_page_encoder_supported(dt: pa.DataType) -> bool:
    """Whether :func:`encode_leaf_page` can encode arrays of ``dt`` (one column, no children columns)."""
    if pa.types.is_null(dt) or _is_binary_like(dt) or bufs.fixed_width_bits(dt) is not None:
        return True
    if pa.types.is_fixed_size_list(dt):
        child = dt.value_type
        return (pa.types.is_fixed_size_list(child) and leaf_page_encoder_supported(child)) or \
            bufs.fixed_width_bits(child) is not None or pa.types.is_null(child)
    if pa.types.is_dictionary(dt):
        return _is_binary_like(dt.value_type) or bufs.fixed_width_bits(dt.value_type) is not None
    return False


def encode_leaf_page(arr: pa.Array, compression: CompressionConfig | None = None) -> EncodedArray:
    """Encode the rows of one page of a single-column ("primitive" in Lance terms) field."""
    page = PageBuilder()
    dt = arr.type
    if pa.types.is_dictionary(dt):
        enc = encode_arrow_dictionary(arr, page)
    elif _is_binary_like(dt):
        encoded = low_cardinality_dictionary(arr) if pa.types.is_string(dt) else None
        if encoded is not None:
            enc = encode_low_cardinality(encoded, page)
        else:
            enc = encode_binary(arr, page, compression)
    elif pa.types.is_fixed_size_list(dt):
        enc = encode_fixed_size_list(arr, page)
    elif pa.types.is_null(dt):
        enc = nullable_all_nulls()
    else:
        bits = bufs.fixed_width_bits(dt)
        if bits is None:
            raise UnsupportedTypeError(f"Arrow type {dt} cannot be written in Lance 2.0")
        enc = encode_fixed(arr, bits, page)
    return EncodedArray(page.buffers, enc, len(arr))
