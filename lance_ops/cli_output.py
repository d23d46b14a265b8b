"""How ``lance-ops`` shows results: plain-JSON conversion, aligned text and tables, a progress bar
on stderr, and the outcome of a run: its exit code and, for errors, one line or one JSON object.

Kept apart from :mod:`lance_ops.cli` (argument parsing and the commands) so each stays small.

Exit codes (docs/adr/0025-cli-outcomes.md): 0 ok; 1 the command failed (a lance_ops error, an
unexpected error, or a result that reports failures: ``rebuild-stats`` with failed files);
2 bad usage (arguments, filter syntax or semantics: nothing was read or changed); 3 not found
(dataset, version, tag or input file); 4 ``verify`` found problems; 5 a commit conflict (another
writer won; the dataset is unchanged by this run); 6 commit outcome unknown (the store failed
mid-commit: check the dataset's versions before retrying); 130 interrupted.
"""
from __future__ import annotations

import json
import re
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
    """A plain-JSON dict as aligned ``key  value`` lines; a list is never squeezed onto one line:
    a list of dicts becomes an aligned table under ``key:``, any other list one item per line."""
    lines = []
    width = max((len(k) for k in data), default=0)
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            header = list(dict.fromkeys(k for item in value for k in item))
            rows = [[format_value(item.get(k)).replace(", ", ",") for k in header] for item in value]
            lines.append(f"{key}:")
            lines.extend("  " + line for line in format_table(header, rows))
        elif isinstance(value, list) and value:
            lines.append(f"{key}:")
            lines.extend(f"  {format_value(v)}" for v in value)
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


def format_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """An aligned text table: the header line, then one line per row (columns two spaces apart)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header, *rows]]


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_VERIFY_PROBLEMS = 4
EXIT_CONFLICT = 5
EXIT_OUTCOME_UNKNOWN = 6
EXIT_INTERRUPTED = 130

#: every exit code and what it says (the ``--help`` epilog and the README list these)
EXIT_CODES = {
    EXIT_OK: "ok", EXIT_FAILED: "the command failed", EXIT_USAGE: "bad usage (nothing was read or changed)",
    EXIT_NOT_FOUND: "dataset, version, tag or input not found", EXIT_VERIFY_PROBLEMS: "verify found problems",
    EXIT_CONFLICT: "commit conflict (another writer won; retry)",
    EXIT_OUTCOME_UNKNOWN: "commit outcome unknown (check the versions before retrying)",
    EXIT_INTERRUPTED: "interrupted",
}


def exit_code_for(exc: BaseException) -> int:
    """The exit code that says what kind of failure ``exc`` is (see the module docstring)."""
    from lance_ops import errors

    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, (errors.DatasetNotFoundError, errors.InputNotFoundError)):
        return EXIT_NOT_FOUND
    if isinstance(exc, (errors.UsageError, errors.InvalidArgumentError, errors.FilterError)):
        return EXIT_USAGE
    if isinstance(exc, errors.CommitConflictError):
        return EXIT_CONFLICT
    if isinstance(exc, errors.CommitOutcomeUnknownError):
        return EXIT_OUTCOME_UNKNOWN
    return EXIT_FAILED


_CARET = re.compile(r"^\s*\^+\s*$")


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line: a filter error's caret drawing (the text and a line of ``^``
    under it) is left out, since its first line already names the position and the token."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if len(lines) >= 3 and _CARET.match(lines[-1]):
        lines = lines[:-2]
    return " ".join(line.strip() for line in lines) or type(exc).__name__


def report_error(message: str, exit_code: int, as_json: bool, error_type: str, out: TextIO | None = None,
                 err: TextIO | None = None) -> int:
    """Show an error and return ``exit_code``: with ``--json`` ONE JSON object on stdout,
    ``{"ok": false, "error": {"type", "message", "exit_code"}}``; else one ``error: ...`` line on
    stderr."""
    if as_json:
        doc = {"ok": False, "error": {"type": error_type, "message": message, "exit_code": exit_code}}
        (out or sys.stdout).write(json.dumps(doc, indent=2) + "\n")
    else:
        (err or sys.stderr).write(f"error: {message}\n")
    return exit_code


def print_result(result: Any, as_json: bool, out: TextIO | None = None, exit_code: int = EXIT_OK) -> None:
    """Write a command's result to ``out`` (stdout): one JSON object whose ``ok`` says whether the
    run succeeded (``exit_code`` 0), or aligned ``key  value`` lines (a text result as it is)."""
    out = out or sys.stdout
    data = to_jsonable(result)
    if as_json:
        doc = {"ok": exit_code == EXIT_OK, **data} if isinstance(data, dict) else {"ok": exit_code == EXIT_OK,
                                                                                 "result": data}
        out.write(json.dumps(doc, indent=2) + "\n")
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
