"""What fragments and blob readers need of a dataset, as a typing Protocol.

``lance_ops.table.fragment`` and ``lance_ops.table.blobs`` work on a dataset that
``lance_ops.table.dataset`` builds out of them; typing against this Protocol instead of importing
``LanceDataset`` keeps the import graph free of a loop (docs/architecture.md).
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.io.base import ObjectStore
from lance_ops.table.manifest.codec import ManifestFile


class DatasetSnapshot(Protocol):
    """One version of a dataset as its fragments and blob columns see it (``LanceDataset`` is one)."""

    uri: str
    storage_options: Mapping[str, Any]

    @property
    def store(self) -> ObjectStore: ...

    @property
    def base(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def manifest(self) -> table_pb2.Manifest: ...

    @property
    def manifest_file(self) -> ManifestFile: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def top_field_ids(self) -> Mapping[str, int]: ...

    @property
    def descendant_field_ids(self) -> Mapping[int, set[int]]: ...

    def cache(self, name: str) -> dict: ...

    def count_rows(self, filter=None, *, fragment_ids: Sequence[int] | None = None) -> int: ...

    def select_rows(self, kind: str, values: np.ndarray) -> tuple[list[Any], np.ndarray, np.ndarray]: ...

    def take_blobs(self, blob_column: str, ids=None, addresses=None, indices=None, *,
                   buffer_size: int = ...) -> list: ...
