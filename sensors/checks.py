"""The conditions the Lance sensors wait for, as plain synchronous functions.

Both the sensors' ``poke`` and the triggers (through ``asyncio.to_thread``) call these, so the two
modes cannot drift apart. They only read manifests (cheap enough to poll), resolve the Airflow
connection themselves (credentials are never part of trigger kwargs) and return a JSON-able dict
when the condition holds, None otherwise.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from lance_ops_airflow.operators.base import jsonable
from lance_ops_airflow.operators.hooks import LanceHook, normalize_conn_id


def _open(dataset_uri: str, lance_conn_id: str | None):
    import lance_ops
    from lance_ops.errors import DatasetNotFoundError

    uri, options = LanceHook(normalize_conn_id(lance_conn_id)).resolve(dataset_uri)
    try:
        return uri, lance_ops.dataset(uri, storage_options=options)
    except DatasetNotFoundError:
        return uri, None


def check_new_version(dataset_uri: str, lance_conn_id: str | None = None, baseline_version: int | None = None,
                      tag: str | None = None) -> dict[str, Any] | None:
    """``{"uri", "version", ...}`` once the latest version is beyond ``baseline_version`` and
    ``tag`` (if given) exists; with neither, once the dataset exists at all."""
    uri, ds = _open(dataset_uri, lance_conn_id)
    if ds is None:
        return None
    latest = ds.version
    out: dict[str, Any] = {"uri": uri, "version": latest, "observed_version": latest,
                           "baseline_version": baseline_version, "tag": tag}
    if baseline_version is not None and latest <= int(baseline_version):
        return None
    if tag:
        tags = ds.tags.list()
        if tag not in tags:
            return None
        out["tag_version"] = tags[tag].get("version")
        out["version"] = out["tag_version"]
    return jsonable(out)


def check_maintenance(dataset_uri: str, lance_conn_id: str | None = None, *,
                      target_rows_per_fragment: int = 1024 * 1024,
                      small_fragments_threshold: int | None = 10,
                      deleted_ratio_threshold: float | None = 0.1,
                      versions_to_clean_threshold: int | None = 20,
                      materialize_deletions_threshold: float = 0.1,
                      cleanup_older_than_seconds: float = 14 * 24 * 3600,
                      unindexed_rows_threshold_pct: float | None = None) -> tuple[bool, dict[str, Any]]:
    """``(needed, {"uri", "health": {...}, "reasons": [...]})`` from ``dataset_health``.

    Maintenance is needed when any enabled threshold is reached: ``small_fragments >=
    small_fragments_threshold``, ``deleted_ratio >= deleted_ratio_threshold`` (and > 0),
    ``versions_awaiting_cleanup >= versions_to_clean_threshold``, some index leaving more than
    ``unindexed_rows_threshold_pct`` percent of the rows unindexed. None disables a threshold.
    """
    from lance_ops.maintenance.health import dataset_health

    uri, ds = _open(dataset_uri, lance_conn_id)
    if ds is None:
        return False, {"uri": uri, "health": None, "reasons": [], "missing": True}
    health = dataset_health(
        ds, target_rows_per_fragment=int(target_rows_per_fragment),
        materialize_deletions_threshold=float(materialize_deletions_threshold),
        cleanup_older_than=timedelta(seconds=float(cleanup_older_than_seconds)),
    ).to_dict()
    reasons = []
    if small_fragments_threshold is not None and health["small_fragments"] >= max(1, int(small_fragments_threshold)):
        reasons.append(f"{health['small_fragments']} fragments below {target_rows_per_fragment} rows "
                       f"(threshold {small_fragments_threshold})")
    if deleted_ratio_threshold is not None and health["deleted_ratio"] > 0 \
            and health["deleted_ratio"] >= float(deleted_ratio_threshold):
        reasons.append(f"deleted-row ratio {health['deleted_ratio']:.3f} (threshold {deleted_ratio_threshold})")
    if versions_to_clean_threshold is not None \
            and health["versions_awaiting_cleanup"] >= max(1, int(versions_to_clean_threshold)):
        reasons.append(f"{health['versions_awaiting_cleanup']} versions awaiting cleanup "
                       f"(threshold {versions_to_clean_threshold})")
    if unindexed_rows_threshold_pct is not None:
        over = _over_threshold(health["index_coverage"], float(unindexed_rows_threshold_pct))
        if over:
            reasons.append(_unindexed_reason(over, float(unindexed_rows_threshold_pct)))
    return bool(reasons), jsonable({"uri": uri, "health": health, "reasons": reasons})


def _over_threshold(coverage: list[dict[str, Any]], threshold_pct: float) -> list[dict[str, Any]]:
    return [c for c in coverage if c["unindexed_rows"] > 0 and c["unindexed_pct"] > threshold_pct]


def _unindexed_reason(over: list[dict[str, Any]], threshold_pct: float) -> str:
    return "unindexed rows above {:g}%: {}".format(threshold_pct, ", ".join(
        f"{c['name']} ({c['kind']}) {c['unindexed_rows']} rows, {c['unindexed_pct']:.1f}%" for c in over))


def check_unindexed_rows(dataset_uri: str, lance_conn_id: str | None = None, *, threshold_pct: float = 0.0,
                         index_names: list[str] | None = None) -> tuple[bool, dict[str, Any]]:
    """``(over, {"uri", "version", "indices": [coverage...], "over": [names], "reasons"})``: ``over``
    when some index (of ``index_names``, default every user index) leaves more than
    ``threshold_pct`` percent (0-100) of the live rows unindexed. A missing dataset or one without
    an index is never over."""
    from lance_ops.maintenance.health import index_coverage
    from lance_ops.table.indices import list_indices

    uri, ds = _open(dataset_uri, lance_conn_id)
    if ds is None:
        return False, {"uri": uri, "version": None, "indices": [], "over": [], "reasons": [], "missing": True}
    coverage = [index_coverage(i) for i in list_indices(ds) if not i.system]
    if index_names:
        coverage = [c for c in coverage if c["name"] in set(index_names)]
    over = _over_threshold(coverage, float(threshold_pct))
    reasons = [_unindexed_reason(over, float(threshold_pct))] if over else []
    return bool(over), jsonable({"uri": uri, "version": ds.version, "indices": coverage,
                                 "over": [c["name"] for c in over], "reasons": reasons,
                                 "threshold_pct": float(threshold_pct)})
