"""What the Lance 2.0 reader knows of a file besides its bytes: the public page/column metadata
objects, the reading plan of a schema (a tree of leaf, blob, struct and list nodes over columns),
and the helpers that turn row ranges into byte-range requests and chunks into arrays.

Split from :mod:`lance_ops.format.v2_0.reader`, which opens files and runs the reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from lance_ops._proto import encodings_v2_0_pb2 as pb
from lance_ops.errors import UnsupportedError
from lance_ops.format import blob_v2
from lance_ops.format.container import Footer
from lance_ops.format.io_plan import Fetched
from lance_ops.format.v2_0 import decode as dec
from lance_ops.format.v2_0 import plans
from lance_ops.schema import FieldNode


ZERO = np.zeros(1, dtype=np.int64)
ZERO.flags.writeable = False


# --------------------------------------------------------------------------------------------
# public metadata objects
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PageInfo:
    """One page of one column (read-only: files of one dataset with equal column bytes share it)."""

    index: int
    row_start: int  # first row (item, for list item columns) of the page within its column
    length: int  # rows (items) in the page
    buffer_offsets: tuple[int, ...]
    buffer_sizes: tuple[int, ...]
    priority: int
    encoding: pb.ArrayEncoding

    @property
    def encoding_name(self) -> str:
        """The page encoding as a short readable description."""
        return dec.describe(self.encoding)

    @property
    def num_bytes(self) -> int:
        """Bytes of all the page buffers."""
        return int(sum(self.buffer_sizes))


@dataclass
class ColumnInfo:
    """One column: which field it belongs to, its role, its pages and column buffers."""

    index: int
    field_path: str
    role: str  # "values", "struct_header", "list_offsets", "packed_struct"
    pages: list[PageInfo]
    buffer_offsets: tuple[int, ...]
    buffer_sizes: tuple[int, ...]

    @property
    def num_bytes(self) -> int:
        """Bytes of the column buffers and of every page of the column."""
        return int(sum(p.num_bytes for p in self.pages) + sum(self.buffer_sizes))


@dataclass
class FileMetadata:
    """What the footer and metadata sections of a file say."""

    path: str
    version: str
    major_version: int
    minor_version: int
    num_rows: int
    file_size: int
    schema: pa.Schema
    footer: Footer
    global_buffers: list[tuple[int, int]]
    columns: list[ColumnInfo] = field(default_factory=list)

    @property
    def num_data_bytes(self) -> int:
        """Bytes of every column (pages and column buffers)."""
        return int(sum(c.num_bytes for c in self.columns))


# --------------------------------------------------------------------------------------------
# column nodes
# --------------------------------------------------------------------------------------------
@dataclass
class LeafNode:
    """A column of values: the reading plan of a field that is not a struct, list or blob."""
    column: int
    dtype: pa.DataType
    path: str


@dataclass
class BlobNode(LeafNode):
    """A blob column (``lance-encoding:blob``): pages of (position, size) descriptions; reads
    return the bytes, or with ``describe`` the descriptions (``dtype`` is then their struct)."""

    describe: bool = False


@dataclass
class StructNode:
    """A struct field: its header column (validity, row count) and one node per child."""
    header: int
    children: list[Node]
    dtype: pa.DataType
    path: str


@dataclass
class ListNode:
    """A list field: its offsets column and the node of its items."""
    column: int
    child: Node
    dtype: pa.DataType
    path: str


@dataclass
class ListBinaryNode(ListNode):
    """A string/binary field that Lance <= 0.14 wrote as ``list<uint8>`` (an offsets column, then
    a u8 items column); read as ``list_type``, returned as ``dtype`` (pylance still reads these)."""

    list_type: Optional[pa.DataType] = None


#: the reading plan of one field (``BlobNode`` is a ``LeafNode``, ``ListBinaryNode`` a ``ListNode``)
Node = Union[LeafNode, StructNode, ListNode]


@dataclass
class EncodingInfo:
    """A parsed page encoding and what the reader derives from it (shared by equal pages)."""

    encoding: pb.ArrayEncoding
    buffers: list[tuple[int, int]]
    fixed: Optional[plans.FixedPlan]
    binary: Optional[plans.BinaryPlan]

    _offsets: Optional["EncodingInfo"] = None

    @classmethod
    def of(cls, enc: pb.ArrayEncoding) -> "EncodingInfo":
        """The cached facts of ``enc`` (parsed once per distinct encoding message)."""
        return cls(enc, dec.referenced_buffers(enc), plans.fixed_plan(enc), plans.binary_plan(enc))

    @property
    def offsets(self) -> "EncodingInfo":
        """For a list page: the info of its offsets encoding."""
        if self._offsets is None:
            self._offsets = EncodingInfo.of(self.encoding.list.offsets)
        return self._offsets


#: a non-empty page read whole: (page index, encoding info, rows, (position, size) of each buffer
#: its encoding references, in ``info.buffers`` order)
WholePage = tuple[int, EncodingInfo, int, list[tuple[int, int]]]


@dataclass
class ColumnState:
    """One column as read: its metadata, pages and the rows each page holds.

    Derived from the column's metadata bytes, its index and its field alone (shared read-only by
    the readers of one dataset whose files hold equal bytes, :mod:`memo`); ``data_end`` is the
    end of the furthest page buffer, checked against each file's size."""
    index: int
    path: str
    role: str
    pages: list[PageInfo]
    page_starts: np.ndarray
    page_ends: np.ndarray
    buffer_offsets: tuple[int, ...]
    buffer_sizes: tuple[int, ...]
    infos: list[EncodingInfo]
    data_end: int = 0
    rows: int = -1  # rows of all the pages (computed once; -1: from ``page_ends``)
    #: every non-empty page read whole, when no page references a global buffer
    #: (``ColumnAccess._whole_plan``)
    whole_plan: Optional[list[WholePage]] = None

    @property
    def num_rows(self) -> int:
        """Rows of all the pages of the column."""
        if self.rows < 0:
            self.rows = int(self.page_ends[-1]) if len(self.page_ends) else 0
        return self.rows


@dataclass(frozen=True)
class SchemaLayout:
    """What a file's schema implies for reading (shared, read-only, by files with that schema)."""

    schema: pa.Schema
    nodes: dict[str, Node]  # top-level name -> LeafNode / BlobNode / StructNode / ListNode
    roles: dict[int, tuple[str, str]]  # column index -> (field path, role)
    top_names: list[str]
    num_columns: int
    described: Optional[dict[str, Node]] = None  # like ``nodes``, blob leaves returning descriptions


def is_packed(node: FieldNode) -> bool:
    """True for a struct field marked packed (one column of packed child values)."""
    md = node.proto.metadata
    for key in ("packed", "lance-encoding:packed"):
        if key in md and bytes(md[key]).strip().lower() in (b"true", b"1", b"yes"):
            return True
    return False


def normalize_ranges(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop empty ranges and merge touching ones (input sorted and non-overlapping)."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) <= 1:
        return starts.astype(np.int64), ends.astype(np.int64)
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    new[1:] = starts[1:] != ends[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(starts) - 1)
    return starts[first].astype(np.int64), ends[last].astype(np.int64)


def empty_array(dtype: pa.DataType) -> pa.Array:
    """An empty array of ``dtype``."""
    return pa.array([], type=dtype)


def concat_chunks(chunks: list[pa.Array], dtype: pa.DataType) -> pa.Array:
    """One array of the non-empty ``chunks`` (an empty one of ``dtype`` if none)."""
    chunks = [c for c in chunks if len(c)]
    if not chunks:
        return empty_array(dtype)
    if len(chunks) == 1:
        return chunks[0]
    return pa.concat_arrays(chunks)


#: with many ranges, slices up to this size are copied into ``bytes`` rather than viewed
_COPY_SMALL = 4096


def cut_blobs(blobs: Sequence[bytes | memoryview], groups: list[int], offsets: list[int],
              lengths: list[int]) -> Fetched:
    """The ranges (``groups[k]``'s blob, from ``offsets[k]``, ``lengths[k]`` bytes) of merged reads.

    Large ranges are zero-copy views. Small ones (typically thousands, for a sparse take) are
    copied into ``bytes``: a memoryview is a GC-tracked object and keeping thousands of them
    alive makes the garbage collector run over and over (and, in a process with many live
    objects, that costs more than the read); a small ``bytes`` copy is cheap and untracked.
    """
    out: Fetched = []
    views: dict[int, memoryview] = {}
    for g, o, n in zip(groups, offsets, lengths):
        blob = blobs[g]
        if o == 0 and n == len(blob):
            out.append(blob)
            continue
        view = views.get(g)
        if view is None:
            view = views[g] = memoryview(blob)
        piece = view[o : o + n]
        out.append(piece.tobytes() if n <= _COPY_SMALL else piece)
    return out


def row_lengths(row_real: np.ndarray, span_start: np.ndarray, row_counts: np.ndarray) -> np.ndarray:
    """Lengths of the rows of a list page from their end offsets and the span starts."""
    prev = np.empty_like(row_real)
    if len(prev):
        prev[1:] = row_real[:-1]
        prev[np.cumsum(row_counts) - row_counts] = span_start
    return row_real - prev


def is_binary_type(t: pa.DataType) -> bool:
    """True for string/binary types (regular and large)."""
    return t in (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def has_binary(schema: pa.Schema) -> bool:
    """True if a (possibly nested) field of ``schema`` is string or binary."""
    def walk(t: pa.DataType) -> bool:
        return is_binary_type(t) or any(walk(t.field(i).type) for i in range(t.num_fields))
    return any(walk(f.type) for f in schema)


def list_to_binary(arr: pa.Array, binary_type: pa.DataType) -> pa.Array:
    """``list<uint8>`` (items without nulls) as the same values of ``binary_type``."""
    values = arr.values
    if values.offset:
        values = pa.concat_arrays([values])
    return pa.Array.from_buffers(binary_type, len(arr), [arr.buffers()[0], arr.buffers()[1], values.buffers()[1]],
                                 null_count=arr.null_count, offset=arr.offset)


def described_node(node: Node) -> Node:
    """A copy of a column-node tree whose blob leaves return their descriptions (and whose
    parents' types say so)."""
    if isinstance(node, ListBinaryNode):
        return node
    if isinstance(node, BlobNode):
        return BlobNode(node.column, blob_v2.DESCRIPTION_TYPE, node.path, True)
    if isinstance(node, StructNode):
        kids = [described_node(c) for c in node.children]
        t = node.dtype
        fields = [t.field(i).with_type(k.dtype) for i, k in enumerate(kids)]
        return StructNode(node.header, kids, pa.struct(fields), node.path)
    if isinstance(node, ListNode):
        kid = described_node(node.child)
        vf = node.dtype.value_field.with_type(kid.dtype)
        t = pa.large_list(vf) if pa.types.is_large_list(node.dtype) else pa.list_(vf)
        return ListNode(node.column, kid, t, node.path)
    return node


def build_schema_layout(schema: pa.Schema, tree: list[FieldNode], uri: str, corrupt: Callable[[str], Exception],
                        first_page_is_list: Optional[Callable[[int], bool]] = None) -> SchemaLayout:
    """Column nodes of the fields (pre-order column numbering) and each column's role.

    ``first_page_is_list`` (files of Lance <= 0.14): string/binary fields whose first page it
    finds list-encoded take two columns. ``corrupt(message)`` makes the error raised for a
    malformed schema.
    """
    roles: dict[int, tuple[str, str]] = {}
    counter = [0]

    def build(node: FieldNode, prefix: str) -> Node:
        path = f"{prefix}{node.proto.name}"
        t = node.arrow.type
        col = counter[0]
        counter[0] += 1
        if pa.types.is_struct(t) and not is_packed(node):
            roles[col] = (path, "struct_header")
            if len(node.children) != t.num_fields:
                raise corrupt(f"struct field {path!r} has {len(node.children)} child fields, expected {t.num_fields}")
            kids = [build(c, path + ".") for c in node.children]
            return StructNode(col, kids, t, path)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            roles[col] = (path, "list_offsets")
            if len(node.children) != 1:
                raise corrupt(f"list field {path!r} has {len(node.children)} child fields, expected 1")
            return ListNode(col, build(node.children[0], path + "."), t, path)
        if pa.types.is_map(t):
            raise UnsupportedError(f"{uri}: map field {path!r} is not supported")
        if blob_v2.is_legacy_blob(node.arrow):
            roles[col] = (path, "blob")
            return BlobNode(col, t, path)
        if first_page_is_list is not None and is_binary_type(t) and first_page_is_list(col):
            roles[col] = (path, "list_offsets")
            item = counter[0]
            counter[0] += 1
            roles[item] = (path + ".item", "values")
            u8 = pa.field("item", pa.uint8(), nullable=False)
            lt = pa.large_list(u8) if t in (pa.large_string(), pa.large_binary()) else pa.list_(u8)
            return ListBinaryNode(col, LeafNode(item, pa.uint8(), path + ".item"), t, path, lt)
        roles[col] = (path, "packed_struct" if pa.types.is_struct(t) else "values")
        return LeafNode(col, t, path)

    nodes: dict[str, Node] = {}
    for node in tree:
        if node.proto.name in nodes:
            raise corrupt(f"schema has two top-level fields named {node.proto.name!r}")
        nodes[node.proto.name] = build(node, "")
    described = None
    if any(r == "blob" for _, r in roles.values()):
        described = {name: described_node(n) for name, n in nodes.items()}
    return SchemaLayout(schema, nodes, roles, [n.proto.name for n in tree], counter[0], described)
