"""Staged results and the key ledger in a cleanup run: which stages pin their data files, which
go, and carrying the idempotency-key ledger forward before any manifest is deleted."""
from __future__ import annotations

import base64
import json
import logging
import re
from datetime import datetime
from typing import Any

from google.protobuf.message import DecodeError

from lance_ops._proto import table_pb2
from lance_ops.errors import LanceOpsError, ObjectNotFoundError
from lance_ops.io.base import ObjectStore
from lance_ops.table.commit import idempotency
from lance_ops.table.commit.staging import StagedResult

from lance_ops.maintenance.cleanup.listing import STAGING_DIR, ListedFile, VersionInfo

_B64_RE = re.compile(r"^[A-Za-z0-9+/]{16,}={0,2}$")

log = logging.getLogger(__name__)


def carry_forward_ledger(store: ObjectStore, base: str, versions: dict[int, VersionInfo]) -> None:
    """Record every keyed version's idempotency key in the ledger before any manifest goes, and
    move the coverage mark to the newest version (:func:`lance_ops.table.commit.idempotency.carry_forward`)."""
    idempotency.carry_forward(store, base, {v: info.manifest for v, info in versions.items()})


def staged_data_files(doc: Any) -> set[str]:
    """Data file names (relative to data/) a staged result names, whatever its layout.

    Walks the JSON: a string ending in ``.lance`` names a data file; a base64 string that
    decodes to a ``DataFragment`` names that fragment's files.
    """
    out: set[str] = set()
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if item.endswith(".lance"):
                out.add(item.replace("\\", "/").rsplit("/", 1)[-1])
            elif _B64_RE.match(item):
                frag = table_pb2.DataFragment()
                try:
                    frag.ParseFromString(base64.b64decode(item, validate=True))
                except (ValueError, DecodeError):  # not base64 / not a fragment
                    continue
                out.update(df.path for df in frag.files if df.path.endswith(".lance"))
    return out


def staged_lifecycle(store: ObjectStore, base: str, named: set[str], young_after: datetime | None) -> tuple[set[str], list[ListedFile]]:
    """``(data files to pin, stage JSONs to delete)``; see the module docstring.

    ``named``: data files some listed manifest names (file names are random, so a stage whose
    file is named was committed). Call after the key ledger was carried forward.
    """
    pinned: set[str] = set()
    drop: list[ListedFile] = []
    for info in store.list_dir(store.join(base, STAGING_DIR)):
        name = info.path.replace("\\", "/").rsplit("/", 1)[-1]
        if not name.endswith(".json") or name.endswith(".plan.json") or name.startswith("."):
            continue
        try:
            raw = store.read(info.path)
            doc = json.loads(raw)
        except (ObjectNotFoundError, FileNotFoundError):
            continue
        except ValueError:
            log.warning("cleanup: %s is not JSON; the files it may stage are not pinned",
                        store.uri(info.path))
            continue
        files = staged_data_files(doc)
        try:
            result = StagedResult.from_json(raw, store.uri(info.path))
        except LanceOpsError:
            result = None
        known = None
        if result is not None and result.key:
            try:
                known = idempotency.read_record(store, base, idempotency.kind_of_operation(result.operation),
                                                result.key)
            except LanceOpsError:
                known = None
        f = ListedFile(info.path, f"{STAGING_DIR}/{name}", info.size, info.last_modified)
        committed = known is not None or (result is not None and result.committed_version is not None) or bool(
            files & named)
        if committed:
            if known is not None:  # a re-run is answered by the ledger
                drop.append(f)
            continue
        if young_after is not None and info.last_modified >= young_after:
            pinned |= files  # pending: its commit step may still come
            continue
        log.info("cleanup: removing abandoned staged result %s (never committed)", store.uri(info.path))
        drop.append(f)
    return pinned, drop
