"""Airflow operators for Lance datasets (the lance-ops deployment tree).

Import with the repository root on ``sys.path`` (as Airflow does for DAG/plugin folders)::

    from operators import LanceDeleteOperator, lance_ingest_group

Submodules: :mod:`operators.hooks` (LanceHook), :mod:`operators.base` (shared behaviour:
idempotency keys, asset events, lineage), :mod:`operators.lance` (in-process operators),
:mod:`operators.spark` (Spark job + commit task groups), :mod:`operators.report` (the run report
that fails a maintenance run naming its failed steps).
"""
from __future__ import annotations

from operators.base import LANCE_ASSET_ALIAS, LanceBaseOperator, dataset_asset_uri, idempotency_key
from operators.hooks import LanceHook
from operators.lance import (
    LanceAppendOperator,
    LanceCleanupOperator,
    LanceCommitStagedOperator,
    LanceCompactionOperator,
    LanceDeleteOperator,
    LanceHealthOperator,
    LanceMaterializeDeletionsOperator,
    LanceRebuildStatisticsOperator,
    LanceRefreshRowIdIndexOperator,
    LanceVerifyOperator,
)
from operators.report import LanceRunReportOperator
from operators.spark import (
    LanceCompactionCommitOperator,
    LanceSparkSubmitOperator,
    lance_compaction_group,
    lance_ingest_group,
)

__all__ = [
    "LANCE_ASSET_ALIAS",
    "LanceAppendOperator",
    "LanceBaseOperator",
    "LanceCleanupOperator",
    "LanceCommitStagedOperator",
    "LanceCompactionCommitOperator",
    "LanceCompactionOperator",
    "LanceDeleteOperator",
    "LanceHealthOperator",
    "LanceHook",
    "LanceMaterializeDeletionsOperator",
    "LanceRebuildStatisticsOperator",
    "LanceRefreshRowIdIndexOperator",
    "LanceRunReportOperator",
    "LanceSparkSubmitOperator",
    "LanceVerifyOperator",
    "dataset_asset_uri",
    "idempotency_key",
    "lance_compaction_group",
    "lance_ingest_group",
]
