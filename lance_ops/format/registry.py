"""Open any Lance data file with the reader for its version (2.0, 2.1+, or legacy v0.1).

All Lance footers end with ``u16 major | u16 minor | "LANC"``, so the last 8 bytes say which
reader applies; pylance's ``LanceFileReader`` likewise reads every version. The tail read that
tells the version is the 2.0 reader's own metadata read (the last 64 KiB), handed over to it, so
opening a 2.0 file costs one request, not two.
"""
from __future__ import annotations

from typing import Any, Mapping

from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.format.v2_0.reader import TAIL_READ_BYTES
from lance_ops.format.v2_0.reader import LanceFileReader as LanceFileReaderV20
from lance_ops.format.legacy.reader import LegacyFileReader, footer_version, is_legacy_footer


def _version_of(store, path: str, tail) -> tuple[int, int]:
    try:
        return footer_version(tail)
    except ValueError as exc:
        raise CorruptFileError(store.uri(path), f"{exc} (truncated or not a Lance file)") from exc


def sniff_version(store, path: str) -> tuple[int, int]:
    """Footer ``(major, minor)`` of the file at ``path`` (one 8-byte tail read)."""
    tail, _ = store.read_tail(path, 8)
    return _version_of(store, path, tail)


def _read_tail(store, path: str) -> tuple[tuple[int, int], tuple[bytes, int]]:
    """The footer version and ``(tail, file size)`` of one tail read a 2.0 reader can reuse."""
    tail, size = store.read_tail(path, TAIL_READ_BYTES)
    return _version_of(store, path, tail), (tail, size)


def open_file_reader(path: str, storage_options: Mapping[str, Any] | None = None, *, store=None, **legacy_kwargs):
    """The right reader for the file's version; ``legacy_kwargs`` go to :class:`LegacyFileReader`."""
    if store is None:
        from lance_ops.io import open_store

        store, path = open_store(path, storage_options)
    (major, minor), tail = _read_tail(store, path)
    if is_legacy_footer(major, minor):
        return LegacyFileReader(path, store=store, **legacy_kwargs)
    if (major, minor) in ((0, 3), (2, 0)):
        return LanceFileReaderV20(path, store=store, _tail=tail)
    if major == 2 and minor >= 3:
        raise UnsupportedError(
            f"{store.uri(path)}: Lance file version {major}.{minor} is pylance's unstable 'next' format "
            "(pylance warns its files may not be readable in the future); lance_ops reads 0.1, 2.0, 2.1 and 2.2")
    if major == 2:
        from lance_ops.format.v2_1.reader import LanceFileReaderV21

        return LanceFileReaderV21(path, store=store)
    raise UnsupportedError(f"{store.uri(path)}: unknown Lance file version {major}.{minor}")


class LanceFileReader(LanceFileReaderV20):
    """Reads a Lance data file of any version: ``LanceFileReader(path, storage_options=None)``.

    Construction returns the reader class for the file's version (all share one surface:
    ``schema``, ``num_rows``, ``read_all``, ``read_range``, ``take_rows``).
    """

    def __new__(cls, path: str, storage_options: Mapping[str, Any] | None = None, *, store=None):
        if store is None:
            from lance_ops.io import open_store

            store, path = open_store(path, storage_options)
        (major, minor), tail = _read_tail(store, path)
        if (major, minor) in ((0, 3), (2, 0)):
            reader = super().__new__(cls)
            reader._sniffed_store = (store, path, tail)
            return reader
        return open_file_reader(path, store=store)

    def __init__(self, path: str, storage_options: Mapping[str, Any] | None = None, *, store=None):
        store, path, tail = self.__dict__.pop("_sniffed_store", (store, path, None))
        super().__init__(path, store=store, _tail=tail)
