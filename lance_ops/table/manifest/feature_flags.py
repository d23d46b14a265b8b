"""Manifest feature flags (``reader_feature_flags`` / ``writer_feature_flags``).

A reader (writer) must refuse a dataset whose reader (writer) flags contain a bit it does not
understand. Flags are recomputed from the manifest content on every commit.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lance_ops.errors import UnsupportedError

if TYPE_CHECKING:
    from lance_ops._proto import table_pb2

#: fragments may have deletion files (reader + writer)
FLAG_DELETION_FILES = 1
#: stable row ids: every fragment has a row id sequence (reader + writer)
FLAG_STABLE_ROW_IDS = 2
#: legacy "use v2 file format" marker; no longer written, harmless to read
FLAG_USE_V2_FORMAT_DEPRECATED = 4
#: the manifest has table config (writer only)
FLAG_TABLE_CONFIG = 8
#: the dataset has extra base paths (reader + writer)
FLAG_BASE_PATHS = 16
#: no transaction files are written, only inline transactions (writer only)
FLAG_DISABLE_TRANSACTION_FILE = 32
#: first bit we do not know (upstream 2026 adds 64 = data overlay files and more)
FLAG_UNKNOWN = 64

#: bits lance_ops can read / write datasets with
SUPPORTED_READER_FLAGS = (
    FLAG_DELETION_FILES
    | FLAG_STABLE_ROW_IDS
    | FLAG_USE_V2_FORMAT_DEPRECATED
    | FLAG_TABLE_CONFIG
    | FLAG_BASE_PATHS
    | FLAG_DISABLE_TRANSACTION_FILE
)
# We can read multi-base datasets but do not write into them.
SUPPORTED_WRITER_FLAGS = SUPPORTED_READER_FLAGS & ~FLAG_BASE_PATHS

_NAMES = {
    FLAG_DELETION_FILES: "deletion files",
    FLAG_STABLE_ROW_IDS: "stable row ids",
    FLAG_USE_V2_FORMAT_DEPRECATED: "v2 format (deprecated)",
    FLAG_TABLE_CONFIG: "table config",
    FLAG_BASE_PATHS: "base paths",
    FLAG_DISABLE_TRANSACTION_FILE: "no transaction files",
    64: "data overlay files",
}


def describe_flags(flags: int) -> str:
    """Human readable list of set bits, e.g. ``"1 (deletion files), 64 (data overlay files)"``."""
    parts = []
    bit = 1
    while bit <= flags:
        if flags & bit:
            name = _NAMES.get(bit)
            parts.append(f"{bit} ({name})" if name else str(bit))
        bit <<= 1
    return ", ".join(parts) or "none"


def _fragment_has_row_ids(fragment: table_pb2.DataFragment) -> bool:
    return fragment.WhichOneof("row_id_sequence") is not None


def compute_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool | None = None,
    disable_transaction_file: bool = False,
) -> tuple[int, int]:
    """``(reader_flags, writer_flags)`` for ``manifest``, as upstream's commit computes them.

    * a fragment with a deletion file -> 1 (reader + writer)
    * stable row ids requested, or already flagged on the manifest -> 2 (reader + writer);
      every fragment must then carry a row id sequence
    * non-empty ``config`` -> 8 (writer)
    * non-empty ``base_paths`` -> 16 (reader + writer)
    * ``disable_transaction_file`` -> 32 (writer)

    ``stable_row_ids=None`` keeps whatever the manifest's current flags say.
    """
    had_stable = bool(
        manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS
        and manifest.writer_feature_flags & FLAG_STABLE_ROW_IDS
    )
    reader = writer = 0
    if any(f.HasField("deletion_file") for f in manifest.fragments):
        reader |= FLAG_DELETION_FILES
        writer |= FLAG_DELETION_FILES
    if stable_row_ids or had_stable:
        missing = [f.id for f in manifest.fragments if not _fragment_has_row_ids(f)]
        if missing:
            raise ValueError(
                f"stable row ids are enabled but fragments {missing[:10]} have no row id sequence"
            )
        reader |= FLAG_STABLE_ROW_IDS
        writer |= FLAG_STABLE_ROW_IDS
    if len(manifest.config):
        writer |= FLAG_TABLE_CONFIG
    if len(manifest.base_paths):
        reader |= FLAG_BASE_PATHS
        writer |= FLAG_BASE_PATHS
    if disable_transaction_file:
        writer |= FLAG_DISABLE_TRANSACTION_FILE
    return reader, writer


def apply_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool | None = None,
    disable_transaction_file: bool = False,
) -> tuple[int, int]:
    """Compute the flags (see :func:`compute_flags`) and store them on ``manifest``."""
    reader, writer = compute_flags(
        manifest, stable_row_ids=stable_row_ids, disable_transaction_file=disable_transaction_file
    )
    manifest.reader_feature_flags = reader
    manifest.writer_feature_flags = writer
    return reader, writer


def check_reader_flags(flags: int, path: str = "<dataset>") -> None:
    """Raise UnsupportedError if ``flags`` has a reader feature we do not understand."""
    unknown = int(flags) & ~SUPPORTED_READER_FLAGS
    if unknown:
        raise UnsupportedError(
            f"{path}: unsupported reader feature flags {describe_flags(unknown)} "
            f"(manifest reader flags {int(flags)}); this dataset needs a newer reader"
        )


def check_writer_flags(flags: int, path: str = "<dataset>") -> None:
    """Raise UnsupportedError if ``flags`` has a writer feature we do not understand."""
    unknown = int(flags) & ~SUPPORTED_WRITER_FLAGS
    if unknown:
        raise UnsupportedError(
            f"{path}: unsupported writer feature flags {describe_flags(unknown)} "
            f"(manifest writer flags {int(flags)}); this dataset needs a newer writer"
        )


def can_read(flags: int) -> bool:
    """Whether lance_ops understands every reader feature in ``flags`` (the non-raising check)."""
    return not (int(flags) & ~SUPPORTED_READER_FLAGS)


def can_write(flags: int) -> bool:
    """Whether lance_ops understands every writer feature in ``flags`` (the non-raising check)."""
    return not (int(flags) & ~SUPPORTED_WRITER_FLAGS)
