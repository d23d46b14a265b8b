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


def print_result(result: Any, as_json: bool, out: TextIO | None = None) -> None:
    """Write a command's result to ``out`` (stdout): one JSON document, or aligned ``key  value`` lines."""
    out = out or sys.stdout
    data = to_jsonable(result)
    if as_json:
        out.write(json.dumps(data, indent=2) + "\n")
        return
    if isinstance(data, dict):
        width = max((len(k) for k in data), default=0)
        for key, value in data.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                out.write(f"{key}:\n")
                for item in value:
                    out.write("  " + format_value(item) + "\n")
            else:
                out.write(f"{key.ljust(width)}  {format_value(value)}\n")
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
