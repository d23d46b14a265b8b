"""Airflow operators for Lance datasets (the provider's operators; ADR 0018).

Installed with the distribution (``pip install lance-ops[airflow]``) as
``lance_ops_airflow.operators``; the repository keeps them in ``operators/``::

    from lance_ops_airflow.operators import LanceDeleteOperator, lance_ingest_group

Submodules: :mod:`lance_ops_airflow.operators.hooks` (LanceHook), :mod:`lance_ops_airflow.operators.base` (shared behaviour:
idempotency keys, asset events, lineage), :mod:`lance_ops_airflow.operators.lance` (in-process operators),
:mod:`lance_ops_airflow.operators.indices` (index upkeep),
:mod:`lance_ops_airflow.operators.spark` (Spark job + commit task groups), :mod:`lance_ops_airflow.operators.merge`
(upserts: ``merge_insert`` on key columns), :mod:`lance_ops_airflow.operators.report` (the run report
that fails a maintenance run naming its failed steps), :mod:`lance_ops_airflow.operators.summary`
(the task log summary), :mod:`lance_ops_airflow.operators.lineage` (OpenLineage datasets and facets).
"""
from __future__ import annotations

from lance_ops_airflow.operators.base import LANCE_ASSET_ALIAS, LanceBaseOperator, dataset_asset_uri, idempotency_key
from lance_ops_airflow.operators.hooks import LanceHook
from lance_ops_airflow.operators.indices import LanceOptimizeIndicesOperator
from lance_ops_airflow.operators.lance import (
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
from lance_ops_airflow.operators.merge import LanceMergeInsertOperator
from lance_ops_airflow.operators.report import LanceRunReportOperator
from lance_ops_airflow.operators.spark import (
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
    "LanceMergeInsertOperator",
    "LanceOptimizeIndicesOperator",
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
