"""The indices of one dataset version as a user sees them: name, kind, columns, segments, coverage.

Read from the manifest's index section (and, for vector indices whose details do not say the
sub-index, the ``lance:index`` schema metadata of ``_indices/<uuid>/index.idx``); no index data is
read. One :class:`IndexInfo` per index *name*: delta segments (same name, different uuids, disjoint
fragment sets) are listed under it. Coverage is counted as pylance 14.0.2's
``ds.stats.index_stats(name)`` counts it: a live fragment is indexed when some segment's
``fragment_bitmap`` names it; indexed / unindexed rows are the live (not deleted) rows of those
fragments / of the other live fragments. Fragments a bitmap names that no longer exist count for
nothing.

The kind comes from the ``index_details`` type URL (compared without case, after its last ``/``);
vector indices (``VectorIndexDetails``) are ``IVF_`` + ``HNSW_`` when field 3 (hnsw config) is set +
the quantizer field set (4 PQ, 5 SQ, 6 RQ, 8 FLAT). An unknown type URL gives the kind
``unknown (<type url>)``. ``lance-ops inspect`` and the maintenance health report both use
:func:`list_indices`.
"""
from __future__ import annotations

import json
import uuid as uuid_mod
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from lance_ops._proto import table_pb2
from lance_ops.format.proto_wire import wire_records
from lance_ops.table.deletion import live_rows
from lance_ops.table.index_files import details_name

if TYPE_CHECKING:
    from lance_ops.table.dataset import LanceDataset

#: type-URL message names (lower case) -> kind, for the user index kinds whose details say it all
DATA_KINDS: dict[str, str] = {
    "lance.table.btreeindexdetails": "BTREE",
    "lance.table.bitmapindexdetails": "BITMAP",
    "lance.table.labellistindexdetails": "LABEL_LIST",
    "lance.table.ngramindexdetails": "NGRAM",
    "lance.table.zonemapindexdetails": "ZONEMAP",
    "lance.table.invertedindexdetails": "INVERTED",
    "lance.index.pb.bloomfilterindexdetails": "BLOOMFILTER",
}
#: system indices: they describe no data coverage (the fragment-reuse index translates every other
#: index's coverage; the MemWAL index tracks write-ahead logs)
SYSTEM_KINDS: dict[str, str] = {
    "lance.table.fragmentreuseindexdetails": "FRAG_REUSE",
    "lance.table.memwalindexdetails": "MEM_WAL",
}
#: every kind :func:`index_kind` names from the type URL alone (one more bloom-filter spelling seen)
SCALAR_KINDS: dict[str, str] = {
    **DATA_KINDS, "lance.table.bloomfilterindexdetails": "BLOOMFILTER", **SYSTEM_KINDS,
}
#: the type-URL message name of vector indices (IVF_*), whose kind needs the details' fields
VECTOR_DETAILS = "lance.index.pb.vectorindexdetails"
#: VectorIndexDetails field numbers: the HNSW config and the quantizer oneof
_HNSW_FIELD = 3
_QUANTIZERS = {4: "PQ", 5: "SQ", 6: "RQ", 8: "FLAT"}
#: names of system indices (not user indices; pylance hides them from list_indices)
SYSTEM_PREFIX = "__lance_"


@dataclass
class IndexSegment:
    """One stored segment of an index (one ``IndexMetadata`` entry, one ``_indices/<uuid>/``)."""

    uuid: str
    fragment_ids: list[int]
    dataset_version: int
    index_version: int
    created_at_ms: int | None
    indexed_rows: int


@dataclass
class IndexInfo:
    """An index of the dataset: its kind, columns, segments and how much of the data it covers.

    ``index_version`` is the newest index format version among the segments (each segment keeps
    its own); ``uuids`` are the segments' uuids in manifest order.
    """

    name: str
    kind: str
    type_url: str
    columns: list[str]
    field_ids: list[int]
    uuids: list[str]
    index_version: int
    system: bool
    indexed_fragments: int
    indexed_rows: int
    unindexed_fragments: int
    unindexed_rows: int
    segments: list[IndexSegment] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON output, XCom)."""
        return asdict(self)


def wire_field_numbers(data: bytes) -> Iterator[int]:
    """The field numbers present at the top level of a serialized protobuf message."""
    return (number for number, *_ in wire_records(data))


def _vector_kind_from_details(value: bytes) -> str | None:
    """IVF_[HNSW_]<quantizer> from VectorIndexDetails bytes; None when they do not say."""
    try:
        present = set(wire_field_numbers(value))
    except ValueError:
        return None
    quantizer = next((q for number, q in _QUANTIZERS.items() if number in present), None)
    if quantizer is None:
        return None
    return "IVF_" + ("HNSW_" if _HNSW_FIELD in present else "") + quantizer


def _vector_kind_from_file(ds: LanceDataset, uid: str) -> str | None:
    """The ``type`` of ``index.idx``'s ``lance:index`` schema metadata (older vector indices)."""
    from lance_ops.format.registry import open_file_reader
    from lance_ops.table.manifest import naming

    path = ds.store.join(ds.base, naming.INDICES_DIR, uid, "index.idx")
    try:
        reader = open_file_reader(path, store=ds.store)
        metadata = reader.schema.metadata or {}
        raw = metadata.get(b"lance:index")
        kind = json.loads(raw).get("type") if raw else None
    except Exception:  # noqa: BLE001 - a missing or unreadable file leaves the kind unknown
        return None
    return str(kind).upper() if kind else None


def index_kind(ds: LanceDataset, index: table_pb2.IndexMetadata) -> str:
    """The kind of one index segment (BTREE, IVF_PQ, ...; ``unknown (<type url>)`` otherwise)."""
    type_url = index.index_details.type_url
    name = details_name(type_url)
    if name in SCALAR_KINDS:
        return SCALAR_KINDS[name]
    if name == VECTOR_DETAILS:
        kind = _vector_kind_from_details(bytes(index.index_details.value))
        if kind is None and not index.HasField("base_id"):
            kind = _vector_kind_from_file(ds, segment_uuid(index))
        if kind is not None:
            return kind
    return f"unknown ({type_url or 'no index details'})"


def segment_uuid(index: table_pb2.IndexMetadata) -> str:
    """The segment's uuid as text (the raw bytes in hex when they are not 16 bytes)."""
    raw = bytes(index.uuid.uuid)
    return str(uuid_mod.UUID(bytes=raw)) if len(raw) == 16 else raw.hex()


def fragment_ids(index: table_pb2.IndexMetadata) -> list[int]:
    """The fragment ids of the segment's stored ``fragment_bitmap`` (portable 32-bit roaring)."""
    if not index.fragment_bitmap:
        return []
    from pyroaring import BitMap

    return [int(i) for i in BitMap.deserialize(bytes(index.fragment_bitmap))]


def field_paths(manifest: table_pb2.Manifest) -> dict[int, str]:
    """Field id -> dotted path (``struct.child``) of every field of the schema."""
    by_id = {f.id: f for f in manifest.fields}
    out: dict[int, str] = {}
    for fid, f in by_id.items():
        parts = [f.name]
        parent = by_id.get(f.parent_id)
        seen = {fid}
        while parent is not None and parent.id not in seen:
            seen.add(parent.id)
            parts.append(parent.name)
            parent = by_id.get(parent.parent_id)
        out[fid] = ".".join(reversed(parts))
    return out


def list_indices(ds: LanceDataset) -> list[IndexInfo]:
    """Every index of ``ds``'s version, one per name, in manifest order, with its coverage."""
    section = ds.manifest_file.index_section
    if section is None or not section.indices:
        return []
    manifest = ds.manifest
    rows = {f.id: live_rows(f) for f in manifest.fragments}
    paths = field_paths(manifest)
    groups: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in section.indices:
        groups.setdefault(index.name, []).append(index)
    out = []
    for name, segments in groups.items():
        first = segments[0]
        covered: set[int] = set()
        parts = []
        for seg in segments:
            frags = fragment_ids(seg)
            live = [i for i in frags if i in rows]
            covered.update(live)
            parts.append(IndexSegment(
                uuid=segment_uuid(seg), fragment_ids=frags, dataset_version=int(seg.dataset_version),
                index_version=int(seg.index_version), created_at_ms=int(seg.created_at) if seg.HasField(
                    "created_at") else None, indexed_rows=sum(rows[i] for i in live)))
        field_ids = [int(i) for i in first.fields]
        out.append(IndexInfo(
            name=name, kind=index_kind(ds, first), type_url=first.index_details.type_url,
            columns=[paths.get(i, f"<field id {i}>") for i in field_ids], field_ids=field_ids,
            uuids=[p.uuid for p in parts], index_version=max(p.index_version for p in parts),
            system=name.startswith(SYSTEM_PREFIX),
            indexed_fragments=len(covered), indexed_rows=sum(rows[i] for i in covered),
            unindexed_fragments=sum(1 for i in rows if i not in covered),
            unindexed_rows=sum(n for i, n in rows.items() if i not in covered),
            segments=parts,
        ))
    return out

