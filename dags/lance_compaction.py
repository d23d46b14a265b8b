"""
### lance_compaction: compact one Lance dataset on demand

Manual DAG with validated Params. `compaction.plan` plans in-process; a plan rewriting at most
`spark_threshold_rows` rows is executed right there, a bigger one by `compaction.spark_rewrite`
(spark-submit `lance_ops/spark/compact.py --stage-only`) and committed by `compaction.commit`,
whose XCom is the compaction's metrics either way. `dry_run` reports the plan and changes nothing.

    airflow dags test lance_compaction -c '{"dataset_uri": "/data/events.lance", "target_rows": 1000000}'
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from lance_ops_airflow.params import conn_id_param, dataset_uri_param

from lance_ops_airflow.operators import lance_compaction_group

with DAG(
    dag_id="lance_compaction",
    description="Compact a Lance dataset (in-process or on Spark), exactly once per run",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    tags=["lance", "maintenance", "spark"],
    doc_md=__doc__,
    params={
        "dataset_uri": dataset_uri_param(),
        "lance_conn_id": conn_id_param(),
        "target_rows": Param(1024 * 1024, type="integer", minimum=1, maximum=1 << 31, title="Target rows per fragment",
                             description="compaction writes fragments of about this many rows"),
        "dry_run": Param(False, type="boolean", title="Dry run", description="report the plan only; change nothing"),
        "max_rows_per_file": Param(None, type=["null", "integer"], minimum=1, maximum=1 << 31, title="Max rows per file",
                                   description="cap on rows per written data file (empty: target rows)"),
        "materialize_deletions": Param(True, type="boolean", title="Materialize deletions",
                                       description="also rewrite fragments with many deleted rows"),
        "materialize_deletions_threshold": Param(
            0.1, type="number", minimum=0, maximum=1, title="Materialize deletions threshold",
            description="fragments with a larger share of deleted rows are rewritten without them (0-1)"),
        "max_source_fragments": Param(None, type=["null", "integer"], minimum=1, maximum=1_000_000,
                                      title="Max source fragments",
                                      description="compact at most this many fragments in one run (empty: all)"),
        "spark_threshold_rows": Param(5_000_000, type=["null", "integer"], minimum=0, maximum=1 << 40,
                                      title="Spark threshold (rows)",
                                      description="plans rewriting more rows run on Spark (empty: never Spark)"),
    },
) as dag:
    lance_compaction_group(
        "compaction",
        dataset_uri="{{ params.dataset_uri }}",
        lance_conn_id="{{ params.lance_conn_id }}",
        target_rows_per_fragment="{{ params.target_rows }}",
        max_rows_per_file="{{ params.max_rows_per_file }}",
        materialize_deletions="{{ params.materialize_deletions }}",
        materialize_deletions_threshold="{{ params.materialize_deletions_threshold }}",
        max_source_fragments="{{ params.max_source_fragments }}",
        dry_run="{{ params.dry_run }}",
        spark_threshold_rows="{{ params.spark_threshold_rows }}",
        spark_conf={"spark.ui.enabled": "false"},
    )
