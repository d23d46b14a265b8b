"""Manifest files: ``_versions/*.manifest``.

Byte layout (all integers little endian)::

    [dictionary values]           legacy (v0.1) datasets only, see below
    [u32 len | IndexSection]      optional; Manifest.index_section = offset of the u32
    [u32 len | Transaction]       optional inline transaction; Manifest.transaction_section
                                  (field 23, as pylance 14 writes it) = offset of the u32
    [u32 len | Manifest]
    [i64 manifest_pos | i16 0 | i16 2 | "LANC"]                       16-byte footer

Nothing may sit between the Manifest message and the footer: a reader checks that the length
prefix equals ``file_size - manifest_pos - 4 - 16``. Older writers stored the inline transaction
offset in field 21 (``transaction_section_v1``); both are accepted on read.

Protobuf maps are serialised in a deterministic key order, and, like upstream's prost
encoder, a map entry's key or value equal to its default (e.g. an empty string) is left out.
Upstream writes map entries in hash order, so a manifest whose maps hold more than one entry is
reproduced semantically (same content and size), not byte for byte; everything else re-encodes to
identical bytes.

Dictionary values (legacy datasets): the manifest of a v0.1 dataset carries the values of every
dictionary field (Arrow dictionary type, logical type ``dict:...``) at the very start of the file,
one after the other in field id order (struct children and list items included), as pylance 14
writes them: string/binary values as a legacy var-binary page (the value bytes, then ``len + 1``
int64 absolute positions; ``Field.dictionary.offset`` points at the positions), integer values as
a plain page (``offset`` at its start); ``Field.dictionary.length`` is the number of values. Nulls
are stored as empty values and, in a nullable field, every empty value reads back as null. Every
new version rewrites the values it inherits (they are part of the schema, fixed by the dataset's
first write). Datasets of file format 2.x keep dictionaries in the data files: their fields carry
an empty ``dictionary`` message and the manifest file holds no values.
"""
from __future__ import annotations

import struct
import threading
from typing import TYPE_CHECKING, Mapping, TypeVar

import numpy as np
import pyarrow as pa
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError, Message

from lance_ops.format.version import FileVersion
from lance_ops._proto import file_pb2, table_pb2, transaction_pb2
from lance_ops.errors import CorruptFileError, LanceOpsError, UnsupportedError
from lance_ops.format.proto_wire import has_map, serialize_like_upstream, wire_records
from lance_ops.table import versions
from lance_ops.table.manifest.facts import FragmentFacts, manifest_facts

if TYPE_CHECKING:
    from lance_ops.io import ObjectStore

MAGIC = b"LANC"
MAJOR_VERSION = 0
MINOR_VERSION = 2
FOOTER_SIZE = 16
#: bytes fetched by the first (tail) read of a manifest
PREFETCH_SIZE = 64 * 1024

_FOOTER = struct.Struct("<qhh4s")
_U32 = struct.Struct("<I")


class ManifestFile:
    """A decoded manifest file.

    The inline transaction is decoded when first asked for (``transaction``), not on open: a
    version's transaction is only needed by commits catching up and by history, and it is often
    as large as the manifest (a delete lists every fragment it touched). Its bounds are checked
    when the file is decoded; a protobuf that does not decode raises CorruptFileError naming the
    file at first access.
    """

    def __init__(self, manifest: table_pb2.Manifest, transaction: transaction_pb2.Transaction | None = None,
                 index_section: table_pb2.IndexSection | None = None, path: str = "", size: int = 0,
                 dictionaries: dict[int, pa.Array] | None = None, *, transaction_blob: bytes | None = None,
                 serialised: bytes | None = None) -> None:
        self.manifest = manifest
        self.index_section = index_section
        #: where it was read from ("" when decoded from memory)
        self.path = path
        #: total file size in bytes
        self.size = size
        #: legacy (v0.1) datasets: field id -> dictionary values stored in the file (as pylance reads them)
        self.dictionaries: dict[int, pa.Array] = dictionaries if dictionaries is not None else {}
        self._transaction = transaction
        self._transaction_blob = transaction_blob if transaction is None else None
        self._lock = threading.Lock()
        #: ``manifest.SerializeToString()`` as the decoder made it, until the facts are read from it
        self._serialised = serialised
        self._facts: FragmentFacts | None = None

    def fragment_facts(self) -> FragmentFacts:
        """The facts of this version's fragment list (ids, row counts, deletions, storage versions;
        :mod:`lance_ops.table.manifest.facts`), gathered once: opening checks the ids, counting
        rows, planning a compaction and an Append's commit read them again. A read version's
        manifest is not changed afterwards (commits build new ones)."""
        facts = self._facts
        if facts is None:
            with self._lock:
                facts = self._facts
                if facts is None:
                    facts = self._facts = manifest_facts(self.manifest, self._serialised)
                    self._serialised = None
        return facts

    @property
    def transaction(self) -> transaction_pb2.Transaction | None:
        """The inline transaction (decoded on first access), None if the file holds none."""
        if self._transaction_blob is not None:
            with self._lock:
                blob = self._transaction_blob
                if blob is not None:
                    self._transaction = _parse(transaction_pb2.Transaction(), blob, self.path or "<manifest>",
                                               "Transaction", keep_unknown=True)
                    self._transaction_blob = None
        return self._transaction

    @transaction.setter
    def transaction(self, value: transaction_pb2.Transaction | None) -> None:
        with self._lock:
            self._transaction, self._transaction_blob = value, None

    @property
    def version(self) -> int:
        """The table version this manifest describes (``manifest.version``)."""
        return self.manifest.version

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ManifestFile):
            return NotImplemented
        return (self.manifest, self.transaction, self.index_section, self.path, self.size) == (
            other.manifest, other.transaction, other.index_section, other.path, other.size) and \
            self.dictionaries.keys() == other.dictionaries.keys() and all(
                self.dictionaries[k].equals(other.dictionaries[k]) for k in self.dictionaries)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ManifestFile(path={self.path!r}, version={self.version}, size={self.size})"


# --- serialisation matching upstream (prost): lance_ops.format.proto_wire --------------------------
_serialize = serialize_like_upstream


# --- dictionary values of legacy datasets ----------------------------------------------------


def is_legacy(manifest: table_pb2.Manifest) -> bool:
    """True for a v0.1 dataset (the only kind whose manifest file holds dictionary values)."""
    return FileVersion.is_legacy_manifest_text(manifest.data_format.version)


def dictionary_fields(manifest: table_pb2.Manifest) -> list[file_pb2.Field]:
    """The fields whose values the manifest file stores, in the order they are written (by id)."""
    if not is_legacy(manifest):
        return []
    return sorted((f for f in manifest.fields if f.logical_type.startswith("dict:")), key=lambda f: f.id)


def _value_type(f: file_pb2.Field) -> pa.DataType:
    from lance_ops.schema import parse_logical_type

    return parse_logical_type(f.logical_type).value_type


def place_dictionaries(manifest: table_pb2.Manifest, dictionaries: Mapping[int, pa.Array] | None) -> bytes:
    """The dictionary-values prefix of a legacy manifest file; sets each field's offset/length.

    ``manifest`` is modified in place. Every dictionary field needs its values in
    ``dictionaries`` (field id -> values): a manifest without them would make readers see empty
    strings, so it is refused (UnsupportedError) rather than written.
    """
    from lance_ops.format.legacy import encode as enc
    from lance_ops.format.legacy.decode import is_binary_like

    fields = dictionary_fields(manifest)
    given: Mapping[int, pa.Array] = dictionaries or {}
    missing = [f"{f.name} (id {f.id})" for f in fields if given.get(f.id) is None]
    if missing:
        raise UnsupportedError(
            f"the dictionary values of {missing} are unknown: a legacy (v0.1) manifest must carry "
            "the values of every dictionary field; nothing was written")
    parts: list[bytes] = []
    pos = 0
    for f in fields:
        vt = _value_type(f)
        values = given[f.id]
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        elif not isinstance(values, pa.Array):
            values = pa.array(values, type=vt)
        if values.type != vt:
            values = values.cast(vt)
        if is_binary_like(vt):
            data, positions = enc.binary_page(values, pos)
            offset = pos + len(data)
            chunk = data + positions
        else:
            offset, chunk = pos, enc.plain_bytes(values)
        f.dictionary.offset = offset
        f.dictionary.length = len(values)
        parts.append(chunk)
        pos += len(chunk)
    return b"".join(parts)


def decode_dictionaries(manifest: table_pb2.Manifest, data: bytes, end: int | None = None,
                        path: str = "<manifest>") -> dict[int, pa.Array]:
    """field id -> dictionary values of a legacy manifest, read from the file bytes ``data``.

    Values must lie before ``end`` (the manifest message's position). Decoded as pylance reads
    them: in a nullable field an empty string/binary value is null.
    """
    from lance_ops.format.legacy import decode as dec

    end = len(data) if end is None else end
    out: dict[int, pa.Array] = {}
    for f in dictionary_fields(manifest):
        vt = _value_type(f)
        off, n = int(f.dictionary.offset), int(f.dictionary.length)
        where = f"dictionary values of field {f.name!r} (id {f.id}) at {off}+{n}"
        try:
            if dec.is_binary_like(vt):
                if off < 0 or n < 0 or off + 8 * (n + 1) > end:
                    raise ValueError("positions run outside the file body")
                positions = np.frombuffer(data, dtype="<i8", count=n + 1, offset=off).astype(np.int64)
                lo, hi = int(positions[0]), int(positions[-1])
                if lo < 0 or hi > end or (np.diff(positions) < 0).any():
                    raise ValueError(f"value bytes {lo}..{hi} are outside the file body or decrease")
                values = dec.decode_binary(vt, f.nullable, [positions], [data[lo:hi]])
            else:
                layout = dec.plain_layout(vt)
                s, e = np.zeros(1, np.int64), np.array([n], np.int64)
                starts, ends = dec.plain_byte_range(layout, s, e)
                if off < 0 or n < 0 or off + int(ends[0]) > end:
                    raise ValueError("values run outside the file body")
                values = dec.decode_plain(layout, [data[off + int(starts[0]):off + int(ends[0])]], s, e)
        except (ValueError, TypeError, pa.ArrowException) as exc:
            raise CorruptFileError(path, f"{where}: {exc}") from None
        out[f.id] = values
    return out


def encode_manifest(
    manifest: table_pb2.Manifest,
    transaction: transaction_pb2.Transaction | None = None,
    index_section: table_pb2.IndexSection | None = None,
    dictionaries: Mapping[int, pa.Array] | None = None,
) -> bytes:
    """The bytes of a manifest file holding ``manifest`` (+ optional sections).

    ``manifest`` is not modified: a copy gets ``index_section`` / ``transaction_section`` set to
    the offsets of the sections written (and cleared when a section is absent; the legacy field
    21 is always cleared). A legacy manifest with dictionary fields needs their values in
    ``dictionaries`` (field id -> values; e.g. a read ``ManifestFile.dictionaries``): they are
    written first and the copy's ``dictionary`` offsets point at them.
    """
    run = None  # the fragment records' bytes, when ``m`` is a copy without them
    if len(manifest.fragments) >= _SPLICE_MIN_FRAGMENTS and not dictionary_fields(manifest):
        m, run = _split_fragments(manifest)
    else:
        m = table_pb2.Manifest()
        m.CopyFrom(manifest)
    prefix = place_dictionaries(m, dictionaries) if dictionary_fields(m) else b""
    parts: list[bytes] = [prefix]
    pos = len(prefix)

    if index_section is not None:
        blob = _serialize(index_section)
        m.index_section = pos
        parts += [_U32.pack(len(blob)), blob]
        pos += 4 + len(blob)
    else:
        m.ClearField("index_section")

    m.ClearField("transaction_section_v1")
    if transaction is not None:
        blob = _serialize(transaction)
        m.transaction_section = pos
        parts += [_U32.pack(len(blob)), blob]
        pos += 4 + len(blob)
    else:
        m.ClearField("transaction_section")

    blob = _serialize_manifest(m) if run is None else _splice_fragments(m, run)
    if len(blob) > 0xFFFFFFFF:
        raise ValueError("manifest larger than 4 GiB cannot be written")
    manifest_pos = pos
    parts += [_U32.pack(len(blob)), blob, _FOOTER.pack(manifest_pos, MAJOR_VERSION, MINOR_VERSION, MAGIC)]
    return b"".join(parts)


#: fragment lists at least this long are serialised apart from the rest of the Manifest
_SPLICE_MIN_FRAGMENTS = 16
#: the field number of ``Manifest.fragments``
_FRAGMENTS_FIELD = table_pb2.Manifest.DESCRIPTOR.fields_by_name["fragments"].number


def _first_record_after(data: bytes, number: int) -> int:
    """The offset of the first top-level record of ``data`` whose field number is above ``number``."""
    for field, _, start, _, _, _ in wire_records(data):
        if field > number:
            return start
    return len(data)


def _copy_without_fragments(manifest: table_pb2.Manifest) -> table_pb2.Manifest | None:
    """A copy of ``manifest`` without its fragment list (None when the top level holds unknown
    fields, which only a whole copy carries over)."""
    if len(unknown_fields.UnknownFieldSet(manifest)):
        return None
    m = table_pb2.Manifest()
    for fd, value in manifest.ListFields():
        if fd.number == _FRAGMENTS_FIELD:
            continue
        if fd.is_repeated:  # repeated fields and maps
            getattr(m, fd.name).MergeFrom(value)
        elif fd.message_type is not None:
            getattr(m, fd.name).CopyFrom(value)
        else:
            setattr(m, fd.name, value)
    return m


def _split_fragments(manifest: table_pb2.Manifest) -> tuple[table_pb2.Manifest, bytes | None]:
    """``(copy, fragment records)``: the fragment list's bytes as they lie in the serialised
    Manifest (fragment records hold no maps: their plain deterministic form is upstream's), and a
    copy of everything else; ``(whole copy, None)`` where that cannot be done. Copying the
    thousands of fragment records only to serialise them was the cost of an encode (ADR 0052)."""
    m = None if has_map(table_pb2.DataFragment.DESCRIPTOR) else _copy_without_fragments(manifest)
    if m is not None:
        full = manifest.SerializeToString(deterministic=True)
        rest = m.SerializeToString(deterministic=True)
        cut = _first_record_after(rest, 1)
        frag_len = len(full) - len(rest)
        if full[:cut] == rest[:cut] and full[cut + frag_len:] == rest[cut:]:
            return m, full[cut:cut + frag_len]
    m = table_pb2.Manifest()
    m.CopyFrom(manifest)
    return m, None


def _splice_fragments(m: table_pb2.Manifest, run: bytes) -> bytes:
    """The Manifest ``m`` (without fragments) serialised as upstream does, with the fragment
    records ``run`` in their place: after the schema (field 1), before the later fields."""
    fixed = _serialize(m)
    at = _first_record_after(fixed, 1)
    return fixed[:at] + run + fixed[at:]


def _serialize_manifest(m: table_pb2.Manifest) -> bytes:
    """``_serialize(m)`` without walking the fragment list from Python (``m`` is the caller's own
    copy and loses its fragments): fragment records hold no maps, so upstream's form of them is
    the plain deterministic encoding; only the rest of the Manifest goes through the map fix-up,
    and the fragment records are spliced in between the schema (field 1) and the later fields."""
    if len(m.fragments) < _SPLICE_MIN_FRAGMENTS or has_map(table_pb2.DataFragment.DESCRIPTOR):
        return _serialize(m)
    full = m.SerializeToString(deterministic=True)
    m.ClearField("fragments")
    rest = m.SerializeToString(deterministic=True)
    cut = _first_record_after(rest, 1)
    frag_len = len(full) - len(rest)
    if full[:cut] != rest[:cut] or full[cut + frag_len:] != rest[cut:]:
        raise AssertionError("the fragment records are not one run after the schema")  # (never: field order)
    fixed = _serialize(m)
    at = _first_record_after(fixed, 1)
    return fixed[:at] + full[cut:cut + frag_len] + fixed[at:]


def _read_section(data: bytes, offset: int, end: int, path: str, what: str) -> bytes:
    if offset < 0 or offset + 4 > end:
        raise CorruptFileError(path, f"{what} offset {offset} is outside the file (size {len(data)})")
    (length,) = _U32.unpack_from(data, offset)
    if offset + 4 + length > end:
        raise CorruptFileError(
            path,
            f"{what} at offset {offset} claims {length} bytes, running past the manifest "
            f"(which starts at {end})",
        )
    return data[offset + 4 : offset + 4 + length]


_M = TypeVar("_M", bound=Message)


def _parse(message: _M, blob: bytes, path: str, what: str, keep_unknown: bool = False) -> _M:
    return _parse_serialised(message, blob, path, what, keep_unknown)[0]


def _parse_serialised(message: _M, blob: bytes, path: str, what: str,
                      keep_unknown: bool = False) -> tuple[_M, bytes | None]:
    """:func:`_parse`, with the message's own serialisation when the wire-type check made it."""
    try:
        message.ParseFromString(blob)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise CorruptFileError(path, f"{what} protobuf does not decode: {e}") from e
    return message, check_wire_types(message, blob, path, what, keep_unknown)


def check_wire_types(message: Message, blob: bytes, path: str, what: str, keep_unknown: bool = False) -> bytes | None:
    """CorruptFileError if a known field of ``message`` (parsed from ``blob``) came with the wrong
    wire type.

    Python's protobuf keeps such a field as an *unknown* field and leaves the real one at its
    default (upstream's decoder refuses the message): a flipped bit in a tag would silently turn
    e.g. a fragment's deletion file or row count into nothing. Without unknown fields a message
    encodes to exactly the blob's size (as written by pylance or us); only when it does not
    (fields of a newer writer, or damage) are the unknown fields looked at one by one.

    Unknown fields are dropped from ``message``, as upstream's decoder drops them (the cheap
    path: about one parse's time), unless ``keep_unknown`` (then a copy is checked: the index
    section of pylance 14 holds fields these protos do not know, and re-encoding reproduces them).

    Returns ``message``'s serialisation when it was made for the check (the cheap path without
    ``keep_unknown``; upb's ByteSize serialises anyway): callers reading the fragment list from it
    need not serialise again. None otherwise.
    """
    probe = message
    if keep_unknown:
        probe = type(message)()
        probe.CopyFrom(message)
    probe.DiscardUnknownFields()
    serialised = probe.SerializeToString()
    if len(serialised) == len(blob):
        return None if keep_unknown else serialised
    if not keep_unknown:  # the rare path: parse again to see what was dropped
        message = type(message)()
        message.ParseFromString(blob)
    bad = _misplaced_field(message)
    if bad is not None:
        raise CorruptFileError(path, f"{what} protobuf does not decode: {bad}")
    return None


def _misplaced_field(message: Message, where: str = "") -> str | None:
    """The first known field of ``message`` (recursively) stored with the wrong wire type."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    desc = message.DESCRIPTOR
    name = where or desc.name
    for unknown in UnknownFieldSet(message):
        field = desc.fields_by_number.get(unknown.field_number)
        if field is not None:
            return f"field {name}.{field.name} (number {unknown.field_number}) has wire type {unknown.wire_type}"
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        values = value if field.is_repeated else [value]
        for i, sub in enumerate(values):
            bad = _misplaced_field(sub, f"{name}.{field.name}[{i}]" if field.is_repeated
                                   else f"{name}.{field.name}")
            if bad is not None:
                return bad
    return None


def manifest_span(data: bytes, path: str = "<manifest>") -> tuple[int, int]:
    """``(start, end)`` of the Manifest message inside the manifest file ``data`` (the footer and
    the length prefix checked); CorruptFileError naming ``path`` on damage."""
    size = len(data)
    if size < FOOTER_SIZE + 4:
        raise CorruptFileError(path, f"truncated manifest: {size} bytes is smaller than the footer")
    manifest_pos, major, minor, magic = _FOOTER.unpack_from(data, size - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptFileError(path, f"bad magic {magic!r} (expected {MAGIC!r}); not a manifest")
    if major < 0 or minor < 0:
        raise CorruptFileError(path, f"bad manifest format version {major}.{minor}")
    body_end = size - FOOTER_SIZE
    if manifest_pos < 0 or manifest_pos + 4 > body_end:
        raise CorruptFileError(
            path, f"manifest position {manifest_pos} is outside the file (size {size}); truncated?"
        )
    (length,) = _U32.unpack_from(data, manifest_pos)
    expected = body_end - manifest_pos - 4
    if length != expected:
        raise CorruptFileError(
            path,
            f"manifest length mismatch: prefix says {length} bytes, but {expected} bytes lie "
            "between it and the footer",
        )
    return manifest_pos + 4, body_end


def decode_manifest(data: bytes, path: str = "<manifest>") -> ManifestFile:
    """Decode a whole manifest file; CorruptFileError naming ``path`` on any damage."""
    data = bytes(data)
    size = len(data)
    start, body_end = manifest_span(data, path)
    manifest_pos = start - 4
    manifest, serialised = _parse_serialised(
        table_pb2.Manifest(), data[manifest_pos + 4 : body_end], path, "Manifest"
    )
    versions.fill_missing_data_format(manifest, path)  # Lance <= 0.15 recorded no storage version

    index_section = None
    if manifest.HasField("index_section"):
        blob = _read_section(data, manifest.index_section, manifest_pos, path, "index section")
        index_section = _parse(table_pb2.IndexSection(), blob, path, "IndexSection", keep_unknown=True)

    transaction_blob = None
    if manifest.HasField("transaction_section"):
        txn_pos = manifest.transaction_section
    elif manifest.HasField("transaction_section_v1"):
        txn_pos = manifest.transaction_section_v1
    else:
        txn_pos = None
    if txn_pos is not None:
        transaction_blob = _read_section(data, txn_pos, manifest_pos, path, "inline transaction")

    dictionaries = decode_dictionaries(manifest, data, manifest_pos, path) if dictionary_fields(manifest) else {}
    return ManifestFile(manifest, None, index_section, path, size, dictionaries, transaction_blob=transaction_blob,
                        serialised=serialised)


def check_fragments(mf: ManifestFile, where: str, stable_row_ids: bool) -> None:
    """Consistency of a manifest's fragment list, checked when a version is opened (well under a
    microsecond per fragment): no fragment id is above ``max_fragment_id`` (a later append would reuse
    it), and with stable row ids every fragment carries a row-id sequence (upstream refuses such a
    manifest). CorruptFileError naming ``where``.
    """
    m = mf.manifest
    frags = m.fragments
    if not frags:
        return
    # (repeated fragment ids are not refused: datasets written by Lance 0.16 have them, and
    # pylance opens them)
    if m.HasField("max_fragment_id"):
        highest = int(mf.fragment_facts().ids.max())
        if highest > m.max_fragment_id:
            raise CorruptFileError(where, f"fragment id {highest} is above max_fragment_id {m.max_fragment_id}")
    if stable_row_ids:
        which = "row_id_sequence"
        missing = [f.id for f in frags if f.WhichOneof(which) is None]
        if missing:
            raise CorruptFileError(
                where, f"stable row ids are enabled but fragments {missing[:10]} have no row-id sequence")


def manifest_schema(mf: ManifestFile, store: ObjectStore | None = None) -> pa.Schema:
    """The Arrow schema of a manifest; a field list that does not convert (an unknown logical
    type, parent ids that do not point at an earlier field) raises with the manifest named."""
    from lance_ops.schema import from_lance_fields

    where = store.uri(mf.path) if store is not None and mf.path else (mf.path or "<manifest>")
    seen: set[int] = set()
    for f in mf.manifest.fields:  # as upstream: a parent is listed before its children
        if f.parent_id >= 0 and f.parent_id not in seen or f.id in seen or f.parent_id < -1:
            raise CorruptFileError(where, f"schema: field {f.name!r} (id {f.id}) has parent id {f.parent_id}, "
                                          "which is not a field listed before it (or the id repeats)")
        seen.add(f.id)
    try:
        return from_lance_fields(mf.manifest.fields, dict(mf.manifest.schema_metadata))
    except CorruptFileError as exc:
        raise CorruptFileError(where, f"schema: {exc.problem}") from exc
    except LanceOpsError as exc:  # e.g. UnsupportedTypeError: same class, manifest named
        raise type(exc)(f"{where}: schema: {exc}") from exc
    except (ValueError, KeyError, TypeError, IndexError, pa.ArrowException) as exc:
        raise CorruptFileError(where, f"schema does not convert: {type(exc).__name__}: {exc}") from exc


def read_manifest_bytes(store: ObjectStore, path: str) -> bytes:
    """The whole manifest file at ``path``: one 64 KiB tail read, then the rest if needed."""
    tail, size = store.read_tail(path, PREFETCH_SIZE)
    if size > len(tail):
        head = store.read_range(path, 0, size - len(tail))
        return head + tail
    return tail


def read_manifest(store: ObjectStore, path: str) -> ManifestFile:
    """Read and decode the manifest at ``path``: one 64 KiB tail read, then the rest if needed."""
    return decode_manifest(read_manifest_bytes(store, path), path)


def write_manifest(
    store: ObjectStore,
    path: str,
    manifest: table_pb2.Manifest,
    transaction: transaction_pb2.Transaction | None = None,
    index_section: table_pb2.IndexSection | None = None,
    *,
    dictionaries: Mapping[int, pa.Array] | None = None,
    if_absent: bool = True,
) -> int:
    """Encode and store a manifest; returns its size in bytes.

    With ``if_absent`` (the default, as commits need) the write is a put-if-absent and raises
    :class:`~lance_ops.errors.AlreadyExistsError` when another writer got there first.
    ``dictionaries``: the dictionary values of a legacy manifest (see :func:`encode_manifest`).
    """
    data = encode_manifest(manifest, transaction, index_section, dictionaries)
    if if_absent:
        store.put_if_absent(path, data)
    else:
        store.put(path, data)
    return len(data)
