"""Page decoders of Lance 2.1+ files (``lance.encodings21.PageLayout``): page bytes -> levels and values.

The byte formats of the four page layouts are described in :mod:`lance_ops.format.v2_1.layout`.
"""
from __future__ import annotations

from typing import Callable, Generic, Optional, Sequence, TypeVar, Union

import numpy as np

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import decode as comp
from lance_ops.format.v2_1.compression.decode import EncodingCorrupt, EncodingUnsupported, Vals
from lance_ops.format.v2_1.compression.per_value import per_value_fixed, per_value_var
from lance_ops.format.v2_1.layout import chunks
from lance_ops.format.v2_1.layout import repdef as rd
from lance_ops.format.v2_1.layout.chunks import spans_index
from lance_ops.format.v2_1.rows import (Decoded, DecodeFn, PageCtx, Ranges, empty_decoded, join_bytes, map_defs,
                                        placeholder_vals, select_rows, unknown)

_Layout = TypeVar("_Layout", pb.MiniBlockLayout, pb.FullZipLayout, pb.AllNullLayout, pb.BlobLayout)


def layout_name(layout: pb.PageLayout) -> str:
    """A short description of a page layout and its encodings (for ``column_layouts`` and error messages)."""
    which = layout.WhichOneof("layout")
    if which == "mini_block_layout":
        m = layout.mini_block_layout
        name = f"mini_block({comp.describe(m.value_compression)}"
        if m.HasField("dictionary"):
            name += f", dictionary={comp.describe(m.dictionary)}"
        return name + ")"
    if which == "full_zip_layout":
        return f"full_zip({comp.describe(layout.full_zip_layout.value_compression)})"
    if which == "all_null_layout":
        return "constant" if 6 in unknown(layout.all_null_layout) else "all_null"
    if which == "blob_layout":
        return "blob(" + layout_name(layout.blob_layout.inner_layout) + ")"
    return which or f"unknown layout (fields {sorted(unknown(layout))})"


# --------------------------------------------------------------------------------------------
# pages
# --------------------------------------------------------------------------------------------
class Page(Generic[_Layout]):
    """Base class: a page of ``num_rows`` rows starting at ``first_row``."""

    def __init__(self, layout: _Layout, offsets: Sequence[int], sizes: Sequence[int], num_rows: int,
                 first_row: int, ctx: PageCtx, version: str) -> None:
        self.layout: _Layout = layout
        self.offsets = [int(o) for o in offsets]
        self.sizes = [int(s) for s in sizes]
        self.num_rows = int(num_rows)
        self.first_row = int(first_row)
        self.ctx = ctx
        self.version = version
        self.ready = False
        self.page_layout: Optional[pb.PageLayout] = None  # set by the reader: the whole layout message
        self.leaf: object = None  # set by the reader: its record of the page's column

    def buf(self, i: int) -> tuple[int, int]:
        """Absolute (position, size) of the page's buffer ``i``."""
        if i >= len(self.offsets):
            raise EncodingCorrupt(f"page has {len(self.offsets)} buffers, needs buffer {i}")
        return self.offsets[i], self.sizes[i]

    # metadata to load before planning reads
    def init_ranges(self) -> Ranges:
        """Byte ranges of the page metadata to read before :meth:`plan` (none by default)."""
        return []

    def init(self, data: Sequence[bytes]) -> None:
        """Load the metadata read from :meth:`init_ranges` (``data``, in order); the page is then ready to plan."""
        self.ready = True

    def plan(self, starts: np.ndarray, ends: np.ndarray) -> tuple[Ranges, DecodeFn]:
        """Byte ranges to read for the rows ``[starts[i], ends[i])`` (page-relative, sorted, disjoint)
        and a function decoding them."""
        raise NotImplementedError


class MiniBlockPage(Page[pb.MiniBlockLayout]):
    """A mini-block page: chunks of a few KiB with their own levels; reads fetch only the wanted chunks."""

    def __init__(self, layout: pb.MiniBlockLayout, offsets: Sequence[int], sizes: Sequence[int], num_rows: int,
                 first_row: int, ctx: PageCtx, version: str) -> None:
        super().__init__(layout, offsets, sizes, num_rows, first_row, ctx, version)
        m = self.layout
        self.large = bool(unknown(m).get(10, 0))
        self.has_rep = m.HasField("rep_compression")
        self.has_def = m.HasField("def_compression")
        self.has_dict = m.HasField("dictionary")
        self.depth = m.repetition_index_depth
        self.num_items = m.num_items
        self.num_buffers = m.num_buffers
        self.def_table = rd.def_mapping(m.layers, self.ctx.canon)
        self.max_rep = rd.page_max_rep(m.layers)
        if self.max_rep != self.ctx.canon.max_rep:
            raise EncodingCorrupt("page repetition depth differs from the schema")
        if self.max_rep and not self.has_rep:
            raise EncodingCorrupt("list page without repetition levels")
        self.dictionary: Optional[Vals] = None
        # pages of a column with equal keys decode their chunks as one batch (see decode_group)
        self.batch_key = None if self.has_dict else (
            m.rep_compression.SerializeToString(), m.def_compression.SerializeToString(),
            m.value_compression.SerializeToString(), tuple(m.layers), self.num_buffers, self.large,
            self.has_rep, self.has_def)

    def prototype(self) -> "MiniBlockPage":
        """This page as constructed, without buffers (what later pages of its encoding copy)."""
        proto = MiniBlockPage.__new__(MiniBlockPage)
        proto.__dict__.update(self.__dict__)
        proto.offsets, proto.sizes, proto.ready = [], [], False
        return proto

    def init_ranges(self) -> Ranges:
        """Chunk metadata, then the dictionary and the repetition index when the page has them."""
        out = [self.buf(0)]
        nxt = 2
        if self.has_dict:
            out.append(self.buf(2))
            nxt = 3
        if self.depth > 0:
            out.append(self.buf(nxt))
        return out

    def init(self, data: Sequence[bytes]) -> None:
        """Parse chunk sizes and counts, the dictionary and the repetition index: where each row lives."""
        data_pos, data_size = self.buf(1)
        sizes, self.chunk_offsets, counts, counts_from0, all_counted = chunks.chunk_table(
            bytes(data[0]), self.large, self.num_items, data_size)
        nchunks = len(sizes)
        self.chunk_sizes = sizes
        self.data_pos = data_pos
        self.chunk_counts = counts
        pos = 1
        if self.has_dict:
            m = self.layout
            self.dictionary = comp.decode_block(m.dictionary, data[pos], int(m.num_dictionary_items))
            pos += 1
        if self.max_rep:
            if self.depth > 0:
                ri = np.frombuffer(bytes(data[pos]), dtype="<u8").astype(np.int64)
                stride = self.depth + 1
                if len(ri) < nchunks * stride:
                    raise EncodingCorrupt("repetition index is shorter than the chunk count")
                ri = ri[: nchunks * stride].reshape(nchunks, stride)
                ends, partial = ri[:, 0], ri[:, -1]
                has_trailer = partial > 0
                has_pre = np.concatenate([[False], has_trailer[:-1]])
                starts = ends + has_trailer - has_pre
            else:
                raise EncodingUnsupported("list page without a repetition index")
        else:
            starts = counts
        self.chunk_row_starts = starts  # rows starting in each chunk (int64)
        self.chunk_first_row = counts_from0 if starts is counts else \
            np.concatenate([[0], np.cumsum(starts)]).astype(np.int64)
        if nchunks and self.chunk_first_row[-1] != self.num_rows:
            raise EncodingCorrupt(f"chunks hold {int(self.chunk_first_row[-1])} rows, page says {self.num_rows}")
        # plan_part() of all rows, when every chunk starts a row: every chunk, one range, rows as written
        whole = bool(nchunks and self.num_rows and (all_counted if starts is counts else (starts > 0).all()))
        self.whole_plan = ([(int(data_pos), int(self.chunk_offsets[-1]))], chunks.whole_part(nchunks, self.num_rows)) \
            if whole else None
        self.ready = True

    def plan(self, starts: np.ndarray, ends: np.ndarray) -> tuple[Ranges, DecodeFn]:
        """The byte ranges of the chunks holding the rows and a function decoding them (a batch of one page)."""
        reqs, part = self.plan_part(starts, ends)
        if part is None:
            return [], lambda datas: empty_decoded(self.ctx)
        return reqs, lambda datas: decode_group([(self, part)], datas)

    def plan_part(self, starts: np.ndarray, ends: np.ndarray) -> tuple[Ranges, Optional[tuple]]:
        """Byte ranges of the chunks holding the rows and what :func:`decode_group` needs:
        (chunk ids, row ranges numbered within those chunks), or None when no rows are wanted."""
        if self.whole_plan is not None and len(starts) == 1 and int(starts[0]) == 0 and int(ends[0]) == self.num_rows:
            return self.whole_plan  # the whole page (what scans read), planned once by init()
        nch = len(self.chunk_sizes)
        fr_end = self.chunk_first_row[1:]
        if len(starts) == 1 and nch and int(ends[0]) > int(starts[0]):  # one range (a take's usual case)
            a0, b0 = int(starts[0]), int(ends[0])
            k0 = min(int(fr_end.searchsorted(a0, side="right")), nch - 1)
            if self.max_rep:
                k1 = nch - 1 if b0 >= self.num_rows else int(fr_end.searchsorted(b0, side="right"))
            else:
                k1 = int(fr_end.searchsorted(b0 - 1, side="right"))
            k1 = min(k1, nch - 1)
            offs = self.chunk_offsets
            ra0 = a0 - int(self.chunk_first_row[k0])
            return ([(self.data_pos + int(offs[k0]), int(offs[k1 + 1]) - int(offs[k0]))],
                    (np.arange(k0, k1 + 1), np.array([ra0], np.int64), np.array([ra0 + b0 - a0], np.int64)))
        keep = ends > starts
        a, b = starts[keep], ends[keep]
        if not len(a) or nch == 0:
            return [], None
        c0 = np.searchsorted(fr_end, a, side="right")
        if self.max_rep:  # up to the chunk where row b starts: row b - 1 may run into it
            c1 = np.where(b >= self.num_rows, nch - 1, np.searchsorted(fr_end, b, side="right"))
        else:
            c1 = np.searchsorted(fr_end, b - 1, side="right")
        c0, c1 = np.minimum(c0, nch - 1), np.minimum(c1, nch - 1)
        cover = np.cumsum(np.bincount(c0, minlength=nch + 1) - np.bincount(c1 + 1, minlength=nch + 1))[:nch] > 0
        cids = np.flatnonzero(cover)
        brk = np.flatnonzero(np.diff(cids) != 1) + 1
        r0 = cids[np.concatenate([[0], brk])]
        r1 = cids[np.concatenate([brk, [len(cids)]]) - 1]
        offs = self.chunk_offsets
        reqs = list(zip((self.data_pos + offs[r0]).tolist(), (offs[r1 + 1] - offs[r0]).tolist()))
        # the requested rows, numbered within the decoded chunks
        drow0 = chunks.excl_cumsum(self.chunk_row_starts[cids])
        ra = a - self.chunk_first_row[c0] + drow0[np.searchsorted(cids, c0)]
        rb = ra + (b - a)
        return reqs, (cids, ra, rb)

    def _decode_batch(self, buf: np.ndarray, pos: np.ndarray, sizes: np.ndarray, counts: np.ndarray
                      ) -> tuple[rd.Levels, Vals, Optional[Callable[[Vals], Vals]], np.ndarray]:
        """Levels, values and a value transform still to apply (FSST, dictionary) of a chunk batch."""
        m = self.layout
        p = chunks.parse_headers(buf, pos, sizes, counts, self.has_rep, self.has_def, self.num_buffers, self.large)
        nlev = p.num_levels
        reps = chunks.batch_levels(m.rep_compression, buf, p.rep, nlev) if p.rep is not None else None  # has_rep
        defs = chunks.batch_levels(m.def_compression, buf, p.defs, nlev) if p.defs is not None else None  # has_def
        nz = counts > 0
        table = None
        if bool(nz.any()):
            bufs = p.bufs if bool(nz.all()) else [(s[nz], z[nz]) for s, z in p.bufs]
            values, table = chunks.batch_values(m.value_compression, buf, bufs, counts[nz], defer_fsst=True)
        else:
            values = placeholder_vals("fixed" if self.has_dict else self.ctx.value_kind, 0, 0)
        post: Optional[Callable[[Vals], Vals]] = None
        if table is not None:
            post = lambda v: chunks.fsst_decode(v, table)  # noqa: E731
        if self.has_dict:
            post = self._lookup
        n = int(nlev.sum()) if (self.has_rep or self.has_def) else int(counts.sum())
        if reps is not None and len(reps) != n or defs is not None and len(defs) != n:
            raise EncodingCorrupt("mini-block levels do not match the chunk level counts")
        dfs = map_defs(defs, self.def_table) if defs is not None else None
        return rd.Levels(reps, dfs, n), values, post, nlev

    def _lookup(self, values: Vals) -> Vals:
        """Dictionary indices -> dictionary values."""
        idx = values.as_uint(values.width * 8).astype(np.int64) if values.n else np.zeros(0, np.int64)
        dictionary = self.dictionary
        if dictionary is None:  # init() loads it for every page with a dictionary
            raise EncodingCorrupt("dictionary page used before its dictionary was read")
        nd = dictionary.n
        if nd == 0:
            return placeholder_vals(self.ctx.value_kind, self.ctx.value_width, len(idx))
        return dictionary.take(np.clip(idx, 0, nd - 1))


def decode_group(items: Sequence[tuple["MiniBlockPage", tuple]], datas: Sequence) -> Decoded:
    """Decode the wanted chunks of one or more mini-block pages of a column (in page order, with
    equal ``batch_key``) as one batch: pages start and end on row boundaries, so their chunks
    can be decoded back to back. ``datas`` are the pages' byte ranges, in order."""
    page = items[0][0]
    buf = join_bytes(datas)
    if len(items) == 1:
        cids, ra, rb = items[0][1]
        sizes, counts = page.chunk_sizes[cids], page.chunk_counts[cids]
        new_run = np.diff(cids) != 1  # (cids[i + 1] > 0 then)
    elif all(p.whole_plan is not None and part is p.whole_plan[1] for p, part in items):
        # whole pages (what scans read): every chunk of each, one run of all their rows
        sizes = np.concatenate([p.chunk_sizes for p, _ in items])
        counts = np.concatenate([p.chunk_counts for p, _ in items])
        ra = np.zeros(1, np.int64)
        rb = np.full(1, sum([p.num_rows for p, _ in items]), np.int64)
        new_run = None
    else:
        sizes = np.concatenate([p.chunk_sizes[part[0]] for p, part in items])
        counts = np.concatenate([p.chunk_counts[part[0]] for p, part in items])
        ras, rbs, runs, shift = [], [], [], 0
        for p, (cids, a, b) in items:
            ras.append(a + shift)
            rbs.append(b + shift)
            runs.append(np.concatenate([[cids[0] > 0], np.diff(cids) != 1]))  # a page's chunk 0 has no row tail
            shift += int(p.chunk_row_starts[cids].sum())
        ra, rb = np.concatenate(ras), np.concatenate(rbs)
        new_run = np.concatenate(runs)[1:]
    pos = chunks.excl_cumsum(sizes)
    if int(pos[-1] + sizes[-1]) > len(buf):
        raise EncodingCorrupt("mini-block chunks run past the data read")
    lv, vals, post, nlev = page._decode_batch(buf, pos, sizes, counts)
    # a run of chunks starting at a chunk > 0 may begin with the tail of an unwanted row: the rows
    # of the run before it end where that run ends
    run_ends = None
    if page.max_rep and new_run is not None and bool(new_run.any()):
        run_ends = np.cumsum(nlev)[np.append(np.flatnonzero(new_run), len(nlev) - 1)]
    d = select_rows(lv, vals, page.ctx.canon, ra, rb, run_ends)
    if post is not None:
        d.values = post(d.values)
    return d


class FullZipPage(Page[pb.FullZipLayout]):
    """A full-zip page: control word and value zipped per entry; reads fetch exactly the wanted rows."""

    def __init__(self, layout: pb.FullZipLayout, offsets: Sequence[int], sizes: Sequence[int], num_rows: int,
                 first_row: int, ctx: PageCtx, version: str) -> None:
        super().__init__(layout, offsets, sizes, num_rows, first_row, ctx, version)
        z = self.layout
        self.bits_rep, self.bits_def = z.bits_rep, z.bits_def
        total = self.bits_rep + self.bits_def
        self.cw = 0 if total == 0 else 1 if total <= 8 else 2 if total <= 16 else 4
        self.detail = z.WhichOneof("details")
        if self.detail is None:
            raise EncodingCorrupt("full-zip layout without bits_per_value or bits_per_offset")
        self.fixed_bytes = z.bits_per_value // 8 if self.detail == "bits_per_value" else 0
        self.len_bytes = z.bits_per_offset // 8 if self.detail == "bits_per_offset" else 0
        self.def_table = rd.def_mapping(z.layers, self.ctx.canon)
        self.max_rep = rd.page_max_rep(z.layers)
        self.max_visible = rd.page_max_visible(z.layers)
        self.has_index = len(self.offsets) > 1 and self.sizes[1] > 0
        self.stride = self.cw + self.fixed_bytes  # bytes per row when there is no repetition index
        self.row_offsets: Optional[np.ndarray] = None

    def init_ranges(self) -> Ranges:
        """The repetition index, when the page has one."""
        return [self.buf(1)] if self.has_index else []

    def init(self, data: Sequence[bytes]) -> None:
        """Parse the repetition index (row start offsets) and check the rows fit the data buffer."""
        if self.has_index:
            raw = bytes(data[0])
            n = self.num_rows + 1
            if len(raw) % n:
                raise EncodingCorrupt(f"full-zip repetition index of {len(raw)} bytes does not fit {n} entries")
            w = len(raw) // n
            if w not in (1, 2, 4, 8):
                raise EncodingCorrupt(f"full-zip repetition index entries of {w} bytes")
            self.row_offsets = np.frombuffer(raw, dtype=f"<u{w}").astype(np.int64)
            end = int(self.row_offsets[-1])
        else:
            if self.max_rep or self.len_bytes:
                raise EncodingCorrupt("full-zip page without a repetition index")
            end = self.num_rows * self.stride
        if end > self.buf(0)[1]:
            raise EncodingCorrupt("full-zip rows run past the data buffer")
        self.ready = True

    def _row_off(self, rows: np.ndarray) -> np.ndarray:
        return self.row_offsets[rows] if self.row_offsets is not None else rows * self.stride

    def plan(self, starts: np.ndarray, ends: np.ndarray) -> tuple[Ranges, DecodeFn]:
        """The byte ranges of the wanted rows and a function decoding them."""
        pos0 = self.buf(0)[0]
        keep = ends > starts
        a, b = starts[keep], ends[keep]
        oa, ob = self._row_off(a), self._row_off(b)
        reqs = list(zip((pos0 + oa).tolist(), (ob - oa).tolist()))

        def decode(datas: Sequence[bytes]) -> Decoded:
            if not len(a):
                return empty_decoded(self.ctx)
            buf = join_bytes(datas)
            if self.row_offsets is None and self.cw == 0 and self.fixed_bytes:
                # no levels, no index: rows of exactly one fixed-width value each
                n = int((b - a).sum())
                if n * self.stride > len(buf):
                    raise EncodingCorrupt("full-zip rows run past the data read")
                raw = buf[:n * self.stride].reshape(n, self.stride)
                return Decoded(rd.Levels(None, None, n), per_value_fixed(self.layout.value_compression, raw, n), n)
            shift = chunks.excl_cumsum(ob - oa) - oa
            rows = spans_index(a, b)
            if len(a) == 1:
                rstart = self._row_off(rows) + int(shift[0])
                rend = self._row_off(rows + 1) + int(shift[0])
            else:
                sh = np.repeat(shift, b - a)
                rstart = self._row_off(rows) + sh
                rend = self._row_off(rows + 1) + sh
            return self._decode_rows(buf, rstart, rend)

        return reqs, decode

    def _decode_rows(self, buf: np.ndarray, row_start: np.ndarray, row_end: np.ndarray) -> Decoded:
        """Decode rows whose bytes are ``buf[row_start[i]:row_end[i]]``."""
        nrows = len(row_start)
        if nrows and (int(row_start.min()) < 0 or int(row_end.max()) > len(buf)):
            raise EncodingCorrupt("full-zip rows run past the data read")
        cw = self.cw
        # walk all rows in parallel, one level entry per step
        cur = row_start.copy()
        end = row_end
        active = np.flatnonzero(cur < end) if nrows else np.zeros(0, np.int64)
        ent_row, ent_step, ent_rep, ent_def, ent_start, ent_len = [], [], [], [], [], []
        step = 0
        maxv = self.max_visible
        while len(active):
            p = cur[active]
            if cw:
                if np.any(p + cw > len(buf)):
                    raise EncodingCorrupt("full-zip control word runs past the data")
                word = chunks.read_uint(buf, p, cw)
                d = word & ((1 << self.bits_def) - 1)
                r = word >> self.bits_def
            else:
                d = np.zeros(len(p), np.int64)
                r = np.zeros(len(p), np.int64)
            p = p + cw
            visible = np.ones(len(p), bool) if maxv is None else d <= maxv
            valid = d == 0
            if self.fixed_bytes or self.len_bytes == 0:
                vstart = p
                vlen = np.where(visible, self.fixed_bytes, 0)
                p = p + vlen
            else:
                has = visible & valid
                lb = self.len_bytes
                ln = np.zeros(len(p), np.int64)
                hp = p[has]
                if np.any(hp + lb > len(buf)):
                    raise EncodingCorrupt("full-zip value length runs past the data")
                ln[has] = chunks.read_uint(buf, hp, lb)
                vstart = p + np.where(has, lb, 0)
                vlen = ln
                p = vstart + vlen
            if np.any(p > end[active]):
                raise EncodingCorrupt("full-zip value runs past its row")
            ent_row.append(active)
            ent_step.append(np.full(len(active), step))
            ent_rep.append(r)
            ent_def.append(d)
            ent_start.append(np.where(visible, vstart, -1))
            ent_len.append(vlen)
            cur[active] = p
            active = active[p < end[active]]
            step += 1
        if len(ent_row) == 1:
            rep, dfs, vstart, vlen = ent_rep[0], ent_def[0], ent_start[0], ent_len[0]
        elif ent_row:
            rows = np.concatenate(ent_row)
            order = np.lexsort((np.concatenate(ent_step), rows))
            rep = np.concatenate(ent_rep)[order]
            dfs = np.concatenate(ent_def)[order]
            vstart = np.concatenate(ent_start)[order]
            vlen = np.concatenate(ent_len)[order]
        else:
            rep = dfs = vstart = vlen = np.zeros(0, np.int64)
        n = len(rep)
        vis = vstart >= 0
        starts, lens = np.compress(vis, vstart), np.compress(vis, vlen)
        values = self._values(buf, starts, lens, np.compress(vis, dfs))
        levels = rd.Levels(rep.astype(np.uint16) if self.max_rep else None,
                           map_defs(dfs.astype(np.uint16), self.def_table) if self.bits_def else None, n)
        return Decoded(levels, values, nrows)

    def _values(self, buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, dfs: np.ndarray) -> Vals:
        n = len(starts)
        z = self.layout
        if self.fixed_bytes:
            w = self.fixed_bytes
            if not n:
                raw = np.zeros((0, w), np.uint8)
            elif int(starts[-1]) + w > len(buf) or int(starts.min()) < 0:
                raise EncodingCorrupt("full-zip value runs past the data")
            else:
                stride = int(starts[1] - starts[0]) if n > 1 else w
                if stride >= w and int(starts[-1]) == int(starts[0]) + stride * (n - 1) and \
                        (n < 3 or bool(np.all(np.diff(starts) == stride))):
                    # evenly spaced rows: a strided view (no copy when rows are back to back)
                    raw = np.lib.stride_tricks.as_strided(buf[int(starts[0]):], shape=(n, w), strides=(stride, 1))
                    if stride != w:
                        raw = raw.copy()
                else:
                    # one row copy per value out of a sliding-window view of the bytes
                    win = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - w + 1, w), strides=(1, 1))
                    raw = win[starts]
            return per_value_fixed(z.value_compression, raw, n)
        total = int(lens.sum())
        offs = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offs[1:])
        src = np.repeat(starts - offs[:-1], lens) + np.arange(total, dtype=np.int64)
        data = buf[src]
        return per_value_var(z.value_compression, Vals("var", n, data, offs))


class ConstantPage(Page[pb.AllNullLayout]):
    """All-null (2.1+) or constant (2.2+) page."""

    def __init__(self, layout: pb.AllNullLayout, offsets: Sequence[int], sizes: Sequence[int], num_rows: int,
                 first_row: int, ctx: PageCtx, version: str) -> None:
        super().__init__(layout, offsets, sizes, num_rows, first_row, ctx, version)
        a = self.layout
        extra = unknown(a)
        self.inline_value = extra.get(6)
        self.rep_comp = self._enc(extra.get(7))
        self.def_comp = self._enc(extra.get(8))
        self.num_rep = extra.get(9)
        self.num_def = extra.get(10)
        self.def_table = rd.def_mapping(a.layers, self.ctx.canon)
        self.max_rep = rd.page_max_rep(a.layers)
        self.ndefs = rd.page_def_count(a.layers)
        # buffers: [scalar value buffer]? then [rep, def]? (2.1 all-null pages: just rep, def)
        nb = len(self.offsets)
        self.value_buf = self.inline_value is None and nb in (1, 3)
        self.level_base = 1 if self.value_buf else 0

    @staticmethod
    def _enc(raw: Optional[bytes]) -> Optional[pb.CompressiveEncoding]:
        if raw is None:
            return None
        e = pb.CompressiveEncoding()
        e.ParseFromString(bytes(raw))
        return e

    def _has(self, i: int) -> bool:
        i += self.level_base
        return i < len(self.sizes) and self.sizes[i] > 0

    def init_ranges(self) -> Ranges:
        """The value buffer and the stored rep/def level buffers."""
        out = [self.buf(0)] if self.value_buf else []
        return out + [self.buf(i + self.level_base) for i in (0, 1) if self._has(i)]

    def init(self, data: Sequence[bytes]) -> None:
        """Parse the constant value and the rep/def levels."""
        it = iter(data)
        self.scalar = _scalar_value(bytes(next(it)), self.ctx) if self.value_buf else None
        rep = next(it) if self._has(0) else None
        dfs = next(it) if self._has(1) else None
        self.rep = self._levels(rep, self.rep_comp, self.num_rep) if rep is not None else None
        self.defs = self._levels(dfs, self.def_comp, self.num_def) if dfs is not None else None
        if self.rep is None and self.max_rep:
            # no levels stored: every row is one (null or empty) list at the outermost layer
            pass
        self.ready = True

    def _levels(self, raw: bytes, enc: Optional[pb.CompressiveEncoding], count: Optional[int]) -> np.ndarray:
        if enc is None:
            return np.frombuffer(bytes(raw), dtype="<u2").astype(np.uint16)
        n = int(count) if count is not None else len(raw) // 2
        return comp.decode_levels(enc, raw, n)

    def plan(self, starts: np.ndarray, ends: np.ndarray) -> tuple[Ranges, DecodeFn]:
        """No bytes to read (the metadata holds everything) and a function building the wanted rows."""
        keep = ends > starts
        a, b = starts[keep], ends[keep]

        def decode(_datas: Sequence[bytes]) -> Decoded:
            n_rows = self.num_rows
            if self.rep is None and self.defs is None:
                levels = rd.Levels(np.full(n_rows, self.ctx.canon.max_rep, np.uint16) if self.max_rep else None,
                                   None, n_rows)
                if self.inline_value is None and not self.value_buf:
                    # every entry is null at the innermost nullable layer
                    page_def = 1 if self.ndefs else 0
                    levels.defs = map_defs(np.full(n_rows, page_def, np.uint16), self.def_table)
            else:
                some_levels = self.defs if self.defs is not None else self.rep
                assert some_levels is not None  # one of them is stored here
                n = len(some_levels)
                rep = self.rep
                if rep is None and self.max_rep:
                    rep = np.full(n, self.ctx.canon.max_rep, np.uint16)
                dfs = self.defs
                if dfs is None and self.inline_value is None and not self.value_buf:
                    dfs = np.full(n, 1 if self.ndefs else 0, np.uint16)
                levels = rd.Levels(rep, map_defs(dfs, self.def_table) if dfs is not None else None, n)
            vis = rd.visible_mask(levels, self.ctx.canon)
            nvis = levels.n if vis is None else int(vis.sum())
            if self.scalar is not None:
                vals = self.scalar.take(np.zeros(nvis, np.int64))
            elif self.inline_value is not None:
                v = np.frombuffer(bytes(self.inline_value), dtype=np.uint8)
                if self.ctx.value_kind == "bool":
                    vals = Vals("bool", nvis, np.full(nvis, bool(v[0] & 1) if len(v) else False))
                else:
                    vals = Vals("fixed", nvis, np.broadcast_to(v, (nvis, len(v))).copy())
                    vals.items_per_value = self.ctx.items_per_value
            else:
                vals = placeholder_vals(self.ctx.value_kind, self.ctx.value_width, nvis, self.ctx.items_per_value)
            return select_rows(levels, vals, self.ctx.canon, a, b)

        return [], decode


def _scalar_value(raw: bytes, ctx: PageCtx) -> Vals:
    """A constant page's value buffer: u32 buffer count, u32 length each, then the Arrow buffers
    of a one-value array (e.g. offsets + bytes for strings)."""
    if len(raw) < 4:
        raise EncodingCorrupt("constant value buffer is truncated")
    nb = int.from_bytes(raw[:4], "little")
    if len(raw) < 4 + 4 * nb:
        raise EncodingCorrupt("constant value buffer header is truncated")
    lens = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "little") for i in range(nb)]
    pos = 4 + 4 * nb
    bufs = []
    for ln in lens:
        if pos + ln > len(raw):
            raise EncodingCorrupt("constant value buffer is truncated")
        bufs.append(raw[pos:pos + ln])
        pos += ln
    if ctx.value_kind == "var":
        if nb != 2:
            raise EncodingCorrupt(f"variable-width constant with {nb} buffers")
        ow = len(bufs[0]) // 2
        offs = np.frombuffer(bufs[0], dtype=f"<u{ow}").astype(np.int64)
        return Vals("var", 1, np.frombuffer(bufs[1], np.uint8)[offs[0]:offs[1]], offs - offs[0])
    if nb != 1:
        raise EncodingCorrupt(f"fixed-width constant with {nb} buffers")
    v = np.frombuffer(bufs[0], np.uint8)
    if ctx.value_kind == "bool":
        return Vals("bool", 1, np.array([bool(v[0] & 1)]))
    out = Vals("fixed", 1, v.reshape(1, -1).copy())
    out.items_per_value = ctx.items_per_value
    return out


class BlobPage(Page[pb.BlobLayout]):
    """Blob layout: an inner page of (position u64, size u64) descriptions; the bytes live
    out of line. A description with size 0 is empty (position 0) or null (position =
    ``def << 16 | rep``)."""

    decode_reads = True  # decoding fetches the blob bytes

    def __init__(self, layout: pb.BlobLayout, offsets: Sequence[int], sizes: Sequence[int], num_rows: int,
                 first_row: int, ctx: PageCtx, version: str,
                 *, fetch: Callable[[Ranges], Sequence[bytes | memoryview]]) -> None:
        super().__init__(layout, offsets, sizes, num_rows, first_row, ctx, version)
        b: pb.BlobLayout = self.layout
        self.def_table = rd.def_mapping(b.layers, self.ctx.canon)
        if rd.page_max_rep(b.layers):
            raise EncodingUnsupported("blob pages inside lists")
        inner_ctx = PageCtx(rd.Canonical((rd.ITEM,)), "fixed", 16)
        inner = b.inner_layout
        which = inner.WhichOneof("layout")
        args2 = (self.offsets, self.sizes, self.num_rows, self.first_row, inner_ctx, self.version)
        self.inner: Union[MiniBlockPage, FullZipPage]
        if which == "mini_block_layout":
            self.inner = MiniBlockPage(inner.mini_block_layout, *args2)
        elif which == "full_zip_layout":
            self.inner = FullZipPage(inner.full_zip_layout, *args2)
        else:
            raise EncodingUnsupported(f"blob descriptions in a {which} page")
        self.fetch = fetch

    def init_ranges(self) -> Ranges:
        """The metadata ranges of the inner description page."""
        return self.inner.init_ranges()

    def init(self, data: Sequence[bytes]) -> None:
        """Load the inner description page's metadata."""
        self.inner.init(data)
        self.ready = True

    def plan(self, starts: np.ndarray, ends: np.ndarray, describe: bool = False) -> tuple[Ranges, DecodeFn]:
        """With ``describe`` the rows' (position, size) descriptions, without reading the bytes."""
        reqs, inner_decode = self.inner.plan(starts, ends)

        def decode(datas: Sequence[bytes]) -> Decoded:
            d = inner_decode(datas)
            desc = d.values
            if desc.kind != "fixed" or (desc.n and desc.width != 16):
                raise EncodingCorrupt("blob descriptions are not (u64, u64) pairs")
            raw = np.ascontiguousarray(desc.data).reshape(-1).view("<u8").reshape(-1, 2) if desc.n else np.zeros((0, 2), np.uint64)
            pos, size = raw[:, 0].astype(np.int64), raw[:, 1].astype(np.int64)
            null = (size == 0) & (pos != 0)
            page_def = np.where(null, (pos >> 16) & 0xFFFF, 0).astype(np.uint16)
            defs = map_defs(page_def, self.def_table) if self.ctx.canon.kinds and len(self.layout.layers) and \
                any(lay != pb.REPDEF_ALL_VALID_ITEM for lay in self.layout.layers) else None
            if describe:
                vals = Vals("fixed", len(size), np.ascontiguousarray(raw).view(np.uint8).reshape(-1, 16))
                return Decoded(rd.Levels(None, defs, len(size)), vals, d.num_rows)
            want = np.flatnonzero(size > 0)
            blobs = self.fetch(list(zip(pos[want].tolist(), size[want].tolist()))) if len(want) else []
            lens = np.where(size > 0, size, 0)
            offs = np.zeros(len(size) + 1, np.int64)
            np.cumsum(lens, out=offs[1:])
            data = np.frombuffer(b"".join(bytes(b) for b in blobs), np.uint8)
            vals = Vals("var", len(size), data, offs)
            return Decoded(rd.Levels(None, defs, len(size)), vals, d.num_rows)

        return reqs, decode


AnyPage = Union[MiniBlockPage, FullZipPage, ConstantPage, BlobPage]
