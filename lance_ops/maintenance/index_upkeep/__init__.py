"""Index upkeep: extend pylance indices to fragments appended since they were built (issue 22).

:func:`optimize_indices` (module :mod:`~lance_ops.maintenance.index_upkeep.optimize`) is the entry
point; ``registry.UPDATERS`` maps each index kind to the updater writing its new segment.
"""
from lance_ops.maintenance.index_upkeep.optimize import (
    IndexUpkeep,
    UpkeepResult,
    optimize_indices,
    plan_upkeep,
    upkeep_refusals,
)

__all__ = ["IndexUpkeep", "UpkeepResult", "optimize_indices", "plan_upkeep", "upkeep_refusals"]
