"""Airflow sensors (and their triggers) for Lance datasets; see :mod:`lance_ops_airflow.sensors.lance`."""
from __future__ import annotations

from lance_ops_airflow.sensors.lance import LanceMaintenanceNeededSensor, LanceNewVersionSensor, LanceUnindexedRowsSensor
from lance_ops_airflow.sensors.triggers import (
    LanceMaintenanceNeededTrigger,
    LanceNewVersionTrigger,
    LanceUnindexedRowsTrigger,
)

__all__ = [
    "LanceMaintenanceNeededSensor",
    "LanceMaintenanceNeededTrigger",
    "LanceNewVersionSensor",
    "LanceNewVersionTrigger",
    "LanceUnindexedRowsSensor",
    "LanceUnindexedRowsTrigger",
]
