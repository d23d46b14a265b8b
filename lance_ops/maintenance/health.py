"""How much maintenance a dataset needs: the numbers behind ``lance-ops inspect`` and the sensors.

Everything comes from manifests (no data file is read; only a vector index whose details do not
name its sub-index has the schema of its ``index.idx`` read), so it is cheap enough to poll from
an Airflow sensor or trigger. The indices and their coverage come from
:func:`lance_ops.table.indices.list_indices`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from lance_ops.table import tags as tags_mod
from lance_ops.table.indices import IndexInfo, list_indices
from lance_ops.table.manifest import naming

if TYPE_CHECKING:
    from lance_ops.table.dataset import LanceDataset


@dataclass
class DatasetHealth:
    """How much maintenance a dataset needs: fragment, row and deletion counts at one version,
    and its indices with their coverage (``unindexed_rows`` > 0: ``optimize_indices`` has work)."""

    uri: str
    version: int
    num_versions: int
    fragments: int
    data_files: int
    rows: int
    physical_rows: int
    deleted_rows: int
    deleted_ratio: float
    small_fragments: int
    fragments_over_deletion_threshold: int
    versions_awaiting_cleanup: int
    bytes: int
    data_storage_version: str
    stable_row_ids: bool
    indices: list[IndexInfo] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for XCom / logs); ``index_coverage`` adds each user index's unindexed share."""
        out = asdict(self)
        out["index_coverage"] = [index_coverage(info) for info in self.indices if not info.system]
        return out

    def max_unindexed_pct(self) -> float:
        """The largest share (0-100) of unindexed rows among the user indices (0.0 without any)."""
        return max((unindexed_pct(info) for info in self.indices if not info.system), default=0.0)


def unindexed_pct(info: IndexInfo) -> float:
    """Percent (0-100) of the rows of the live fragments that ``info`` does not cover yet."""
    total = info.indexed_rows + info.unindexed_rows
    return 100.0 * info.unindexed_rows / total if total else 0.0


def index_coverage(info: IndexInfo) -> dict[str, Any]:
    """One index's coverage in a few numbers: name, kind, indexed / unindexed rows and unindexed %."""
    return {"name": info.name, "kind": info.kind, "indexed_rows": info.indexed_rows,
            "unindexed_rows": info.unindexed_rows, "unindexed_fragments": info.unindexed_fragments,
            "unindexed_pct": round(unindexed_pct(info), 3)}


def dataset_health(
    ds: LanceDataset,
    *,
    target_rows_per_fragment: int = 1024 * 1024,
    materialize_deletions_threshold: float = 0.1,
    cleanup_older_than: timedelta = timedelta(days=14),
) -> DatasetHealth:
    """Summary of ``ds`` (its checked-out version) and of its version history."""
    m = ds.manifest
    physical = sum(f.physical_rows for f in m.fragments)
    deleted = sum(f.deletion_file.num_deleted_rows for f in m.fragments if f.HasField("deletion_file"))
    small = sum(1 for f in m.fragments if f.physical_rows < target_rows_per_fragment)
    over = sum(
        1 for f in m.fragments
        if f.physical_rows and f.HasField("deletion_file")
        and f.deletion_file.num_deleted_rows / f.physical_rows > materialize_deletions_threshold
    )
    locations = naming.list_versions(ds.store, ds.base)
    tagged = set(tags_mod.tagged_versions(ds.store, ds.base))
    cutoff = datetime.now(timezone.utc) - cleanup_older_than
    latest = max((loc.version for loc in locations), default=ds.version)
    awaiting = sum(
        1 for loc in locations
        if loc.version != latest and loc.version not in tagged and loc.last_modified < cutoff
    )
    return DatasetHealth(
        uri=ds.uri,
        version=ds.version,
        num_versions=len(locations),
        fragments=len(m.fragments),
        data_files=sum(len(f.files) for f in m.fragments),
        rows=physical - deleted,
        physical_rows=physical,
        deleted_rows=deleted,
        deleted_ratio=(deleted / physical) if physical else 0.0,
        small_fragments=small,
        fragments_over_deletion_threshold=over,
        versions_awaiting_cleanup=awaiting,
        bytes=sum(df.file_size_bytes for f in m.fragments for df in f.files),
        data_storage_version=ds.data_storage_version,
        stable_row_ids=ds.has_stable_row_ids,
        indices=list_indices(ds),
    )
