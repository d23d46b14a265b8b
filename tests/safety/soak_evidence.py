"""Evidence the fault-proxy soak keeps, so that a failure in CI can be diagnosed afterwards.

:class:`ManifestArchive` copies every manifest and transaction file the soak's dataset ever
shows (polled directly from moto, around the proxy), including versions a cleanup removes a
moment later and two different manifests seen under one version number (a reused slot).
:func:`write_evidence` replays that archive against the workers' operation logs: per version
and per distinct manifest, the operation, transaction uuid, batch, fragments with their data
and deletion files, whether it is still retained, and for every acknowledged append whose rows
are missing, whether its data files are named there. It writes ``evidence.json`` and
``chain.txt`` and returns a short summary for the assertion message.
"""
from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from lance_ops.table.commit.transaction_file import decode_transaction
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import decode_manifest


class ManifestArchive(threading.Thread):
    """Polls ``<prefix>/_versions/`` and ``<prefix>/_transactions/`` every ``interval`` seconds and
    keeps a copy of every object (key, ETag) it sees, with when it was first seen."""

    def __init__(self, client: Any, bucket: str, prefix: str, out_dir: Path, interval: float = 0.1) -> None:
        super().__init__(name="soak-archive", daemon=True)
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")
        self.out_dir = out_dir
        self.interval = interval
        self.records: list[dict[str, Any]] = []
        self.errors = 0
        self._seen: set[tuple[str, str]] = set()
        self._stop_event = threading.Event()
        out_dir.mkdir(parents=True, exist_ok=True)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.poll()
            self._stop_event.wait(self.interval)
        self.poll()

    def stop(self) -> None:
        """Stop polling (after one last poll) and wait for the thread."""
        self._stop_event.set()
        self.join(timeout=30)

    def poll(self) -> None:
        """One round: list both directories, copy what is new."""
        for area in (naming.VERSIONS_DIR, naming.TRANSACTIONS_DIR):
            try:
                pages = self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=f"{self.prefix}/{area}/")
                for page in pages:
                    for obj in page.get("Contents", ()):
                        self._keep(obj)
            except Exception:  # noqa: BLE001 - evidence is best effort; counted
                self.errors += 1

    def _keep(self, obj: dict[str, Any]) -> None:
        key = obj["Key"]
        if (key, obj["ETag"].strip('"')) in self._seen:
            return
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
            body, etag = resp["Body"].read(), resp["ETag"].strip('"')
        except Exception:  # noqa: BLE001 - removed meanwhile (a cleanup): counted, nothing to keep
            self.errors += 1
            return
        if (key, etag) in self._seen:  # replaced since the listing by one already kept
            return
        self._seen.add((key, etag))
        name = f"{len(self.records):05d}-{key.rsplit('/', 1)[-1]}"
        (self.out_dir / name).write_bytes(body)
        self.records.append({"key": key, "etag": etag, "file": name, "first_seen": time.time(),
                             "last_modified": obj["LastModified"].timestamp()})


def _fragments(manifest: Any) -> list[dict[str, Any]]:
    out = []
    for f in manifest.fragments:
        d = f.deletion_file if f.HasField("deletion_file") else None
        out.append({"id": f.id, "rows": f.physical_rows, "files": [x.path for x in f.files],
                    "deletion": None if d is None else naming.deletion_file_path(f.id, d)})
    return out


def _txn_summary(txn: Any) -> dict[str, Any]:
    if txn is None:
        return {"op": None}
    op = txn.WhichOneof("operation")
    out: dict[str, Any] = {"op": op, "uuid": txn.uuid, "read_version": txn.read_version,
                           "properties": dict(txn.transaction_properties)}
    if op == "append":
        out["files"] = [x.path for f in txn.append.fragments for x in f.files]
    elif op == "rewrite":
        out["old_ids"] = sorted(f.id for g in txn.rewrite.groups for f in g.old_fragments)
    elif op == "delete":
        out["updated_ids"] = sorted(f.id for f in txn.delete.updated_fragments)
        out["deleted_ids"] = sorted(txn.delete.deleted_fragment_ids)
    return out


def replay(archive: ManifestArchive, retained: set[int]) -> list[dict[str, Any]]:
    """Every archived manifest decoded, in version order (then first seen)."""
    txns: dict[str, Any] = {}
    for rec in archive.records:
        if f"/{naming.TRANSACTIONS_DIR}/" in rec["key"]:
            try:
                txns[rec["key"].rsplit("/", 1)[-1]] = decode_transaction((archive.out_dir / rec["file"]).read_bytes())
            except Exception:  # noqa: BLE001
                pass
    rows = []
    for rec in archive.records:
        parsed = naming.parse_manifest_name(rec["key"])
        if parsed is None:
            continue
        try:
            mf = decode_manifest((archive.out_dir / rec["file"]).read_bytes(), rec["key"])
        except Exception as exc:  # noqa: BLE001
            rows.append({"version": parsed[0], "file": rec["file"], "error": repr(exc)})
            continue
        txn = mf.transaction if mf.transaction is not None else txns.get(mf.manifest.transaction_file)
        rows.append({"version": parsed[0], "file": rec["file"], "etag": rec["etag"],
                     "last_modified": rec["last_modified"], "first_seen": rec["first_seen"],
                     "timestamp": mf.manifest.timestamp.ToNanoseconds() / 1e9,
                     "retained": parsed[0] in retained, "txn": _txn_summary(txn),
                     "fragments": _fragments(mf.manifest)})
    rows.sort(key=lambda r: (r["version"], r.get("first_seen", 0)))
    return rows


def lost_appends(entries: list[dict[str, Any]], present: set[int], deletes: dict[str, dict]) -> list[dict]:
    """Acknowledged appends with rows missing (deleted odd ids of an acknowledged delete aside)."""
    out = []
    for e in entries:
        if e["op"] != "append" or e["outcome"] != "ok":
            continue
        batch = set(range(e["lo"], e["hi"]))
        d = deletes.get(e["batch"])
        if d is not None and d["outcome"] in ("ok", "unknown"):
            batch = {i for i in batch if i % 2 == 0}
        missing = batch - present
        if missing:
            out.append(dict(e, missing=len(missing), of=len(batch)))
    return out


def write_evidence(out_dir: Path, archive: ManifestArchive, entries: list[dict[str, Any]], present: set[int],
                   retained: set[int], failure: str) -> str:
    """Write ``evidence.json`` and ``chain.txt`` under ``out_dir``; returns a summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    deletes = {e["batch"]: e for e in entries if e["op"] == "delete"}
    lost = lost_appends(entries, present, deletes)
    chain = replay(archive, retained)
    by_batch = {r["txn"].get("properties", {}).get("soak.batch"): r for r in chain if r.get("txn")}
    per_version: dict[int, list[dict]] = defaultdict(list)
    for r in chain:
        per_version[r["version"]].append(r)
    acked_at: dict[int, list[str]] = defaultdict(list)
    for e in entries:
        if e["outcome"] == "ok" and e.get("version") is not None:
            acked_at[int(e["version"])].append(f"{e['op']}:{e.get('batch', '')}:{e.get('uuid', '')}")
    notes = []
    for a in lost:
        mine = by_batch.get(a["batch"])
        files = set(mine["txn"].get("files", [])) if mine else set()
        seen = [r for r in chain if files and files & {p for f in r.get("fragments", []) for p in f["files"]}]
        at = per_version.get(int(a["version"]), []) if a.get("version") is not None else []
        notes.append({
            "batch": a["batch"], "acknowledged_version": a.get("version"), "uuid": a.get("uuid"),
            "missing": a["missing"], "of": a["of"], "its_files": sorted(files),
            "manifests_seen_at_that_version": [{"file": r["file"], "op": r["txn"].get("op"),
                                                "uuid": r["txn"].get("uuid"),
                                                "batch": r["txn"].get("properties", {}).get("soak.batch")}
                                               for r in at],
            "operations_acknowledged_at_that_version": acked_at.get(int(a["version"]), []),
            "versions_naming_its_files": sorted({r["version"] for r in seen}),
        })
    reused = {v: [r["txn"].get("uuid") for r in rs] for v, rs in per_version.items()
              if len({r["txn"].get("uuid") for r in rs if r.get("txn")}) > 1}
    evidence = {"failure": failure, "lost": notes, "slots_seen_with_two_transactions": reused,
                "archive_errors": archive.errors, "retained": sorted(retained), "chain": chain,
                "duplicate_acknowledged_versions": {v: ops for v, ops in acked_at.items() if len(ops) > 1}}
    (out_dir / "evidence.json").write_text(json.dumps(evidence, indent=1, default=str))
    with open(out_dir / "chain.txt", "w", encoding="utf-8") as f:
        for r in chain:
            t = r.get("txn", {})
            frags = " ".join(f"{x['id']}{'d' if x['deletion'] else ''}" for x in r.get("fragments", []))
            f.write(f"{'v' + str(r['version']):<6} {'R' if r.get('retained') else '-'} {t.get('op')!s:8} "
                    f"{t.get('properties', {}).get('soak.batch', '')!s:8} uuid={t.get('uuid')} "
                    f"read={t.get('read_version')} frags=[{frags}] file={r['file']}\n")
    summary = {"evidence": str(out_dir), "lost": [{k: n[k] for k in ("batch", "acknowledged_version", "missing",
                                                                       "manifests_seen_at_that_version",
                                                                       "operations_acknowledged_at_that_version",
                                                                       "versions_naming_its_files")}
                                                   for n in notes][:3],
               "slots_seen_with_two_transactions": dict(list(reused.items())[:5]),
               "duplicate_acknowledged_versions": evidence["duplicate_acknowledged_versions"]}
    return json.dumps(summary, default=str)
