"""``LanceMergeInsertOperator``: upsert rows into a Lance dataset in the task process (issue 23).

The source (rows, columns, or a Parquet / Arrow IPC file or directory) is merged on the key
columns ``on`` with ``ds.merge_insert(on)`` (ADR 0021): matched target rows take the source's
values, unmatched source rows are inserted, optionally target rows missing from the source are
deleted. One ``Update`` version is committed, carrying the task's idempotency key:

* a retry (or a cleared task) whose earlier try committed finds that version by its key and
  commits nothing (``already_committed: true``);
* a re-run with another key (a new DAG run) over the same source changes no data: every matched
  row is rewritten with the values it already has and nothing is inserted (pylance commits a
  new version for it too).

Duplicate keys in the source that match one target row fail the task at once (pylance's
``AmbiguousMergeError``), before anything is written. Used by the ``lance_ingest`` DAG's
``mode=upsert`` with ``upsert_engine=task``: the group's task runs only when the rendered
``mode`` is ``upsert`` and ``engine`` is ``task`` (the default engine there is the Spark merge job,
``lance_ops/spark/merge.py``, ADR 0035).
"""
from __future__ import annotations

import ast
import json
from typing import Any

from lance_ops_airflow.operators.base import LanceBaseOperator, as_bool, find_committed, skip
from lance_ops_airflow.operators.lance import load_source

#: the transaction property holding the merge's result counts (read back on a retry)
METRICS_PROPERTY = "lance_ops.merge_insert.metrics"
#: source formats read in the task process
TASK_FORMATS = ("parquet", "pq", "arrow", "ipc", "feather", "arrows")


def key_columns(on: Any, param: str = "on") -> list[str]:
    """The key columns from a list or a comma-separated string; a ValueError naming ``param``
    when there are none or one is not a non-empty column name."""
    if isinstance(on, str):
        text = on.strip()
        if text.startswith("["):
            try:  # JSON, or a list rendered by a DAG that does not render native objects
                on = json.loads(text) if '"' in text or "'" not in text else ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise ValueError(f"Param {param!r}: {on!r} is not a list of column names") from None
        else:
            on = [part.strip() for part in text.split(",")] if text not in ("", "None", "null") else []
    if on is None:
        on = []
    if not isinstance(on, (list, tuple)):
        raise ValueError(f"Param {param!r} must be a list of key column names, not {type(on).__name__}")
    cols = [c for c in on]
    bad = [c for c in cols if not isinstance(c, str) or not c.strip()]
    if bad:
        raise ValueError(f"Param {param!r}: key column names must be non-empty strings, got {bad!r}")
    if not cols:
        raise ValueError(f"Param {param!r} is required when mode is 'upsert': give the key columns "
                         'to match source and target rows on, e.g. ["id"]')
    if len(set(cols)) != len(cols):
        raise ValueError(f"Param {param!r}: key columns repeat: {cols!r}")
    return [c.strip() for c in cols]


class LanceMergeInsertOperator(LanceBaseOperator):
    """Upsert a source into a dataset on key columns (``merge_insert``), committed exactly once.

    :param on: key columns (a list, or a comma-separated string). (templated)
    :param data: rows (a list of dicts) or columns (a dict of lists). (templated)
    :param source_path: a Parquet or Arrow IPC file (or a directory of Parquet files). (templated)
    :param source_format: ``parquet`` or ``arrow``; default from the file suffix. (templated)
    :param when_matched_update_all: matched target rows take the source's values (else they are
        kept as they are). (templated)
    :param when_matched_update_condition: only update matches where this SQL (over
        ``target.<col>`` and ``source.<col>``) holds. (templated)
    :param when_not_matched_insert_all: insert source rows matching no target row. (templated)
    :param when_not_matched_by_source_delete: delete target rows matching no source row: ``True``
        for all of them, or a SQL filter restricting which. (templated)
    :param mode: run only when this renders to ``upsert`` (a DAG's write-mode Param); any other
        value skips the task. (templated)
    :param engine: run only when this renders to ``task`` (default); ``spark`` skips the task (the
        ``lance_ingest`` group's Spark merge job writes the run). (templated)
    """

    template_fields = LanceBaseOperator.template_fields + (
        "on", "data", "source_path", "source_format", "when_matched_update_all", "when_matched_update_condition",
        "when_not_matched_insert_all", "when_not_matched_by_source_delete", "mode", "engine",
    )
    template_fields_renderers = {"data": "json"}
    operation = "merge_insert"
    idempotent_retries = True
    ui_color = "#c9e4f5"

    def __init__(self, *, on: Any, data: Any = None, source_path: str | None = None,
                 source_format: str | None = None, when_matched_update_all: bool | str = True,
                 when_matched_update_condition: str | None = None, when_not_matched_insert_all: bool | str = True,
                 when_not_matched_by_source_delete: bool | str = False, mode: str = "upsert",
                 engine: str = "task", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on = on
        self.data = data
        self.source_path = source_path
        self.source_format = source_format
        self.when_matched_update_all = when_matched_update_all
        self.when_matched_update_condition = when_matched_update_condition
        self.when_not_matched_insert_all = when_not_matched_insert_all
        self.when_not_matched_by_source_delete = when_not_matched_by_source_delete
        self.mode = mode
        self.engine = engine

    def lineage_inputs(self) -> list[str]:
        """The source path, when it is known when the DAG is parsed."""
        return [self.source_path] if isinstance(self.source_path, str) and "{{" not in self.source_path else []

    def run(self, context: Any, uri: str, storage_options: dict[str, str], key: str) -> dict[str, Any]:
        """Look for this task's earlier commit, else read the source and merge it once."""
        mode = str(self.mode or "").strip()
        if mode != "upsert":
            skip(self.log, f"mode is {mode!r}, not 'upsert': the ingest tasks write this run")
        engine = str(self.engine or "task").strip().lower()
        if engine != "task":
            skip(self.log, f"upsert_engine is {engine!r}: the Spark merge job writes this run")
        on = key_columns(self.on)
        fmt = self._source_format()
        ds = self.open_dataset(uri, storage_options)
        earlier = self._already(ds, key)
        if earlier is not None:
            return earlier
        source = load_source(self.data, self.source_path, fmt, storage_options)
        missing = [c for c in on if c not in source.column_names]
        if missing:
            raise ValueError(f"Param 'on': key column(s) {missing!r} are not in the source "
                             f"(its columns: {source.column_names!r})")
        builder = ds.merge_insert(on)
        if as_bool(self.when_matched_update_all):
            builder = builder.when_matched_update_all(_optional_text(self.when_matched_update_condition))
        if as_bool(self.when_not_matched_insert_all):
            builder = builder.when_not_matched_insert_all()
        delete = self.when_not_matched_by_source_delete
        if isinstance(delete, str) and not _is_bool_text(delete):
            builder = builder.when_not_matched_by_source_delete(delete.strip())
        elif as_bool(delete):
            builder = builder.when_not_matched_by_source_delete()
        self.check_cancelled()
        before = ds.version
        counts = builder.execute(source, idempotency_key=key,
                                 transaction_properties={METRICS_PROPERTY: json.dumps(
                                     {"num_source_rows": source.num_rows, "on": on})})
        metrics = {**{k: int(v) for k, v in counts.items()}, "num_source_rows": source.num_rows, "on": on,
                   "read_version": before}
        self.log.info("upsert on %s: %d updated, %d inserted, %d deleted (source %d rows)", ", ".join(on),
                      metrics.get("num_updated_rows", 0), metrics.get("num_inserted_rows", 0),
                      metrics.get("num_deleted_rows", 0), source.num_rows)
        return {"version": ds.version, "changed": True, "metrics": metrics}

    def _source_format(self) -> str | None:
        fmt = str(self.source_format or "").strip().lower()
        if fmt in ("", "none", "null"):
            return None
        if fmt not in TASK_FORMATS:
            raise ValueError(f"Param 'source_format': mode 'upsert' reads the source in the task and takes "
                             f"parquet or arrow files, not {fmt!r}")
        return fmt

    def _already(self, ds: Any, key: str) -> dict[str, Any] | None:
        """The result of an earlier try that committed under ``key`` (None if none did)."""
        earlier = find_committed(ds, key)
        if earlier is None:
            return None
        self.log.info("key %s was already committed as version %d: nothing to do", key, earlier.version)
        from lance_ops.table.commit.transaction_file import load_transaction
        from lance_ops.table.rewrite_rows import RESULT_PROPERTY

        metrics: dict[str, Any] = {}
        txn = load_transaction(ds.store, ds.base, earlier)
        if txn is not None:
            for prop in (RESULT_PROPERTY, METRICS_PROPERTY):  # the counts, then source rows and keys
                try:
                    metrics.update(json.loads(txn.transaction_properties.get(prop) or "{}"))
                except ValueError:
                    pass
            metrics["committed_operation"] = txn.WhichOneof("operation")
        return {"version": earlier.version, "already_committed": True, "changed": False, "metrics": metrics}


def _is_bool_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() in ("", "true", "false", "none", "null", "1", "0",
                                                                "yes", "no", "on", "off")


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None", "null") else text
