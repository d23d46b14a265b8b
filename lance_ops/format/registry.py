"""Which reader and writer serve each :class:`FileVersion`; open any Lance data file by its footer.

All Lance footers end with ``u16 major | u16 minor | "LANC"``, so the last 8 bytes say which
reader applies; pylance's ``LanceFileReader`` likewise reads every version. The tail read that
tells the version is the 2.0 reader's own metadata read (the last 64 KiB), handed over to it, so
opening a 2.0 file costs one request, not two.

``LanceFileWriter(path, schema, version=...)`` (the public name, as pylance's) is a factory over
:data:`WRITERS`: the v2 container writer for 2.0/2.1/2.2, the legacy writer for ``"0.1"``/``"legacy"``;
``LanceFileReader(path, storage_options)`` likewise returns the reader of the file's version.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, MutableMapping

import pyarrow as pa

from lance_ops.errors import CorruptFileError, UnsupportedError
from lance_ops.io.base import ObjectStore
from lance_ops.format.legacy.reader import LegacyFileReader, footer_version, is_legacy_footer
from lance_ops.format.legacy.writer import LegacyFileWriter
from lance_ops.format.v2_0.reader import LanceFileReader as LanceFileReaderV20
from lance_ops.format.v2_0.reader import TAIL_READ_BYTES
from lance_ops.format.v2_1.reader import LanceFileReaderV21
from lance_ops.format.version import FileVersion
from lance_ops.format.writer import V2FileWriter

#: the reader class of each readable version (2.1 and 2.2 share the structural layout)
READERS: dict[FileVersion, type] = {
    FileVersion.LEGACY: LegacyFileReader,
    FileVersion.V2_0: LanceFileReaderV20,
    FileVersion.V2_1: LanceFileReaderV21,
    FileVersion.V2_2: LanceFileReaderV21,
}
#: the writer class of each writable version (one v2 container writer; the encoders differ inside)
WRITERS: dict[FileVersion, type] = {
    FileVersion.LEGACY: LegacyFileWriter,
    FileVersion.V2_0: V2FileWriter,
    FileVersion.V2_1: V2FileWriter,
    FileVersion.V2_2: V2FileWriter,
}


def LanceFileWriter(path: str | os.PathLike[str], schema: pa.Schema | None = None, *,  # noqa: N802
                    version: str | FileVersion = FileVersion.V2_0, **kwargs: Any) -> V2FileWriter | LegacyFileWriter:
    """Write one Lance data file; mirrors ``lance.file.LanceFileWriter(path, schema, version=...)``.

    ``version`` is ``"2.0"`` (default), ``"2.1"``, ``"2.2"``, or ``"0.1"``/``"legacy"``; the other
    keyword arguments go to the writer (see :class:`~lance_ops.format.writer.V2FileWriter` and
    :class:`~lance_ops.format.legacy.writer.LegacyFileWriter`, which share one surface).
    """
    parsed = FileVersion.file_writer_spelling(version)
    if parsed is not None and parsed in WRITERS:
        return WRITERS[parsed](path, schema, version=parsed, **kwargs)
    return V2FileWriter(path, schema, version=version, **kwargs)  # refuses the version with today's message


def reader_class(version: FileVersion) -> type:
    """The reader class for ``version``."""
    return READERS[version]


def writer_class(version: FileVersion) -> type:
    """The writer class for ``version``."""
    return WRITERS[version]


def _version_of(store: ObjectStore, path: str, tail: bytes) -> tuple[int, int]:
    try:
        return footer_version(tail)
    except ValueError as exc:
        raise CorruptFileError(store.uri(path), f"{exc} (truncated or not a Lance file)") from exc


def sniff_version(store: ObjectStore, path: str) -> tuple[int, int]:
    """Footer ``(major, minor)`` of the file at ``path`` (one 8-byte tail read)."""
    tail, _ = store.read_tail(path, 8)
    return _version_of(store, path, tail)


def _read_tail(store: ObjectStore, path: str) -> tuple[tuple[int, int], tuple[bytes, int]]:
    """The footer version and ``(tail, file size)`` of one tail read a 2.0 reader can reuse."""
    tail, size = store.read_tail(path, TAIL_READ_BYTES)
    return _version_of(store, path, tail), (tail, size)


def open_file_reader(path: str, storage_options: Mapping[str, Any] | None = None, *, store: ObjectStore | None = None,
                     memo: MutableMapping[str, Any] | None = None,
                     **legacy_kwargs: Any) -> LanceFileReaderV20 | LanceFileReaderV21 | LegacyFileReader:
    """The right reader for the file's version; ``legacy_kwargs`` go to :class:`LegacyFileReader`.

    ``memo``: a dict owned by one dataset object, in which readers of that dataset's files keep
    what equal metadata bytes of its files share (2.0 files: ADR 0044); None for a file read alone."""
    if store is None:
        from lance_ops.io import open_store

        store, path = open_store(path, storage_options)
    (major, minor), tail = _read_tail(store, path)
    if is_legacy_footer(major, minor):
        return LegacyFileReader(path, store=store, **legacy_kwargs)
    if FileVersion.from_manifest(major, minor) is FileVersion.V2_0:  # footer (0, 3), or (2, 0)
        return LanceFileReaderV20(path, store=store, _tail=tail, memo=memo)
    if major == 2 and minor >= 3:
        raise UnsupportedError(
            f"{store.uri(path)}: Lance file version {major}.{minor} is pylance's unstable 'next' format "
            "(pylance warns its files may not be readable in the future); lance_ops reads 0.1, 2.0, 2.1 and 2.2")
    if major == 2:
        return LanceFileReaderV21(path, store=store, _tail=tail)
    raise UnsupportedError(f"{store.uri(path)}: unknown Lance file version {major}.{minor}")


def LanceFileReader(path: str, storage_options: Mapping[str, Any] | None = None, *,  # noqa: N802
                    store: ObjectStore | None = None) -> LanceFileReaderV20 | LanceFileReaderV21 | LegacyFileReader:
    """Read a Lance data file of any version; mirrors ``lance.file.LanceFileReader(path, storage_options=None)``.

    A factory (ADR 0002), as :func:`LanceFileWriter`: it returns the reader of the file's version
    (:func:`open_file_reader`), all with one surface (``schema``, ``num_rows``, ``read_all``,
    ``read_range``, ``take_rows``). A 2.0 file costs one tail read, handed to its reader.
    """
    return open_file_reader(path, storage_options, store=store)
