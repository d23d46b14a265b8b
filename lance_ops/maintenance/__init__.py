"""Table maintenance: version cleanup (:mod:`lance_ops.maintenance.cleanup`) and friends.

Submodules are imported on demand; keep this package file free of heavy imports so that
``import lance_ops.maintenance.<module>`` (and Airflow DAG parsing) stays cheap.
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``lance_ops.maintenance.optimize_indices``, imported on first use (the package stays light)."""
    if name == "optimize_indices":
        from lance_ops.maintenance.index_upkeep.optimize import optimize_indices

        return optimize_indices
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
