"""Run one callable against pylance (the oracle, test-only) and against lance-ops, and compare.

``fn(lib)`` receives the module: ``lance`` or ``lance_ops`` (with ``lance_ops.file`` loaded), so
the same code is the call a pylance user writes and the call after changing the import.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Optional

import lance
import pyarrow as pa

import lance_ops
import lance_ops.file  # noqa: F401  (``lance_ops.file`` as an attribute, as ``lance.file``)

LIBS: tuple[types.ModuleType, types.ModuleType] = (lance, lance_ops)


class Raised:
    """An exception one side raised, kept as a value to compare."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __repr__(self) -> str:
        return f"Raised({type(self.exc).__name__}: {self.exc})"


def call(fn: Callable[[types.ModuleType], Any], lib: types.ModuleType) -> Any:
    """``fn(lib)``, or :class:`Raised` with what it raised."""
    try:
        return fn(lib)
    except Exception as exc:  # noqa: BLE001 - the exception is the result being compared
        return Raised(exc)


def _short(value: Any, limit: int = 1500) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _norm(value: Any) -> Any:
    if isinstance(value, pa.RecordBatchReader):
        return pa.Table.from_batches(list(value), schema=value.schema)
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], pa.RecordBatch):
        return [b.num_rows for b in value], pa.Table.from_batches(list(value))
    return value


def same(fn: Callable[[types.ModuleType], Any], *, normalize: Optional[Callable[[Any], Any]] = None,
         error_match: Optional[str] = None) -> Any:
    """Assert ``fn`` gives equal results on pylance and lance-ops (tables: exact equality incl. schema).

    When pylance raises, lance-ops must raise an instance of the same exception class (pylance
    raises builtins; lance_ops' errors derive from them, ADR 0008). Returns lance-ops' result.
    """
    theirs, ours = (call(fn, lib) for lib in LIBS)
    if isinstance(theirs, Raised):
        assert isinstance(ours, Raised), f"pylance raised {theirs!r}, lance-ops returned {_short(ours)}"
        assert isinstance(ours.exc, type(theirs.exc)), f"pylance raised {theirs!r}, lance-ops raised {ours!r}"
        if error_match is not None:
            import re

            assert re.search(error_match, str(ours.exc)), ours
        return ours
    if isinstance(ours, Raised):
        raise AssertionError(f"lance-ops raised {ours!r}; pylance returned {_short(theirs)}") from ours.exc
    theirs, ours = _norm(theirs), _norm(ours)
    if normalize is not None:
        theirs, ours = normalize(theirs), normalize(ours)
    if isinstance(theirs, pa.Table):
        assert isinstance(ours, pa.Table), ours
        assert ours.schema.equals(theirs.schema, check_metadata=False), (ours.schema, theirs.schema)
        assert ours.equals(theirs), (ours.slice(0, 5), theirs.slice(0, 5))
    else:
        assert ours == theirs, f"lance-ops: {_short(ours)}\npylance: {_short(theirs)}"
    return ours
