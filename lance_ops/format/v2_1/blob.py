"""Blob columns (``lance-encoding:blob``) of the Lance writers: the values live out of line.

What pylance 14 writes (``LanceFileWriter``, every file version; ``write_dataset`` at 2.0 / 2.1 --
at 2.2 pylance's dataset layer turns such fields into ``lance.blob.v2`` columns instead: a packed
struct of (kind, position, size, blob_id, blob_uri) descriptors with large values in side
``.blob`` files, which lance_ops' datasets write the same way, see ``v2_1.blob_v2``):

* a field is a blob field when its metadata *has* the key ``lance-encoding:blob`` (any value, even
  ``false``); its type must be ``large_binary`` (anything else is refused);
* **out-of-line bytes**: every valid, non-empty value is written as its own buffer, padded with
  0x48 to a 64-byte boundary, at the current end of the file *when the batch arrives* -- all blob
  values of a batch (fields in column order, rows in order) go before any page that batch
  completes. Pages only hold *descriptions*;
* **description**: ``(position u64, size u64)`` -- the absolute file offset and length of the
  bytes; an empty value is ``(0, 0)``; a null is ``(1, 0)`` in 2.0 and ``(def << 16 | rep, 0)``
  in 2.1+ (``def`` the value's definition level, > 0);
* **2.1 / 2.2 page**: ``PageLayout.blob_layout`` whose ``layers`` are the blob field's rep/def
  layers (struct parents included) and whose ``inner_layout`` is a mini-block page of the
  descriptions as a packed struct (``packed_struct([64, 64], flat(128))``, no levels, layer
  ``ALL_VALID_ITEM``). The layers are those of the batches in the page: pylance closes the pending
  page when a batch's layers differ from the previous batch's. Blobs below a list are refused
  (pylance 14 writes such files but cannot read them back). The column encoding stays ``values``.
* **2.0 page** (``v2_0.blob``): ``packed_struct`` of two ``nullable(no_nulls(flat(64)))``
  over one buffer of the 16-byte descriptions; column encoding ``blob(inner=values)``.

Compression metadata on a blob field is ignored (as pylance does): the descriptions are always
stored flat.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.errors import UnsupportedTypeError
from lance_ops.format.container import PAD_BYTE, PAGE_ALIGNMENT
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.v2_1.layout import pages as lay
from lance_ops.format.version import FileVersion

BLOB_META_KEY = b"lance-encoding:blob"
DESCRIPTION = pa.binary(16)  # one (position u64, size u64) pair, as stored in a queue
_COPY_BLOCK = 4 << 20  # bytes of small values scattered per numpy pass
_BIG_VALUE = 1 << 20  # values at least this long are copied one slice each


def is_blob(field: pa.Field) -> bool:
    """Whether ``field`` is a legacy blob field (metadata ``lance-encoding:blob``): its bytes go out of line."""
    md = field.metadata or {}
    return BLOB_META_KEY in md


def check_blob_field(field: pa.Field, name: str, below_list: bool, version: str) -> None:
    """Refuse (before anything is written) blob fields pylance cannot write or read back."""
    t = field.type
    if not pa.types.is_large_binary(t):
        raise UnsupportedTypeError(
            f"field {name!r}: blob encoding (lance-encoding:blob) needs large_binary values, the field "
            f"has type {t}")
    if below_list and version != FileVersion.V2_0:
        raise UnsupportedTypeError(
            f"field {name!r}: blob fields inside lists cannot be written to Lance {version} files "
            "(only file version 2.0 stores them)")


# --------------------------------------------------------------------------------------------
# out-of-line buffers
# --------------------------------------------------------------------------------------------
class OutOfLineBuffers:
    """Blob bytes of one batch, to be written at ``start`` (a 64-aligned file offset) before the
    batch's pages. ``add_values`` returns the absolute position of every value it stores."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.position = start
        self.chunks: list[np.ndarray] = []

    @property
    def size(self) -> int:
        """Bytes stored so far (padding included): what the batch adds to the file before its pages."""
        return self.position - self.start

    def add_values(self, values: pa.Array, store: np.ndarray) -> np.ndarray:
        """Store ``values[i]`` for every ``store[i]`` with a non-empty value; uint64 positions
        (0 elsewhere). Each value is padded with 0x48 to a multiple of 64 bytes."""
        n = len(values)
        offs, data = large_binary_parts(values)
        lens = np.diff(offs)
        positions = np.zeros(n, dtype=np.uint64)
        idx = np.flatnonzero(store & (lens > 0))
        if len(idx) == 0:
            return positions
        ln = lens[idx]
        padded = ln + (-ln) % PAGE_ALIGNMENT
        dst = np.zeros(len(idx), dtype=np.int64)
        np.cumsum(padded[:-1], out=dst[1:])
        total = int(padded.sum())
        out = np.full(total, PAD_BYTE[0], dtype=np.uint8)
        _scatter(out, data, offs[idx], dst, ln)
        positions[idx] = (self.position + dst).astype(np.uint64)
        self.chunks.append(out)
        self.position += total
        return positions


def large_binary_parts(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets, n + 1, not rebased; data bytes) of a large_binary slice."""
    n = len(values)
    bufs = values.buffers()
    if bufs[1] is None:
        offs = np.zeros(n + 1, dtype=np.int64)
    else:
        offs = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1, offset=values.offset * 8)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if len(bufs) > 2 and bufs[2] is not None else np.zeros(0, np.uint8)
    return offs, data


def _scatter(out: np.ndarray, data: np.ndarray, src: np.ndarray, dst: np.ndarray, lens: np.ndarray) -> None:
    """out[dst[k]:dst[k]+lens[k]] = data[src[k]:src[k]+lens[k]] for every k, vectorised: values of
    1 MiB and more one slice copy each, the small ones in numpy passes of about 4 MiB."""
    big = np.flatnonzero(lens >= _BIG_VALUE)
    for k in big.tolist():  # one iteration per MiB or more of data
        s, d, n = int(src[k]), int(dst[k]), int(lens[k])
        out[d:d + n] = data[s:s + n]
    small = np.flatnonzero(lens < _BIG_VALUE)
    if len(small) == 0:
        return
    sl = lens[small]
    cum = np.cumsum(sl)
    block = (cum - 1) // _COPY_BLOCK
    cuts = np.flatnonzero(np.diff(block)) + 1
    bounds = np.concatenate(([0], cuts, [len(small)]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # one iteration per ~4 MiB
        ks = small[a:b]
        ln = lens[ks]
        tot = int(ln.sum())
        start = np.zeros(len(ks), dtype=np.int64)
        np.cumsum(ln[:-1], out=start[1:])
        within = np.arange(tot, dtype=np.int64) - np.repeat(start, ln)
        out[np.repeat(dst[ks], ln) + within] = data[np.repeat(src[ks], ln) + within]


# --------------------------------------------------------------------------------------------
# descriptions
# --------------------------------------------------------------------------------------------
def describe(values: pa.Array, valid: Optional[np.ndarray], null_position: np.ndarray | int,
             external: OutOfLineBuffers) -> np.ndarray:
    """(n, 2) uint64 descriptions of ``values`` (large_binary, one per row), writing the bytes of
    valid non-empty values to ``external``. ``valid``: effective validity (None: all valid);
    ``null_position``: the position stored for nulls (1 in 2.0, ``def << 16`` per row in 2.1+)."""
    n = len(values)
    store = np.ones(n, dtype=bool) if valid is None else valid
    offs, _ = large_binary_parts(values)
    lens = np.diff(offs).astype(np.uint64)
    out = np.zeros((n, 2), dtype=np.uint64)
    out[:, 0] = external.add_values(values, store)
    out[:, 1] = np.where(store, lens, 0)
    if valid is not None:
        nulls = ~valid
        pos = np.broadcast_to(np.asarray(null_position, dtype=np.uint64), (n,))
        out[nulls, 0] = pos[nulls]
        out[nulls, 1] = 0
    return out


def descriptions_array(desc: np.ndarray) -> pa.Array:
    """The descriptions as a queue-able ``fixed_size_binary(16)`` array (16 bytes a row)."""
    raw = np.ascontiguousarray(desc, dtype="<u8").reshape(-1)
    return pa.FixedSizeBinaryArray.from_buffers(DESCRIPTION, len(desc), [None, pa.py_buffer(raw.view(np.uint8))])


def descriptions_bytes(arr: pa.Array) -> np.ndarray:
    """The 16-byte rows of a ``descriptions_array`` slice, as a flat uint8 array."""
    n = len(arr)
    return np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=n * 16, offset=arr.offset * 16)


# --------------------------------------------------------------------------------------------
# 2.1+ pages
# --------------------------------------------------------------------------------------------
def description_encoding() -> pb.CompressiveEncoding:
    """The packed-struct encoding of the (position u64, size u64) blob descriptions."""
    e = pb.CompressiveEncoding()
    e.packed_struct.bits_per_value.extend([64, 64])
    e.packed_struct.values.CopyFrom(ev.enc_flat(128))
    return e


def blob_page(desc: pa.Array, layers: list[int], version: str) -> lay.PageOut:
    """A ``blob_layout`` page over the descriptions ``desc`` (``descriptions_array`` slice)."""
    n = len(desc)
    large = version >= FileVersion.V2_2
    mb = ev.flat_miniblock(descriptions_bytes(desc), n, 128)
    mb.encoding = description_encoding()
    inner = lay.miniblock_page(mb, None, None, [pb.REPDEF_ALL_VALID_ITEM], None, n, large, limit_21=False)
    assert inner is not None  # only the 2.1 chunk limit (off here) makes it give up
    layout = pb.PageLayout()
    layout.blob_layout.inner_layout.CopyFrom(inner.layout)
    layout.blob_layout.layers.extend(layers)
    return lay.PageOut(layout, inner.buffers)


def replace_leaf(arr: pa.Array, path: tuple, depth: int, leaf: pa.Array) -> pa.Array:
    """``arr`` (of ``path[depth]``) with the leaf ``path[-1]`` replaced by ``leaf`` (one entry per
    row of ``arr``; only structs may lie between). Struct validity is kept."""
    if depth == len(path) - 1:
        return leaf
    t = arr.type
    target = _child_index(t, path[depth + 1].name)
    children, fields = [], []
    for i in range(t.num_fields):
        f = t.field(i)
        child = arr.field(i)  # applies the struct's offset
        if i == target:
            child = replace_leaf(child, path, depth + 1, leaf)
            f = pa.field(f.name, child.type, f.nullable, f.metadata)
        children.append(child)
        fields.append(f)
    mask = None
    if arr.null_count:
        mask = pa.array(~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool))
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def _child_index(t: pa.StructType, name: str) -> int:
    for i in range(t.num_fields):  # the first child of that name (as the shredder finds it)
        if t.field(i).name == name:
            return i
    raise KeyError(name)


def leaf_of(arr: pa.Array, path: tuple) -> pa.Array:
    """The (one entry per row) leaf ``path[-1]`` below the struct ``arr`` of ``path[0]``."""
    for f in path[1:]:
        arr = arr.field(_child_index(arr.type, f.name))
    return arr
