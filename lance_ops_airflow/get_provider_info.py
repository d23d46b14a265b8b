"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point.

Airflow (``ProvidersManager``) calls :func:`get_provider_info` in every component (api-server,
scheduler, dag-processor, triggerer, workers) without importing the hook: the Connections form of
the ``lance`` type (its extra fields, which of them are secrets, relabelled and hidden standard
fields) is declared here as data (``conn-fields`` / ``ui-field-behaviour``, the Airflow 3.2+ form;
hook methods building wtforms widgets are deprecated there). This module imports nothing of Airflow.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

#: the connection type the Lance hook registers
CONN_TYPE = "lance"
#: extra fields of a ``lance`` connection (stored in its extra JSON under these names)
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "region": {
        "label": "Region",
        "description": "S3 region, e.g. us-east-1",
        "schema": {"type": ["string", "null"]},
    },
    "endpoint": {
        "label": "Endpoint URL",
        "description": "S3-compatible endpoint (MinIO, Ceph, LocalStack); empty for AWS S3",
        "schema": {"type": ["string", "null"]},
    },
    "session_token": {
        "label": "Session token",
        "description": "temporary credentials' session token (kept secret like the keys)",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "allow_http": {
        "label": "Allow HTTP",
        "description": "allow a plain-http endpoint (on by default for http:// endpoints)",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "base_uri": {
        "label": "Base URI",
        "description": "prefix for relative dataset URIs, e.g. s3://bucket/lance",
        "schema": {"type": ["string", "null"]},
    },
    "storage_options": {
        "label": "Extra storage options (JSON)",
        "description": 'any other lance-ops storage options, e.g. {"virtual_hosted_style_request": "false"}',
        "schema": {"type": ["string", "null"]},
    },
}
#: how the standard connection fields show in the form
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "host"],
    "relabeling": {"login": "Access key ID", "password": "Secret access key"},
    "placeholders": {"login": "AKIA...", "extra": '{"storage_options": {}}'},
}

HOOK = "lance_ops_airflow.operators.hooks.LanceHook"
OPERATOR_MODULES = ["lance_ops_airflow.operators.lance", "lance_ops_airflow.operators.indices",
                    "lance_ops_airflow.operators.spark", "lance_ops_airflow.operators.report",
                    "lance_ops_airflow.operators.merge"]
SENSOR_MODULES = ["lance_ops_airflow.sensors.lance"]
TRIGGER_MODULES = ["lance_ops_airflow.sensors.triggers"]
INTEGRATION = "Lance"


def _version() -> str:
    """The installed distribution's version (read from its metadata: importing lance_ops is not needed)."""
    try:
        return version("lance-ops")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0+unknown"


def get_provider_info() -> dict[str, Any]:
    """Describe the Lance provider: package, versions, connection type, operators, sensors, triggers."""
    return {
        "package-name": "lance-ops",
        "name": "Lance",
        "description": "Lance datasets in Airflow: Spark ingest, upserts, compaction, index upkeep, cleanup, verify, "
                       "deferrable version, maintenance and unindexed-rows sensors (pure-Python Lance format).",
        "versions": [_version()],
        "integrations": [{"integration-name": INTEGRATION, "external-doc-url": "https://lancedb.github.io/lance/",
                          "tags": ["software"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["lance_ops_airflow.operators.hooks"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": OPERATOR_MODULES}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": SENSOR_MODULES}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": TRIGGER_MODULES}],
        "connection-types": [{
            "connection-type": CONN_TYPE,
            "hook-class-name": HOOK,
            "hook-name": "Lance dataset storage",
            "conn-fields": CONN_FIELDS,
            "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
        }],
    }
