"""The built wheel, installed non-editable into fresh virtualenvs, one extra each (issue 21,
acceptance items 1 and 2): ``[airflow]`` registers the provider (``airflow providers list``, the
``lance`` connection type and its form) and its example DAGs load in a DagBag; ``[spark]`` runs a
real ingest with ``spark-submit``; ``[test]`` runs a small test file. Nothing is imported from the
repository (no ``PYTHONPATH``, a temporary working directory).
"""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.packaging.conftest import REPO, clean_env, run

pytestmark = pytest.mark.slow

PROVIDER_CHECK = textwrap.dedent("""
    import json, pathlib, sysconfig
    from airflow.providers_manager import ProvidersManager
    from airflow.dag_processing.dagbag import DagBag

    pm = ProvidersManager()
    info = pm.providers["lance-ops"]
    hook = pm.hooks["lance"]
    widgets = {w.field_name: w.is_sensitive for k, w in pm.connection_form_widgets.items()
               if k.startswith("extra__lance__")}
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    import lance_ops_airflow.example_dags as examples
    folder = pathlib.Path(examples.__file__).parent
    bag = DagBag(dag_folder=str(folder))
    print(json.dumps({
        "version": info.version,
        "info": info.data,
        "hook": [hook.hook_class_name, hook.connection_id_attribute_name, hook.hook_name],
        "widgets": widgets,
        "behaviour": pm.field_behaviours.get("lance"),
        "top_level": sorted(p.name for p in site.iterdir()),
        "examples_in_site_packages": folder.is_relative_to(site),
        "dags": sorted(bag.dag_ids),
        "import_errors": {str(k): v for k, v in bag.import_errors.items()},
    }))
""")


@pytest.mark.venv_extra("airflow")
def test_airflow_extra_registers_the_provider_and_loads_the_dags(venvs, tmp_path):
    bin_dir = venvs["airflow"]
    env = clean_env(AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    listed = run([str(bin_dir / "airflow"), "providers", "list", "-o", "json"], cwd=tmp_path, env=env).stdout
    providers = json.loads(listed[listed.index("["):])
    assert {"package_name": "lance-ops", "version": "0.1.0"}.items() <= next(
        p for p in providers if p["package_name"] == "lance-ops").items()

    out = json.loads(run([str(bin_dir / "python"), "-c", PROVIDER_CHECK], cwd=tmp_path, env=env).stdout.splitlines()[-1])
    assert out["version"] == "0.1.0" and out["info"]["versions"] == ["0.1.0"]
    assert out["hook"] == ["lance_ops_airflow.operators.hooks.LanceHook", "lance_conn_id", "Lance dataset storage"]
    (conn,) = out["info"]["connection-types"]
    assert conn["connection-type"] == "lance"
    # the form: region, endpoint, secrets as password fields, extra storage options
    assert out["widgets"] == {"region": False, "endpoint": False, "session_token": True, "allow_http": False,
                              "base_uri": False, "storage_options": False}
    assert out["behaviour"]["relabeling"] == {"login": "Access key ID", "password": "Secret access key"}
    assert {"schema", "port", "host"} <= set(out["behaviour"]["hidden_fields"])
    modules = {key: [m for entry in out["info"][key] for m in entry["python-modules"]]
               for key in ("operators", "sensors", "triggers", "hooks")}
    assert modules == {
        "operators": ["lance_ops_airflow.operators.lance", "lance_ops_airflow.operators.indices",
                      "lance_ops_airflow.operators.spark", "lance_ops_airflow.operators.report",
                      "lance_ops_airflow.operators.merge"],
        "sensors": ["lance_ops_airflow.sensors.lance"],
        "triggers": ["lance_ops_airflow.sensors.triggers"],
        "hooks": ["lance_ops_airflow.operators.hooks"],
    }
    # one namespaced import path: no generic top-level package in site-packages
    assert {"lance_ops", "lance_ops_airflow"} <= set(out["top_level"])
    assert not {"operators", "sensors", "dags", "example_dags"} & set(out["top_level"])
    # the example DAGs ship with the package and load without the repository
    assert out["examples_in_site_packages"]
    assert out["import_errors"] == {}
    assert out["dags"] == ["lance_compaction", "lance_ingest", "lance_ingest_downstream", "lance_maintenance"]


@pytest.mark.venv_extra("spark")
def test_spark_extra_runs_an_ingest_with_spark_submit(venvs, tmp_path):
    import lance

    if shutil.which("java") is None:
        pytest.skip("a JVM is needed for spark-submit")
    bin_dir = venvs["spark"]
    source = tmp_path / "raw"
    source.mkdir()
    table = pa.table({"id": pa.array(range(3000), pa.int64()), "name": pa.array([f"n{i}" for i in range(3000)])})
    for i in range(3):
        pq.write_table(table.slice(i * 1000, 1000), source / f"part-{i}.parquet")
    uri = str(tmp_path / "events.lance")
    job = run([str(bin_dir / "python"), "-c", "import lance_ops.spark.ingest as m; print(m.__file__)"],
              cwd=tmp_path).stdout.strip()
    env = clean_env(PATH=f"{bin_dir}:{clean_env()['PATH']}", SPARK_LOCAL_IP="127.0.0.1",
                    PYSPARK_PYTHON=str(bin_dir / "python"), PYSPARK_DRIVER_PYTHON=str(bin_dir / "python"))
    run([str(bin_dir / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false", job,
         "--path", str(source), "--uri", uri, "--mode", "create"], cwd=tmp_path, env=env)
    got = lance.dataset(uri).to_table().sort_by("id")
    assert got.select(["id", "name"]) == table


@pytest.mark.venv_extra("test")
def test_test_extra_runs_a_test_file(venvs, tmp_path):
    bin_dir = venvs["test"]
    work = tmp_path / "work"
    shutil.copytree(REPO / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    proc = run([str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_api.py"],
               cwd=work, env=clean_env())
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    where = run([str(bin_dir / "python"), "-c", "import lance_ops; print(lance_ops.__file__)"], cwd=work).stdout
    assert str(bin_dir.parent) in where  # the installed wheel, not the repository
