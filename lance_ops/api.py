"""The package face: ``lance_ops.dataset``, ``lance_ops.write_dataset`` and ``lance_ops.LanceDataset``.

The face stands above every floor (docs/adr/0003-public-face-composes-maintenance.md): the core
``lance_ops.table.dataset.LanceDataset`` knows scans, takes, deletes and tags; the dataset users
get adds the maintenance verbs (``optimize``, ``cleanup_old_versions``) by importing
``lance_ops.maintenance`` here, so the table layer never imports upward.
"""
from __future__ import annotations

import functools
import io
import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa

from lance_ops.errors import InvalidArgumentError, UnsupportedError

from lance_ops.maintenance import rowid_index
from lance_ops.table import dataset as core
from lance_ops.table import write as core_write
from lance_ops.table.commit import hooks
from lance_ops.table import rewrite_rows
from lance_ops.table.merge_insert import MergeInsertBuilder
from lance_ops.table.update import plan_update
from lance_ops.table.transaction_view import Transaction

# the face composes the layers: take_by_row_id asks the persisted row-id index first (ADR 0006)
hooks.register_row_id_index(rowid_index.lookup)

if TYPE_CHECKING:
    from lance_ops.maintenance.cleanup import CleanupStats
    from lance_ops.maintenance.compaction import DatasetOptimizer


#: scan arguments ``default_scan_options`` may set (the ones lance_ops' scans take)
_SCAN_OPTIONS = ("columns", "filter", "limit", "offset", "with_row_id", "with_row_address", "batch_size",
                 "blob_handling", "fragments")


class LanceDataset(core.LanceDataset):
    """A Lance dataset at one version, with the maintenance verbs of pylance's ``LanceDataset``.

    ``default_scan_options`` (pylance's): scan arguments used by ``to_table``, ``to_batches`` and
    ``scanner`` where the call does not give them.
    """

    def __init__(self, uri: str, version: int | str | None = None, storage_options: Mapping[str, Any] | None = None,
                 *, default_scan_options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(uri, version, storage_options, **kwargs)
        unknown = set(default_scan_options or {}) - set(_SCAN_OPTIONS)
        if unknown:
            raise InvalidArgumentError(f"default_scan_options: lance_ops scans take {list(_SCAN_OPTIONS)}, "
                                       f"not {sorted(unknown)}")
        self.default_scan_options = dict(default_scan_options) if default_scan_options else None

    def _defaults(self, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` with ``default_scan_options`` filled in where a value is None."""
        if not self.default_scan_options:
            return given
        out = dict(given)
        for key, value in self.default_scan_options.items():
            if out.get(key) is None:
                out[key] = value
        return out

    def to_table(self, columns: Any = None, filter: Any = None, limit: int | None = None,
                 offset: int | None = None, **kwargs: Any) -> pa.Table:
        """As :meth:`lance_ops.table.dataset.LanceDataset.to_table`, after ``default_scan_options``."""
        return super().to_table(**self._defaults(dict(columns=columns, filter=filter, limit=limit, offset=offset,
                                                      **kwargs)))

    def to_batches(self, columns: Any = None, filter: Any = None,
                   **kwargs: Any) -> Iterator[pa.RecordBatch]:
        """As :meth:`lance_ops.table.dataset.LanceDataset.to_batches`, after ``default_scan_options``."""
        args = self._defaults(dict(columns=columns, filter=filter, **kwargs))
        if args.get("limit") is not None or args.get("offset"):
            return self.scanner(**args).to_batches()
        args.pop("limit", None), args.pop("offset", None)
        return super().to_batches(**args)

    def scanner(self, columns: Any = None, filter: Any = None, limit: int | None = None,
                offset: int | None = None, **kwargs: Any) -> core.Scanner:
        """As :meth:`lance_ops.table.dataset.LanceDataset.scanner`, after ``default_scan_options``."""
        return super().scanner(**self._defaults(dict(columns=columns, filter=filter, limit=limit, offset=offset,
                                                     **kwargs)))

    def head(self, num_rows: int, **kwargs: Any) -> pa.Table:
        """The first ``num_rows`` rows of a scan (``kwargs`` as :meth:`scanner`'s), as pylance's ``head``."""
        kwargs["limit"] = num_rows
        return self.scanner(**kwargs).head(num_rows)

    def insert(self, data: Any, *, mode: str = "append", **kwargs: Any) -> None:
        """Write ``data`` into this dataset (``mode`` ``"append"`` or ``"overwrite"``), as pylance's
        ``insert``: this object moves to the new version; ``kwargs`` go to ``write_dataset``."""
        kwargs.setdefault("storage_options", dict(self.storage_options))
        new = core_write.write_dataset(data, self.uri, mode=mode, **kwargs)
        self.move_to(new.manifest_file)

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """pylance's ``merge_insert(on)``: a builder of an upsert keyed on ``on``
        (``when_matched_update_all``, ``when_not_matched_insert_all``,
        ``when_not_matched_by_source_delete``, then ``execute(data)``; ADR 0021)."""
        return MergeInsertBuilder(self, on)

    def update(self, updates: dict[str, str], where: Any = None, *, conflict_retries: int = 10,
               retry_timeout: Any = None, data_storage_version: str | None = None) -> dict[str, int]:
        """pylance's ``update``: set columns to SQL expressions (``{"v": "v * 2"}``) on the rows
        matching ``where`` (every row without it); returns ``{"num_rows_updated": n}`` and moves
        this object to the new version (an ``Update`` transaction, ADR 0021)."""
        return dict(rewrite_rows.run(self, lambda ds: plan_update(ds, updates, where), "update",
                                     conflict_retries=conflict_retries))

    def _take_rows(self, row_ids: Any, columns: Any = None, *, ignore_deletions: bool = False,
                   **kwargs: Any) -> pa.Table:
        """Rows by row id (stable ids, else row addresses), as pylance's ``_take_rows``."""
        return self.take_by_row_id(row_ids, columns)

    def read_transaction(self, version: int) -> Transaction | None:
        """The transaction that made ``version`` (pylance's shape), None if it was not recorded."""
        proto = self.checkout_version(version).transaction
        return None if proto is None else Transaction.from_proto(proto)

    def get_transactions(self, recent_transactions: int = 10) -> list[Transaction | None]:
        """The transactions of this version and the ``recent_transactions - 1`` before it, newest first."""
        first = max(1, self.version - int(recent_transactions) + 1)
        return [self.read_transaction(v) for v in range(self.version, first - 1, -1)]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as (uri, version, storage options, default scan options)."""
        return (_reopen, (self.uri, self.version, dict(self.storage_options), self.default_scan_options))

    @property
    def optimize(self) -> "DatasetOptimizer":
        """Compaction entry points (``compact_files``, ``materialize_deletions``, ``plan``);
        ``compact_files`` takes pylance's options and returns pylance's ``CompactionMetrics``."""
        from lance_ops.maintenance.compaction import DatasetOptimizer  # on use: opening stays light
        from lance_ops.optimize import CompactionMetrics, compaction_arguments

        class Optimizer(DatasetOptimizer):
            """pylance's ``DatasetOptimizer`` surface over lance_ops' compaction."""

            def compact_files(self, **kwargs: Any) -> CompactionMetrics:
                """Compact (pylance's options, ``max_bytes_per_file`` included); pylance's metrics object."""
                return CompactionMetrics(super().compact_files(**compaction_arguments(ds, kwargs)))

            def optimize_indices(self, **kwargs: Any) -> None:
                """Bring the indices up to date with new fragments (pylance's keywords: ``index_names``,
                ``num_indices_to_merge``, ``retrain``); the dataset moves to the new version."""
                from lance_ops.maintenance.index_upkeep.optimize import optimize_indices

                optimize_indices(ds, **kwargs)

        ds = self
        return Optimizer(self)

    def cleanup_old_versions(self, older_than: timedelta | None = None, retain_versions: int | None = None, *,
                             delete_unverified: bool = False,
                             error_if_tagged_old_versions: bool = True, delete_rate_limit: int | None = None,
                             versions: list[int] | None = None, delete_concurrency: int | None = None,
                             dry_run: bool = False,
                             progress: Callable[[int, int], None] | None = None) -> "CleanupStats":
        """Remove old versions and the files only they use (see lance_ops.maintenance.cleanup).

        Versions older than ``older_than`` (or beyond the newest ``retain_versions``) go, with
        the data, deletion and index files no remaining version references.
        """
        from lance_ops.maintenance.cleanup import cleanup_old_versions

        return cleanup_old_versions(self, older_than, retain_versions, delete_unverified=delete_unverified,
                                    error_if_tagged_old_versions=error_if_tagged_old_versions, dry_run=dry_run,
                                    progress=progress, versions=versions, delete_rate_limit=delete_rate_limit,
                                    delete_concurrency=delete_concurrency)


def _face(ds: core.LanceDataset) -> LanceDataset:
    """``ds`` as the face's class (same version, store and decoded manifest; no re-read)."""
    if isinstance(ds, LanceDataset):
        return ds
    return LanceDataset(ds.uri, ds.version, ds.storage_options, _manifest_file=ds.manifest_file,
                        _store=(ds.store, ds.base))


class BlobColumn:
    """A binary column read as file-like objects, one per row (pylance's ``lance.BlobColumn``)."""

    def __init__(self, blob_column: pa.Array | pa.ChunkedArray) -> None:
        if not isinstance(blob_column, (pa.Array, pa.ChunkedArray)):
            raise ValueError(f"Expected a pyarrow.Array or pyarrow.ChunkedArray, got {type(blob_column)}")
        if not (pa.types.is_large_binary(blob_column.type) or pa.types.is_binary(blob_column.type)):
            raise ValueError(f"Expected a binary array, got {blob_column.type}")
        self.blob_column = blob_column

    def __iter__(self) -> Iterator[io.BytesIO]:
        for value in self.blob_column:  # one file object per row is what the caller asks for
            yield io.BytesIO(value.as_py())  # a null reads as b"", as pylance's


def _reopen(uri: str, version: int, storage_options: dict[str, Any],
            default_scan_options: dict[str, Any] | None) -> LanceDataset:
    """A face dataset unpickled: opened again at its version."""
    return LanceDataset(uri, version, storage_options, default_scan_options=default_scan_options)


def _as_datetime(ts: Any) -> datetime:
    """``asof`` as pylance reads it: a datetime, ``"%Y-%m-%d %H:%M:%S"`` text, or a pandas Timestamp."""
    if isinstance(ts, datetime):
        return ts
    if isinstance(ts, str):
        try:
            return datetime.strptime(ts, "%Y-%m-%d %H:%M:%S")
        except ValueError:
            raise InvalidArgumentError(f"Failed to parse timestamp string {ts}") from None
    if hasattr(ts, "to_pydatetime"):
        return ts.to_pydatetime()
    raise TypeError(f"Unrecognized version timestamp {ts} of type {type(ts)}")


def dataset(uri: str | os.PathLike[str], version: int | str | None = None, asof: Any = None,
            block_size: int | None = None, commit_lock: Any = None, index_cache_size: int | None = None,
            storage_options: Mapping[str, Any] | None = None,
            default_scan_options: Mapping[str, Any] | None = None, **kwargs: Any) -> LanceDataset:
    """Open the dataset at ``uri``, with ``lance.dataset``'s arguments.

    ``version``: an int, a tag name, or None for the latest; ``asof`` (with no ``version``): the
    newest version committed before that time (naive datetimes as ``versions()`` gives them).
    ``block_size``, ``commit_lock``, ``index_cache_size`` and pylance's cache-size arguments are
    accepted and change nothing (lance_ops has no such caches); namespaces are refused.
    """
    for name in ("namespace_client", "table_id", "session", "base_store_params"):
        if kwargs.get(name) is not None:
            raise UnsupportedError(f"lance_ops.dataset({name}=...) is not supported (no namespaces or sessions)")
    ds = LanceDataset(os.fspath(uri), version, dict(storage_options or {}), default_scan_options=default_scan_options)
    if version is None and asof is not None:
        cutoff = _as_datetime(asof)
        before = [v["version"] for v in ds.versions() if v["timestamp"] < cutoff]
        if not before:
            raise InvalidArgumentError(f"{cutoff} is earlier than the first version of this dataset")
        ds = LanceDataset(ds.uri, max(before), ds.storage_options, default_scan_options=default_scan_options,
                          _store=(ds.store, ds.base))
    return ds


@functools.wraps(core_write.write_dataset)
def write_dataset(*args: Any, **kwargs: Any) -> LanceDataset:
    """:func:`lance_ops.table.write.write_dataset`, returning the face's dataset class.

    Same arguments; ``functools.wraps`` replaces this docstring with the core one at runtime.
    """
    return _face(core_write.write_dataset(*args, **kwargs))


__all__ = ["BlobColumn", "LanceDataset", "Transaction", "dataset", "write_dataset"]
