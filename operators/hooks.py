"""LanceHook: an Airflow connection -> (dataset URI, storage options).

Credentials and endpoints come from the connection, never from DAG code:

* ``lance_conn_id=None`` -> a local dataset; relative paths are made absolute, no options.
* ``conn_type="lance"`` (the type this provider registers, with its own Connections form; an
  ``aws`` connection works the same) -> S3 storage options:

  ==========================================  =========================================
  connection field                            storage option (pylance names)
  ==========================================  =========================================
  login                                       ``aws_access_key_id``
  password                                    ``aws_secret_access_key``
  extra ``session_token``/``aws_session_token``  ``aws_session_token``
  extra ``endpoint``/``endpoint_url``         ``endpoint``   (also ``host`` of the conn)
  extra ``region``/``region_name``            ``region``
  extra ``allow_http``                        ``allow_http`` ("true"/"false")
  extra ``storage_options``                   merged verbatim (any other lance_ops option; JSON)
  extra ``base_uri``                          prefix for dataset URIs that are not absolute
  ==========================================  =========================================

  Each extra may also carry the form's prefixed name (``extra__lance__region`` ...). The form
  itself is declared in :mod:`lance_ops_airflow.get_provider_info`.

For example ``AIRFLOW_CONN_LANCE_S3='{"conn_type": "lance", "login": "AKIA..", "password": "..",
"extra": {"endpoint": "http://127.0.0.1:9000", "region": "us-east-1", "allow_http": true,
"base_uri": "s3://bucket/lance"}}'`` lets a DAG say ``dataset_uri="events.lance"``.

Secrets never go into task arguments, trigger kwargs, XComs or asset extras: operators resolve the
connection at execute time, triggers at run time. For spark-submit, :meth:`spark_arguments` splits
options into non-secret ``--storage-option k=v`` arguments and secret environment variables
(``AWS_ACCESS_KEY_ID`` ...), which boto3 in the Spark driver and its local executors picks up.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from airflow.sdk import BaseHook

from lance_ops_airflow.get_provider_info import CONN_TYPE, UI_FIELD_BEHAVIOUR

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")

#: storage options that are secrets (every spelling lance_ops accepts), and the environment
#: variable boto3 reads each from
SECRET_OPTIONS = {
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_session_token": "AWS_SESSION_TOKEN",
    "session_token": "AWS_SESSION_TOKEN",
    "aws_token": "AWS_SESSION_TOKEN",
    "token": "AWS_SESSION_TOKEN",
}


def _mask_secrets(options: dict[str, str]) -> None:
    """Register the credential values with Airflow's secrets masker (task logs, rendered
    fields) and with lance_ops' log redaction; the access key id too, which Airflow does not
    treat as secret by itself."""
    from lance_ops.io import redact

    redact.protect(options)
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        return
    for key, value in options.items():
        if key.lower() in SECRET_OPTIONS and value:
            mask_secret(value)


def _redacted(options: dict) -> dict:
    """``options`` as a dict whose repr() masks credentials (imported here: parsing a DAG file
    must not import lance_ops.io, which brings boto3)."""
    from lance_ops.io.redact import RedactedOptions

    return RedactedOptions(options)


def _extra_value(extra: dict, *names: str) -> Any:
    """The first non-empty extra among ``names`` (each also under the form's ``extra__lance__`` prefix)."""
    for name in names:
        for key in (name, f"extra__{CONN_TYPE}__{name}"):
            value = extra.get(key)
            if value not in (None, ""):
                return value
    return None


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def normalize_conn_id(conn_id: Any) -> str | None:
    """``None``/""/"None"/"null" (what a rendered empty template gives) -> None."""
    if conn_id is None:
        return None
    text = str(conn_id).strip()
    return None if text in ("", "None", "none", "null") else text


def is_absolute_uri(uri: str) -> bool:
    return bool(_SCHEME_RE.match(uri)) or uri.startswith("/") or uri.lower().startswith("file:")


class LanceHook(BaseHook):
    """Resolve a Lance dataset URI and its storage options from an Airflow connection."""

    conn_name_attr = "lance_conn_id"
    default_conn_name = "lance_default"
    conn_type = CONN_TYPE
    hook_name = "Lance dataset storage"

    def __init__(self, lance_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lance_conn_id = normalize_conn_id(lance_conn_id)
        self._resolved: tuple[dict[str, str], str | None] | None = None

    # -- connection -> options --------------------------------------------------------------------
    def _load(self) -> tuple[dict[str, str], str | None]:
        if self._resolved is not None:
            return self._resolved
        if self.lance_conn_id is None:
            self._resolved = ({}, None)
            return self._resolved
        conn = self.get_connection(self.lance_conn_id)
        extra = conn.extra_dejson or {}
        options: dict[str, str] = {}
        if conn.login:
            options["aws_access_key_id"] = conn.login
        if conn.password:
            options["aws_secret_access_key"] = conn.password
        token = _extra_value(extra, "session_token", "aws_session_token")
        if token:
            options["aws_session_token"] = str(token)
        endpoint = _extra_value(extra, "endpoint", "endpoint_url") or (
            conn.host if conn.host and _SCHEME_RE.match(conn.host) else None
        )
        if endpoint:
            options["endpoint"] = str(endpoint)
        region = _extra_value(extra, "region", "region_name")
        if region:
            options["region"] = str(region)
        allow_http = _extra_value(extra, "allow_http")
        if allow_http is not None:
            options["allow_http"] = "true" if _truthy(allow_http) else "false"
        elif endpoint and str(endpoint).startswith("http://"):
            options["allow_http"] = "true"
        more = _extra_value(extra, "storage_options") or {}
        if isinstance(more, str):
            try:
                more = json.loads(more)
            except ValueError as exc:
                raise ValueError(f"connection {self.lance_conn_id!r}: extra storage_options is not JSON: {exc}") from None
        if not isinstance(more, dict):
            raise ValueError(f"connection {self.lance_conn_id!r}: extra storage_options must be a JSON object")
        options.update({str(k): str(v) for k, v in more.items()})
        _mask_secrets(options)
        base_uri = _extra_value(extra, "base_uri", "root")
        self._resolved = (_redacted(options), str(base_uri) if base_uri else None)
        return self._resolved

    def get_storage_options(self) -> dict[str, str]:
        """lance_ops / pylance storage options for the connection ({} for local datasets)."""
        return _redacted(self._load()[0])  # a dict whose repr() masks the credentials

    def resolve_uri(self, dataset_uri: str) -> str:
        """The full dataset URI: absolute URIs as given, relative ones under ``base_uri`` (or cwd)."""
        uri = str(dataset_uri or "").strip()
        if not uri:
            raise ValueError("dataset_uri is empty: pass a dataset path or URI (e.g. -c '{\"dataset_uri\": ...}')")
        if is_absolute_uri(uri):
            return uri
        base = self._load()[1]
        if base:
            return base.rstrip("/") + "/" + uri.lstrip("/")
        return os.path.abspath(uri)

    def resolve(self, dataset_uri: str) -> tuple[str, dict[str, str]]:
        """``(uri, storage_options)`` for ``dataset_uri``."""
        return self.resolve_uri(dataset_uri), self.get_storage_options()

    def open_dataset(self, dataset_uri: str, version: int | str | None = None):
        """``lance_ops.dataset(...)`` for the resolved URI with the connection's options."""
        import lance_ops

        uri, options = self.resolve(dataset_uri)
        return lance_ops.dataset(uri, version=version, storage_options=options)

    def spark_arguments(self) -> tuple[list[str], dict[str, str]]:
        """``(["--storage-option", "k=v", ...], {secret env vars})`` for a spark-submit job."""
        args: list[str] = []
        env: dict[str, str] = {}
        for key, value in sorted(self.get_storage_options().items()):
            if key.lower() in SECRET_OPTIONS:
                env[SECRET_OPTIONS[key.lower()]] = value
            else:
                args += ["--storage-option", f"{key}={value}"]
        return args, env

    def get_conn(self) -> tuple[dict[str, str], str | None]:
        return self._load()

    def test_connection(self) -> tuple[bool, str]:
        try:
            self._load()
        except Exception as exc:  # noqa: BLE001 - reported to the UI
            return False, str(exc)
        return True, "connection resolved"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The Connections form's standard fields (hidden, relabelled), for Airflow before 3.2.

        Airflow 3.2+ reads the same data from the provider info (``ui-field-behaviour``) without
        importing the hook.
        """
        return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}
