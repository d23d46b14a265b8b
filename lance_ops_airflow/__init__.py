"""The Lance provider for Apache Airflow (installed with ``pip install lance-ops[airflow]``).

Subpackages: :mod:`lance_ops_airflow.operators` (hook, operators, task groups),
:mod:`lance_ops_airflow.sensors` (deferrable sensors and their triggers) and
:mod:`lance_ops_airflow.example_dags`. In the repository they are the top-level ``operators/``,
``sensors/`` and ``dags/`` folders, mapped here at install time (ADR 0018).
"""
from __future__ import annotations
