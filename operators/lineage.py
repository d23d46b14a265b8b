"""OpenLineage datasets and facets of a Lance task (used by ``get_openlineage_facets_on_complete``).

Only imported when the OpenLineage provider asks for lineage, i.e. after the task ran, in the task
process. Names follow the OpenLineage naming spec: namespace ``file`` and the absolute path for a
local dataset, ``s3://<bucket>`` and the key for S3. Facets:

* ``schema`` (both input and output): the latest version's top-level fields and Arrow types;
* ``outputStatistics`` (output, when the task wrote rows): ``rowCount`` / ``size`` from the
  task's metrics (``rows_written`` or ``num_rows``; ``bytes_written``);
* ``version`` (output): the Lance version the task left, when the openlineage client has the facet.

Reading the schema opens the dataset with the task's connection; if that fails the facet is left
out with a warning, never failing the task.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

#: metrics naming the rows / bytes a task wrote, the first present wins
ROWS_WRITTEN = ("rows_written", "num_rows")
BYTES_WRITTEN = ("bytes_written",)


def openlineage_names(uri: str) -> tuple[str, str]:
    """OpenLineage (namespace, name) per the naming spec: ``file`` + path, ``s3://bucket`` + key."""
    text = str(uri)
    if "://" in text and not text.lower().startswith("file:"):
        scheme, rest = text.split("://", 1)
        scheme = "s3" if scheme.lower() in ("s3", "s3a", "s3+ddb") else scheme.lower()
        bucket, _, key = rest.partition("/")
        return f"{scheme}://{bucket}", key.split("?", 1)[0].strip("/")
    path = text[len("file://"):] if text.lower().startswith("file://") else text
    return "file", os.path.abspath(path)


def _first(metrics: Mapping[str, Any], names: Iterable[str]) -> int | None:
    for name in names:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return None


def schema_fields(uri: str, lance_conn_id: str | None) -> list[tuple[str, str]]:
    """(name, Arrow type) of the dataset's latest version's top-level fields."""
    from lance_ops_airflow.operators.hooks import LanceHook

    ds = LanceHook(lance_conn_id).open_dataset(uri)
    return [(field.name, str(field.type)) for field in ds.schema]


def operator_lineage(log: Any, uri: str, inputs: list[str], result: Mapping[str, Any] | None,
                     lance_conn_id: str | None) -> Any:
    """``OperatorLineage`` for a task on ``uri`` (None without the OpenLineage provider)."""
    try:
        from airflow.providers.common.compat.openlineage.facet import (
            InputDataset,
            OutputDataset,
            OutputStatisticsOutputDatasetFacet,
            SchemaDatasetFacet,
            SchemaDatasetFacetFields,
        )
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    if OutputDataset is None:  # pragma: no cover - compat placeholder when the openlineage client is missing
        return None
    facets: dict[str, Any] = {}
    try:
        fields = schema_fields(uri, lance_conn_id)
        facets["schema"] = SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t) for n, t in fields])
    except Exception as exc:  # noqa: BLE001 - lineage never fails the task
        log.warning("OpenLineage: no schema facet for %s: %s", uri, exc)
    output_facets = dict(facets)
    result = result or {}
    version = result.get("version")
    if version is not None:
        try:
            from openlineage.client.facet_v2 import dataset_version_dataset

            output_facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
        except ImportError:  # pragma: no cover - older openlineage clients
            pass
    metrics = result.get("metrics") or {}
    rows = _first(metrics, ROWS_WRITTEN) if result.get("changed") else None
    output_stats = None
    if rows is not None:
        output_stats = OutputStatisticsOutputDatasetFacet(rowCount=rows, size=_first(metrics, BYTES_WRITTEN))
    ns, name = openlineage_names(uri)
    output = OutputDataset(namespace=ns, name=name, facets=output_facets,
                           outputFacets={"outputStatistics": output_stats} if output_stats else {})
    datasets_in = []
    for item in inputs:
        in_ns, in_name = openlineage_names(item)
        same = (in_ns, in_name) == (ns, name)
        datasets_in.append(InputDataset(namespace=in_ns, name=in_name, facets=dict(facets) if same else {}))
    return OperatorLineage(inputs=datasets_in, outputs=[output])
