"""Which indices cover which fragments: what index-aware compaction planning needs to know.

Every ``IndexMetadata`` segment of the manifest's index section names the fragments it covers in
``fragment_bitmap`` (a portable 32-bit RoaringBitmap of fragment ids). pylance's planner tags each
candidate fragment with the set of (non-system) segments covering it and never bins fragments with
different sets together; lance_ops does the same (:func:`IndexCoverage.key`), and for now never
rewrites a fragment that some segment covers (rewriting one needs an index remap, which lance_ops
does not write yet: ADR 0011).

Only index kinds whose meaning lance_ops knows are accepted (:data:`KNOWN_KINDS`, matched on the
``index_details`` type URL, case-insensitively as pylance compares them). An unknown kind, a
segment without type information, or a system index lance_ops cannot apply yet (pylance's
fragment-reuse and MemWAL indices) refuses the whole operation with :class:`UnsupportedError`
naming the index and its type, before anything is written.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from lance_ops._proto import table_pb2
from lance_ops.errors import LanceOpsError, UnsupportedError
from lance_ops.table.indices import (
    DATA_KINDS,
    SYSTEM_KINDS,
    VECTOR_DETAILS,
    details_name,
    fragment_ids,
    index_kind,
    segment_uuid,
)

#: how a task treats the indices (``CompactionTask.index_action``): no index covers its fragments;
#: they are covered and every covering segment is remapped at commit (each entry of the task's
#: ``indices`` says how: "remap", "rebuild", "keep" or "drop"); or covered by a kind lance_ops cannot
#: remap yet (held back, never executed)
ACTION_NONE = "none"
ACTION_REMAP = "remap"
ACTION_REMAP_UNSUPPORTED = "remap (not supported yet)"
#: task-level actions that may be executed
RUNNABLE_ACTIONS = frozenset({ACTION_NONE, ACTION_REMAP})

#: index_details type-URL message name -> kind, for the kinds compaction accepts (vector indices of
#: every sub-kind are one kind here: their coverage is all that planning needs)
KNOWN_KINDS: dict[str, str] = {**DATA_KINDS, VECTOR_DETAILS: "VECTOR"}


@dataclass(frozen=True)
class IndexSegment:
    """One ``IndexMetadata`` entry: its name, uuid, kind and the fragment ids it covers."""

    name: str
    uuid: str
    kind: str
    type_url: str
    fragment_ids: frozenset[int]
    #: the precise kind (``lance_ops.table.indices.index_kind``: IVF_PQ, ...) when known
    remap_kind: str = ""
    #: whether the segment stores its fragment bitmap (a rewrite needs one)
    has_bitmap: bool = True
    #: why this segment's remapper cannot carry it through a rewrite (a layout it does not handle,
    #: found at planning by the remapper's optional ``segment_refusal``); "" when it can
    refusal: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a task and a dry run carry: name, uuid and kind."""
        out = {"name": self.name, "uuid": self.uuid, "kind": self.remap_kind or self.kind}
        if self.refusal:
            out["refusal"] = self.refusal
        return out

    def label(self) -> str:
        """``name (KIND)`` for messages."""
        return f"{self.name} ({self.remap_kind or self.kind})"


def _kind(index: table_pb2.IndexMetadata, where: str) -> tuple[str, str]:
    """(kind, type URL) of a segment; UnsupportedError for a kind lance_ops does not know."""
    url = index.index_details.type_url if index.HasField("index_details") else ""
    key = details_name(url)
    name = index.name or "<unnamed>"
    if key in KNOWN_KINDS:
        return KNOWN_KINDS[key], url
    if key in SYSTEM_KINDS:
        raise UnsupportedError(
            f"{where}: the dataset has the system index {name!r} of type {SYSTEM_KINDS[key]} ({url}), "
            "written by a deferred index remap (pylance compact_files(defer_index_remap=True)) or a MemWAL "
            "writer; lance_ops cannot apply it yet, so it does not compact or rewrite this dataset. "
            "Nothing was written.")
    shown = url or "no index_details (an index written by an older Lance version)"
    raise UnsupportedError(
        f"{where}: index {name!r} has a type lance_ops does not know: {shown}; lance_ops refuses to "
        "compact or rewrite a dataset carrying indices it does not know rather than risk leaving them "
        "inconsistent. Nothing was written.")


def _coverage(index: table_pb2.IndexMetadata, fallback: Any, where: str) -> frozenset[int]:
    """The fragment ids a segment covers; ``fallback(dataset_version)`` when it stores no bitmap."""
    if not index.fragment_bitmap:
        return frozenset(fallback(int(index.dataset_version)))
    try:
        return frozenset(fragment_ids(index))
    except Exception as exc:  # noqa: BLE001 - pyroaring raises ValueError / MemoryError on garbage
        raise LanceOpsError(f"{where}: index {index.name!r} has an unreadable fragment bitmap: {exc}") from exc


def index_segments(manifest_file: Any, where: str, fallback: Any = None,
                   kind_of: Any = None) -> list[IndexSegment]:
    """The index segments of a ManifestFile (refusing kinds lance_ops does not know).

    ``fallback(dataset_version) -> fragment ids`` gives the coverage of a segment that stores no
    fragment bitmap (very old writers); without one, such a segment counts as covering every
    fragment of the manifest (the safe side: none of them is rewritten). ``kind_of(index) -> str``
    gives each segment's precise kind (:attr:`IndexSegment.remap_kind`).
    """
    section = getattr(manifest_file, "index_section", None)
    if section is None:
        if manifest_file.manifest.HasField("index_section") and manifest_file.manifest.index_section:
            raise LanceOpsError(f"{where}: the manifest points at an index section that was not read")
        return []
    if fallback is None:
        every = [f.id for f in manifest_file.manifest.fragments]

        def fallback(_version: int) -> Iterable[int]:
            return every

    out = []
    for index in section.indices:
        kind, url = _kind(index, where)
        precise = kind_of(index) if kind_of is not None else ""
        out.append(IndexSegment(index.name, segment_uuid(index), kind, url, _coverage(index, fallback, where),
                                precise, bool(index.fragment_bitmap)))
    return out


class IndexCoverage:
    """The segments covering each fragment of one version: the planner's binning key."""

    def __init__(self, segments: Iterable[IndexSegment]) -> None:
        self.segments = list(segments)

    @classmethod
    def of(cls, ds: Any) -> "IndexCoverage":
        """Coverage of dataset ``ds`` at its checked-out version (refusing unknown index kinds).

        A segment without a stored bitmap covers the fragment ids below ``max_fragment_id + 1``
        of the version it was built from, as pylance reconstructs it (every fragment of ``ds`` when
        that version is gone).
        """
        from lance_ops.table.dataset import open_manifest

        def fallback(version: int) -> Iterable[int]:
            try:
                old = open_manifest(ds.store, ds.base, version, ds.uri)
            except LanceOpsError:
                return [f.id for f in ds.manifest.fragments]
            return range(int(old.manifest.max_fragment_id) + 1)

        segments = index_segments(ds.manifest_file, ds.uri, fallback, kind_of=lambda idx: index_kind(ds, idx))
        section = getattr(ds.manifest_file, "index_section", None)
        protos = list(section.indices) if section is not None else []
        stable = bool(ds.has_stable_row_ids)
        return cls([_with_refusal(seg, proto, ds, stable) for seg, proto in zip(segments, protos)])

    def covering(self, fragment_id: int) -> tuple[IndexSegment, ...]:
        """The segments covering ``fragment_id`` (in index-section order)."""
        return tuple(s for s in self.segments if fragment_id in s.fragment_ids)

    def key(self, fragment_id: int) -> tuple[str, ...]:
        """The uuids of the segments covering ``fragment_id``: fragments with different keys are
        never binned together (pylance's rule)."""
        return tuple(s.uuid for s in self.covering(fragment_id))


def _with_refusal(segment: IndexSegment, index: table_pb2.IndexMetadata, ds: Any, stable: bool) -> IndexSegment:
    """``segment`` with :attr:`IndexSegment.refusal` set when its remapper names a reason (checked
    at planning, so an unsupported layout is held back before a ReserveFragments version exists)."""
    check = getattr(remappers().get(segment.remap_kind), "segment_refusal", None)
    if not callable(check):
        return segment
    reason = check(ds.store, ds.base, index, stable)
    return replace(segment, refusal=str(reason)) if reason else segment


def describe(segments: Iterable[IndexSegment]) -> str:
    """``a (BTREE), b (VECTOR)`` for messages (names de-duplicated: delta segments share one)."""
    seen: dict[str, str] = {}
    for s in segments:
        seen.setdefault(s.name, s.label())
    return ", ".join(seen.values())


def remappers() -> dict[str, Any]:
    """The index kinds lance_ops can remap during compaction (kind -> remapper)."""
    from lance_ops.maintenance.index_remap.registry import REMAPPERS

    return REMAPPERS


def remappable(segment: IndexSegment) -> bool:
    """True iff compaction can carry ``segment`` through a rewrite of its fragments (its kind has
    a remapper and it stores a fragment bitmap)."""
    return (segment.has_bitmap and bool(segment.remap_kind) and segment.remap_kind in remappers()
            and not segment.refusal)


def planned_action(segment: IndexSegment, stable_row_ids: bool) -> str:
    """What the commit will do with ``segment`` ("remap" unless its remapper says otherwise through
    an optional ``plan_action(stable_row_ids) -> str`` attribute)."""
    remapper = remappers().get(segment.remap_kind)
    plan_action = getattr(remapper, "plan_action", None)
    return str(plan_action(stable_row_ids)) if callable(plan_action) else "remap"


def task_indices(segments: Iterable[IndexSegment], stable_row_ids: bool) -> list[dict[str, Any]]:
    """The ``indices`` entries of a task whose fragments ``segments`` cover (with each ``action``)."""
    return [{**s.to_dict(), "action": planned_action(s, stable_row_ids)} for s in segments]


def refuse_indexed_rewrite(where: str, fragment_ids: Iterable[int], segments: Iterable[IndexSegment],
                           why: str) -> UnsupportedError:
    """The error for a rewrite of fragments covered by indices lance_ops cannot remap (raised
    before anything is written)."""
    ids = sorted(set(fragment_ids))
    segments = list(segments)
    blocked = [s for s in segments if not remappable(s)] or segments
    reasons = "".join(f" ({s.name}: {s.refusal})" for s in blocked if s.refusal)
    return UnsupportedError(
        f"{where}: {why} would rewrite fragment(s) {ids}, covered by index(es) {describe(blocked)}{reasons}; "
        "rewriting an indexed fragment needs the index remapped to the new rows, and lance_ops cannot remap "
        "indices of this kind yet (or the segment stores no fragment bitmap; see docs/adr/0011-index-aware-compaction.md), "
        "so it refuses: nothing was written. Unindexed fragments can still be compacted (e.g. with "
        "materialize_deletions=False or a higher materialize_deletions_threshold), or use pylance's "
        "compact_files for these.")


def check_fragments_unindexed(manifest_file: Any, fragment_ids: Iterable[int], where: str, why: str) -> None:
    """Refuse (UnsupportedError) when a segment of ``manifest_file`` covers one of ``fragment_ids``
    or is of a kind lance_ops does not know."""
    wanted = set(fragment_ids)
    hits = [s for s in index_segments(manifest_file, where) if s.fragment_ids & wanted]
    if hits:
        covered = set().union(*(s.fragment_ids & wanted for s in hits))
        raise refuse_indexed_rewrite(where, covered, hits, why)


def check_fragments_remappable(ds: Any, fragment_ids: Iterable[int], why: str) -> list[IndexSegment]:
    """The segments of ``ds`` (at its version) covering any of ``fragment_ids``; UnsupportedError
    when one of them cannot be remapped (or is of a kind lance_ops does not know)."""
    wanted = set(fragment_ids)
    hits = [s for s in IndexCoverage.of(ds).segments if s.fragment_ids & wanted]
    blocked = [s for s in hits if not remappable(s)]
    if blocked:
        covered = set().union(*(s.fragment_ids & wanted for s in blocked))
        raise refuse_indexed_rewrite(ds.uri, covered, blocked, why)
    return hits
