"""Many small 2.0 files decoded together (ADR 0037; the 2.0 counterpart of ADR 0033's
``LanceFileReaderV21.read_all_of``).

A scan of thousands of small 2.0 files spent most of its decode time in per-file and per-page
Python: one table built and validated per file, one decode call per page. Here the pages of a
plain leaf column of every file are fetched per file (:meth:`LanceFileReader.whole_columns`), then
runs of pages of one kind are assembled at once: plain fixed-width values (flat, no validity,
optionally inside fixed-size lists) by joining their bytes, plain binary pages (u64 end offsets
and bytes) by rebasing each page's offsets onto the joined bytes. Any other page is decoded on its
own, in order. Every check of the per-page decoders is kept per page (buffer sizes, offsets
non-decreasing and within their page's bytes); a failure is raised by reading the files one by
one (:func:`read_all_of` callers), so the error names the damaged file.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0 import plans
from lance_ops.format.v2_0.layout import ZERO, EncodingInfo
from lance_ops.format.v2_0.reader import LanceFileReader

__all__ = ["read_all_of"]

_Page = tuple[EncodingInfo, int, dict]
_UNKNOWN: tuple = ("unknown",)


def read_all_of(readers: Sequence[LanceFileReader], columns: Sequence[str]) -> pa.Table:
    """Every row of ``columns`` of each of ``readers``, back to back: what
    ``concat_tables([r.read_all(columns) for r in readers])`` returns (types and values).

    Columns that are not plain leaves in every file (structs, lists, blobs) or whose types
    differ between files are read file by file. Any error is raised by the file-by-file read,
    naming the damaged file."""
    if not readers:
        raise ValueError("read_all_of needs at least one reader")
    try:
        return _read_all_of(readers, columns)
    except Exception:  # noqa: BLE001 - the one-by-one read raises the error naming the file
        return pa.concat_tables([r.read_all(columns=list(columns)) for r in readers])


def _read_all_of(readers: Sequence[LanceFileReader], columns: Sequence[str]) -> pa.Table:
    first = readers[0]
    arrays: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    per_file = [r.whole_columns(columns) for r in readers]  # one fetch round per file
    for j, name in enumerate(columns):
        sources = [got[j] for got in per_file]
        dtype = sources[0][0] if sources[0] is not None else None
        if dtype is None or any(s is None or s[0] != dtype for s in sources):
            one_by_one = [r.read_all(columns=[name]).column(0) for r in readers]
            arrays.append(pa.chunked_array([c for col in one_by_one for c in col.chunks], one_by_one[0].type))
        else:
            pages = [page for s in sources if s is not None for page in s[1]]
            arrays.append(pa.chunked_array(_decode_pages(pages, dtype, first.path), dtype))
        fields.append(first.schema.field(name))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=first.schema.metadata))
    table.validate()
    return table


def _decode_pages(pages: list[_Page], dtype: pa.DataType, path: str) -> list[pa.Array]:
    """The arrays of ``pages`` (in order): runs of one batchable kind assembled at once."""
    out: list[pa.Array] = []
    run: list[_Page] = []
    run_key: Optional[tuple] = None
    keys: dict[int, Optional[tuple]] = {}  # id(info) -> batch key: files of one dataset share their infos
    for page in pages:
        info = page[0]
        key = keys.get(id(info), _UNKNOWN)
        if key is _UNKNOWN:
            key = keys[id(info)] = _batch_key(info, dtype)
        if run and key != run_key:
            out.append(_assemble(run, run_key, dtype, path))
            run = []
        if key is None:
            out.append(_one(page, dtype, path))
            run_key = None
            continue
        run.append(page)
        run_key = key
    if run:
        out.append(_assemble(run, run_key, dtype, path))
    return out or [pa.array([], type=dtype)]


def _batch_key(info: EncodingInfo, dtype: pa.DataType) -> Optional[tuple]:
    """What pages must share to be assembled together (None: decode the page on its own)."""
    plan = info.fixed
    if (plan is not None and not plan.all_null and plan.values is not None and plan.validity is None
            and plan.bits_per_row % 8 == 0 and plan.bits_per_row > 0 and not pa.types.is_dictionary(dtype)):
        values = (int(plan.values.buffer_type), int(plan.values.buffer_index))
        return ("fixed", plan.bits_per_row, plan.item_bits, plan.dims, values)
    bplan = info.binary
    if bplan is not None and dec.is_var_binary(dtype):
        return ("binary", (int(bplan.offsets.buffer_type), int(bplan.offsets.buffer_index)),
                (int(bplan.data.buffer_type), int(bplan.data.buffer_index)))
    return None


def _one(page: _Page, dtype: pa.DataType, path: str) -> pa.Array:
    info, n, data = page
    ctx = dec.DecodeContext(path, "page")
    bufs = dec.PageBuffers({key: pa.py_buffer(d) for key, d in data.items()})
    return dec.decode_rows(info.encoding, n, dtype, bufs, ctx, ZERO, np.array([n], dtype=np.int64))


def _assemble(run: list[_Page], key: Optional[tuple], dtype: pa.DataType, path: str) -> pa.Array:
    assert key is not None
    ctx = dec.DecodeContext(path, "pages read together")
    counts = np.array([n for _, n, _ in run], dtype=np.int64)
    if key[0] == "fixed":
        width = key[1] // 8
        chunks = []
        for (_, n, data) in run:
            raw = data[key[4]]
            if len(raw) < n * width:
                raise ctx.corrupt(f"values buffer of {len(raw)} bytes is shorter than {n} rows x {width} bytes")
            chunks.append(raw[:n * width])
        plan = run[0][0].fixed
        assert plan is not None
        return plans.assemble_fixed(plan, dtype, np.zeros(len(run), np.int64), counts, chunks, None, ctx)
    return _binary(run, key, counts, dtype, ctx)


def _binary(run: list[_Page], key: tuple, counts: np.ndarray, dtype: pa.DataType,
            ctx: dec.DecodeContext) -> pa.Array:
    """Binary pages: each page's stored u64 ends (a null row stores ``previous end + the page's
    null adjustment``) resolved, checked within the page's bytes, and rebased onto the joined bytes."""
    offs, datas, adjust = [], [], []
    for (info, n, data) in run:
        raw = data[key[1]]
        if len(raw) < n * 8:
            raise ctx.corrupt(f"offsets buffer of {len(raw)} bytes is shorter than {n} rows")
        offs.append(np.frombuffer(raw, dtype="<u8", count=n))
        datas.append(data[key[2]])
        assert info.binary is not None
        adjust.append(int(info.binary.null_adjustment))
    ends = np.concatenate(offs)
    sizes = np.array([len(d) for d in datas], dtype=np.int64)
    adj = np.repeat(np.array(adjust, dtype=np.uint64), counts)
    nulls = (adj > 0) & (ends >= adj)
    real = np.where(nulls, ends - adj, ends)
    if real.size and int(real.max()) > 1 << 62:
        raise ctx.corrupt("binary offset past any plausible size")
    real = real.astype(np.int64)
    starts = np.cumsum(counts) - counts  # first row of each page
    prev = np.empty_like(real)
    prev[1:] = real[:-1]
    prev[starts[counts > 0]] = 0
    if bool((real < prev).any()):
        raise ctx.corrupt("binary offsets are not non-decreasing")
    last = real[np.cumsum(counts)[counts > 0] - 1]
    if bool((last > sizes[counts > 0]).any()):
        raise ctx.corrupt("binary offset past the end of its page's bytes")
    used = np.zeros(len(run), dtype=np.int64)
    used[counts > 0] = last
    base = np.cumsum(used) - used
    joined = pa.py_buffer(b"".join(d[:u] for d, u in zip(datas, used.tolist())))
    out_ends = real + np.repeat(base, counts)
    return dec.var_binary(dtype, out_ends, nulls if bool(nulls.any()) else None, joined, ctx)
