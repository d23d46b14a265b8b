"""How ``lance-ops`` shows results: plain-JSON conversion, aligned text, a progress bar on stderr.

Kept apart from :mod:`lance_ops.cli` (argument parsing and the commands) so each stays small.
"""
from __future__ import annotations

import json
import sys
import time
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, TextIO


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON types: dicts/lists recursively, dates as ISO text, NaN as null, numpy scalars unwrapped."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    try:  # numpy scalars
        return value.item()
    except AttributeError:
        return str(value)


def format_value(value: Any) -> str:
    """``value`` as one short human-readable cell: floats to 4 digits, lists and dicts joined, None as ``-``."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "-"
        return ", ".join(format_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={format_value(v)}" for k, v in value.items())
    if value is None:
        return "-"
    return str(value)


def format_text(data: dict[str, Any]) -> str:
    """A plain-JSON dict as aligned ``key  value`` lines; lists of dicts as indented lines."""
    lines = []
    width = max((len(k) for k in data), default=0)
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{key}:")
            lines.extend("  " + format_value(item) for item in value)
        else:
            lines.append(f"{key.ljust(width)}  {format_value(value)}")
    return "\n".join(lines)


def format_indices(indices: list[dict[str, Any]]) -> list[str]:
    """One line per index (``IndexInfo.to_dict()`` dicts): name, kind, columns, coverage, version, uuid."""
    out = []
    for info in indices:
        cols = ", ".join(info["columns"]) or "-"
        uuids = info["uuids"]
        uuid_text = uuids[0] if len(uuids) == 1 else f"{len(uuids)} segments: {', '.join(uuids)}"
        out.append(f"{info['name']}: {info['kind']} on {cols}; indexed {info['indexed_rows']} rows in "
                   f"{info['indexed_fragments']} fragments, unindexed {info['unindexed_rows']} rows in "
                   f"{info['unindexed_fragments']} fragments; index version {info['index_version']}; "
                   f"uuid {uuid_text}")
    return out


def print_result(result: Any, as_json: bool, out: TextIO | None = None) -> None:
    """Write a command's result to ``out`` (stdout): one JSON document, or aligned ``key  value`` lines."""
    out = out or sys.stdout
    data = to_jsonable(result)
    if as_json:
        out.write(json.dumps(data, indent=2) + "\n")
        return
    if isinstance(data, dict):
        text = format_text(data)
        out.write(text + "\n" if text else "")
    else:
        out.write(f"{format_value(data)}\n")


class Progress:
    """A one-line progress bar on stderr (no-op unless enabled)."""

    def __init__(self, label: str, enabled: bool, stream: TextIO | None = None) -> None:
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        final = total is not None and done >= total
        if not final and now - self._last < 0.1:
            return
        self._last = now
        if total:
            width = 30
            filled = int(width * min(done, total) / total)
            text = f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        else:
            text = f"\r{self.label} {done}"
        self.stream.write(text)
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the bar's line (if one was drawn) so later output starts on a fresh line."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
