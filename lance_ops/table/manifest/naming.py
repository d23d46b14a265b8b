"""Names of the files that make up a Lance table, and version discovery by listing.

Pure naming: paths, schemes and what ``_versions/`` holds. Where a version lives when a DynamoDB
external manifest store is in play is answered by :mod:`lance_ops.table.commit.locate` (ADR 0009).

Layout of a dataset directory (all paths relative to the dataset root)::

    data/{random}.lance                                   data files
    _versions/{version}.manifest                          V1 manifest naming
    _versions/{u64::MAX - version:020}.manifest           V2 manifest naming (default in 14.x)
    _versions/d{version}.manifest                         detached versions (ignored here)
    _versions/latest_version_hint.json                    optional hint, {"version":N}
    _transactions/{read_version}-{uuid}.txn               raw Transaction protobuf
    _deletions/{fragment_id}-{read_version}-{id}.arrow|.bin
    _refs/tags/{name}.json                                tags

V2 names sort in *descending* version order, so on a lexically listed store the first V2 name is
the latest version. A directory must use a single scheme; a mixture is refused.
"""
from __future__ import annotations

import enum
import json
import re
import time
import uuid as _uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

from lance_ops.errors import ObjectNotFoundError, StorageError, UnsupportedError

if TYPE_CHECKING:
    from lance_ops._proto import table_pb2
    from lance_ops.io.base import ObjectStore

U64_MAX = (1 << 64) - 1
#: versions with this bit set are "detached" (not part of the main history)
DETACHED_VERSION_MASK = 1 << 63

DATA_DIR = "data"
VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
DELETIONS_DIR = "_deletions"
INDICES_DIR = "_indices"
TAGS_DIR = "_refs/tags"
VERSION_HINT_NAME = "latest_version_hint.json"
MANIFEST_SUFFIX = ".manifest"

_V2_STEM_LEN = 20
_V2_NAME_LEN = _V2_STEM_LEN + len(MANIFEST_SUFFIX)  # 29


class NamingScheme(str, enum.Enum):
    """How manifest files of a dataset are named."""

    V1 = "V1"  # _versions/{version}.manifest
    V2 = "V2"  # _versions/{u64::MAX - version:020}.manifest


class ManifestLocation(NamedTuple):
    """One committed version found by listing ``_versions/``."""

    version: int
    path: str
    scheme: NamingScheme
    size: int
    last_modified: datetime


# --- manifests -------------------------------------------------------------------------------
def check_version(version: int) -> int:
    """``version`` as an int, refused with ValueError unless it is a u64."""
    version = int(version)
    if version < 0 or version > U64_MAX:
        raise ValueError(f"version must be in [0, 2**64), got {version}")
    return version


def manifest_name(version: int, v2: bool) -> str:
    """File name (no directory) of the manifest of ``version`` under the given scheme."""
    version = check_version(version)
    if v2:
        return f"{U64_MAX - version:020d}{MANIFEST_SUFFIX}"
    return f"{version}{MANIFEST_SUFFIX}"


def manifest_path(version: int, v2: bool) -> str:
    """``_versions/<name>``: the manifest path relative to the dataset root."""
    return f"{VERSIONS_DIR}/{manifest_name(version, v2)}"


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def basename(path: str) -> str:
    """The last component of a listed path (``/`` or ``\\`` separated): the name to match on."""
    return _basename(path)


def _split_v2_candidates(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """``paths`` split into those whose name has a V2 manifest name's length and suffix (the only
    ones :func:`parse_manifest_name` can read as V2) and the others that end in the suffix."""
    named = [p for p in paths if p.endswith(MANIFEST_SUFFIX)]
    v2 = [p for p in named if len(_basename(p)) == _V2_NAME_LEN]
    if len(v2) == len(named):
        return v2, []
    return v2, [p for p in named if len(_basename(p)) != _V2_NAME_LEN]


def _split_v2_named(paths: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """:func:`_split_v2_candidates`, the V2 candidates as ``(name, path)`` pairs."""
    named = [(_basename(p), p) for p in paths if p.endswith(MANIFEST_SUFFIX)]
    v2 = [entry for entry in named if len(entry[0]) == _V2_NAME_LEN]
    if len(v2) == len(named):
        return v2, []
    return v2, [p for n, p in named if len(n) != _V2_NAME_LEN]


def parse_manifest_name(name: str) -> tuple[int, NamingScheme] | None:
    """``(version, scheme)`` for a committed manifest file name, else None.

    Accepts a bare name or a path (only the last component is looked at). Detached manifests
    (``d{v}.manifest``), temporary files (``.tmp*``), staged external-store copies
    (``{v}.manifest-{uuid}``), the version hint and anything else return None.
    """
    name = _basename(name)
    if not name.endswith(MANIFEST_SUFFIX):
        return None
    stem = name[: -len(MANIFEST_SUFFIX)]
    if not stem or not stem.isascii() or not stem.isdigit():
        return None
    value = int(stem)
    if len(name) == _V2_NAME_LEN:
        if value > U64_MAX:
            return None
        return U64_MAX - value, NamingScheme.V2
    if len(stem) > 1 and stem[0] == "0":  # V1 names never carry leading zeros
        return None
    if value > U64_MAX:
        return None
    return value, NamingScheme.V1


def _scheme_of(entries: Iterable[ManifestLocation], where: str) -> NamingScheme | None:
    return _one_scheme({e.scheme for e in entries}, where)


def _one_scheme(schemes: set[NamingScheme], where: str) -> NamingScheme | None:
    if len(schemes) > 1:
        raise UnsupportedError(
            f"{where}: mixed V1 and V2 manifest naming in one _versions directory; "
            "migrate the dataset to a single naming scheme first"
        )
    return next(iter(schemes), None)


def list_versions(store: ObjectStore, base: str) -> list[ManifestLocation]:
    """Every committed manifest under ``base/_versions``, sorted by version (ascending).

    Both schemes are returned as found; use :func:`detect_scheme` to refuse mixtures.
    """
    out: list[ManifestLocation] = []
    for info in store.list_dir(store.join(base, VERSIONS_DIR)):
        parsed = parse_manifest_name(info.path)
        if parsed is None:
            continue
        version, scheme = parsed
        out.append(ManifestLocation(version, info.path, scheme, info.size, info.last_modified))
    out.sort(key=lambda e: (e.version, e.scheme.value))
    return out


def list_versions_from(store: ObjectStore, base: str, first: int) -> list[ManifestLocation]:
    """:func:`list_versions`, only the versions from ``first`` on (one listing; a local directory
    looks only at those files, not at every manifest of the history)."""
    where = store.join(base, VERSIONS_DIR)
    parsed: dict[str, tuple[int, NamingScheme]] = {}

    def pick(paths: Sequence[str]) -> list[str]:
        v2_named, others = _split_v2_candidates(paths)
        # a V2 name holds version >= first iff its 20 digits are <= U64_MAX - first (equal-length
        # digit strings compare as numbers): only those few are parsed
        bound = f"{U64_MAX - first:020d}" if 0 <= first <= U64_MAX else None
        close = [p for p in v2_named if bound is None or _basename(p)[:_V2_STEM_LEN] <= bound]
        for path in close + others:
            got = parse_manifest_name(path)
            if got is not None and got[0] >= first:
                parsed[path] = got
        return list(parsed)

    out = [ManifestLocation(parsed[info.path][0], info.path, parsed[info.path][1], info.size, info.last_modified)
           for info in store.list_dir_selected(where, pick)]
    out.sort(key=lambda e: (e.version, e.scheme.value))
    return out


def detect_scheme(store: ObjectStore, base: str) -> NamingScheme | None:
    """The naming scheme used by the dataset at ``base`` (None if it has no manifests).

    Raises :class:`~lance_ops.errors.UnsupportedError` ("mixed V1 and V2 manifest naming") if
    both schemes are present.
    """
    return _scheme_of(list_versions(store, base), store.join(base, VERSIONS_DIR))


#: re-listings of an empty ``_versions/`` when other evidence says the dataset exists
EMPTY_LISTING_RETRIES = 3
#: distinct read versions of transaction files probed for evidence of an existing dataset
_TXN_PROBES = 3


def _evidence_of_versions(store: ObjectStore, base: str, known: int | None) -> str | None:
    """Why the dataset at ``base`` must have versions although ``_versions/`` listed empty.

    Listings are not trusted to prove absence (an object store can answer one with nothing):
    a version the caller already read (``known``), the version hint, version 1 found by name,
    or a version found by name after a transaction file's read version all say it exists.
    None: no evidence (a new dataset, or one whose only commit never landed).
    """
    if known is not None:
        return f"version {known} was read before"
    hint = read_version_hint(store, base)
    if hint is not None:
        return f"the version hint names version {hint}"
    if find_manifest_by_name(store, base, 1) is not None:
        return "the manifest of version 1 exists"
    read_versions: set[int] = set()
    try:
        for info in store.list_dir(store.join(base, TRANSACTIONS_DIR)):
            parsed = parse_transaction_file_name(info.path)
            if parsed is not None:
                read_versions.add(parsed[0])
    except ObjectNotFoundError:
        return None
    for r in sorted(read_versions, reverse=True)[:_TXN_PROBES]:
        if r + 1 <= U64_MAX and find_manifest_by_name(store, base, r + 1) is not None:
            return f"the manifest of version {r + 1} exists"
    return None


def _list_versions_trusting_no_absence(store: ObjectStore, base: str, known: int | None) -> list[ManifestLocation]:
    """:func:`list_versions`; an empty answer is checked (and the listing retried) before it is
    believed. Raises :class:`~lance_ops.errors.StorageError` if the dataset evidently exists but
    every listing came back empty."""
    entries = list_versions(store, base)
    if entries:
        return entries
    evidence = _evidence_of_versions(store, base, known)
    if evidence is None:
        return entries
    for attempt in range(EMPTY_LISTING_RETRIES):
        time.sleep(0.05 * (2 ** attempt))
        entries = list_versions(store, base)
        if entries:
            return entries
    raise StorageError(
        f"{store.uri(store.join(base, VERSIONS_DIR))}: listing returned no manifests {EMPTY_LISTING_RETRIES + 1} "
        f"times although the dataset exists ({evidence}); not treating it as absent — retry later"
    )


def latest_listed(store: ObjectStore, base: str) -> tuple[ManifestLocation | None, NamingScheme | None]:
    """The newest manifest one listing of ``_versions/`` shows, and the directory's scheme.

    The listing is taken as it comes (an empty one gives ``(None, None)``); a mixed directory is
    refused. :mod:`lance_ops.table.commit.locate` uses this where another source of truth (the
    DynamoDB external manifest store) is consulted afterwards.
    """
    entries = list_versions(store, base)
    scheme = _scheme_of(entries, store.join(base, VERSIONS_DIR))
    return (entries[-1] if entries else None), scheme


def _newest_by_name(store: ObjectStore, base: str) -> ManifestLocation | None:
    """The newest committed manifest one listing of ``_versions/`` names, chosen by name (only it
    is looked at: a local directory is not ``stat``-ed file by file); a mixed directory is refused.
    None if the listing shows no manifest or the newest was gone when looked at."""
    where = store.join(base, VERSIONS_DIR)
    found: dict[str, tuple[int, NamingScheme]] = {}

    def pick(paths: Sequence[str]) -> list[str]:
        schemes: set[NamingScheme] = set()
        best: tuple[int, str] | None = None  # (version, path) of the newest
        by_name, others = _split_v2_named(paths)
        # V2: the newest is the first valid name in name order (equal-length digit strings sort
        # as numbers, the inverted numbering puts the newest first); others are all parsed.
        # The smallest name is nearly always valid: it is tried before sorting them all.
        smallest = min(by_name) if by_name else None
        if smallest is not None and parse_manifest_name(smallest[0]) is None:
            ordered = [p for _, p in sorted(by_name)]
        else:
            ordered = [smallest[1]] if smallest is not None else []
        for path in ordered:
            parsed = parse_manifest_name(path)
            if parsed is not None:
                found[path] = parsed
                schemes.add(parsed[1])
                best = (parsed[0], path)
                break
        for path in others:
            parsed = parse_manifest_name(path)
            if parsed is not None:
                found[path] = parsed
                schemes.add(parsed[1])
                if best is None or parsed[0] > best[0]:
                    best = (parsed[0], path)
        _one_scheme(schemes, where)  # (so two names of one version have one scheme: no tie to break)
        return [] if best is None else [best[1]]

    infos = store.list_dir_selected(where, pick)
    if not infos:
        return None
    info = infos[0]
    version, scheme = found[info.path]
    return ManifestLocation(version, info.path, scheme, info.size, info.last_modified)


def _refuse_external_store(store: ObjectStore, base: str, what: str) -> None:
    """Directory-only answers would miss commits the DynamoDB table holds: refuse them."""
    if store.external_manifest_table:
        raise ValueError(
            f"naming.{what} reads _versions/ only, but {store.uri(base)} has a DynamoDB external "
            f"manifest store: use lance_ops.table.commit.locate.{what}"
        )


def latest_version(store: ObjectStore, base: str, *, known: int | None = None) -> ManifestLocation | None:
    """The newest committed manifest in ``_versions/``, or None if there is none.

    For V2 this is the lexically first name; listing once and taking the maximum is the same
    thing and also catches a mixed directory (which is refused).

    An empty listing is not believed on its own: ``known`` (a version the caller read), the
    version hint and probes by name are checked first, and if they say the dataset exists the
    listing is retried, then StorageError is raised (never None: callers would re-create it).

    A store with a DynamoDB external manifest store (``s3+ddb://``) is refused with ValueError:
    :func:`lance_ops.table.commit.locate.latest_version` answers for every store.
    """
    _refuse_external_store(store, base, "latest_version")
    newest = _newest_by_name(store, base)
    if newest is not None:
        return newest
    # nothing listed (or the newest vanished before it was looked at): the careful way
    entries = _list_versions_trusting_no_absence(store, base, known)
    _scheme_of(entries, store.join(base, VERSIONS_DIR))
    return entries[-1] if entries else None


def find_manifest_by_name(store: ObjectStore, base: str, version: int) -> ManifestLocation | None:
    """The manifest of ``version`` found under either naming scheme, else None.

    Probes the two possible names directly (one HEAD each) instead of listing ``_versions/``.
    """
    version = check_version(version)
    for v2 in (True, False):
        path = store.join(base, manifest_path(version, v2))
        try:
            size = store.size(path)
        except ObjectNotFoundError:
            continue
        scheme = NamingScheme.V2 if v2 else NamingScheme.V1
        return ManifestLocation(version, path, scheme, size, datetime.now(timezone.utc))
    return None


def find_version(store: ObjectStore, base: str, version: int) -> ManifestLocation | None:
    """The manifest of ``version`` in ``_versions/`` (None if that version does not exist).

    Probes the two possible names directly (one HEAD each) instead of listing ``_versions/``.
    A store with a DynamoDB external manifest store is refused with ValueError:
    :func:`lance_ops.table.commit.locate.find_version` answers for every store.
    """
    version = check_version(version)
    _refuse_external_store(store, base, "find_version")
    return find_manifest_by_name(store, base, version)


# --- version hint ----------------------------------------------------------------------------
def version_hint_path(store: ObjectStore, base: str) -> str:
    """``base/_versions/latest_version_hint.json``: where the optional version hint lives."""
    return store.join(base, VERSIONS_DIR, VERSION_HINT_NAME)


def write_version_hint(store: ObjectStore, base: str, version: int) -> bool:
    """Write ``_versions/latest_version_hint.json`` (``{"version":N}``) on local stores.

    pylance 14 writes the hint only for local datasets; on object stores nothing is written and
    False is returned. The hint is an optimisation only: readers must not trust it blindly.
    """
    if getattr(store, "scheme", "") != "file":
        return False
    payload = json.dumps({"version": check_version(version)}, separators=(",", ":"))
    store.put(version_hint_path(store, base), payload.encode())
    return True


def read_version_hint(store: ObjectStore, base: str) -> int | None:
    """The version recorded in the hint file, or None if absent or unreadable."""
    path = version_hint_path(store, base)
    try:
        data = store.read(path)
        value = json.loads(data)["version"]
    except Exception:  # a missing or garbled hint is simply ignored
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX:
        return value
    return None


# --- data, transaction and deletion files ----------------------------------------------------
def new_data_file_name(uuid_bytes: bytes | None = None) -> str:
    """A fresh data file name: 24 binary digits + 26 hex digits of a random UUID + ``.lance``.

    The first three UUID bytes are written as a 24-bit binary number (spreading names over
    object-store key prefixes), the remaining 13 bytes as lowercase hex.
    """
    raw = _uuid.uuid4().bytes if uuid_bytes is None else bytes(uuid_bytes)
    if len(raw) != 16:
        raise ValueError("uuid_bytes must be 16 bytes")
    return f"{int.from_bytes(raw[:3], 'big'):024b}{raw[3:].hex()}.lance"


_DATA_NAME_RE = re.compile(r"^[01]{24}[0-9a-f]{26}\.lance$")


def is_generated_data_file_name(name: str) -> bool:
    """Whether ``name`` has the shape of :func:`new_data_file_name` output."""
    return bool(_DATA_NAME_RE.match(_basename(name)))


def new_transaction_uuid() -> str:
    """A hyphenated random UUID as used in Transaction.uuid and transaction file names."""
    return str(_uuid.uuid4())


def transaction_file_name(read_version: int, uuid: str) -> str:
    """``{read_version}-{uuid}.txn`` (relative to ``_transactions/``)."""
    return f"{check_version(read_version)}-{uuid}.txn"


_TXN_NAME_RE = re.compile(r"^(\d+)-(.+)\.txn$")


def parse_transaction_file_name(name: str) -> tuple[int, str] | None:
    """``(read_version, uuid)`` of a transaction file name, else None."""
    m = _TXN_NAME_RE.match(_basename(name))
    if not m:
        return None
    return int(m.group(1)), m.group(2)


DELETION_EXTENSIONS = {0: "arrow", 1: "bin"}  # DeletionFile.ARROW_ARRAY, DeletionFile.BITMAP


def deletion_file_name(fragment_id: int, read_version: int, id: int, file_type: int | str) -> str:
    """``{fragment_id}-{read_version}-{id}.{arrow|bin}``.

    ``file_type`` is a ``DeletionFile.DeletionFileType`` value (0 arrow, 1 bitmap) or the
    extension itself.
    """
    if isinstance(file_type, str):
        ext = file_type.lstrip(".")
        if ext not in ("arrow", "bin"):
            raise ValueError(f"unknown deletion file extension {file_type!r}")
    else:
        try:
            ext = DELETION_EXTENSIONS[int(file_type)]
        except KeyError:
            raise ValueError(f"unknown deletion file type {file_type!r}") from None
    return f"{int(fragment_id)}-{int(read_version)}-{int(id)}.{ext}"


def deletion_file_path(fragment_id: int, deletion_file: table_pb2.DeletionFile) -> str:
    """``_deletions/<name>`` for a ``DeletionFile`` proto of fragment ``fragment_id``."""
    name = deletion_file_name(
        fragment_id, deletion_file.read_version, deletion_file.id, deletion_file.file_type
    )
    return f"{DELETIONS_DIR}/{name}"


_DEL_NAME_RE = re.compile(r"^(\d+)-(\d+)-(\d+)\.(arrow|bin)$")


def parse_deletion_file_name(name: str) -> tuple[int, int, int, int] | None:
    """``(fragment_id, read_version, id, file_type)`` of a deletion file name, else None."""
    m = _DEL_NAME_RE.match(_basename(name))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if m.group(4) == "arrow" else 1
