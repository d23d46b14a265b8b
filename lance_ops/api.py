"""The package face: ``lance_ops.dataset``, ``lance_ops.write_dataset`` and ``lance_ops.LanceDataset``.

The face stands above every floor (docs/adr/0003-public-face-composes-maintenance.md): the core
``lance_ops.table.dataset.LanceDataset`` knows scans, takes, deletes and tags; the dataset users
get adds the maintenance verbs (``optimize``, ``cleanup_old_versions``) by importing
``lance_ops.maintenance`` here, so the table layer never imports upward.
"""
from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lance_ops.maintenance import rowid_index
from lance_ops.table import dataset as core
from lance_ops.table import write as core_write
from lance_ops.table.commit import hooks

# the face composes the layers: take_by_row_id asks the persisted row-id index first (ADR 0006)
hooks.register_row_id_index(rowid_index.lookup)

if TYPE_CHECKING:
    from lance_ops.maintenance.cleanup import CleanupStats
    from lance_ops.maintenance.compaction import DatasetOptimizer


class LanceDataset(core.LanceDataset):
    """A Lance dataset at one version, with the maintenance verbs of pylance's ``LanceDataset``."""

    @property
    def optimize(self) -> "DatasetOptimizer":
        """Compaction entry points (``compact_files``, ``materialize_deletions``, ``plan``)."""
        from lance_ops.maintenance.compaction import DatasetOptimizer  # on use: opening stays light

        return DatasetOptimizer(self)

    def cleanup_old_versions(self, older_than: timedelta | None = None, retain_versions: int | None = None, *,
                             delete_unverified: bool = False,
                             error_if_tagged_old_versions: bool = True, dry_run: bool = False,
                             progress: Callable[[int, int], None] | None = None) -> "CleanupStats":
        """Remove old versions and the files only they use (see lance_ops.maintenance.cleanup).

        Versions older than ``older_than`` (or beyond the newest ``retain_versions``) go, with
        the data, deletion and index files no remaining version references.
        """
        from lance_ops.maintenance.cleanup import cleanup_old_versions

        return cleanup_old_versions(self, older_than, retain_versions, delete_unverified=delete_unverified,
                                    error_if_tagged_old_versions=error_if_tagged_old_versions, dry_run=dry_run,
                                    progress=progress)


def _face(ds: core.LanceDataset) -> LanceDataset:
    """``ds`` as the face's class (same version, store and decoded manifest; no re-read)."""
    if isinstance(ds, LanceDataset):
        return ds
    return LanceDataset(ds.uri, ds.version, ds.storage_options, _manifest_file=ds.manifest_file,
                        _store=(ds.store, ds.base))


def dataset(uri: str, version: int | str | None = None, storage_options: Mapping[str, Any] | None = None) -> LanceDataset:
    """Open the dataset at ``uri`` at ``version`` (an int, a tag name, or None for the latest)."""
    return LanceDataset(str(uri), version, dict(storage_options or {}))


@functools.wraps(core_write.write_dataset)
def write_dataset(*args: Any, **kwargs: Any) -> LanceDataset:
    """:func:`lance_ops.table.write.write_dataset`, returning the face's dataset class.

    Same arguments; ``functools.wraps`` replaces this docstring with the core one at runtime.
    """
    return _face(core_write.write_dataset(*args, **kwargs))


__all__ = ["LanceDataset", "dataset", "write_dataset"]
