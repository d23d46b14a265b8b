"""What every Lance operator shares: idempotency keys, asset events, lineage, value coercion.

Airflow 3 rules kept here: ``__init__`` only stores arguments (no I/O, no lance_ops import), all
work happens in ``execute``, every constructor argument is a plain JSON-able value so the operator
survives DAG serialization, and the dataset URI / connection id are templated.

Idempotency: a task's commits carry the key ``airflow:<dag_id>:<run_id>:<scope>:<map_index>``
(``scope`` is the task id, or the task-group id when a Spark task and a commit task share one
staged result). ``try_number`` is deliberately not part of it: a retried or cleared task finds
the version its earlier try committed and commits nothing new.

Asset events: an operator whose dataset URI is known when the DAG is parsed puts
``Asset(<uri>)`` in its ``outlets``; one with a templated URI (the usual case: ``{{
params.dataset_uri }}``) puts ``AssetAlias("lance_ops_datasets")`` there and, at run time, adds an
event for ``Asset(<resolved uri>)`` through the alias. Every event carries ``extra = {"uri",
"version", "operation", "metrics"}``. Alias events are only added when the dataset changed (not on
dry runs or no-ops), so asset-scheduled DAGs are not woken up for nothing; static ``Asset`` outlets
always get an event from Airflow, with ``extra["changed"]`` telling the two apart.

Errors: :func:`classify_failure` logs the cause as ONE error line (``"<ErrorClass>: <message>"``,
the first error line of the task log) and turns errors that a retry cannot fix (missing dataset
or input, schema mismatch, bad arguments, corrupt files, refused stages; see
``lance_ops.errors.is_retryable``) into ``AirflowFailException``, so the task fails at once.
Retryable ones (storage/network errors, lost commit races, an unknown commit outcome of a
keyed commit) are re-raised unchanged and keep the task's ``retries``.
"""
from __future__ import annotations

import json
import os
import re
import time
from datetime import timedelta
from typing import Any, Iterable, Mapping, NoReturn

from airflow.sdk import Asset, AssetAlias, BaseOperator

from lance_ops_airflow.operators.hooks import LanceHook, is_absolute_uri, normalize_conn_id
from lance_ops_airflow.operators.lineage import openlineage_names, operator_lineage
from lance_ops_airflow.operators.summary import summary_lines

#: the alias through which operators with templated dataset URIs emit their asset events
LANCE_ASSET_ALIAS = "lance_ops_datasets"

# -- small value helpers (templated fields arrive as strings unless the DAG renders native objects)
def as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, (int, float)):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on", "y"):
        return True
    if text in ("0", "false", "no", "off", "n", "", "none", "null"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def as_optional_int(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    if isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    return int(float(value)) if isinstance(value, str) and "." in value else int(value)


def as_optional_float(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    return float(value)


def as_int(value: Any, name: str) -> int:
    out = as_optional_int(value)
    if out is None:
        raise ValueError(f"{name} is required")
    return out


#: seconds per duration unit (``14d``, ``12h``, ``30m``, ``45s``, ``2w``; ``1d12h`` combines them)
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
#: JSON-schema pattern of a duration string, for DAG Params (the trigger form checks it)
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?\s*[smhdwSMHDW]\s*)+$"


def parse_duration(value: Any, name: str = "duration") -> float | None:
    """Seconds of a duration: ``"14d"``, ``"12h"``, ``"1d12h"``, a number of seconds or a timedelta.

    ``None``/``""`` -> None. Anything else (a negative number, ``"14 days"``, ``"2x"``) raises a
    ValueError naming ``name``, the value and the accepted form.
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
        seconds = float(value)
    elif isinstance(value, str) and re.fullmatch(DURATION_PATTERN, value):
        seconds = sum(float(n) * DURATION_UNITS[u.lower()] for n, u in _DURATION_PART.findall(value))
    else:
        raise ValueError(f"{name}: {value!r} is not a duration; use a number with a unit "
                         "(s, m, h, d, w), e.g. 14d, 12h, 30m, 1d12h")
    if seconds < 0:
        raise ValueError(f"{name}: {value!r} is negative; a duration is 0 or more (e.g. 0s, 14d)")
    return seconds


def skip(log: Any, reason: str) -> NoReturn:
    """Log why the task is skipped (an INFO line ``skipped: <reason>``), then skip it."""
    from airflow.sdk.exceptions import AirflowSkipException

    log.info("skipped: %s", reason)
    raise AirflowSkipException(reason)


def jsonable(value: Any) -> Any:
    """A JSON round trip (datetimes, numpy numbers ... become strings/numbers) for XCom and extras."""
    return json.loads(json.dumps(value, default=_json_default))


#: lists longer than this in a result (plans, file lists) are cut, so XComs and asset extras stay small
MAX_LIST_ITEMS = 50


def trim_lists(value: Any, limit: int = MAX_LIST_ITEMS) -> Any:
    """``value`` with every list cut to ``limit`` items (a final string says how many were left out)."""
    if isinstance(value, dict):
        return {k: trim_lists(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        head = [trim_lists(v, limit) for v in value[:limit]]
        if len(value) > limit:
            head.append(f"... {len(value) - limit} more")
        return head
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    return str(value)


# -- idempotency --------------------------------------------------------------------------------
def idempotency_key(context: Mapping[str, Any], scope: str | None = None) -> str:
    """The commit key of this task instance: dag_id, run_id, task (or group) id, map_index."""
    from lance_ops.table.commit.staging import sanitize_key

    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    if map_index is None:
        map_index = -1
    raw = f"airflow:{ti.dag_id}:{ti.run_id}:{scope or ti.task_id}:{map_index}"
    return sanitize_key(raw)


def find_committed(ds, key: str):
    """The ManifestFile an earlier try committed with ``key`` (None if there is none)."""
    from lance_ops.table.commit.idempotency import find_committed as find_in_ledger

    return find_in_ledger(ds.store, ds.base, key)


# -- error classification -----------------------------------------------------------------------
def classify_failure(log: Any, exc: BaseException, *, idempotent: bool = False) -> NoReturn:
    """Log ``exc``'s cause as one error line, then fail at once (not retryable) or re-raise it.

    Airflow's own exceptions (skip, sensor timeout, fail) pass through without a line.
    ``idempotent``: the step finds its earlier commit by key, so an unknown commit outcome may
    be retried.
    """
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from lance_ops.errors import error_line, is_retryable

    if isinstance(exc, AirflowException):
        raise exc
    line = error_line(exc)
    if is_retryable(exc, idempotent=idempotent):
        log.error("%s (retryable)", line)
        raise exc
    log.error("%s", line)
    raise AirflowFailException(f"{line} (not retryable)") from exc


# -- assets and lineage ---------------------------------------------------------------------------
def dataset_asset_uri(uri: str) -> str:
    """The Airflow asset URI of a dataset: ``file:///abs/path`` locally, the URI itself on S3."""
    text = str(uri)
    if text.lower().startswith("file:"):
        return text
    if "://" in text:
        return text.rstrip("/")
    return "file://" + os.path.abspath(text)


def _static_uri(dataset_uri: Any, lance_conn_id: Any) -> str | None:
    """The dataset URI when it is known at parse time (no template, absolute), else None."""
    if not isinstance(dataset_uri, str) or "{{" in dataset_uri or "{%" in dataset_uri:
        return None
    if not is_absolute_uri(dataset_uri):
        return None
    if isinstance(lance_conn_id, str) and "{{" in lance_conn_id:
        return None
    return dataset_asset_uri(dataset_uri)


class LanceBaseOperator(BaseOperator):
    """Base for operators acting on one Lance dataset (``dataset_uri`` via ``lance_conn_id``).

    :param dataset_uri: dataset path or URI; relative names are resolved under the connection's
        ``base_uri``. (templated)
    :param lance_conn_id: Airflow connection with the storage credentials; None for local
        datasets. (templated)
    :param emit_asset_event: emit an Asset event for the dataset (see module docs).
    :param idempotency_scope: the part of the idempotency key naming the step (default: task id).
    """

    template_fields: tuple[str, ...] = ("dataset_uri", "lance_conn_id")
    ui_color = "#d7ecff"
    #: name of the operation, used in results and asset extras
    operation = "lance"
    #: whether the dataset is also an input (lineage)
    reads_dataset = True
    #: whether a retry finds this step's earlier commit by its key (then an unknown commit
    #: outcome may be retried; see ``lance_ops.errors.is_retryable``)
    idempotent_retries = False

    def __init__(
        self,
        *,
        dataset_uri: str,
        lance_conn_id: str | None = None,
        emit_asset_event: bool = True,
        idempotency_scope: str | None = None,
        **kwargs: Any,
    ) -> None:
        outlets = list(kwargs.pop("outlets", None) or [])
        if emit_asset_event:
            static = _static_uri(dataset_uri, lance_conn_id)
            if static is not None:
                if not any(isinstance(o, Asset) and o.uri == static for o in outlets):
                    outlets.append(Asset(uri=static))
            elif not any(isinstance(o, AssetAlias) and o.name == LANCE_ASSET_ALIAS for o in outlets):
                outlets.append(AssetAlias(name=LANCE_ASSET_ALIAS))
        super().__init__(outlets=outlets, **kwargs)
        self.dataset_uri = dataset_uri
        self.lance_conn_id = lance_conn_id
        self.emit_asset_event = emit_asset_event
        self.idempotency_scope = idempotency_scope
        self._resolved_uri: str | None = None
        self._last_result: dict[str, Any] | None = None
        self._cancelled = False

    # -- helpers for subclasses -----------------------------------------------------------------
    def resolve(self) -> tuple[str, dict[str, str]]:
        hook = LanceHook(normalize_conn_id(self.lance_conn_id))
        uri, options = hook.resolve(self.dataset_uri)
        self._resolved_uri = uri
        return uri, options

    def open_dataset(self, uri: str, options: Mapping[str, str]):
        import lance_ops

        return lance_ops.dataset(uri, storage_options=dict(options))

    def key(self, context: Mapping[str, Any]) -> str:
        return idempotency_key(context, self.idempotency_scope)

    def run(self, context: Mapping[str, Any], uri: str, storage_options: dict[str, str], key: str) -> dict[str, Any]:
        """Do the work; return ``{"version", "changed", "metrics", ...}``."""
        raise NotImplementedError

    # -- the template method ----------------------------------------------------------------------
    def execute(self, context: Any) -> dict[str, Any]:
        started = time.monotonic()
        try:
            uri, options = self.resolve()
            key = self.key(context)
            self.log.info("%s on %s (idempotency key %s)", self.operation, uri, key)
            outcome = self.run(context, uri, options, key)
        except Exception as exc:  # noqa: BLE001 - classified: fail at once or keep the retries
            classify_failure(self.log, exc, idempotent=self.idempotent_retries)
        result = {
            "operation": outcome.pop("operation", self.operation),
            "uri": uri,
            "idempotency_key": key,
            "changed": bool(outcome.pop("changed", False)),
            "dry_run": bool(outcome.pop("dry_run", False)),
            "already_committed": bool(outcome.pop("already_committed", False)),
            **outcome,
        }
        result = trim_lists(jsonable(result))
        self._last_result = result
        self.emit_asset_events(context, uri, result)
        for line in summary_lines(result, seconds=time.monotonic() - started):
            self.log.info("%s", line)
        return result

    def emit_asset_events(self, context: Any, uri: str, result: Mapping[str, Any]) -> None:
        if not self.emit_asset_event:
            return
        extra = {
            "uri": uri,
            "version": result.get("version"),
            "operation": result.get("operation"),
            "metrics": result.get("metrics", {}),
            "changed": result.get("changed", False),
            "lance_conn_id": normalize_conn_id(self.lance_conn_id),
        }
        events = context["outlet_events"]
        asset_uri = dataset_asset_uri(uri)
        static_uris = set()
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                events[outlet].extra = dict(extra)
                static_uris.add(outlet.uri)
        if result.get("changed") and not result.get("dry_run") and asset_uri not in static_uris:
            for outlet in self.outlets:
                if isinstance(outlet, AssetAlias) and outlet.name == LANCE_ASSET_ALIAS:
                    events[outlet].add(Asset(uri=asset_uri), extra=dict(extra))

    def on_kill(self) -> None:
        """In-process lance_ops calls cannot be interrupted midway; nothing is committed after this.

        The flag is checked between steps; Airflow kills the process after its grace period, which
        at worst leaves uncommitted data files for cleanup to remove.
        """
        self._cancelled = True

    def check_cancelled(self) -> None:
        if self._cancelled:
            from airflow.sdk.exceptions import AirflowException

            raise AirflowException(f"{self.task_id}: killed before committing")

    # -- OpenLineage ------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[str]:
        """URIs of inputs other than the dataset itself (e.g. an ingested Parquet path)."""
        return []

    def get_openlineage_facets_on_complete(self, task_instance: Any = None) -> Any:
        """Inputs/outputs for OpenLineage; None when the OpenLineage provider is not installed.

        Datasets are named per the OpenLineage naming spec (:func:`openlineage_names`). The output
        carries the committed version's ``schema`` facet and, when the task wrote rows,
        ``outputStatistics`` (rows and bytes it wrote, from its metrics); the dataset as an input
        carries the schema too. See :mod:`lance_ops_airflow.operators.lineage`.
        """
        uri = self._resolved_uri or _static_uri(self.dataset_uri, self.lance_conn_id)
        if not uri:
            return None
        inputs = list(self.lineage_inputs()) + ([uri] if self.reads_dataset else [])
        return operator_lineage(self.log, uri, inputs, self._last_result, normalize_conn_id(self.lance_conn_id))


def merge_outlets(outlets: Iterable[Any] | None, *extra: Any) -> list[Any]:
    out = list(outlets or [])
    for item in extra:
        if item not in out:
            out.append(item)
    return out
