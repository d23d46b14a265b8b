"""Byte-level constants and the 40-byte footer of a v2 ``.lance`` data file.

Layout (all little-endian): data buffers (each padded to 64 bytes), global buffer 0 (a
``lance.file.FileDescriptor``), the column metadata messages, the column-metadata offset table
(``u64 pos, u64 size`` per column), the global-buffer offset table (same shape), then the footer:
``u64 column_meta_start | u64 cmo_table_start | u64 gbo_table_start | u32 num_global_buffers |
u32 num_columns | u16 major | u16 minor | b"LANC"``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from lance_ops.errors import CorruptFileError

MAGIC = b"LANC"
FOOTER_SIZE = 40
PAGE_ALIGNMENT = 64
PAD_BYTE = b"\x48"
_FOOTER = struct.Struct("<QQQIIHH4s")

# type_url values of the google.protobuf.Any wrappers, exactly as upstream writes them.
ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"
PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"

@dataclass(frozen=True)
class Footer:
    """The fixed 40-byte footer of a v2 file: where the metadata sections start, and the version.

    Readers parse it first (:meth:`unpack` also checks the offsets); the writer packs it last.
    """

    column_meta_start: int
    cmo_table_start: int
    gbo_table_start: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    def pack(self) -> bytes:
        """The 40 footer bytes, ending with the ``LANC`` magic."""
        return _FOOTER.pack(
            self.column_meta_start, self.cmo_table_start, self.gbo_table_start,
            self.num_global_buffers, self.num_columns, self.major, self.minor, MAGIC,
        )

    @classmethod
    def unpack(cls, tail: bytes, file_size: int, path: str) -> "Footer":
        """Parse the last 40 bytes and check that every offset lies inside the file."""
        if file_size < FOOTER_SIZE or len(tail) < FOOTER_SIZE:
            raise CorruptFileError(path, f"file is {file_size} bytes, too small to hold a Lance footer")
        *values, magic = _FOOTER.unpack(bytes(tail[-FOOTER_SIZE:]))
        if magic != MAGIC:
            raise CorruptFileError(path, f"bad magic {magic!r} (expected {MAGIC!r}): not a Lance file or truncated")
        footer = cls(*values)
        body_end = file_size - FOOTER_SIZE
        if not (footer.column_meta_start <= footer.cmo_table_start <= footer.gbo_table_start <= body_end):
            raise CorruptFileError(path, "footer offsets are out of order or past the end of the file")
        if footer.cmo_table_start + 16 * footer.num_columns > footer.gbo_table_start:
            raise CorruptFileError(path, "column metadata offset table overlaps the global buffer table")
        if footer.gbo_table_start + 16 * footer.num_global_buffers > body_end:
            raise CorruptFileError(path, "global buffer offset table runs past the footer")
        if footer.num_global_buffers < 1:
            raise CorruptFileError(path, "file has no global buffer 0 (schema)")
        return footer


def padding_for(length: int, alignment: int = PAGE_ALIGNMENT) -> int:
    """Bytes of padding needed after ``length`` bytes to reach the next ``alignment`` boundary."""
    return (-length) % alignment
