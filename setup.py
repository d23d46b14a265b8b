"""Package list for lance-ops (metadata lives in pyproject.toml).

The Airflow tree keeps its repository folders (``operators/``, ``sensors/``, ``dags/``) but installs
under one namespaced import path, ``lance_ops_airflow`` (ADR 0018): setuptools maps each folder to
its subpackage, so site-packages holds no generic top-level ``operators`` or ``sensors`` package.
"""
from setuptools import find_packages, setup

AIRFLOW_TREE = {
    "lance_ops_airflow.operators": "operators",
    "lance_ops_airflow.sensors": "sensors",
    "lance_ops_airflow.example_dags": "dags",
}

setup(
    packages=[*find_packages(include=["lance_ops", "lance_ops.*"]), "lance_ops_airflow", *AIRFLOW_TREE],
    package_dir=AIRFLOW_TREE,
)
