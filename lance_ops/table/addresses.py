"""Row addresses: ``(fragment_id << 32) | row_offset`` as ``uint64``.

The offset is the *physical* position of the row in its fragment (deleted rows keep their slot).
All helpers accept scalars or array-likes and are vectorised with numpy.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

_U64 = np.uint64
_U32_MAX = 0xFFFFFFFF
_SHIFT = _U64(32)
_LOW = _U64(_U32_MAX)


def _as_u64(values: ArrayLike, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return arr.astype(_U64)
        raise TypeError(f"{what} must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise ValueError(f"{what} must be >= 0")
    return arr.astype(_U64, copy=False)


def _check_u32(arr: np.ndarray, what: str) -> None:
    if arr.size and int(arr.max()) > _U32_MAX:
        raise ValueError(f"{what} must fit in 32 bits")


def row_addresses(fragment_ids: ArrayLike, offsets: ArrayLike) -> np.ndarray:
    """``(fragment_id << 32) | offset`` (broadcasting, e.g. one fragment id and many offsets)."""
    frag = _as_u64(fragment_ids, "fragment ids")
    offs = _as_u64(offsets, "row offsets")
    _check_u32(frag, "fragment ids")
    _check_u32(offs, "row offsets")
    return (frag << _SHIFT) | offs


def row_address(fragment_id: int, offset: int) -> int:
    """Scalar form of :func:`row_addresses`."""
    if not (0 <= fragment_id <= _U32_MAX and 0 <= offset <= _U32_MAX):
        raise ValueError("fragment id and row offset must fit in 32 bits")
    return (int(fragment_id) << 32) | int(offset)


def split_row_addresses(addresses: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``(fragment_ids, offsets)`` as two ``uint32`` arrays."""
    addr = _as_u64(addresses, "row addresses")
    return (addr >> _SHIFT).astype(np.uint32), (addr & _LOW).astype(np.uint32)


def fragment_ids_of(addresses: ArrayLike) -> np.ndarray:
    """The fragment id (high 32 bits) of each row address, as ``uint32``."""
    return (_as_u64(addresses, "row addresses") >> _SHIFT).astype(np.uint32)


def offsets_of(addresses: ArrayLike) -> np.ndarray:
    """The physical row offset (low 32 bits) of each row address, as ``uint32``."""
    return (_as_u64(addresses, "row addresses") & _LOW).astype(np.uint32)


def group_by_fragment(addresses: ArrayLike) -> dict[int, np.ndarray]:
    """``{fragment_id: sorted unique uint32 offsets}`` for a batch of row addresses."""
    addr = np.unique(_as_u64(addresses, "row addresses"))
    if addr.size == 0:
        return {}
    frags = (addr >> _SHIFT).astype(np.uint32)
    offs = (addr & _LOW).astype(np.uint32)
    cuts = np.flatnonzero(np.diff(frags)) + 1
    starts = np.concatenate([[0], cuts])
    return {int(frags[s]): part for s, part in zip(starts.tolist(), np.split(offs, cuts))}


def fragment_range(fragment_id: int, physical_rows: int) -> np.ndarray:
    """All row addresses of a fragment with ``physical_rows`` rows."""
    return row_addresses(fragment_id, np.arange(int(physical_rows), dtype=_U64))
