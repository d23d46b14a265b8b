"""
### lance_ingest: files -> Lance dataset with Spark, committed once

`ingest.spark_stage` (spark-submit `lance_ops/spark/ingest.py --stage-only`: executors write the
fragments, the driver stages them under the dataset's `_staging/`) -> `ingest.commit` (one small
task commits the staged result; an Airflow retry finds its earlier commit by the run's
idempotency key and commits nothing new).

    airflow dags test lance_ingest -c '{"dataset_uri": "/data/events.lance", "source_path": "/raw/day=1"}'

`mode=upsert` (with `on`, the key columns) runs the Spark merge job in `ingest.spark_stage`
(`lance_ops/spark/merge.py`: executors join the source with the dataset's key columns and write
the new fragments and deletion files; the driver commits one Update under the run's idempotency
key), then `ingest.commit` reports that version: rows whose key matches are updated, the rest
inserted (a re-run over the same source leaves the same rows). With `upsert_engine=task` both
skip and `ingest.upsert` merges the source (Parquet or Arrow files) in the task process instead.

    airflow dags test lance_ingest -c '{"dataset_uri": "/data/events.lance", "source_path": "/raw/fix.parquet",
                                        "mode": "upsert", "on": ["id"]}'

**Asset.** `dataset_uri` is a run-time Param, so the asset another DAG can be scheduled on must be
fixed when the file is parsed: the commit task emits an event for
`Asset(name="lance_ingest", uri=$LANCE_OPS_INGEST_ASSET_URI or "lance://ingest")`, whose extra
`{"uri", "version", "operation", "metrics", "lance_conn_id"}` names the dataset and the version
the run committed. (It also emits an event for the dataset's own asset, `file:///...` or
`s3://...`, through the `lance_ops_datasets` AssetAlias.) One ingestion DAG feeding several
datasets therefore shares one schedulable asset; deploy a copy of this file with another asset URI
per dataset if downstream DAGs must wait for one dataset only.

### lance_ingest_downstream: scheduled on that asset

Reads the triggering event (or the latest event of the asset on a manual run), waits with a
deferrable `LanceNewVersionSensor` until that version is visible, then reads the dataset *as of*
the event's version and reports its rows and fragments.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param, task

from lance_ops_airflow.params import conn_id_param, dataset_uri_param

from lance_ops_airflow.operators import lance_ingest_group
from lance_ops_airflow.sensors import LanceNewVersionSensor

SOURCE = os.environ.get("LANCE_OPS_SOURCE_PATH", "").strip()
INGEST_ASSET = Asset(name="lance_ingest", uri=os.environ.get("LANCE_OPS_INGEST_ASSET_URI", "lance://ingest"))

with DAG(
    dag_id="lance_ingest",
    description="Spark ingestion into a Lance dataset with an exactly-once commit step",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    tags=["lance", "ingest", "spark"],
    doc_md=__doc__,
    params={
        "dataset_uri": dataset_uri_param(os.environ.get("LANCE_OPS_DATASET_URI", "").strip(),
                                         description="target dataset path or URI (created by mode=create)"),
        "lance_conn_id": conn_id_param(os.environ.get("LANCE_OPS_CONN_ID") or None),
        "source_path": Param(**({"default": SOURCE} if SOURCE else {}), type="string", minLength=1, maxLength=2048,
                             title="Source path", description="input files (a file or directory Spark can read)"),
        "source_format": Param("parquet", type="string", enum=["parquet", "csv", "json", "orc"], title="Source format",
                               description="format of the input files"),
        "mode": Param("append", type="string", enum=["append", "overwrite", "create", "upsert"], title="Write mode",
                      description="append to the dataset, overwrite it, create it (fails if it exists), or "
                                  "upsert: update the rows whose `on` key matches and insert the rest"),
        "on": Param(None, type=["null", "array"], items={"type": "string", "minLength": 1, "maxLength": 256},
                    minItems=1, maxItems=32, uniqueItems=True,
                    title="Key columns (upsert)",
                    description='columns matching source rows with dataset rows, e.g. ["id"]; required when '
                                "mode is upsert, ignored otherwise"),
        "upsert_engine": Param("spark", type="string", enum=["spark", "task"], title="Upsert engine",
                               description="mode=upsert: the Spark merge job (default) or a merge in the "
                                           "Airflow task process (small Parquet/Arrow sources)"),
        "partitions": Param(None, type=["null", "integer"], minimum=1, maximum=100_000, title="Spark partitions",
                            description="repartition the input into this many Spark tasks (empty: as read)"),
        "max_rows_per_file": Param(None, type=["null", "integer"], minimum=1, maximum=1 << 31,
                                   title="Max rows per file", description="cap on rows per written data file"),
        "data_storage_version": Param(None, type=["null", "string"], enum=[None, "2.0", "2.1", "2.2", "stable", "legacy"],
                                      title="Data storage version",
                                      description="file format of a dataset this run creates (empty: lance-ops' "
                                                  "default); an existing dataset keeps its own"),
    },
) as ingest_dag:
    lance_ingest_group(
        "ingest",
        dataset_uri="{{ params.dataset_uri }}",
        lance_conn_id="{{ params.lance_conn_id }}",
        source_path="{{ params.source_path }}",
        source_format="{{ params.source_format }}",
        mode="{{ params.mode }}",
        on="{{ params.on }}",
        upsert_engine="{{ params.upsert_engine }}",
        partitions="{{ params.partitions }}",
        max_rows_per_file="{{ params.max_rows_per_file }}",
        data_storage_version="{{ params.data_storage_version }}",
        spark_conf={"spark.ui.enabled": "false"},
        outlets=[INGEST_ASSET],
    )


with DAG(
    dag_id="lance_ingest_downstream",
    description="Runs after each lance_ingest commit: checks the committed version",
    schedule=[INGEST_ASSET],
    start_date=datetime(2024, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["lance", "ingest"],
    doc_md=__doc__,
    params={
        "dataset_uri": Param("", type="string", maxLength=2048, title="Dataset URI override",
                             description="check this dataset instead of the one the asset event names (empty: the event's)"),
        "lance_conn_id": conn_id_param(),
    },
) as downstream_dag:

    @task(inlets=[INGEST_ASSET])
    def ingest_event(**context) -> dict:
        """The asset event this run is about: the triggering one, else the asset's latest."""
        event = None
        for events in (context.get("triggering_asset_events") or {}).values():
            if events:
                event = events[-1]
        if event is None:
            events = context["inlet_events"][INGEST_ASSET]
            event = events[-1] if len(events) else None
        extra = dict(event.extra or {}) if event is not None else {}
        params = context["params"]
        uri = params.get("dataset_uri") or extra.get("uri")
        if not uri:
            raise ValueError("no lance_ingest asset event to check and no dataset_uri given")
        return {
            "uri": uri,
            "version": extra.get("version"),
            "lance_conn_id": params.get("lance_conn_id") or extra.get("lance_conn_id"),
            "metrics": extra.get("metrics", {}),
        }

    @task
    def check_version(info: dict, observed: dict) -> dict:
        """Read the dataset as of the event's version and summarise it."""
        from lance_ops_airflow.operators.hooks import LanceHook

        hook = LanceHook(info.get("lance_conn_id"))
        version = info.get("version") or observed["version"]
        ds = hook.open_dataset(info["uri"], version=version)
        latest = hook.open_dataset(info["uri"])
        out = {"uri": info["uri"], "version": ds.version, "latest_version": latest.version,
               "rows": ds.count_rows(), "fragments": len(ds.get_fragments()),
               "ingested_rows": info.get("metrics", {}).get("num_rows")}
        if ds.version != version:
            raise ValueError(f"expected version {version}, read {ds.version}")
        return out

    info = ingest_event()
    observed = LanceNewVersionSensor(
        task_id="version_visible",
        dataset_uri="{{ ti.xcom_pull(task_ids='ingest_event')['uri'] }}",
        lance_conn_id="{{ ti.xcom_pull(task_ids='ingest_event')['lance_conn_id'] }}",
        baseline_version="{{ (ti.xcom_pull(task_ids='ingest_event')['version'] or 1) - 1 }}",
        deferrable=True,
        poke_interval=5,
        timeout=300,
    )
    info >> observed
    check_version(info, observed.output)
