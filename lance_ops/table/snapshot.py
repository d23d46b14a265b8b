"""What fragments and blob readers need of a dataset, as a typing Protocol.

``lance_ops.table.fragment`` and ``lance_ops.table.blobs`` work on a dataset that
``lance_ops.table.dataset`` builds out of them; typing against this Protocol instead of importing
``LanceDataset`` keeps the import graph free of a loop (docs/architecture.md).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops._proto import table_pb2
from lance_ops.io.base import ObjectStore
from lance_ops.table.manifest.codec import ManifestFile

#: rows chosen for ``take_blobs``: ids, addresses or positions, as a sequence or an array
BlobSelection = Union[Iterable[int], np.ndarray, pa.Array, pa.ChunkedArray]


class DatasetSnapshot(Protocol):
    """One version of a dataset as its fragments and blob columns see it (``LanceDataset`` is one)."""

    uri: str

    @property
    def storage_options(self) -> Mapping[str, Any]:
        """The options the dataset was opened with (for stores of external blob URIs); read-only here."""
        ...

    @property
    def store(self) -> ObjectStore:
        """The object store holding the dataset's files."""
        ...

    @property
    def base(self) -> str:
        """The dataset root inside :attr:`store`."""
        ...

    @property
    def version(self) -> int:
        """The version number this snapshot reads."""
        ...

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The manifest of this version."""
        ...

    @property
    def manifest_file(self) -> ManifestFile:
        """The decoded manifest file of this version (with its dictionaries, for legacy readers)."""
        ...

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version as pylance shows it (extension types restored)."""
        ...

    @property
    def storage_schema(self) -> pa.Schema:
        """The Arrow schema of this version as stored (what reads and filters work on)."""
        ...

    @property
    def top_field_ids(self) -> Mapping[str, int]:
        """Field id of each top-level column, by name."""
        ...

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether ``_rowid`` values are stable row ids (else they are row addresses)."""
        ...

    @property
    def descendant_field_ids(self) -> Mapping[int, set[int]]:
        """Each top-level field id with the ids of itself and its nested fields."""
        ...

    def cache(self, name: str) -> dict:
        """The snapshot's cache called ``name`` (readers, deletion vectors), kept as long as the object."""
        ...

    def count_rows(self, filter: str | pc.Expression | None = None, *,
                   fragment_ids: Sequence[int] | None = None) -> int:
        """Live rows (matching ``filter``), of the given fragments only when ``fragment_ids`` is set."""
        ...

    @property
    def to_table(self) -> Callable[..., pa.Table]:
        """The dataset's ``to_table`` (``fragments=`` restricts the scan; a fragment's ``to_table`` uses it)."""
        ...

    @property
    def scanner(self) -> Callable[..., Any]:
        """The dataset's ``scanner`` (``fragments=`` restricts it)."""
        ...

    @property
    def take_fragment_rows(self) -> Callable[..., pa.Table]:
        """Rows at positions among one fragment's live rows (``LanceFragment.take``)."""
        ...

    def select_rows(self, kind: str, values: np.ndarray) -> tuple[list[Any], np.ndarray, np.ndarray]:
        """(fragments, fragment position per row, physical offset per row) of the rows ``values``
        chosen by ``kind`` (``"ids"``, ``"addresses"`` or ``"indices"``); the fragments are
        ``LanceFragment`` objects (not named here: that import would make a loop)."""
        ...

    def take_blobs(self, blob_column: str, ids: BlobSelection | None = None,
                   addresses: BlobSelection | None = None, indices: BlobSelection | None = None, *,
                   buffer_size: int = ...) -> list:
        """File-like handles on the blob values of the rows chosen by exactly one of the selections."""
        ...
