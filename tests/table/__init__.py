"""Shared helpers for the table-metadata tests: local stores and pylance-built datasets."""
from __future__ import annotations

import os

import pyarrow as pa


def local_store(path: str | os.PathLike):
    """``(store, base)`` for a local directory, through the io layer's ``open_store``."""
    from lance_ops.io import open_store

    return open_store(os.fspath(path), None)


def int_table(start: int, stop: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, stop), pa.int64()),
            "s": pa.array([f"row{i}" for i in range(start, stop)], pa.string()),
        }
    )


def commit_rewritten(store, base: str, manifest_file, mutate=None, *, v2: bool | None = None) -> int:
    """Write ``manifest_file`` (after ``mutate(manifest)``) as the next version; returns it.

    This is how the tests hand pylance a manifest encoded by lance_ops.
    """
    from lance_ops.table.manifest import codec as mf
    from lance_ops.table.manifest import naming

    latest = naming.latest_version(store, base)
    if v2 is None:
        v2 = latest.scheme is naming.NamingScheme.V2
    m = type(manifest_file.manifest)()
    m.CopyFrom(manifest_file.manifest)
    new_version = latest.version + 1
    m.version = new_version
    if mutate is not None:
        mutate(m)
    data = mf.encode_manifest(m, manifest_file.transaction, manifest_file.index_section)
    store.put_if_absent(store.join(base, naming.manifest_path(new_version, v2)), data)
    return new_version
