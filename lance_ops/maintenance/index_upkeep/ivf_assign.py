"""Assign new vectors to an IVF segment's existing centroids and encode them with its quantizer.

What pylance 14.0.2's ``optimize_indices`` does to a new row (checked against its output, IVF_FLAT /
IVF_PQ / IVF_SQ with l2, cosine and dot; the tests compare the codes it writes):

* **cosine**: the vector is divided by its L2 norm first (f32, squares summed in dimension order); everything below uses the normalised
  vector and l2 distances (the stored centroids are not unit vectors);
* **partition**: the nearest centroid, by squared l2 (l2, cosine) or by the dot distance
  ``1 - x.c`` (dot); the IVF ``loss`` of a build is the sum of those nearest distances;
* **PQ** (``__pq_code``, ``nbits`` 8): l2 and cosine encode the *residual* (vector minus its
  centroid), dot the vector itself; each of the ``m`` sub-vectors gets the nearest of its 256
  codebook entries, by l2 (l2, cosine) or dot. The codebook buffer is a ``Tensor`` message
  (``data_type`` 1, ``shape`` 2, ``data`` 3) whose data is ``m`` blocks of 256 x ``dim/m`` values;
* **SQ** (``__sq_code``): ``(v - start) * 255 / (end - start)`` per dimension, in f64, truncated
  and saturated to 0..255 (upstream ``scale_to_u8``), with the stored bounds (never widened);
* **FLAT** (``flat``): the vector itself.

Work is vectorised per batch; distance matrices are bounded by :data:`MAX_DISTANCE_CELLS`. The
nearest centroid / codebook entry is screened in float32 (:func:`nearest_screened_stacked`, one
small BLAS product per chunk) and only near ties are decided in float64, which gives the float64
choice for every row (ADR 0028).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.format.proto_wire import encode_varint, read_varint, wire_records
from lance_ops.maintenance.index_remap.ivf_files import IVF_METADATA_KEY, IndexFile

#: at most this many distances are held at once (rows x centroids), ~64 MiB of f64
MAX_DISTANCE_CELLS = 1 << 23
#: rows x points x dimensions of one float32 screening product: at most OpenBLAS' threshold for
#: running a GEMM on the calling thread (65536 x 4), so no thread pool is woken per chunk
SCREEN_CELLS = 1 << 18
#: float32 screening margin, in units of the rounding-error bound (generous: near ties go to float64)
SCREEN_SLACK = 4.0
#: IVF message field of the centroids tensor and of the training loss (a double)
_CENTROIDS_FIELD = 4
_LOSS_FIELD = 5
#: Tensor message fields
_TENSOR_SHAPE, _TENSOR_DATA = 2, 3
_FLOAT_BY_SIZE = {2: np.float16, 4: np.float32, 8: np.float64}
DISTANCE_TYPES = ("l2", "cosine", "dot")
CODE_COLUMNS = {"FLAT": "flat", "PQ": "__pq_code", "SQ": "__sq_code"}


def _fields(message: bytes) -> dict[int, bytes]:
    """Last value of each length-delimited or varint top-level field of a message."""
    return {number: message[start:end] for number, _, _, _, start, end in wire_records(message)}


def decode_tensor(message: bytes, path: str) -> np.ndarray:
    """The values of a serialized ``Tensor`` as a 2-D float64 array (its ``shape``'s first dim x the rest)."""
    try:
        fields = _fields(message)
        raw_shape = fields.get(_TENSOR_SHAPE, b"")
        shape: list[int] = []
        pos = 0
        while pos < len(raw_shape):
            value, pos = read_varint(raw_shape, pos)
            shape.append(value)
    except (ValueError, IndexError):
        raise CorruptFileError(path, "a tensor of the vector index does not decode") from None
    data = fields.get(_TENSOR_DATA, b"")
    count = int(np.prod(shape)) if shape else 0
    if count == 0 or len(data) % count or len(data) // count not in _FLOAT_BY_SIZE:
        raise CorruptFileError(path, f"a tensor of shape {shape} has {len(data)} data bytes")
    values = np.frombuffer(data, dtype=_FLOAT_BY_SIZE[len(data) // count]).astype(np.float64)
    return values.reshape(shape[0], -1)


def centroids(index: IndexFile, path: str) -> np.ndarray:
    """The IVF centroids (partitions x dim, float64) of a segment's ``index.idx``."""
    message = index.buffers[index.buffer_index(IVF_METADATA_KEY, path)]
    raw = _fields(message).get(_CENTROIDS_FIELD)
    if raw is None:
        raise UnsupportedError(f"{path}: the IVF model has no centroids tensor (an older layout lance_ops "
                               "does not update); nothing was written")
    return decode_tensor(raw, path)


def ivf_loss(message: bytes) -> float | None:
    """The ``loss`` of a serialized IVF message (None when absent)."""
    raw = _fields(message).get(_LOSS_FIELD)
    return float(np.frombuffer(raw, dtype="<f8")[0]) if raw is not None and len(raw) == 8 else None


def with_loss(message: bytes, loss: float) -> bytes:
    """The IVF ``message`` with its ``loss`` (field 5, double) set; other records kept byte for byte."""
    records = [(number, message[rec:end]) for number, _, rec, _, _, end in wire_records(message)
               if number != _LOSS_FIELD]
    loss_record = encode_varint(_LOSS_FIELD << 3 | 1) + np.array([loss], dtype="<f8").tobytes()
    before = [raw for number, raw in records if number < _LOSS_FIELD]
    after = [raw for number, raw in records if number > _LOSS_FIELD]
    return b"".join(before + [loss_record] + after)


@dataclass(frozen=True)
class Quantizer:
    """The quantizer of an IVF storage file: kind, codes column type and its parameters."""

    kind: str  # FLAT, PQ, SQ
    distance_type: str
    code_type: pa.DataType  # the codes column type (fixed-size list)
    codebook: np.ndarray | None = None  # PQ: m x 256 x sub_dim (float64)
    bounds: tuple[float, float] | None = None  # SQ: (start, end)
    transposed: bool = False  # PQ codes stored transposed per partition

    @classmethod
    def of(cls, aux: IndexFile, kind: str, distance_type: str, dim: int, path: str) -> "Quantizer":
        """Read the quantizer of ``auxiliary.idx`` (``kind``: FLAT, PQ or SQ)."""
        column = CODE_COLUMNS[kind]
        code_type = aux.table.schema.field(column).type
        try:
            entries = json.loads(aux.metadata.get("storage_metadata") or "[]")
            meta = json.loads(entries[0]) if entries else {}
        except (ValueError, TypeError, IndexError):
            raise CorruptFileError(path, "storage_metadata is not a JSON list of metadata") from None
        if kind == "FLAT":
            return cls(kind, distance_type, code_type)
        if kind == "SQ":
            bounds = meta.get("bounds") or {}
            if int(meta.get("num_bits", 8)) != 8 or "start" not in bounds or "end" not in bounds:
                raise UnsupportedError(f"{path}: SQ storage with {meta}: lance_ops encodes 8-bit SQ with "
                                       "stored bounds only; nothing was written")
            return cls(kind, distance_type, code_type, bounds=(float(bounds["start"]), float(bounds["end"])))
        m, nbits = int(meta.get("num_sub_vectors", 0)), int(meta.get("nbits", 0))
        if nbits != 8 or m <= 0 or dim % m or code_type.list_size != m:
            raise UnsupportedError(f"{path}: PQ storage with {meta}: lance_ops encodes 8-bit PQ codes with "
                                   "sub-vectors dividing the dimension only; nothing was written")
        position = int(meta.get("codebook_position", 0))
        if not 1 <= position <= len(aux.buffers):
            raise CorruptFileError(path, f"codebook_position {position} names no global buffer")
        book = decode_tensor(aux.buffers[position - 1], path)
        if book.size != 256 * dim:
            raise CorruptFileError(path, f"the PQ codebook has {book.size} values, not 256 x {dim}")
        return cls(kind, distance_type, code_type, codebook=book.reshape(m, 256, dim // m),
                   transposed=bool(meta.get("transposed")))


def norm_l2(x: np.ndarray) -> np.ndarray:
    """Per-row L2 norm in f32, the squares summed one dimension after the other as pylance 14.0.2
    does (checked bit for bit at dim 16, 24 and 48; a lane-wise or pairwise sum differs in the last
    bit for about a third of the rows, which changes stored FLAT vectors). One vectorised pass
    over rows per dimension."""
    total = np.zeros(x.shape[0], dtype=np.float32)
    for j in range(x.shape[1]):
        column = x[:, j]
        total += column * column
    return np.sqrt(total)


def prepare(vectors: np.ndarray, distance_type: str) -> np.ndarray:
    """The vectors as the index sees them: float32, divided by their norm for cosine."""
    x = np.asarray(vectors, dtype=np.float32)
    if distance_type == "cosine":
        with np.errstate(divide="ignore", invalid="ignore"):
            x = x / norm_l2(x)[:, None]
    return x


def _nearest(x: np.ndarray, points: np.ndarray, dot: bool, with_distance: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(index, distance) of the nearest point for each row; squared l2, or ``1 - x.p`` for dot.

    Without ``with_distance`` only the index is computed (the per-row ``|x|^2`` term of l2 does not
    change the argmin) and the distances returned are empty."""
    x64 = x.astype(np.float64)
    products = x64 @ points.T
    if dot:
        best = products.argmax(axis=1)
        picked = products[np.arange(len(x64)), best]
        return best, (1.0 - picked) if with_distance else np.zeros(0)
    products *= -2.0
    products += (points * points).sum(1)[None, :]
    best = products.argmin(axis=1)
    if not with_distance:
        return best, np.zeros(0)
    return best, products[np.arange(len(x64)), best] + (x64 * x64).sum(1)


def assign(x: np.ndarray, centres: np.ndarray, distance_type: str) -> tuple[np.ndarray, float]:
    """Partition of each prepared vector (:func:`nearest_screened`) and the summed float64 distance
    to it (the IVF loss: squared l2 to the centroid, or ``1 - x.c`` for dot)."""
    dot = distance_type == "dot"
    best = nearest_screened(x, centres, dot)
    loss = 0.0
    step = max(1, MAX_DISTANCE_CELLS // max(1, x.shape[1] if x.ndim == 2 else 1))
    for start in range(0, len(x), step):
        x64 = x[start:start + step].astype(np.float64)
        picked = centres[best[start:start + step]]
        if dot:
            loss += float((1.0 - np.einsum("ij,ij->i", x64, picked)).sum())
        else:
            diff = x64 - picked
            loss += float(np.einsum("ij,ij->i", diff, diff).sum())
    return best, loss


def encode(q: Quantizer, x: np.ndarray, partition: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Row-major codes of prepared vectors (rows x code width) in the codes column's value type."""
    value_type = q.code_type.value_type.to_pandas_dtype()
    if q.kind == "FLAT":
        return x.astype(value_type)
    if q.kind == "SQ":
        assert q.bounds is not None
        start, end = q.bounds
        if start == end:
            return np.zeros(x.shape, dtype=np.uint8)
        scaled = (x.astype(np.float64) - start) * 255.0 / (end - start)
        return np.clip(np.nan_to_num(scaled, nan=0.0), 0, 255).astype(np.uint8)
    assert q.codebook is not None
    m, _, sub = q.codebook.shape
    residual = x - centres[partition].astype(np.float32) if q.distance_type != "dot" else x
    stacked = np.ascontiguousarray(residual.reshape(len(x), m, sub).transpose(1, 0, 2))
    return nearest_screened_stacked(stacked, q.codebook, q.distance_type == "dot").T.astype(np.uint8)


def nearest_screened(x: np.ndarray, points: np.ndarray, dot: bool) -> np.ndarray:
    """The index :func:`_nearest` (float64) picks for each row of ``x`` (float32), found in float32
    (:func:`nearest_screened_stacked` with one group)."""
    return nearest_screened_stacked(x[None], points[None], dot)[0]


def nearest_screened_stacked(x: np.ndarray, points: np.ndarray, dot: bool) -> np.ndarray:
    """For each group ``g`` (a PQ sub-vector), the index :func:`_nearest` (float64) picks among
    ``points[g]`` for each row of ``x[g]`` (float32), found in float32; ``x``: groups x rows x K.

    The float32 scores ``|p|^2 - 2 x.p`` (or ``-x.p`` for dot) come from one stacked BLAS product per
    chunk of rows, each matrix small enough (:data:`SCREEN_CELLS`) for OpenBLAS to run it on the
    calling thread and in cache (larger products start its thread pool, which costs more than it
    saves on a shared machine). They pick the nearest point whenever the runner-up is further than
    twice a bound of the float32 and float64 rounding errors; then the float64 argmin is the same
    point. The few rows under that margin (near ties) are decided by :func:`_nearest` itself, so
    the result is the float64 one (which matches pylance's codes)."""
    groups, count, width = x.shape
    out = np.empty((groups, count), dtype=np.int64)
    if not count:
        return out
    weights = np.ascontiguousarray((points.astype(np.float32) * np.float32(-1.0 if dot else -2.0)).transpose(0, 2, 1))
    squares = (points * points).sum(2)
    norms = (np.zeros_like(squares) if dot else squares).astype(np.float32)[:, None, :]
    # |score error| <= (K + 4) u (|p|^2 + 2 |x| |p|) in float32 (u = 2^-24), far less in float64:
    # SCREEN_SLACK x eps (= 2u) per unit of that magnitude covers both with a wide margin
    point_norm = np.sqrt(squares.max(1))[:, None]
    magnitude_base = np.abs(norms[:, 0, :]).max(1)[:, None].astype(np.float64)
    slack = SCREEN_SLACK * (width + 4) * float(np.finfo(np.float32).eps)
    x = np.ascontiguousarray(x, dtype=np.float32)
    x_norms = np.sqrt(np.einsum("gij,gij->gi", x, x, dtype=np.float64))
    step = max(1, SCREEN_CELLS // max(1, points.shape[1] * width))
    doubt = np.zeros((groups, count), dtype=bool)
    for start in range(0, count, step):
        scores = x[:, start:start + step] @ weights
        if not dot:
            scores += norms
        best = scores.argmin(axis=2)[:, :, None]
        best_score = np.take_along_axis(scores, best, 2)[:, :, 0].astype(np.float64)
        np.put_along_axis(scores, best, np.float32(np.inf), 2)
        runner_up = scores.min(axis=2).astype(np.float64)
        size = scores.shape[1]
        bound = slack * (magnitude_base + 2.0 * x_norms[:, start:start + size] * point_norm)
        doubt[:, start:start + size] = ~((runner_up - best_score) > 2.0 * bound)
        out[:, start:start + size] = best[:, :, 0]
    for g in np.flatnonzero(doubt.any(axis=1)).tolist():
        redo = np.flatnonzero(doubt[g])
        out[g, redo] = _nearest(x[g][redo], points[g], dot, False)[0]
    return out


def transpose_codes(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row-major codes (rows x W, rows grouped by partition) as stored transposed: W runs of L per partition."""
    out = np.empty(codes.size, dtype=codes.dtype)
    width = codes.shape[1] if codes.ndim == 2 else 0
    pos = 0
    for length in lengths.tolist():
        if length:
            out[pos * width:(pos + length) * width] = codes[pos:pos + length].T.ravel()
        pos += length
    return out


def untranspose_codes(values: np.ndarray, width: int, lengths: np.ndarray) -> np.ndarray:
    """Stored transposed PQ code bytes back to row-major (rows x ``width``)."""
    out = np.empty((int(lengths.sum()), width), dtype=values.dtype)
    pos = 0
    for length in lengths.tolist():
        if length:
            out[pos:pos + length] = values[pos * width:(pos + length) * width].reshape(width, length).T
        pos += length
    return out
