"""The DAG folder parses cleanly, cheaply, and its DAGs have the promised shape and Params."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.airflow import DAGS, REPO, TEST_DAGS


@pytest.fixture(scope="module")
def dagbag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors_and_all_dags(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {"lance_maintenance", "lance_ingest", "lance_ingest_downstream", "lance_compaction"}


def test_test_dags_parse(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(TEST_DAGS))
    assert bag.import_errors == {}
    assert {"lance_test_retry", "lance_test_sensors"} <= set(bag.dag_ids)


def test_parsing_is_light(airflow_home):
    """Parsing the DAG files imports neither pyspark nor lance_ops (nor pyarrow/boto3)."""
    code = textwrap.dedent(f"""
        import runpy, sys, json
        for name in ("lance_maintenance", "lance_ingest", "lance_compaction"):
            runpy.run_path({str(DAGS)!r} + "/" + name + ".py")
        heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"pyspark", "lance_ops", "pyarrow", "boto3", "lance"}})
        print(json.dumps(heavy))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_maintenance_dag_shape(dagbag):
    dag = dagbag.get_dag("lance_maintenance")
    assert dag.catchup is False
    assert dag.schedule is None  # no LANCE_OPS_DATASET_URI in the tests' environment: not scheduled
    order = ["maintenance_needed", "compaction.plan", "compaction.spark_rewrite", "compaction.commit",
             "materialize_deletions", "optimize_indices", "rebuild_statistics", "refresh_row_id_index", "verify",
             "cleanup", "health", "run_report"]
    assert set(dag.task_dict) == set(order)
    assert dag.task_dict["materialize_deletions"].upstream_task_ids == {"compaction.commit"}
    # index upkeep after compaction and materialization, before statistics (issue 22)
    assert dag.task_dict["optimize_indices"].upstream_task_ids == {"materialize_deletions"}
    assert dag.task_dict["rebuild_statistics"].upstream_task_ids == {"optimize_indices"}
    assert dag.task_dict["optimize_indices"].skip_when_nothing_to_do is False
    assert dag.task_dict["compaction.commit"].upstream_task_ids == {"compaction.plan", "compaction.spark_rewrite"}
    assert dag.task_dict["cleanup"].upstream_task_ids == {"verify"}
    assert dag.task_dict["health"].upstream_task_ids == {"cleanup"}
    assert dag.task_dict["run_report"].upstream_task_ids == {"health"}
    # never stalls: a failed step does not stop the later ones; verify still gates cleanup
    rules = {t: getattr(dag.task_dict[t].trigger_rule, "value", dag.task_dict[t].trigger_rule) for t in order}
    for t in ("materialize_deletions", "optimize_indices", "rebuild_statistics", "refresh_row_id_index", "verify",
              "health"):
        assert rules[t] == "none_skipped", (t, rules[t])
    assert rules["cleanup"] == "all_success" and rules["run_report"] == "all_done"
    sensor = dag.task_dict["maintenance_needed"]
    assert sensor.deferrable and sensor.soft_fail
    for name in ("dataset_uri", "lance_conn_id", "small_fragments_threshold", "deleted_ratio_threshold",
                 "versions_to_clean_threshold", "cleanup_older_than", "sensor_timeout", "dry_run",
                 "optimize_indices", "unindexed_rows_threshold_pct", "num_indices_to_merge", "index_names"):
        assert name in dag.params


def test_ingest_asset_and_downstream_schedule(dagbag):
    from airflow.sdk import Asset, AssetAlias

    ingest = dagbag.get_dag("lance_ingest")
    commit = ingest.task_dict["ingest.commit"]
    assets = [o for o in commit.outlets if isinstance(o, Asset)]
    assert [a.uri.rstrip("/") for a in assets] == ["lance://ingest"]
    assert any(isinstance(o, AssetAlias) and o.name == "lance_ops_datasets" for o in commit.outlets)
    downstream = dagbag.get_dag("lance_ingest_downstream")
    assert [a.uri.rstrip("/") for a in downstream.schedule] == ["lance://ingest"]


def test_compaction_params_are_validated(dagbag):
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.get_dag("lance_compaction")

    def validated(conf):
        params = copy.deepcopy(dag.params)
        params.update(conf)
        return params.validate()

    ok = validated({"dataset_uri": "/x.lance", "target_rows": 10, "dry_run": True})
    assert ok["target_rows"] == 10 and ok["dry_run"] is True
    for bad in ({"dataset_uri": ""}, {"dataset_uri": "/x", "target_rows": 0},
                {"dataset_uri": "/x", "dry_run": "maybe"}, {"dataset_uri": "/x", "target_rows": "ten"}, {}):
        with pytest.raises(ParamValidationError):
            validated(bad)


# -- Params (issue 21, acceptance item 3) --------------------------------------------------------------
#: the bound keywords a Param of each JSON type must carry
BOUNDS = {"integer": {"minimum", "maximum"}, "number": {"minimum", "maximum"}, "boolean": set(),
          "array": {"minItems", "maxItems", "items"}}


def test_every_param_has_title_description_type_and_bounds(dagbag):
    seen = 0
    for dag in dagbag.dags.values():
        for name in dag.params:
            param = dag.params.get_param(name)
            schema = param.schema
            where = f"{dag.dag_id}.{name}"
            assert schema.get("title") and param.description, f"{where}: no title/description"
            kinds = schema.get("type")
            assert kinds, f"{where}: no type"
            kinds = [kinds] if isinstance(kinds, str) else kinds
            for kind in set(kinds) - {"null"}:
                if kind == "string":
                    assert {"maxLength", "enum"} & set(schema), f"{where}: a string needs maxLength or enum"
                else:
                    assert BOUNDS[kind] <= set(schema), f"{where}: {kind} needs {BOUNDS[kind]}"
                if kind == "array" and schema["items"].get("type") == "string":
                    assert "maxLength" in schema["items"], f"{where}: string items need maxLength"
            seen += 1
    assert seen >= 30


def _validated(dag, conf):
    import copy

    params = copy.deepcopy(dag.params)
    params.update(conf)
    return params.validate()


def test_maintenance_params_reject_bad_values_and_take_durations(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.get_dag("lance_maintenance")
    ok = _validated(dag, {"dataset_uri": "/x.lance", "cleanup_older_than": "1d12h", "sensor_timeout": "10m"})
    assert ok["cleanup_older_than"] == "1d12h" and ok["sensor_timeout"] == "10m"
    assert dag.params["cleanup_older_than"] == "14d" and dag.params["sensor_timeout"] == "0s"
    for bad in ({}, {"dataset_uri": ""}, {"dataset_uri": "/x", "cleanup_older_than": "1209600"},
                {"dataset_uri": "/x", "cleanup_older_than": "14 days"}, {"dataset_uri": "/x", "small_fragments_threshold": -3},
                {"dataset_uri": "/x", "deleted_ratio_threshold": 1.5}, {"dataset_uri": "/x", "sensor_timeout": "-1h"}):
        with pytest.raises(ParamValidationError):
            _validated(dag, bad)


def test_scheduled_only_with_a_configured_dataset(airflow_home, tmp_path):
    """Without LANCE_OPS_DATASET_URI the maintenance DAG has no schedule (no runs, so no failed
    ones) and dataset_uri has no default; with it, it runs daily on that dataset."""
    code = textwrap.dedent(f"""
        import json, runpy
        ns = runpy.run_path({str(DAGS)!r} + "/lance_maintenance.py")
        dag = ns["dag"]
        print(json.dumps([dag.schedule, dag.params.get_param("dataset_uri").has_value and dag.params["dataset_uri"]]))
    """)
    results = []
    for value in ("", str(tmp_path / "events.lance")):
        env = {k: v for k, v in os.environ.items() if k != "LANCE_OPS_DATASET_URI"}
        env["LANCE_OPS_DATASET_URI"] = value
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             cwd=str(REPO), env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert results == [[None, False], ["@daily", str(tmp_path / "events.lance")]]


def test_durations_parse_with_a_clear_error():
    from lance_ops_airflow.operators.base import parse_duration

    assert parse_duration("14d") == 14 * 86400
    assert parse_duration("12h") == 12 * 3600
    assert parse_duration("1d12h") == 36 * 3600
    assert parse_duration("0s") == 0 and parse_duration(90) == 90 and parse_duration("") is None
    with pytest.raises(ValueError, match=r"older_than: '14 days' is not a duration; use a number with a unit"):
        parse_duration("14 days", "older_than")
    with pytest.raises(ValueError, match=r"older_than: -5 is negative"):
        parse_duration(-5, "older_than")


def test_every_dag_survives_serialization(dagbag):
    """Operators and their fields round-trip through Airflow's DAG serialization."""
    from airflow.serialization.serialized_objects import DagSerialization

    checked = 0
    for dag in dagbag.dags.values():
        data = DagSerialization.to_dict(dag)
        json.dumps(data)
        back = DagSerialization.from_dict(data)
        assert set(back.task_dict) == set(dag.task_dict)
        for task_id, task in dag.task_dict.items():
            if not type(task).__module__.startswith("lance_ops_airflow."):
                continue
            restored = back.task_dict[task_id]
            assert restored.task_type == type(task).__name__
            for name in task.template_fields:
                want = getattr(task, name)
                got = getattr(restored, name, None)
                if isinstance(want, tuple):
                    want = list(want)
                assert got == want, (dag.dag_id, task_id, name, got, want)
            checked += 1
    assert checked >= 14


def test_ingest_data_storage_version_param_reaches_the_job(dagbag):
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.get_dag("lance_ingest")
    args = dag.task_dict["ingest.spark_stage"].job_args
    assert args[args.index("--data-storage-version") + 1] == "{{ params.data_storage_version }}"
    for good in ("2.0", "2.1", "2.2", "stable", "legacy", None):  # None: the library's default
        params = copy.deepcopy(dag.params)
        params.update({"dataset_uri": "/x.lance", "source_path": "/raw", "data_storage_version": good})
        assert params.validate()["data_storage_version"] == good
    for bad in ("3.0", "", 2.2):
        params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError, match="data_storage_version"):
            params.update({"dataset_uri": "/x.lance", "source_path": "/raw", "data_storage_version": bad})
            params.validate()
