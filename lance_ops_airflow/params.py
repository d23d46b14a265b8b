"""DAG Params shared by the example DAGs (and any DAG on Lance datasets): each with a title, a
description, a type and bounds, so the trigger form explains and checks every field.

Durations are strings such as ``14d``, ``12h``, ``1d12h`` (checked by the form's pattern, parsed
by :func:`lance_ops_airflow.operators.base.parse_duration`, which names the field on a bad value).
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from lance_ops_airflow.operators.base import DURATION_PATTERN


def dataset_uri_param(default: str = "", *, description: str | None = None) -> Param:
    """A required dataset path or URI: no default when ``default`` is empty (the form asks for it)."""
    extra: dict[str, Any] = {"default": default} if default else {}
    return Param(**extra, type="string", minLength=1, maxLength=2048, title="Dataset URI",
                 description=description or "dataset path or URI (s3://bucket/x.lance, /data/x.lance; "
                                            "relative: under the connection's base_uri)")


def conn_id_param(default: str | None = None) -> Param:
    """The Airflow connection holding the storage credentials (empty for local paths)."""
    return Param(default, type=["null", "string"], maxLength=250, title="Lance connection id",
                 description="Airflow connection (type lance or aws) with the S3 credentials; empty for local paths")


def duration_param(default: str, *, title: str, description: str) -> Param:
    """A duration entered as ``14d``, ``12h``, ``30m``, ``45s`` or combined (``1d12h``)."""
    return Param(default, type="string", pattern=DURATION_PATTERN, minLength=2, maxLength=32, title=title,
                 description=description)
