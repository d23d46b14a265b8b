"""Stable row ids: ``RowIdSequence`` and ``RowDatasetVersionSequence`` (rowids.proto).

A fragment of a dataset with stable row ids carries the row id of each of its physical rows (in
row order) as a ``RowIdSequence``: a list of ``U64Segment`` s, each one of

* ``range``              ``[start, end)``
* ``range_with_holes``   ``[start, end)`` minus the sorted absolute values in ``holes``
* ``range_with_bitmap``  ``[start, end)`` filtered by a bitmap, bit ``i`` = value ``start + i``,
                         least significant bit of each byte first (verified against pylance 14)
* ``sorted_array``       an ``EncodedU64Array`` known to be sorted
* ``array``              an ``EncodedU64Array`` in any order

and an ``EncodedU64Array`` is ``u16``/``u32`` little-endian offsets from ``base``, or raw ``u64``.

The created-at / last-updated-at version sequences are runs of ``(span, version)`` where only the
*length* of ``span`` (a segment over row offsets) matters: the runs, expanded, give one version
per physical row.

Everything here works on numpy ``uint64`` arrays; segments are materialised only while encoding
or decoding.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence, TypeVar

import numpy as np
from google.protobuf.message import DecodeError, Message
from numpy.typing import ArrayLike

from lance_ops._proto import rowids_pb2, table_pb2
from lance_ops.errors import CorruptFileError, ObjectNotFoundError
from lance_ops.io.base import ObjectStore
from lance_ops.table.paths import resolve_inside

if TYPE_CHECKING:  # deleted offsets may come as a bitmap; pyroaring is not needed to import this module
    from pyroaring import BitMap

_U64 = np.uint64
_U64_MAX = (1 << 64) - 1
_U16_LIMIT = 0xFFFF  # offsets use u16 when max - min < this
_U32_LIMIT = 0xFFFFFFFF

#: segment kinds (the oneof field names of U64Segment)
RANGE = "range"
RANGE_WITH_HOLES = "range_with_holes"
RANGE_WITH_BITMAP = "range_with_bitmap"
SORTED_ARRAY = "sorted_array"
ARRAY = "array"

_M = TypeVar("_M", bound=Message)


def _as_u64(values: ArrayLike) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != _U64:
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"row ids must be integers, got dtype {arr.dtype}")
        if arr.size and arr.dtype.kind == "i" and arr.min() < 0:
            raise ValueError("row ids must be >= 0")
        arr = arr.astype(_U64)
    return np.ascontiguousarray(arr.ravel())


# --- EncodedU64Array -------------------------------------------------------------------------
def encode_u64_array(values: ArrayLike) -> rowids_pb2.EncodedU64Array:
    """The narrowest ``EncodedU64Array`` for ``values`` (order preserved)."""
    v = _as_u64(values)
    msg = rowids_pb2.EncodedU64Array()
    if v.size == 0:
        msg.u16_array.SetInParent()
        return msg
    lo = int(v.min())
    span = int(v.max()) - lo
    if span < _U16_LIMIT:
        msg.u16_array.base = lo
        msg.u16_array.offsets = (v - _U64(lo)).astype("<u2").tobytes()
    elif span < _U32_LIMIT:
        msg.u32_array.base = lo
        msg.u32_array.offsets = (v - _U64(lo)).astype("<u4").tobytes()
    else:
        msg.u64_array.values = v.astype("<u8").tobytes()
    return msg


def _decode_offsets(raw: bytes, width: int, base: int, where: str) -> np.ndarray:
    if len(raw) % width:
        raise CorruptFileError(where, f"u{width * 8} offsets of {len(raw)} bytes are not whole values")
    offsets = np.frombuffer(raw, dtype=f"<u{width}").astype(_U64)
    if base:
        if offsets.size and base + int(offsets.max()) > _U64_MAX:
            raise CorruptFileError(where, "encoded u64 array overflows 64 bits")
        offsets += _U64(base)
    return offsets


def decode_u64_array(msg: rowids_pb2.EncodedU64Array, where: str = "<row ids>") -> np.ndarray:
    """The values of an ``EncodedU64Array`` as ``uint64`` (order kept); CorruptFileError naming
    ``where`` if no array is set or its offsets are not whole values."""
    kind = msg.WhichOneof("array")
    if kind == "u16_array":
        return _decode_offsets(msg.u16_array.offsets, 2, msg.u16_array.base, where)
    if kind == "u32_array":
        return _decode_offsets(msg.u32_array.offsets, 4, msg.u32_array.base, where)
    if kind == "u64_array":
        return _decode_offsets(msg.u64_array.values, 8, 0, where)
    raise CorruptFileError(where, "EncodedU64Array has no array set")


def _u64_array_len(msg: rowids_pb2.EncodedU64Array, where: str) -> int:
    kind = msg.WhichOneof("array")
    if kind == "u16_array":
        return len(msg.u16_array.offsets) // 2
    if kind == "u32_array":
        return len(msg.u32_array.offsets) // 4
    if kind == "u64_array":
        return len(msg.u64_array.values) // 8
    raise CorruptFileError(where, "EncodedU64Array has no array set")


# --- U64Segment ------------------------------------------------------------------------------
def _holes_of(v: np.ndarray) -> np.ndarray:
    """The values missing from ``[v[0], v[-1]]`` for sorted unique ``v``."""
    gaps = np.diff(v)
    idx = np.flatnonzero(gaps > 1)
    if idx.size == 0:
        return np.empty(0, dtype=_U64)
    starts = v[idx] + _U64(1)
    lens = (gaps[idx] - _U64(1)).astype(np.int64)
    before = np.cumsum(lens) - lens  # holes emitted before each gap
    total = int(lens.sum())
    return np.repeat(starts - before.astype(_U64), lens) + np.arange(total, dtype=_U64)


def choose_segment_kind(values: ArrayLike) -> str:
    """The segment kind :func:`encode_segment` picks for ``values`` (upstream's size rule)."""
    v = _as_u64(values)
    n = v.size
    if n == 0:
        return RANGE
    if n > 1 and not bool(np.all(v[1:] >= v[:-1])):
        return ARRAY
    lo, hi = int(v[0]), int(v[-1])
    if n > 1 and bool(np.any(v[1:] == v[:-1])):
        return SORTED_ARRAY  # duplicates: only an array keeps them
    if hi == _U64_MAX:
        return SORTED_ARRAY  # an exclusive end of 2**64 cannot be stored
    slots = hi - lo + 1
    holes = slots - n
    if holes == 0:
        return RANGE
    with_holes = 24 + 4 * holes
    with_bitmap = 24 + (slots + 7) // 8
    sorted_array = 24 + 2 * n
    best = min(with_holes, with_bitmap, sorted_array)
    if best == with_holes:
        return RANGE_WITH_HOLES
    if best == with_bitmap:
        return RANGE_WITH_BITMAP
    return SORTED_ARRAY


def encode_segment(values: ArrayLike, kind: str | None = None) -> rowids_pb2.U64Segment:
    """Encode ``values`` as one ``U64Segment`` of the most compact kind (or the one given)."""
    v = _as_u64(values)
    if kind is None:
        kind = choose_segment_kind(v)
    seg = rowids_pb2.U64Segment()
    if kind == ARRAY:
        seg.array.CopyFrom(encode_u64_array(v))
        return seg
    if kind == SORTED_ARRAY:
        if v.size > 1 and not bool(np.all(v[1:] >= v[:-1])):
            raise ValueError("sorted_array segment needs sorted values")
        seg.sorted_array.CopyFrom(encode_u64_array(v))
        return seg
    if v.size == 0:
        if kind != RANGE:
            raise ValueError(f"cannot encode an empty sequence as {kind}")
        seg.range.SetInParent()
        return seg
    if v.size > 1 and not bool(np.all(v[1:] > v[:-1])):
        raise ValueError(f"{kind} segment needs strictly increasing values")
    lo, hi = int(v[0]), int(v[-1])
    if hi == _U64_MAX:
        raise ValueError(f"{kind} segment cannot hold the value 2**64-1")
    if kind == RANGE:
        if hi - lo + 1 != v.size:
            raise ValueError("range segment needs contiguous values")
        seg.range.start = lo
        seg.range.end = hi + 1
    elif kind == RANGE_WITH_HOLES:
        seg.range_with_holes.start = lo
        seg.range_with_holes.end = hi + 1
        seg.range_with_holes.holes.CopyFrom(encode_u64_array(_holes_of(v)))
    elif kind == RANGE_WITH_BITMAP:
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[v - _U64(lo)] = True
        seg.range_with_bitmap.start = lo
        seg.range_with_bitmap.end = hi + 1
        seg.range_with_bitmap.bitmap = np.packbits(present, bitorder="little").tobytes()
    else:
        raise ValueError(f"unknown segment kind {kind!r}")
    return seg


def _check_range(start: int, end: int, where: str) -> int:
    if end < start:
        raise CorruptFileError(where, f"segment range end {end} is before its start {start}")
    return end - start


def decode_segment(seg: rowids_pb2.U64Segment, where: str = "<row ids>") -> np.ndarray:
    """The values of one segment as ``uint64``."""
    kind = seg.WhichOneof("segment")
    if kind == RANGE:
        _check_range(seg.range.start, seg.range.end, where)
        return np.arange(seg.range.start, seg.range.end, dtype=_U64)
    if kind == RANGE_WITH_HOLES:
        r = seg.range_with_holes
        width = _check_range(r.start, r.end, where)
        holes = decode_u64_array(r.holes, where)
        keep = np.ones(width, dtype=bool)
        if holes.size:
            if int(holes.min()) < r.start or int(holes.max()) >= r.end:
                raise CorruptFileError(where, "range_with_holes has a hole outside its range")
            keep[holes - _U64(r.start)] = False
        return np.flatnonzero(keep).astype(_U64) + _U64(r.start)
    if kind == RANGE_WITH_BITMAP:
        r = seg.range_with_bitmap
        width = _check_range(r.start, r.end, where)
        if len(r.bitmap) * 8 < width:
            raise CorruptFileError(
                where, f"range_with_bitmap covers {width} values but has {len(r.bitmap)} bitmap bytes"
            )
        bits = np.unpackbits(np.frombuffer(r.bitmap, dtype=np.uint8), count=width, bitorder="little")
        return np.flatnonzero(bits).astype(_U64) + _U64(r.start)
    if kind == SORTED_ARRAY:
        return decode_u64_array(seg.sorted_array, where)
    if kind == ARRAY:
        return decode_u64_array(seg.array, where)
    raise CorruptFileError(where, "U64Segment has no segment set")


def segment_length(seg: rowids_pb2.U64Segment, where: str = "<row ids>") -> int:
    """Number of values in a segment, without materialising it."""
    kind = seg.WhichOneof("segment")
    if kind == RANGE:
        return _check_range(seg.range.start, seg.range.end, where)
    if kind == RANGE_WITH_HOLES:
        r = seg.range_with_holes
        width = _check_range(r.start, r.end, where)
        return width - _u64_array_len(r.holes, where)
    if kind == RANGE_WITH_BITMAP:
        r = seg.range_with_bitmap
        width = _check_range(r.start, r.end, where)
        if len(r.bitmap) * 8 < width:
            raise CorruptFileError(where, "range_with_bitmap bitmap is too short")
        bits = np.unpackbits(np.frombuffer(r.bitmap, dtype=np.uint8), count=width, bitorder="little")
        return int(np.count_nonzero(bits))
    if kind == SORTED_ARRAY:
        return _u64_array_len(seg.sorted_array, where)
    if kind == ARRAY:
        return _u64_array_len(seg.array, where)
    raise CorruptFileError(where, "U64Segment has no segment set")


def _is_contiguous(v: np.ndarray) -> bool:
    return v.size > 0 and int(v[-1]) - int(v[0]) + 1 == v.size and bool(np.all(np.diff(v) == 1))


# --- RowIdSequence ---------------------------------------------------------------------------
class RowIdSequence:
    """The row ids of one fragment, as a list of segments (each a ``uint64`` array)."""

    __slots__ = ("segments",)

    def __init__(self, segments: Iterable[np.ndarray] = ()) -> None:
        self.segments: list[np.ndarray] = [_as_u64(s) for s in segments]

    # construction / serialisation
    @classmethod
    def from_range(cls, start: int, end: int) -> "RowIdSequence":
        """The ids ``[start, end)`` (one segment; none when empty)."""
        if end < start:
            raise ValueError("end must be >= start")
        return cls([np.arange(start, end, dtype=_U64)] if end > start else [])

    @classmethod
    def from_array(cls, values: ArrayLike) -> "RowIdSequence":
        """The ids ``values`` in their order, as one segment (none when empty)."""
        v = _as_u64(values)
        return cls([v] if v.size else [])

    @classmethod
    def from_proto(cls, msg: rowids_pb2.RowIdSequence, where: str = "<row ids>") -> "RowIdSequence":
        """Decode every segment of a parsed ``RowIdSequence``; CorruptFileError names ``where``."""
        return cls(decode_segment(s, where) for s in msg.segments)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "<row ids>") -> "RowIdSequence":
        """Parse and decode a serialized ``RowIdSequence``; CorruptFileError names ``where``."""
        return cls.from_proto(_parse(rowids_pb2.RowIdSequence(), data, where), where)

    def to_proto(self) -> rowids_pb2.RowIdSequence:
        """The protobuf message, each segment encoded in its most compact kind."""
        msg = rowids_pb2.RowIdSequence()
        for seg in self.segments:
            msg.segments.append(encode_segment(seg))
        return msg

    def to_bytes(self) -> bytes:
        """The serialized (deterministic) ``RowIdSequence`` stored inline or in a row-id file."""
        return self.to_proto().SerializeToString(deterministic=True)

    def to_numpy(self) -> np.ndarray:
        """All ids as one ``uint64`` array (a copy: the segments are not shared)."""
        if not self.segments:
            return np.empty(0, dtype=_U64)
        if len(self.segments) == 1:
            return self.segments[0].copy()
        return np.concatenate(self.segments)

    # inspection
    def __len__(self) -> int:
        return sum(int(s.size) for s in self.segments)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RowIdSequence):
            return NotImplemented
        return np.array_equal(self.to_numpy(), other.to_numpy())

    def __repr__(self) -> str:
        return f"RowIdSequence(len={len(self)}, segments={len(self.segments)})"

    def _bounds(self) -> np.ndarray:
        return np.cumsum([0] + [int(s.size) for s in self.segments])

    # transformations (all return new sequences)
    def slice(self, offset: int, length: int) -> "RowIdSequence":
        """Rows ``[offset, offset + length)``, segment boundaries kept."""
        total = len(self)
        if offset < 0 or length < 0 or offset + length > total:
            raise IndexError(f"slice [{offset}, {offset + length}) out of a sequence of {total}")
        end = offset + length
        bounds = self._bounds()
        out = []
        for seg, lo, hi in zip(self.segments, bounds[:-1], bounds[1:]):
            a, b = max(int(lo), offset), min(int(hi), end)
            if a < b:
                out.append(seg[a - lo : b - lo])
        return RowIdSequence(out)

    def mask(self, positions: ArrayLike | BitMap) -> "RowIdSequence":
        """Drop the rows at ``positions`` (offsets into the sequence, e.g. deleted offsets)."""
        pos = np.asarray(positions if not hasattr(positions, "to_array") else
                         np.frombuffer(positions.to_array(), dtype=np.uint32))
        if pos.size == 0:
            return RowIdSequence(self.segments)
        total = len(self)
        pos = pos.astype(np.int64, copy=False)
        if int(pos.min()) < 0 or int(pos.max()) >= total:
            raise IndexError(f"mask position out of a sequence of {total}")
        keep = np.ones(total, dtype=bool)
        keep[pos] = False
        bounds = self._bounds()
        out = []
        for seg, lo, hi in zip(self.segments, bounds[:-1], bounds[1:]):
            kept = seg[keep[lo:hi]]
            if kept.size:
                out.append(kept)
        return RowIdSequence(out)

    @staticmethod
    def concat(sequences: Iterable["RowIdSequence"]) -> "RowIdSequence":
        """Join sequences; touching contiguous ranges are merged into one segment."""
        out: list[np.ndarray] = []
        for seq in sequences:
            for seg in seq.segments:
                if not seg.size:
                    continue
                if (
                    out
                    and int(out[-1][-1]) + 1 == int(seg[0])
                    and _is_contiguous(out[-1])
                    and _is_contiguous(seg)
                ):
                    out[-1] = np.concatenate([out[-1], seg])
                else:
                    out.append(seg)
        return RowIdSequence(out)

    @staticmethod
    def rechunk(sequences: Iterable["RowIdSequence"], sizes: Sequence[int]) -> list["RowIdSequence"]:
        """Re-split the concatenation of ``sequences`` into chunks of ``sizes`` rows."""
        whole = RowIdSequence.concat(sequences)
        total = len(whole)
        if sum(int(s) for s in sizes) != total:
            raise ValueError(f"chunk sizes sum to {sum(sizes)} but the sequences hold {total} rows")
        out, offset = [], 0
        for size in sizes:
            out.append(whole.slice(offset, int(size)))
            offset += int(size)
        return out


def _parse(message: _M, data: bytes, where: str) -> _M:
    try:
        message.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as e:
        raise CorruptFileError(where, f"{type(message).__name__} protobuf does not decode: {e}") from e
    return message


def encode_row_ids(values: ArrayLike) -> bytes:
    """Serialized ``RowIdSequence`` with a single segment (empty input: no segments)."""
    return RowIdSequence.from_array(values).to_bytes()


def decode_row_ids(data: bytes, where: str = "<row ids>") -> np.ndarray:
    """All row ids of a serialized ``RowIdSequence`` as ``uint64``."""
    return RowIdSequence.from_bytes(data, where).to_numpy()


def read_fragment_row_ids(store: ObjectStore, base: str, fragment: table_pb2.DataFragment, manifest_path: str = "<manifest>", *,
                          check: bool = True) -> np.ndarray | None:
    """Row ids of a ``DataFragment`` (inline or external), None if it has none.

    The sequence must hold exactly one id per physical row; its length is checked before any
    segment is expanded, so a damaged range cannot make us allocate more than the fragment needs.
    CorruptFileError names the file the sequence was read from: ``manifest_path`` for inline ids.
    ``check=False`` (for ``verify``, which reports a wrong length itself) only refuses sequences
    longer than the fragment (the allocation guard).
    """
    which = fragment.WhichOneof("row_id_sequence")
    if which == "inline_row_ids":
        where, what = manifest_path, f"inline row ids of fragment {fragment.id}"
        data = fragment.inline_row_ids
    elif which == "external_row_ids":
        ext = fragment.external_row_ids
        path = resolve_inside(store, base, ext.path, what=f"external row-id path of fragment {fragment.id}",
                              where=manifest_path)
        where, what = store.uri(path), f"row ids of fragment {fragment.id}"
        try:
            data = store.read_range(path, ext.offset, ext.size)
        except ObjectNotFoundError as exc:
            raise ObjectNotFoundError(f"{exc} (row ids of fragment {fragment.id} in manifest {manifest_path})") from exc
    else:
        return None
    rows = int(fragment.physical_rows)
    try:
        msg = _parse(rowids_pb2.RowIdSequence(), data, where)
        count = sum(segment_length(seg, where) for seg in msg.segments)
        if count > rows or check and count != rows:
            raise CorruptFileError(where, f"{count} row ids for {rows} physical rows")
        ids = RowIdSequence.from_proto(msg, where).to_numpy()
        if ids.size > rows or check and ids.size != rows:
            raise CorruptFileError(where, f"{ids.size} row ids for {rows} physical rows")
    except CorruptFileError as exc:
        raise CorruptFileError(where, f"{what}: {exc.problem}") from None
    return ids


# --- RowDatasetVersionSequence ---------------------------------------------------------------
def encode_version_sequence(versions: ArrayLike) -> bytes:
    """Runs of equal consecutive versions; each span is ``range[start, end)`` of row offsets."""
    v = _as_u64(versions)
    msg = rowids_pb2.RowDatasetVersionSequence()
    if v.size:
        change = np.flatnonzero(v[1:] != v[:-1]) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [v.size]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            run = msg.runs.add()
            run.span.range.start = s
            run.span.range.end = e
            run.version = int(v[s])
    return msg.SerializeToString(deterministic=True)


def uniform_version_sequence(row_count: int, version: int) -> bytes:
    """All ``row_count`` rows at ``version`` (one run, span ``range[0, row_count)``)."""
    return encode_version_sequence(np.full(int(row_count), int(version), dtype=_U64))


def decode_version_sequence(data: bytes, where: str = "<version sequence>") -> np.ndarray:
    """One version per row (``uint64``), expanding the runs."""
    msg = _parse(rowids_pb2.RowDatasetVersionSequence(), data, where)
    if not msg.runs:
        return np.empty(0, dtype=_U64)
    lengths = np.fromiter((segment_length(r.span, where) for r in msg.runs), dtype=np.int64,
                          count=len(msg.runs))
    versions = np.fromiter((r.version for r in msg.runs), dtype=_U64, count=len(msg.runs))
    return np.repeat(versions, lengths)


def read_fragment_versions(store: ObjectStore, base: str, fragment: table_pb2.DataFragment, which: str = "created") -> np.ndarray | None:
    """Per-row created-at (``which="created"``) or last-updated-at (``"updated"``) versions."""
    if which == "created":
        oneof, inline = "created_at_version_sequence", "inline_created_at_versions"
    elif which == "updated":
        oneof, inline = "last_updated_at_version_sequence", "inline_last_updated_at_versions"
    else:
        raise ValueError("which must be 'created' or 'updated'")
    kind = fragment.WhichOneof(oneof)
    if kind is None:
        return None
    where = f"fragment {fragment.id} {which} versions"
    if kind == inline:
        return decode_version_sequence(getattr(fragment, inline), where)
    ext = getattr(fragment, kind)
    path = resolve_inside(store, base, ext.path, what=f"{kind} path of fragment {fragment.id}", where=store.uri(base))
    return decode_version_sequence(store.read_range(path, ext.offset, ext.size), path)
