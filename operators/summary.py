"""The short human summary a Lance task writes to its log (the full result is the XCom JSON).

A result dict is long and nested (plans, per-file lists); the Airflow log view cuts a long line.
:func:`summary_lines` turns it into a few aligned lines, the same shape for every operation::

    Lance compaction: changed the dataset, now at version 7
      dataset  /data/events.lance
      rows     rows_rewritten=120000
      files    fragments_added=2  fragments_removed=12
      bytes    bytes_written=3.1 MiB
      seconds  task=2.41  rewrite_seconds=1.90
      XCom     return_value (full result as JSON)

Numbers are picked from the result's ``metrics`` by name (``*rows*``, ``*files*``/``*fragments*``,
``*bytes*``, ``*seconds*``), so a new metric shows up without touching this module.
"""
from __future__ import annotations

from typing import Any, Mapping

#: summary line label -> the words a metric's name contains to be listed on that line
GROUPS = (
    ("rows", ("rows",)),
    ("files", ("files", "fragments")),
    ("bytes", ("bytes",)),
    ("seconds", ("seconds",)),
)


def human_bytes(value: float) -> str:
    """``1536`` -> ``1.5 KiB`` (binary units; plain bytes below 1 KiB)."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - the loop returns


def outcome(result: Mapping[str, Any]) -> str:
    """What changed, in words: changed (now at version N) / already committed / dry run / no change."""
    version = result.get("version")
    if result.get("already_committed"):
        return f"already committed by an earlier try as version {version}: nothing new"
    if result.get("dry_run"):
        return "dry run: nothing changed"
    if result.get("changed"):
        return f"changed the dataset, now at version {version}"
    reason = result.get("reason") or (result.get("metrics") or {}).get("reason")
    return f"no change (version {version})" + (f": {reason}" if reason else "")


def _numbers(metrics: Mapping[str, Any], words: tuple[str, ...], taken: set[str]) -> list[tuple[str, Any]]:
    out = []
    for key in sorted(metrics):
        value = metrics[key]
        if key in taken or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if any(w in key.lower() for w in words):
            out.append((key, value))
            taken.add(key)
    return out


def _format(label: str, key: str, value: Any) -> str:
    if label == "bytes":
        return f"{key}={human_bytes(value)}"
    if label == "seconds":
        return f"{key}={float(value):.2f}"
    return f"{key}={value}"


def summary_lines(result: Mapping[str, Any], *, seconds: float | None = None) -> list[str]:
    """A few aligned lines: what changed, rows, files, bytes, seconds (groups with no number are left out)."""
    metrics = result.get("metrics") or {}
    metrics = metrics if isinstance(metrics, Mapping) else {}
    lines = [f"Lance {result.get('operation', 'task')}: {outcome(result)}", f"  {'dataset':<8} {result.get('uri')}"]
    taken: set[str] = set()
    for label, words in GROUPS:
        found = _numbers(metrics, words, taken)
        if label == "seconds" and seconds is not None:
            found.insert(0, ("task", seconds))
        if found:
            lines.append(f"  {label:<8} " + "  ".join(_format(label, k, v) for k, v in found))
    lines.append(f"  {'XCom':<8} return_value (full result as JSON)")
    return lines
