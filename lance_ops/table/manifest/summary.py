"""Per-version summaries (``versions()``) without decoding every fragment of every manifest.

A dataset with N fragments and V versions holds about N * V / 2 fragment records in its
manifests, nearly all of them repeated from the version before (an append adds a few at the end).
:class:`VersionSummarizer` reads each manifest's bytes once and walks only the top level of the
Manifest message (ADR 0036):

* the fragment records (field 2) are byte ranges; when the bytes up to the end of the previous
  version's fragment list are the same in this version, those fragments' counts are carried over
  and only the records after them are looked at;
* a record is decoded (and its wire types checked, as :func:`codec.decode_manifest` does) once per
  distinct byte string; the counts of records seen before come from a memo;
* the rest of the Manifest (version, timestamp, schema, ...) is parsed and checked as one small
  message without the fragments.

The damage checks of a full decode apply to everything a summary uses (the footer, the length
prefix, the top-level field structure, each fragment record and the remaining fields); the index
section and the inline transaction, which a summary does not use, are not decoded (pylance's
``versions()`` does not read them either).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError
from lance_ops.format.proto_wire import read_varint
from lance_ops.table.manifest.codec import check_wire_types, manifest_span

#: the tag byte of a Manifest.fragments record (field 2, length-delimited)
_FRAGMENT_TAG = 0x12
#: (data files, their bytes, physical rows, deletion files, deleted rows) of one fragment
Counts = tuple[int, int, int, int, int]


@dataclass
class VersionSummary:
    """What ``versions()`` reports of one manifest: its Manifest without the fragment list, the
    number of fragments and the summed counts of :data:`Counts`."""

    manifest: table_pb2.Manifest
    fragments: int
    totals: Counts

    def metadata(self) -> dict[str, str]:
        """The ``metadata`` dict pylance's ``versions()`` reports."""
        files, size, phys, del_files, deleted = self.totals
        return {
            "total_data_file_rows": str(phys),
            "total_data_files": str(files),
            "total_deletion_file_rows": str(deleted),
            "total_deletion_files": str(del_files),
            "total_files_size": str(size),
            "total_fragments": str(self.fragments),
            "total_rows": str(phys - deleted),
        }


def fragment_counts(f: table_pb2.DataFragment) -> Counts:
    """:data:`Counts` of one fragment record."""
    data_files = f.files
    has_del = f.HasField("deletion_file")
    return (len(data_files), sum(df.file_size_bytes for df in data_files), int(f.physical_rows),
            int(has_del), int(f.deletion_file.num_deleted_rows) if has_del else 0)


def _varint(blob: bytes, pos: int, end: int, path: str) -> tuple[int, int]:
    """The varint at ``pos`` (ending before ``end``) and the position after it."""
    try:
        value, after = read_varint(blob, pos)
    except ValueError:
        after = end + 1
    if after > end or after - pos > 10:
        raise CorruptFileError(path, "Manifest protobuf does not decode: truncated or overlong varint")
    return value, after


def _skip(blob: bytes, pos: int, end: int, path: str) -> int:
    """The position after the top-level field starting at ``pos``."""
    key, pos = _varint(blob, pos, end, path)
    wire = key & 7
    if wire == 0:
        _, pos = _varint(blob, pos, end, path)
    elif wire == 1:
        pos += 8
    elif wire == 2:
        length, pos = _varint(blob, pos, end, path)
        pos += length
    elif wire == 5:
        pos += 4
    else:
        raise CorruptFileError(path, f"Manifest protobuf does not decode: field {key >> 3} has wire type {wire}")
    if pos > end:
        raise CorruptFileError(path, f"Manifest protobuf does not decode: field {key >> 3} runs past the message")
    return pos


class VersionSummarizer:
    """Summaries of the manifests of one dataset, fed in version order (state is carried over)."""

    def __init__(self) -> None:
        self._memo: dict[bytes, Counts] = {}
        self._prev: bytes = b""
        self._prev_end = 0  # end of the previous version's fragment records (in its blob)
        self._prev_count = 0
        self._prev_totals: Counts = (0, 0, 0, 0, 0)

    def _counts(self, record: bytes, path: str) -> Counts:
        counts = self._memo.get(record)
        if counts is None:
            frag = _parsed(table_pb2.DataFragment(), record, path)
            counts = self._memo[record] = fragment_counts(frag)
        return counts

    def summarize(self, data: bytes, path: str = "<manifest>") -> VersionSummary:
        """The summary of the manifest file ``data``; CorruptFileError naming ``path`` on damage."""
        start, end = manifest_span(data, path)
        blob = data[start:end]
        n = len(blob)
        pos = 0
        # the schema (field 1) and anything else before the fragment list
        while pos < n and blob[pos] != _FRAGMENT_TAG:
            pos = _skip(blob, pos, n, path)
        frag_start = pos
        files = size = phys = del_files = deleted = count = 0
        if self._prev_end and self._prev_end <= n and self._prev_end > frag_start \
                and blob.startswith(self._prev[:self._prev_end]):
            pos = self._prev_end  # the fragments of the version before, unchanged: carry them over
            count = self._prev_count
            files, size, phys, del_files, deleted = self._prev_totals
        while pos < n and blob[pos] == _FRAGMENT_TAG:
            length, body = _varint(blob, pos + 1, n, path)
            pos = body + length
            if pos > n:
                raise CorruptFileError(path, "Manifest protobuf does not decode: a fragment runs past the message")
            c = self._counts(blob[body:pos], path)
            files += c[0]
            size += c[1]
            phys += c[2]
            del_files += c[3]
            deleted += c[4]
            count += 1
        frag_end = pos
        while pos < n:  # the fields after the list; a second run of fragment records (valid
            if blob[pos] == _FRAGMENT_TAG:  # protobuf, though no Lance writer makes one): decode it all
                return self._whole(blob, path)
            pos = _skip(blob, pos, n, path)
        manifest = _parse_manifest(blob[:frag_start] + blob[frag_end:], path)
        totals: Counts = (files, size, phys, del_files, deleted)
        self._prev, self._prev_end, self._prev_count, self._prev_totals = blob, frag_end, count, totals
        return VersionSummary(manifest, count, totals)

    def _whole(self, blob: bytes, path: str) -> VersionSummary:
        """The summary from a decode of the whole Manifest message (nothing carried over)."""
        manifest = _parse_manifest(blob, path)
        totals = [0, 0, 0, 0, 0]
        for frag in manifest.fragments:
            for i, c in enumerate(self._counts(frag.SerializeToString(), path)):
                totals[i] += c
        count = len(manifest.fragments)
        del manifest.fragments[:]
        self._prev, self._prev_end = b"", 0
        return VersionSummary(manifest, count, (totals[0], totals[1], totals[2], totals[3], totals[4]))


def _parse_manifest(blob: bytes, path: str) -> table_pb2.Manifest:
    return _parsed(table_pb2.Manifest(), blob, path)


_Message = TypeVar("_Message", table_pb2.Manifest, table_pb2.DataFragment)


def _parsed(message: _Message, blob: bytes, path: str) -> _Message:
    """``message`` parsed from ``blob`` and wire-checked; CorruptFileError(path) when it does not decode."""
    try:
        message.ParseFromString(blob)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CorruptFileError(path, f"Manifest protobuf does not decode: {exc}") from exc
    check_wire_types(message, blob, path, type(message).__name__)
    return message
