"""The idempotency-key ledger: which keyed step committed which version, beyond version cleanup.

A keyed commit records its key in the transaction properties (``lance_ops.idempotency_key``).
That alone is forgotten as soon as cleanup removes the version, so lance_ops also keeps a
*ledger* under the dataset, in an area of its own that pylance ignores::

    _lance_ops/keys/<kind>/<sha256(key)[:40]>.json    one record per (kind, key): first version
    _lance_ops/keys/_state/covered-<version:020d>     every keyed version <= this has a record
    _lance_ops/keys/_state/lost-<first>-<last>         versions removed before the ledger saw them

Keys are scoped by *kind*, the transaction's operation grouped as the user sees it: ``write``
(append and overwrite - a staged append that created the dataset committed an Overwrite),
``delete``, ``rewrite`` (compaction, deletion materialization), ``update``, otherwise the
operation's name. A delete and an append may use the same key without seeing each other.

Who writes what:

* every keyed commit writes its record right after it landed (best effort: :func:`remember`);
* a lookup that has to scan versions not covered yet records the keyed ones it reads and, when
  it scanned a long stretch without holes, moves the ``covered`` mark up;
* cleanup (:func:`carry_forward`) records every keyed version and moves the mark up to the
  newest version *before* it deletes any manifest, and marks versions that vanished without a
  record (removed by another tool) as ``lost``. If that fails, cleanup deletes nothing.

A lookup (:func:`lookup`) reads the record of (kind, key); failing that it scans the retained
versions above the ``covered`` mark. When neither finds the key but versions the step could have
committed to are unknown (lost, or missing above the mark), it raises
:class:`~lance_ops.errors.IdempotencyUnknownError` and the step commits nothing. Records are never
removed by lance_ops: the retention of a key is the life of the dataset. See
``docs/adr/0001-idempotency-ledger.md``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

from lance_ops.errors import AlreadyExistsError, IdempotencyUnknownError, ObjectNotFoundError
from lance_ops.table.manifest import naming
from lance_ops.table.commit import locate
from lance_ops.table.manifest.codec import ManifestFile, read_manifest
from lance_ops.table.commit.transaction_file import load_transaction

if TYPE_CHECKING:
    from lance_ops._proto import transaction_pb2
    from lance_ops.io import ObjectStore
    from lance_ops.table.manifest.naming import ManifestLocation

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY = "lance_ops.idempotency_key"
#: lance_ops' own area under the dataset root (pylance ignores it; cleanup of lance_ops knows it)
OWN_DIR = "_lance_ops"
KEYS_DIR = f"{OWN_DIR}/keys"
STATE_DIR = f"{KEYS_DIR}/_state"
RECORD_FORMAT = "lance_ops.key/1"
#: a lookup moves the ``covered`` mark after scanning at least this many versions (so a keyed
#: step scans a handful of versions at most; each move is one small PUT, and the old mark goes)
ADVANCE_AFTER = 4
#: transaction properties of our own kept in a record (so a replay can report its result)
_OWN_PREFIX = "lance_ops."
_KINDS = {"append": "write", "overwrite": "write"}
#: kinds a step may be looked up under when it does not know its own (compatibility lookups)
KNOWN_KINDS = ("write", "delete", "rewrite", "update")
_COVERED_RE = re.compile(r"^covered-(\d+)$")
_LOST_RE = re.compile(r"^lost-(\d+)-(\d+)$")
_READERS = 8


def kind_of_operation(operation: str | None) -> str:
    """The key scope of a transaction operation (``append``/``overwrite`` -> ``write``)."""
    op = operation or "unknown"
    return _KINDS.get(op, op)


def kind_of(txn: transaction_pb2.Transaction | None) -> str:
    """The key scope of a committed transaction (``unknown`` when it could not be read)."""
    return kind_of_operation(txn.WhichOneof("operation") if txn is not None else None)


@dataclass
class KeyRecord:
    """What the ledger knows of one committed (kind, key)."""

    key: str
    kind: str
    version: int
    operation: str
    transaction_uuid: str = ""
    #: the transaction's ``lance_ops.*`` properties (deleted rows, compaction metrics, ...)
    properties: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """The record file's content: sorted-key JSON tagged with :data:`RECORD_FORMAT`."""
        doc = {"format": RECORD_FORMAT, **asdict(self)}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "KeyRecord":
        """Parse a record file; IdempotencyUnknownError naming ``where`` when it does not parse
        (a damaged record must stop the step, not let it commit a second time)."""
        try:
            raw = json.loads(data)
            if raw.get("format") != RECORD_FORMAT:
                raise ValueError(f"format {raw.get('format')!r}")
            return cls(key=str(raw["key"]), kind=str(raw["kind"]), version=int(raw["version"]),
                       operation=str(raw["operation"]), transaction_uuid=str(raw.get("transaction_uuid", "")),
                       properties={str(k): str(v) for k, v in dict(raw.get("properties", {})).items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise IdempotencyUnknownError(f"{where}: unreadable idempotency record ({exc}); nothing was "
                                          "committed. Restore or remove the file after checking the dataset") from exc

    @classmethod
    def of(cls, version: int, txn: transaction_pb2.Transaction | None) -> "KeyRecord | None":
        """The record of a committed transaction, or None when it carries no key."""
        if txn is None:
            return None
        key = txn.transaction_properties.get(IDEMPOTENCY_KEY)
        if not key:
            return None
        props = {k: v for k, v in txn.transaction_properties.items()
                 if k.startswith(_OWN_PREFIX) and k != IDEMPOTENCY_KEY}
        return cls(key=key, kind=kind_of(txn), version=int(version), operation=txn.WhichOneof("operation") or "",
                   transaction_uuid=txn.uuid, properties=props)


def record_path(store: ObjectStore, base: str, kind: str, key: str) -> str:
    """Where the record of (``kind``, ``key``) lives: ``_lance_ops/keys/<kind>/<sha256(key)[:40]>.json``
    (hashed, so any key makes a safe, bounded file name)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return store.join(base, KEYS_DIR, re.sub(r"[^a-z0-9_]", "_", kind.lower()), f"{digest}.json")


def read_record(store: ObjectStore, base: str, kind: str, key: str) -> KeyRecord | None:
    """The ledger's record of (``kind``, ``key``), or None if there is none (or the file holds
    another key, a hash collision); IdempotencyUnknownError if it is unreadable."""
    path = record_path(store, base, kind, key)
    try:
        data = store.read(path)
    except (ObjectNotFoundError, FileNotFoundError):
        return None
    rec = KeyRecord.from_json(data, store.uri(path))
    return rec if rec.key == key and rec.kind == kind else None


def write_record(store: ObjectStore, base: str, rec: KeyRecord) -> None:
    """Store ``rec`` unless an earlier version is already recorded for its (kind, key)."""
    path = record_path(store, base, rec.kind, rec.key)
    try:
        store.put_if_absent(path, rec.to_json())
        return
    except AlreadyExistsError:
        pass
    try:
        have = KeyRecord.from_json(store.read(path), store.uri(path))
        if have.key == rec.key and have.version <= rec.version:
            return
    except (ObjectNotFoundError, FileNotFoundError, IdempotencyUnknownError):
        pass
    store.put(path, rec.to_json())  # the first committed version wins


def remember(store: ObjectStore, base: str, mf: ManifestFile | None) -> KeyRecord | None:
    """After a keyed commit: record it in the ledger (best effort - a lookup or cleanup would
    record it later anyway); returns the record."""
    if mf is None:
        return None
    try:
        rec = KeyRecord.of(mf.version, load_transaction(store, base, mf))
        if rec is not None:
            write_record(store, base, rec)
        return rec
    except Exception as exc:  # noqa: BLE001 - the commit landed; the ledger catches up later
        log.warning("%s: could not record the idempotency key of version %d (%s); a later lookup or "
                    "cleanup records it", store.uri(base), mf.version, exc)
        return None


# --- the ledger's coverage ------------------------------------------------------------------------
@dataclass
class LedgerState:
    """``covered``: every keyed version up to it has a record; ``lost``: version ranges removed
    before the ledger recorded them (their keys are unknown)."""

    covered: int = 0
    lost: list[tuple[int, int]] = field(default_factory=list)
    covered_paths: list[tuple[int, str]] = field(default_factory=list)
    lost_paths: list[str] = field(default_factory=list)


def read_state(store: ObjectStore, base: str) -> LedgerState:
    """The ledger's coverage as the ``_state/`` marks say (one listing): the highest ``covered``
    mark and every ``lost`` range, with the paths of the marks."""
    state = LedgerState()
    for info in store.list(store.join(base, STATE_DIR)):
        name = info.path.replace("\\", "/").rsplit("/", 1)[-1]
        m = _COVERED_RE.match(name)
        if m is not None:
            state.covered = max(state.covered, int(m.group(1)))
            state.covered_paths.append((int(m.group(1)), info.path))
            continue
        m = _LOST_RE.match(name)
        if m is not None:
            state.lost.append((int(m.group(1)), int(m.group(2))))
            state.lost_paths.append(info.path)
    state.lost.sort()
    return state


def _mark_covered(store: ObjectStore, base: str, version: int) -> None:
    path = store.join(base, STATE_DIR, f"covered-{version:020d}")
    try:
        store.put_if_absent(path, b"")
    except AlreadyExistsError:
        pass


def _mark_lost(store: ObjectStore, base: str, first: int, last: int) -> None:
    path = store.join(base, STATE_DIR, f"lost-{first}-{last}")
    try:
        store.put_if_absent(path, b"")
    except AlreadyExistsError:
        pass


def _ranges(versions: Iterable[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for v in sorted(versions):
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return [(a, b) for a, b in out]


def _missing(present: Iterable[int], above: int, latest: int) -> list[int]:
    have = set(present)
    return [v for v in range(above + 1, latest + 1) if v not in have]


_T = TypeVar("_T")
_R = TypeVar("_R")


def _parallel_map(store: ObjectStore, fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
    """``[fn(i) for i in items]``, side by side on remote stores (each item is a small read)."""
    if len(items) <= 4 or getattr(store, "scheme", "") == "file":
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(_READERS, len(items)), thread_name_prefix="lance-ops-keys") as pool:
        return list(pool.map(fn, items))


_Loaded = tuple["ManifestFile", "transaction_pb2.Transaction | None"]


def _load(store: ObjectStore, base: str, locs: list[ManifestLocation]) -> dict[int, _Loaded | None]:
    """version -> (manifest, transaction); None where the manifest vanished meanwhile."""

    def one(loc: ManifestLocation) -> tuple[int, _Loaded | None]:
        try:
            mf = read_manifest(store, loc.path)
        except (ObjectNotFoundError, FileNotFoundError):
            return loc.version, None
        return loc.version, (mf, load_transaction(store, base, mf))

    return dict(_parallel_map(store, one, locs))


def _advance(store: ObjectStore, base: str, latest: int, before: LedgerState) -> None:
    """Move the coverage mark after a scan recorded every keyed version up to ``latest``, and
    drop the marks it supersedes (best effort: the highest mark wins anyway)."""
    try:
        _mark_covered(store, base, latest)
        for version, path in before.covered_paths:
            if version < latest:
                store.delete(path)
    except Exception as exc:  # noqa: BLE001 - an optimisation only
        log.debug("%s: could not move the key ledger mark: %s", store.uri(base), exc)


def _unknown(uri: str, key: str, kind: str, ranges: list[tuple[int, int]]) -> IdempotencyUnknownError:
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:5])
    return IdempotencyUnknownError(
        f"{uri}: cannot tell whether the {kind} step with idempotency key {key!r} was already committed: "
        f"version(s) {shown} were removed without lance_ops' key ledger (cleanup by another tool?) or have no "
        "readable transaction. "
        "Nothing was committed. Check the data; if the step never committed, re-run it with a new key, or "
        "accept the gap for good with `lance-ops keys URI --accept-lost` (lance_ops.table.commit.idempotency.accept_lost)")


def _read_any(store: ObjectStore, base: str, kinds: tuple[str, ...], key: str) -> KeyRecord | None:
    for kind in kinds:
        rec = read_record(store, base, kind, key)
        if rec is not None:
            return rec
    return None


def lookup(
    store: ObjectStore, base: str, key: str, kind: str | Iterable[str], *, since: int = 0
) -> KeyRecord | None:
    """The record of the version that first committed (``kind``, ``key``), or None if it never did.

    ``kind`` may be several kinds (the first found wins). ``since``: the step cannot have
    committed at or below this version (a staged result's read version); holes at or below it
    do not matter. Raises IdempotencyUnknownError when the key is not found and versions above
    ``since`` were removed without being recorded.
    """
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    rec = _read_any(store, base, kinds, key)
    if rec is not None:
        return rec
    for _ in range(3):
        before = read_state(store, base)
        locs = naming.list_versions(store, base)
        if not locs:
            return None
        by_version = {loc.version: loc for loc in locs}
        latest = max(by_version)
        scan = [by_version[v] for v in sorted(by_version) if v > before.covered]
        loaded = _load(store, base, scan)
        found: KeyRecord | None = None
        keyed: list[KeyRecord] = []
        unreadable: list[int] = []  # versions whose transaction (and so key) cannot be read
        for version in sorted(loaded):
            item = loaded[version]
            if item is None:
                continue
            if item[1] is None and item[0].manifest.transaction_file:
                unreadable.append(version)
            r = KeyRecord.of(version, item[1])
            if r is None:
                continue
            keyed.append(r)
            if found is None and r.key == key and r.kind in kinds:
                found = r
        recorded = True  # the mark may only move when every keyed version got its record
        for r in keyed:
            try:
                write_record(store, base, r)
            except Exception as exc:  # noqa: BLE001 - an optimisation only
                recorded = False
                log.debug("%s: could not record key of version %d: %s", store.uri(base), r.version, exc)
        advance = (recorded and not unreadable and len(scan) >= ADVANCE_AFTER
                   and not _missing(by_version, before.covered, latest))
        if found is not None:
            if advance:
                _advance(store, base, latest, before)
            return found
        if any(item is None for item in loaded.values()):
            # removed by a concurrent cleanup, which records keys before deleting: look again
            rec = _read_any(store, base, kinds, key)
            if rec is not None:
                return rec
            continue
        # holes above the mark read first may be covered by now (a concurrent cleanup moves the
        # mark before it deletes): look again. Without holes the first reading is the answer.
        after = read_state(store, base) if _missing(by_version, before.covered, latest) else before
        holes = [v for v in _missing(by_version, after.covered, latest) + unreadable if v > since]
        lost = [(max(a, since + 1), b) for a, b in after.lost if b > since]
        if holes or lost:
            rec = _read_any(store, base, kinds, key)
            if rec is not None:
                return rec
            raise _unknown(store.uri(base), key, "/".join(kinds), sorted(lost + _ranges(holes)))
        if advance:
            _advance(store, base, latest, before)
        return None
    raise IdempotencyUnknownError(
        f"{store.uri(base)}: versions kept vanishing while looking up idempotency key {key!r} (a cleanup "
        "running at the same time?); nothing was committed, retry the step")


def find_in_versions(
    store: ObjectStore, base: str, key: str, kind: str | None, first: int, last: int
) -> ManifestFile | None:
    """The newest version in ``first..last`` (both included) committed with ``key`` (of ``kind``;
    any kind when None). The commit loop's check of versions that landed while it worked."""
    for version in range(last, first - 1, -1):
        loc = locate.find_version(store, base, version)
        if loc is None:
            continue
        try:
            mf = read_manifest(store, loc.path)
        except (ObjectNotFoundError, FileNotFoundError):
            continue
        txn = load_transaction(store, base, mf)
        if txn is not None and txn.transaction_properties.get(IDEMPOTENCY_KEY) == key and (
                kind is None or kind_of(txn) == kind):
            return mf
    return None


def manifest_of(store: ObjectStore, base: str, rec: KeyRecord) -> ManifestFile | None:
    """The manifest of the recorded version, if it is still retained."""
    loc = locate.find_version(store, base, rec.version)
    if loc is None:
        return None
    try:
        return read_manifest(store, loc.path)
    except (ObjectNotFoundError, FileNotFoundError):
        return None


def find_committed(
    store: ObjectStore, base: str, key: str, *, kind: str | None = None
) -> ManifestFile | None:
    """The retained manifest of the version that committed with ``key`` (of ``kind``; any kind
    when None), else None: the public lookup for callers above the table layer (Airflow
    operators). The ledger covers every version, removed ones too; see :func:`lookup`."""
    rec = lookup(store, base, key, kind or KNOWN_KINDS)
    return manifest_of(store, base, rec) if rec is not None else None


# --- cleanup's guarantee --------------------------------------------------------------------------
def carry_forward(store: ObjectStore, base: str, manifests: Mapping[int, ManifestFile]) -> int:
    """Before cleanup deletes manifests: record every keyed version of ``manifests`` (all listed
    versions) above the ``covered`` mark, mark versions missing above it as lost, and move the
    mark to the newest version. Raises on any store failure (cleanup then deletes nothing).
    Returns the number of records written. Call it after ``manifests`` were read."""
    if not manifests:
        return 0
    state = read_state(store, base)  # read after the manifests: a concurrent cleanup's mark is seen
    latest = max(manifests)
    written = 0
    todo = sorted(v for v in manifests if v > state.covered)
    txns = dict(zip(todo, _parallel_map(store, lambda v: load_transaction(store, base, manifests[v]), todo)))
    for version in todo:
        mf, txn = manifests[version], txns[version]
        if txn is None and mf.manifest.transaction_file:
            # the transaction is unreadable: its key (if any) is unknown
            _mark_lost(store, base, version, version)
            continue
        rec = KeyRecord.of(version, txn)
        if rec is not None:
            write_record(store, base, rec)
            written += 1
    for first, last in _ranges(_missing(manifests, state.covered, latest)):
        log.warning("%s: versions %d-%d were removed without lance_ops' key ledger; keyed steps that may "
                    "have committed there are refused", store.uri(base), first, last)
        _mark_lost(store, base, first, last)
    if latest > state.covered:
        _mark_covered(store, base, latest)
    for version, path in state.covered_paths:  # older marks are redundant
        if version < latest:
            try:
                store.delete(path)
            except Exception:  # noqa: BLE001 - harmless leftovers
                pass
    return written


def accept_lost(store: ObjectStore, base: str) -> list[tuple[int, int]]:
    """Forget the lost ranges (the operator checked that no step keyed there will be re-run) and
    cover every version now listed; returns the ranges that were forgotten."""
    locs = naming.list_versions(store, base)
    loaded = _load(store, base, [loc for loc in locs])
    manifests = {v: item[0] for v, item in loaded.items() if item is not None}
    state = read_state(store, base)
    for version, item in loaded.items():
        if item is not None and version > state.covered:
            rec = KeyRecord.of(version, item[1])
            if rec is not None:
                write_record(store, base, rec)
    if manifests:
        _mark_covered(store, base, max(manifests))
    for path in state.lost_paths:
        store.delete(path)
    return state.lost


def ledger_summary(store: ObjectStore, base: str) -> dict[str, Any]:
    """For ``inspect``: the coverage mark and lost ranges."""
    state = read_state(store, base)
    return {"covered_through_version": state.covered, "lost_versions": [list(r) for r in state.lost]}
