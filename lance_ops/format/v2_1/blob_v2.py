"""Blob v2 columns of 2.2 data files: descriptors in the file, large values in side files.

What pylance 14 writes for a ``lance.blob.v2`` field of a 2.2 dataset (layout facts in
:mod:`lance_ops.format.blob_v2`), and what this module reproduces byte for byte:

* every valid value gets a **kind** from its size, in this order: ``size > dedicated threshold``
  (default 4 MiB) -> 2, a side file of its own; ``size > inline threshold`` (default 64 KiB) -> 1,
  appended to the data file's open *pack* side file; otherwise 0, inline in the data file's
  out-of-line buffers (64-byte padded, absolute position; an empty value takes the running
  position). A value given as a URI is kind 3 (``position``/``size`` its range, 0/0 = whole).
* side files are numbered per data file from 1 in order of first use (packs and dedicated files
  share the counter); columns are processed in order, rows in order. A pack is closed, and the
  next packed value starts a new one, when adding the value would take it past the pack
  threshold (default 1 GiB). Thresholds come from the field metadata keys
  ``lance-encoding:blob-{inline,dedicated}-size-threshold`` / ``...-pack-file-size-threshold``.
* the page is a full-zip page of a **variable packed struct**: per row ``kind u8, position u64,
  size u64, blob_id u32, len u32, uri bytes`` (offsets 32 bit); layer ``ALL_VALID_ITEM``, or
  ``NULLABLE_ITEM`` with one definition bit when the page has null rows (a null row stores no
  value); a page of nulls only is an all-null page. Batches accumulate into pages like any
  other column.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.errors import SchemaMismatchError, UnsupportedError
from lance_ops.format import blob_v2
from lance_ops.format.container import PAGE_ALIGNMENT
from lance_ops.format.v2_1.blob import OutOfLineBuffers, large_binary_parts
from lance_ops.format.v2_1.compression import values as ev
from lance_ops.format.v2_1.layout import pages as lay
from lance_ops.io.base import ObjectStore, ObjectWriter

INLINE_THRESHOLD_KEY = b"lance-encoding:blob-inline-size-threshold"
DEDICATED_THRESHOLD_KEY = b"lance-encoding:blob-dedicated-size-threshold"
PACK_FILE_THRESHOLD_KEY = b"lance-encoding:blob-pack-file-size-threshold"
DEFAULT_INLINE_THRESHOLD = 64 * 1024
DEFAULT_DEDICATED_THRESHOLD = 4 * 1024 * 1024
DEFAULT_PACK_FILE_THRESHOLD = 1024 ** 3

#: bytes of a descriptor row before the URI: kind, position, size, blob_id, URI length
_FIXED_ROW = 1 + 8 + 8 + 4 + 4


@dataclass(frozen=True)
class Thresholds:
    """Size thresholds of a blob v2 field: up to ``inline`` bytes in the data file, from ``dedicated`` bytes a side
    file of its own, packed side files cut at ``pack_file`` bytes."""

    inline: int = DEFAULT_INLINE_THRESHOLD
    dedicated: int = DEFAULT_DEDICATED_THRESHOLD
    pack_file: int = DEFAULT_PACK_FILE_THRESHOLD


def thresholds_of(field: pa.Field) -> Thresholds:
    """The field's size thresholds (metadata), pylance's defaults where absent."""
    md = field.metadata or {}

    def one(key: bytes, default: int, allow_zero: bool) -> int:
        raw = md.get(key, md.get(key.decode()))
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise SchemaMismatchError(f"field {field.name!r}: {key.decode()} must be an integer, got {raw!r}") from None
        if value < 0 or (value == 0 and not allow_zero):
            raise SchemaMismatchError(
                f"field {field.name!r}: {key.decode()} must be {'non-negative' if allow_zero else 'positive'}, "
                f"got {value}")
        return value

    return Thresholds(one(INLINE_THRESHOLD_KEY, DEFAULT_INLINE_THRESHOLD, True),
                      one(DEDICATED_THRESHOLD_KEY, DEFAULT_DEDICATED_THRESHOLD, False),
                      one(PACK_FILE_THRESHOLD_KEY, DEFAULT_PACK_FILE_THRESHOLD, False))


# --------------------------------------------------------------------------------------------
# side files
# --------------------------------------------------------------------------------------------
class SideFiles:
    """The ``.blob`` side files of one data file (``<data dir>/<stem>/<id>.blob``).

    Dedicated values are written with one put each; packed values stream into the open pack.
    :meth:`close` publishes the open pack; :meth:`abort` removes everything written.
    """

    def __init__(self, store: ObjectStore, data_file_path: str) -> None:
        stem = data_file_path[: -len(".lance")] if data_file_path.endswith(".lance") else data_file_path
        self._store = store
        self._stem = stem
        self._next_id = 1
        self._pack: Optional[tuple[int, ObjectWriter]] = None  # (blob id, writer)
        self.written: list[str] = []

    def _path(self, blob_id: int) -> str:
        return f"{self._stem}/{blob_v2.side_file_name(blob_id)}"

    def _new_id(self) -> int:
        blob_id = self._next_id
        self._next_id += 1
        return blob_id

    def dedicated(self, value: memoryview) -> int:
        """The id of a new side file holding ``value`` alone (written now, one put)."""
        blob_id = self._new_id()
        path = self._path(blob_id)
        self.written.append(path)
        with self._store.open_output(path) as out:  # streamed: no copy of the value
            out.write(value)
        return blob_id

    def packed(self, value: memoryview, pack_threshold: int) -> tuple[int, int]:
        """(blob id, position) of ``value`` appended to the open pack (a new one when it would
        take the open pack past ``pack_threshold``)."""
        if self._pack is not None:
            _, writer = self._pack
            if writer.tell() > 0 and writer.tell() + len(value) > pack_threshold:
                self._close_pack()
        if self._pack is None:
            blob_id = self._new_id()
            path = self._path(blob_id)
            self._pack = (blob_id, self._store.open_output(path))
            self.written.append(path)
        blob_id, writer = self._pack
        position = writer.tell()
        writer.write(value)
        return blob_id, position

    def _close_pack(self) -> None:
        if self._pack is not None:
            _, writer = self._pack
            self._pack = None
            writer.close()

    def close(self) -> None:
        """Publish the open pack file (the dedicated files are already written)."""
        self._close_pack()

    def abort(self) -> None:
        """Drop the open pack and delete every side file written (best effort), when the data file fails."""
        if self._pack is not None:
            _, writer = self._pack
            self._pack = None
            writer.abort()
        for path in self.written:
            try:
                self._store.delete(path)
            except Exception:  # noqa: BLE001 - best effort; cleanup removes orphans
                pass
        self.written = []


# --------------------------------------------------------------------------------------------
# descriptors
# --------------------------------------------------------------------------------------------
def _child(children: dict, name: str, n: int, dtype: pa.DataType) -> pa.Array:
    arr = children.get(name)
    return arr if arr is not None else pa.nulls(n, dtype)


def describe(logical: pa.StructArray, field: pa.Field, thresholds: Thresholds, external: OutOfLineBuffers,
             side_files: Callable[[], SideFiles]) -> pa.StructArray:
    """Descriptors (``blob_v2.DESCRIPTOR_TYPE``) of ``logical`` (a ``struct<data, uri[, position,
    size]>`` as :func:`lance_ops.format.blob_v2.to_logical` makes it). Inline bytes go to
    ``external``, larger values to side files. Bad rows raise before anything is stored."""
    n = len(logical)
    valid = np.ones(n, bool) if logical.null_count == 0 else np.asarray(logical.is_valid().to_numpy(zero_copy_only=False), bool)
    kids = dict(zip([f.name for f in logical.type], logical.flatten()))
    data = _child(kids, "data", n, pa.large_binary())
    uri = _child(kids, "uri", n, pa.utf8())
    has_data = valid & np.asarray(data.is_valid().to_numpy(zero_copy_only=False), bool)
    has_uri = valid & np.asarray(uri.is_valid().to_numpy(zero_copy_only=False), bool)
    _check_rows(field, kids, valid, has_data, has_uri)

    offs, raw = large_binary_parts(data)
    lens = np.where(has_data, np.diff(offs), 0).astype(np.int64)
    dedicated = has_data & (lens > thresholds.dedicated)
    inline = has_data & ~dedicated & (lens <= thresholds.inline)
    packed = has_data & ~dedicated & ~inline

    kind = np.zeros(n, np.uint8)
    position = np.zeros(n, np.uint64)
    size = np.where(has_data, lens, 0).astype(np.uint64)
    blob_id = np.zeros(n, np.uint32)
    kind[packed] = blob_v2.KIND_PACKED
    kind[dedicated] = blob_v2.KIND_DEDICATED

    # inline: 64-byte padded, in row order; an empty value takes the running position
    padded = np.where(inline & (lens > 0), lens + (-lens) % PAGE_ALIGNMENT, 0)
    running = external.position + np.cumsum(padded) - padded
    position[inline] = running[inline].astype(np.uint64)
    if inline.any():
        external.add_values(data, inline)

    for i in np.flatnonzero(packed | dedicated):  # values > 64 KiB: few per batch
        # (numpy's stubs lack __buffer__: an ndarray is a buffer)
        value = memoryview(raw)[int(offs[i]):int(offs[i + 1])]  # type: ignore[arg-type]
        if dedicated[i]:
            blob_id[i] = side_files().dedicated(value)
        else:
            blob_id[i], position[i] = side_files().packed(value, thresholds.pack_file)

    uris = pa.array([""] * n, pa.utf8()) if not has_uri.any() else _uri_column(uri, has_uri)
    if has_uri.any():
        kind[has_uri] = blob_v2.KIND_EXTERNAL
        pos_in = kids.get("position")
        size_in = kids.get("size")
        if pos_in is not None and size_in is not None:  # the logical type has both or neither
            p = np.asarray(pos_in.fill_null(0).to_numpy(zero_copy_only=False), np.uint64)
            s = np.asarray(size_in.fill_null(0).to_numpy(zero_copy_only=False), np.uint64)
            position[has_uri] = p[has_uri]
            size[has_uri] = s[has_uri]
    arrays = [pa.array(kind), pa.array(position), pa.array(size), pa.array(blob_id), uris]
    mask = None if valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays(arrays, fields=list(blob_v2.DESCRIPTOR_TYPE), mask=mask)


def _uri_column(uri: pa.Array, has_uri: np.ndarray) -> pa.Array:
    import pyarrow.compute as pc

    return pc.if_else(pa.array(has_uri), uri.cast(pa.utf8()), pa.scalar("", pa.utf8()))


def _check_rows(field: pa.Field, kids: dict, valid: np.ndarray, has_data: np.ndarray, has_uri: np.ndarray) -> None:
    """Every valid row sets exactly one of data and uri; a URI range sets both ends, size > 0."""
    name = field.name
    both = np.flatnonzero(has_data & has_uri)
    if len(both):
        raise SchemaMismatchError(f"blob column {name!r}, row {int(both[0])}: a blob cannot have both data and uri")
    neither = np.flatnonzero(valid & ~has_data & ~has_uri)
    if len(neither):
        raise SchemaMismatchError(
            f"blob column {name!r}, row {int(neither[0])}: a blob must set data or uri (a null blob is a null row)")
    pos_in, size_in = kids.get("position"), kids.get("size")
    if pos_in is None or size_in is None:  # the logical type has both or neither
        return
    p_set = np.asarray(pos_in.is_valid().to_numpy(zero_copy_only=False), np.bool_) & valid
    s_set = np.asarray(size_in.is_valid().to_numpy(zero_copy_only=False), np.bool_) & valid
    bad = np.flatnonzero(p_set != s_set)
    if len(bad):
        raise SchemaMismatchError(
            f"blob column {name!r}, row {int(bad[0])}: an external blob range sets both position and size, or neither")
    bad = np.flatnonzero((p_set | s_set) & ~has_uri)
    if len(bad):
        raise SchemaMismatchError(f"blob column {name!r}, row {int(bad[0])}: position/size need a uri")
    sizes = np.asarray(size_in.fill_null(1).to_numpy(zero_copy_only=False), np.uint64)
    bad = np.flatnonzero(s_set & (sizes == 0))
    if len(bad):
        raise SchemaMismatchError(f"blob column {name!r}, row {int(bad[0])}: an external blob range needs size > 0")


def check_external_uris(logical: pa.StructArray, field: pa.Field, allow_outside_bases: bool) -> None:
    """External URIs must be absolute (``scheme://...``); as pylance without registered bases,
    they are only stored when ``allow_outside_bases`` is set."""
    kids = dict(zip([f.name for f in logical.type], logical.flatten()))
    uri = kids.get("uri")
    if uri is None or uri.null_count == len(uri):
        return
    if not allow_outside_bases:
        first = next(u for u in uri.to_pylist() if u is not None)
        raise UnsupportedError(
            f"blob column {field.name!r}: external blob URI {first!r} is outside registered external bases "
            "(lance_ops registers none). Pass allow_external_blob_outside_bases=True to store absolute URIs.")
    import pyarrow.compute as pc

    ok = pc.match_substring_regex(uri, r"^[A-Za-z][A-Za-z0-9+.-]*://")
    bad = np.flatnonzero(~np.asarray(ok.fill_null(True).to_numpy(zero_copy_only=False), bool))
    if len(bad):
        raise UnsupportedError(
            f"blob column {field.name!r}, row {int(bad[0])}: external blob URI {uri[int(bad[0])].as_py()!r} is "
            "not an absolute URI (scheme://...)")


# --------------------------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------------------------
def descriptor_encoding() -> pb.CompressiveEncoding:
    """The variable packed struct encoding of the descriptor rows (kind u8, position, size, blob id, uri)."""
    e = pb.CompressiveEncoding()
    vps = e.variable_packed_struct
    for bits in (8, 64, 64, 32):
        f = vps.fields.add()
        f.value.CopyFrom(ev.enc_flat(bits))
        f.bits_per_value = bits
    f = vps.fields.add()
    f.value.CopyFrom(ev.enc_variable(32))
    f.bits_per_length = 32
    return e


def descriptor_rows(desc: pa.StructArray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets n + 1, row bytes) of the packed descriptor rows; null rows are empty."""
    n = len(desc)
    valid = np.ones(n, bool) if desc.null_count == 0 else np.asarray(desc.is_valid().to_numpy(zero_copy_only=False), bool)
    kids = desc.flatten()
    uri = kids[4].fill_null("")
    ub = uri.buffers()
    uoffs = np.frombuffer(ub[1], np.int32, count=n + 1, offset=uri.offset * 4).astype(np.int64)
    udata = np.frombuffer(ub[2], np.uint8) if ub[2] is not None else np.zeros(0, np.uint8)
    ulen = np.where(valid, np.diff(uoffs), 0)
    row_len = np.where(valid, _FIXED_ROW + ulen, 0)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(row_len, out=offs[1:])
    out = np.zeros(int(offs[-1]), np.uint8)
    rows = np.flatnonzero(valid)
    fixed = np.zeros((len(rows), _FIXED_ROW), np.uint8)
    col = 0
    for arr, width in zip(kids[:4], (1, 8, 8, 4)):
        vals = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))[rows]
        fixed[:, col:col + width] = vals.astype(f"<u{width}").view(np.uint8).reshape(-1, width)
        col += width
    fixed[:, col:col + 4] = ulen[rows].astype("<u4").view(np.uint8).reshape(-1, 4)
    starts = offs[:-1][rows]
    out[(starts[:, None] + np.arange(_FIXED_ROW)[None, :]).reshape(-1)] = fixed.reshape(-1)
    lv = ulen[rows]
    total = int(lv.sum())
    if total:  # URI bytes follow the fixed part of their row
        within = np.arange(total) - np.repeat(np.cumsum(lv) - lv, lv)
        dst = np.repeat(starts + _FIXED_ROW, lv) + within
        src = np.repeat(uoffs[:-1][rows], lv) + within
        out[dst] = udata[src]
    return offs, out


def descriptor_page(desc: pa.StructArray) -> lay.PageOut:
    """A full-zip page of blob v2 descriptors, as pylance writes it."""
    n = len(desc)
    if n and desc.null_count == n:  # nothing but nulls: an all-null page without buffers
        return lay.all_null_page([pb.RepDefLayer.REPDEF_NULLABLE_ITEM], None, None, simple=True)
    offs, data = descriptor_rows(desc)
    pv = ev.PerValue(descriptor_encoding(), offsets=offs, data=data, offset_bits=32)
    # pylance sizes the repetition index as if null rows held a descriptor too
    valid_rows = n - desc.null_count
    uri_bytes = int(offs[-1]) - valid_rows * _FIXED_ROW
    estimate = n * (4 + _FIXED_ROW) + uri_bytes
    if desc.null_count:
        valid = np.asarray(desc.is_valid().to_numpy(zero_copy_only=False), bool)
        defs = (~valid).astype(np.uint16)
        return lay.fullzip_page(pv, None, defs, valid, [pb.RepDefLayer.REPDEF_NULLABLE_ITEM], None, n,
                                index_estimate=estimate + n)
    return lay.fullzip_page(pv, None, None, None, [pb.RepDefLayer.REPDEF_ALL_VALID_ITEM], None, n,
                            index_estimate=estimate)


class BlobV2FieldEncoder:
    """The encoder of one top-level blob v2 field (one column): logical values in, descriptor
    pages out. Has the surface of ``v2_1.encode.FieldEncoderV21``."""

    def __init__(self, field: pa.Field, first_column: int, cache_bytes: int, max_page_bytes: int,
                 side_files: Callable[[], SideFiles]) -> None:
        self.field = field
        self.thresholds = thresholds_of(field)
        self.first_column = first_column
        self.leaves = [((), field)]
        self.blob_leaves = [0]
        self.cache_bytes = cache_bytes
        self.max_page_bytes = max_page_bytes
        self._side_files = side_files
        self._queue: list[pa.StructArray] = []
        self._queued_bytes = 0
        self.rows = 0

    def columns(self) -> Iterator[int]:
        """The one column this field owns."""
        yield self.first_column

    def maybe_encode(self, array: pa.Array, external: Optional[OutOfLineBuffers] = None) -> list:
        """Describe ``array`` (bytes to ``external`` or side files) and queue it; the pages once the queue is full."""
        if external is None:
            raise ValueError("blob fields need the batch's out-of-line buffers")
        logical = blob_v2.to_logical(array, self.field)
        desc = describe(logical, self.field, self.thresholds, external, self._side_files)
        self._queue.append(desc)
        self._queued_bytes += desc.nbytes
        if self._queued_bytes >= self.cache_bytes:
            return self.flush()
        return []

    def flush(self) -> list:
        """Pages of every queued description (cut at ``max_page_bytes``); the queue is emptied."""
        if not self._queue:
            return []
        from lance_ops.format.v2_1.encode import EncodedPageV21

        desc = self._queue[0] if len(self._queue) == 1 else pa.concat_arrays(self._queue)
        self._queue, self._queued_bytes = [], 0
        pages = []
        parts = max(1, min(len(desc), -(-desc.nbytes // self.max_page_bytes)))
        step = -(-len(desc) // parts)
        for start in range(0, len(desc), step):
            piece = desc.slice(start, step)
            page = descriptor_page(piece)
            pages.append(EncodedPageV21(self.first_column, len(piece), page.buffers, page.layout, priority=self.rows))
            self.rows += len(piece)
        return pages

    def finish(self) -> list:
        """Nothing left at the end of the file (``flush`` wrote every page)."""
        return []
