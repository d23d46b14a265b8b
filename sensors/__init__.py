"""Airflow sensors (and their triggers) for Lance datasets; see :mod:`sensors.lance`."""
from __future__ import annotations

from sensors.lance import LanceMaintenanceNeededSensor, LanceNewVersionSensor
from sensors.triggers import LanceMaintenanceNeededTrigger, LanceNewVersionTrigger

__all__ = [
    "LanceMaintenanceNeededSensor",
    "LanceMaintenanceNeededTrigger",
    "LanceNewVersionSensor",
    "LanceNewVersionTrigger",
]
