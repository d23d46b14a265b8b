"""Operators that commit to (or maintain) a Lance dataset in the task process.

Every operator returns a metrics dict (its XCom ``return_value``)::

    {"operation": "delete", "uri": "...", "version": 7, "changed": true, "dry_run": false,
     "already_committed": false, "idempotency_key": "airflow_...", "metrics": {...}}

and emits an asset event for the dataset (see :mod:`lance_ops_airflow.operators.base`). Operators that commit record
the task's idempotency key in the transaction and look for it first, so a retry whose first try's
commit landed returns that version with ``already_committed: true`` and writes nothing.
"""
from __future__ import annotations

import inspect
import os
from datetime import timedelta
from typing import Any, Mapping

from lance_ops_airflow.operators.base import (
    LanceBaseOperator,
    as_bool,
    as_int,
    as_optional_float,
    as_optional_int,
    find_committed,
    parse_duration,
)


def _call_with_key(fn, *args: Any, idempotency_key: str | None = None, **kwargs: Any) -> Any:
    """Call ``fn`` passing ``idempotency_key`` only if it takes one."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    if "idempotency_key" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["idempotency_key"] = idempotency_key
    return fn(*args, **kwargs)


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if hasattr(value, "to_dict"):
        return dict(value.to_dict())
    return dict(value)


def _latest_version(uri: str, options: Mapping[str, str]) -> int:
    import lance_ops

    return lance_ops.dataset(uri, storage_options=dict(options)).latest_version


class _CommittingOperator(LanceBaseOperator):
    """Shared flow: look for this task's earlier commit, else run once and report the new version."""

    idempotent_retries = True

    def already(self, ds, key: str) -> dict[str, Any] | None:
        earlier = find_committed(ds, key)
        if earlier is None:
            return None
        self.log.info("key %s was already committed as version %d: nothing to do", key, earlier.version)
        import json

        from lance_ops.table.commit.transaction_file import load_transaction

        metrics = {}
        txn = load_transaction(ds.store, ds.base, earlier)
        if txn is not None:
            raw = txn.transaction_properties.get("lance_ops.compaction.metrics")
            if raw:
                try:
                    metrics = json.loads(raw)
                except ValueError:
                    metrics = {}
            metrics.setdefault("committed_operation", txn.WhichOneof("operation"))
        return {"version": earlier.version, "already_committed": True, "changed": False, "metrics": metrics}


# -- append / commit staged -----------------------------------------------------------------------
def load_source(data: Any = None, source_path: str | None = None, source_format: str | None = None,
                storage_options: Mapping[str, str] | None = None):
    """A pyarrow Table from a list of row dicts, a dict of columns, or an Arrow IPC / Parquet path."""
    import pyarrow as pa

    if data is not None:
        if isinstance(data, str):
            import json

            data = json.loads(data)
        if isinstance(data, Mapping):
            return pa.table(dict(data))
        rows = list(data)
        if not rows:
            raise ValueError("data is empty: nothing to append")
        return pa.Table.from_pylist(rows)
    if not source_path:
        raise ValueError("give data (rows) or source_path (Arrow IPC / Parquet file), or a staged_key")
    path = str(source_path)
    fmt = (source_format or os.path.splitext(path.rstrip("/"))[1].lstrip(".") or "parquet").lower()
    filesystem = None
    if path.startswith(("s3://", "s3a://")):
        filesystem = _s3_filesystem(storage_options or {})
        path = path.split("://", 1)[1]
    elif path.startswith("file://"):
        path = path[len("file://"):]
    if fmt in ("parquet", "pq"):
        import pyarrow.parquet as pq

        return pq.read_table(path, filesystem=filesystem)
    if fmt in ("arrow", "ipc", "feather", "arrows"):
        import pyarrow.ipc as ipc

        src = filesystem.open_input_file(path) if filesystem is not None else pa.memory_map(path)
        with src:
            try:
                return ipc.open_file(src).read_all()
            except pa.ArrowInvalid:
                src.seek(0)
                return ipc.open_stream(src).read_all()
    raise ValueError(f"unsupported source format {fmt!r}: use parquet or arrow (IPC)")


def _s3_filesystem(options: Mapping[str, str]):
    """A pyarrow S3 filesystem from lance storage options (the same connection as the dataset)."""
    from pyarrow import fs

    kwargs: dict[str, Any] = {}
    if options.get("aws_access_key_id"):
        kwargs.update(access_key=options["aws_access_key_id"], secret_key=options.get("aws_secret_access_key"))
        if options.get("aws_session_token"):
            kwargs["session_token"] = options["aws_session_token"]
    if options.get("region"):
        kwargs["region"] = options["region"]
    endpoint = options.get("endpoint")
    if endpoint:
        scheme, _, rest = endpoint.partition("://")
        kwargs["endpoint_override"] = rest or scheme
        kwargs["scheme"] = scheme if rest else "https"
    return fs.S3FileSystem(**kwargs)


class LanceAppendOperator(_CommittingOperator):
    """Append small in-process data, or commit a staged result.

    :param data: rows (a list of dicts) or columns (a dict of lists). (templated)
    :param source_path: an Arrow IPC (``.arrow``/``.feather``) or Parquet file. (templated)
    :param source_format: ``parquet`` or ``arrow``; default from the file suffix.
    :param staged_key: commit the result staged under this key instead (see
        :class:`LanceCommitStagedOperator`). (templated)
    :param mode: ``append`` (creates a missing dataset), ``create`` or ``overwrite``. (templated)
    :param max_rows_per_file: rows per new fragment. (templated)
    :param data_storage_version: file format of a dataset this task creates or overwrites
        (``2.0``, ``2.1``, ``2.2``/``stable``, ``legacy``; default ``lance_ops.table.versions.DEFAULT``);
        an append keeps the dataset's own. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + (
        "data", "source_path", "source_format", "staged_key", "mode", "max_rows_per_file", "data_storage_version",
    )
    template_fields_renderers = {"data": "json"}
    operation = "append"
    reads_dataset = False

    def __init__(self, *, data: Any = None, source_path: str | None = None, source_format: str | None = None,
                 staged_key: str | None = None, mode: str = "append",
                 max_rows_per_file: int | str | None = None, data_storage_version: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_storage_version = data_storage_version
        self.data = data
        self.source_path = source_path
        self.source_format = source_format
        self.staged_key = staged_key
        self.mode = mode
        self.max_rows_per_file = max_rows_per_file

    def lineage_inputs(self) -> list[str]:
        return [self.source_path] if isinstance(self.source_path, str) and "{{" not in self.source_path else []

    def run(self, context, uri, storage_options, key):
        from lance_ops.errors import DatasetNotFoundError

        if self.staged_key:
            from lance_ops.maintenance.staged_commit import commit_staged

            res = commit_staged(uri, str(self.staged_key), storage_options=storage_options)
            return {"operation": res["operation"], "version": res["version"],
                    "already_committed": res["already_committed"], "changed": not res["already_committed"],
                    "metrics": res["metrics"]}
        import lance_ops

        try:
            ds = lance_ops.dataset(uri, storage_options=storage_options)
        except DatasetNotFoundError:
            ds = None
        if ds is not None:
            earlier = self.already(ds, key)
            if earlier is not None:
                return earlier
        table = load_source(self.data, self.source_path, self.source_format, storage_options)
        self.check_cancelled()
        mode = str(self.mode or "append")
        kwargs = {}
        max_rows = as_optional_int(self.max_rows_per_file)
        if max_rows:
            kwargs["max_rows_per_file"] = max_rows
        version = str(self.data_storage_version or "").strip()
        if version and version != "None":  # an unset Param renders as "None"
            kwargs["data_storage_version"] = version
        out = lance_ops.write_dataset(table, uri, mode=mode, storage_options=storage_options,
                                      idempotency_key=key, **kwargs)
        fragments = 0
        txn = out.transaction
        if txn is not None:
            op = txn.WhichOneof("operation")
            fragments = len(getattr(txn, op).fragments) if op in ("append", "overwrite") else 0
        return {"version": out.version, "changed": True,
                "operation": "append" if ds is not None and mode == "append" else ("create" if ds is None else mode),
                "metrics": {"num_rows": table.num_rows, "num_fragments": fragments}}


class LanceCommitStagedOperator(_CommittingOperator):
    """Commit what a Spark job staged under this task's (group's) idempotency key, exactly once.

    The Spark task and this task share ``idempotency_scope`` (the task-group id when built by
    :func:`lance_ops_airflow.operators.spark.lance_ingest_group`), so both derive the same key from the run.

    :param staged_key: an explicit key instead of the derived one. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + ("staged_key",)
    operation = "commit_staged"
    ui_color = "#bfe3c9"

    def __init__(self, *, staged_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.staged_key = staged_key

    def key(self, context):
        return str(self.staged_key) if self.staged_key else super().key(context)

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.staged_commit import commit_staged

        self.check_cancelled()
        res = commit_staged(uri, key, storage_options=storage_options)
        return {"operation": res["operation"], "version": res["version"],
                "already_committed": res["already_committed"], "changed": not res["already_committed"],
                "metrics": res["metrics"]}


# -- delete -----------------------------------------------------------------------------------------
class LanceDeleteOperator(_CommittingOperator):
    """Delete the rows matching a SQL predicate (``"id > 5 AND name IS NULL"``).

    :param predicate: the filter. (templated)
    :param dry_run: only count the matching rows. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + ("predicate", "dry_run")
    operation = "delete"

    def __init__(self, *, predicate: str, dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.predicate = predicate
        self.dry_run = dry_run

    def run(self, context, uri, storage_options, key):
        from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY

        if not str(self.predicate or "").strip():
            raise ValueError("predicate is empty; refusing to guess what to delete")
        ds = self.open_dataset(uri, storage_options)
        if as_bool(self.dry_run):
            n = ds.count_rows(filter=self.predicate)
            return {"version": ds.version, "dry_run": True, "metrics": {"num_rows_to_delete": n}}
        earlier = self.already(ds, key)
        if earlier is not None:
            return earlier
        self.check_cancelled()
        before = ds.version
        res = ds.delete(self.predicate, transaction_properties={IDEMPOTENCY_KEY: key})
        return {"version": ds.version, "changed": ds.version != before,
                "metrics": {"num_deleted_rows": int(res.get("num_deleted_rows", 0)), "read_version": before}}


# -- maintenance ------------------------------------------------------------------------------------
class LanceMaterializeDeletionsOperator(_CommittingOperator):
    """Rewrite fragments whose deleted-row ratio exceeds ``threshold`` without their deleted rows.

    :param threshold: deleted / physical rows above which a fragment is rewritten. (templated)
    :param dry_run: only report what would be rewritten. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + ("threshold", "dry_run")
    operation = "materialize_deletions"

    def __init__(self, *, threshold: float | str = 0.1, dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.dry_run = dry_run

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.compaction import materialize_deletions

        ds = self.open_dataset(uri, storage_options)
        dry = as_bool(self.dry_run)
        before = ds.version
        threshold = as_optional_float(self.threshold)
        metrics = _as_dict(_call_with_key(materialize_deletions, ds, 0.1 if threshold is None else threshold,
                                          dry_run=dry, idempotency_key=None if dry else key))
        after = before if dry else _latest_version(uri, storage_options)
        return {"version": after, "dry_run": dry, "changed": after != before, "metrics": metrics,
                "already_committed": bool(metrics.get("already_committed"))}


class LanceCompactionOperator(_CommittingOperator):
    """Plan a compaction in-process; run small ones here, hand big ones to Spark.

    Routes (``result["route"]``): ``noop`` (nothing to do), ``dry_run`` (report the plan),
    ``in_process`` (the plan rewrites at most ``spark_threshold_rows`` rows, or no threshold is
    set: compact here, committed with the task's idempotency key), ``spark`` (bigger: the plan is
    stored under the dataset's ``_staging/`` and a downstream Spark task of the same group
    executes it, see :func:`lance_ops_airflow.operators.spark.lance_compaction_group`; the plan file's URI is in
    ``result["plan_file"]``). Standalone (no ``spark_task_id``) every plan runs in-process.

    :param target_rows_per_fragment: the fragment size to aim for. (templated)
    :param max_rows_per_file: upper bound of rows per new fragment. (templated)
    :param materialize_deletions: also rewrite fragments with many deleted rows. (templated)
    :param materialize_deletions_threshold: deleted-row ratio for that. (templated)
    :param max_source_fragments: bound the work of one run. (templated)
    :param dry_run: report the plan only. (templated)
    :param spark_threshold_rows: rows to rewrite above which Spark executes the plan. (templated)
    :param spark_task_id: the Spark task of the group that executes big plans.
    """

    template_fields = LanceBaseOperator.template_fields + (
        "target_rows_per_fragment", "max_rows_per_file", "materialize_deletions",
        "materialize_deletions_threshold", "max_source_fragments", "dry_run", "spark_threshold_rows",
    )
    operation = "compaction"

    def __init__(self, *, target_rows_per_fragment: int | str = 1024 * 1024,
                 max_rows_per_file: int | str | None = None, materialize_deletions: bool | str = True,
                 materialize_deletions_threshold: float | str = 0.1,
                 max_source_fragments: int | str | None = None, dry_run: bool | str = False,
                 spark_threshold_rows: int | str | None = None, spark_task_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target_rows_per_fragment = target_rows_per_fragment
        self.max_rows_per_file = max_rows_per_file
        self.materialize_deletions = materialize_deletions
        self.materialize_deletions_threshold = materialize_deletions_threshold
        self.max_source_fragments = max_source_fragments
        self.dry_run = dry_run
        self.spark_threshold_rows = spark_threshold_rows
        self.spark_task_id = spark_task_id

    def options(self):
        from lance_ops.maintenance.compaction import CompactionOptions

        threshold = as_optional_float(self.materialize_deletions_threshold)
        return CompactionOptions(
            target_rows_per_fragment=as_int(self.target_rows_per_fragment, "target_rows_per_fragment"),
            max_rows_per_file=as_optional_int(self.max_rows_per_file),
            materialize_deletions=as_bool(self.materialize_deletions),
            materialize_deletions_threshold=0.1 if threshold is None else threshold,
            max_source_fragments=as_optional_int(self.max_source_fragments),
        )

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.compaction import plan_compaction, plan_summary_metrics

        ds = self.open_dataset(uri, storage_options)
        dry = as_bool(self.dry_run)
        if not dry:
            earlier = self.already(ds, key)
            if earlier is not None:
                return {**earlier, "route": "in_process"}
        opts = self.options()
        plan = plan_compaction(ds, opts, explain=dry)  # a dry run shows a refused plan (ADR 0011)
        summary = plan_summary_metrics(plan)
        base = {"version": ds.version, "plan": {"read_version": plan.read_version, "tasks": len(plan.tasks),
                                                  **summary}}
        if not plan.tasks and not (dry and plan.held_back):
            return {**base, "route": "noop", "metrics": summary}
        if dry:  # held-back tasks (indexed fragments) and a refusal are shown too
            refusal = {"refusal": plan.refusal} if plan.refusal is not None else {}
            return {**base, "route": "dry_run", "dry_run": True, "metrics": summary,
                    "tasks": plan.summary(), **refusal}
        threshold = as_optional_int(self.spark_threshold_rows)
        rows = summary["rows_read"]
        if threshold is None or rows <= threshold:
            return {**base, **self._in_process(ds, uri, storage_options, key, opts), "route": "in_process"}
        if not self.spark_task_id:
            self.log.warning("plan rewrites %d rows (> %d) but no Spark task follows (use "
                             "lance_compaction_group); compacting in-process", rows, threshold)
            return {**base, **self._in_process(ds, uri, storage_options, key, opts), "route": "in_process"}
        plan_file = self._store_plan(uri, storage_options, key, plan)
        self.log.info("plan rewrites %d rows (> %d): handing %s to Spark task %s",
                      rows, threshold, plan_file, self.spark_task_id)
        return {**base, "route": "spark", "plan_file": plan_file, "metrics": summary}

    def _in_process(self, ds, uri, storage_options, key, opts) -> dict[str, Any]:
        from lance_ops.maintenance.compaction import compact_files

        self.check_cancelled()
        before = ds.version
        metrics = _as_dict(_call_with_key(
            compact_files, ds,
            target_rows_per_fragment=opts.target_rows_per_fragment, max_rows_per_file=opts.max_rows_per_file,
            materialize_deletions=opts.materialize_deletions,
            materialize_deletions_threshold=opts.materialize_deletions_threshold,
            max_source_fragments=opts.max_source_fragments, idempotency_key=key,
        ))
        after = _latest_version(uri, storage_options)
        return {"version": after, "changed": after != before, "metrics": metrics,
                "already_committed": bool(metrics.get("already_committed"))}

    def _store_plan(self, uri, storage_options, key, plan) -> str:
        from lance_ops.io import open_store
        from lance_ops.table.commit.staging import STAGING_DIR

        store, base = open_store(uri, storage_options)
        path = store.join(base, STAGING_DIR, f"{key}.plan.json")
        store.put(path, plan.to_json().encode())
        return store.uri(path)


class LanceRebuildStatisticsOperator(LanceBaseOperator):
    """Rebuild the per-fragment column statistics (kept in lance_ops' own ``_stats`` files).

    The task fails (its error line names each data file and why) when the statistics of some data
    file could not be written; the files that did get statistics keep them.

    :param fragments: fragment ids to rebuild (default: those missing or stale). (templated)
    :param force: rebuild even when up to date. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + ("fragments", "force")
    operation = "rebuild_statistics"

    def __init__(self, *, fragments: list[int] | str | None = None, force: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fragments = fragments
        self.force = force

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.statistics import rebuild_statistics

        ds = self.open_dataset(uri, storage_options)
        frags = self.fragments
        if isinstance(frags, str):
            import json

            frags = json.loads(frags) if frags.strip() not in ("", "None", "null") else None
        self.check_cancelled()
        metrics = _as_dict(rebuild_statistics(ds, frags, as_bool(self.force)))
        if metrics.get("failed"):
            self._fail(metrics)
        files = metrics.pop("files", None)
        if isinstance(files, list):
            metrics["files_sample"] = files[:20]
        # statistics live in lance_ops' own files: no new version is committed
        return {"version": ds.version, "changed": bool(metrics.get("written")), "metrics": metrics}

    def _fail(self, metrics: dict[str, Any]) -> None:
        """Fail the task naming the data files whose statistics could not be written: at once,
        unless some failure may pass on a retry (a storage error), which keeps the task's retries."""
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from lance_ops.maintenance.statistics import failure_summary

        line = failure_summary(metrics)
        if any(f.get("retryable") for f in metrics.get("failures") or []):
            self.log.error("%s (retryable)", line)
            raise AirflowException(line)
        self.log.error("%s", line)
        raise AirflowFailException(f"{line} (not retryable)")


class LanceRefreshRowIdIndexOperator(LanceBaseOperator):
    """Refresh the persisted row-id index (stable row ids -> row addresses)."""

    operation = "refresh_row_id_index"

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.rowid_index import refresh_row_id_index

        ds = self.open_dataset(uri, storage_options)
        self.check_cancelled()
        # the index is a file of its own (no new version); an up-to-date index makes a retry a no-op
        metrics = _as_dict(_call_with_key(refresh_row_id_index, ds, idempotency_key=key))
        changed = not metrics.get("up_to_date") and not metrics.get("skipped")
        return {"version": metrics.get("version", ds.version), "changed": changed, "metrics": metrics}


class LanceCleanupOperator(LanceBaseOperator):
    """Remove old versions and the files only they reference.

    :param older_than: versions older than this are removed: a duration (``"14d"``, ``"12h"``,
        ``"1d12h"``) or seconds (default 14 days; with ``retain_versions`` both must hold).
        (templated) ``older_than_seconds`` is the same in seconds (the earlier name).
    :param retain_versions: always keep this many newest versions. (templated)
    :param delete_unverified: also delete unreferenced files younger than 7 days (only safe
        without concurrent writers). (templated)
    :param error_if_tagged_old_versions: fail if a tagged version would otherwise be removed. (templated)
    :param dry_run: only report what would be removed. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + (
        "older_than", "retain_versions", "delete_unverified", "error_if_tagged_old_versions", "dry_run",
    )
    operation = "cleanup"

    def __init__(self, *, older_than: str | float | None = "14d", older_than_seconds: float | str | None = None,
                 retain_versions: int | str | None = None, delete_unverified: bool | str = False,
                 error_if_tagged_old_versions: bool | str = True, dry_run: bool | str = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than if older_than_seconds is None else older_than_seconds
        self.retain_versions = retain_versions
        self.delete_unverified = delete_unverified
        self.error_if_tagged_old_versions = error_if_tagged_old_versions
        self.dry_run = dry_run

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.cleanup import cleanup_old_versions

        ds = self.open_dataset(uri, storage_options)
        seconds = parse_duration(self.older_than, "older_than")
        dry = as_bool(self.dry_run)
        self.check_cancelled()
        stats = _as_dict(cleanup_old_versions(
            ds, older_than=None if seconds is None else timedelta(seconds=seconds),
            retain_versions=as_optional_int(self.retain_versions),
            delete_unverified=as_bool(self.delete_unverified),
            error_if_tagged_old_versions=as_bool(self.error_if_tagged_old_versions), dry_run=dry,
        ))
        changed = not dry and bool(stats.get("old_versions") or stats.get("bytes_removed")
                                   or stats.get("files_removed"))
        return {"version": ds.latest_version, "dry_run": dry, "changed": changed, "metrics": stats}


# -- verify -----------------------------------------------------------------------------------------
class LanceVerifyOperator(LanceBaseOperator):
    """Check that every file the dataset's manifest references exists, has its recorded size and
    decodes (see :func:`lance_ops.maintenance.verify.verify_dataset`); read-only.

    Problems fail the task at once (``AirflowFailException``: a retry cannot repair files). The
    first error line of the log says how many problems there are and names the first; one line
    per further problem follows (up to ``max_problems_logged``); the whole report is pushed as the
    XCom ``verify_report``. On success the XCom is the usual metrics dict.

    :param version: version number or tag to check (default: the latest). (templated)
    :param all_versions: check every version instead. (templated)
    :param deep: also decode every page of every data file. (templated)
    :param max_problems_logged: log at most this many problems.
    """

    template_fields = LanceBaseOperator.template_fields + ("version", "all_versions", "deep")
    operation = "verify"
    ui_color = "#fff3c4"

    def __init__(self, *, version: int | str | None = None, all_versions: bool | str = False,
                 deep: bool | str = False, max_problems_logged: int = 100, **kwargs: Any) -> None:
        kwargs.setdefault("emit_asset_event", False)  # nothing changes: downstream DAGs must not fire
        super().__init__(**kwargs)
        self.version = version
        self.all_versions = all_versions
        self.deep = deep
        self.max_problems_logged = max_problems_logged

    def run(self, context, uri, storage_options, key):
        from lance_ops.maintenance.verify import verify_dataset

        version = self.version
        if isinstance(version, str):
            version = None if version.strip() in ("", "None", "null") else \
                int(version) if version.strip().isdigit() else version.strip()
        self.check_cancelled()
        report = verify_dataset(uri, version=version, all_versions=as_bool(self.all_versions),
                                deep=as_bool(self.deep), storage_options=storage_options)
        metrics = {**report.counts, "problems": len(report.problems), "versions_checked": list(report.versions)}
        if not report.ok:
            from airflow.sdk.exceptions import AirflowFailException

            first = report.problems[0]
            self.log.error("verify found %d problem(s) in %s; first: %s", len(report.problems), uri, first)
            for problem in report.problems[1:self.max_problems_logged]:
                self.log.error("problem: %s", problem)
            if len(report.problems) > self.max_problems_logged:
                self.log.error("... and %d more", len(report.problems) - self.max_problems_logged)
            ti = context.get("ti") if hasattr(context, "get") else None
            if ti is not None:
                ti.xcom_push(key="verify_report", value={**report.to_dict(),
                                                         "problems": [p.to_dict() for p in report.problems[:1000]]})
            raise AirflowFailException(
                f"{uri}: verify found {len(report.problems)} problem(s); first: {first}")
        self.log.info("%s", report.summary())
        return {"version": report.versions[-1] if report.versions else None, "changed": False, "metrics": metrics}


# -- health -----------------------------------------------------------------------------------------
class LanceHealthOperator(LanceBaseOperator):
    """Report the dataset's health after maintenance (read-only, no asset event): fragments, rows,
    deletions, versions awaiting cleanup and every index with its kind, columns, uuids, coverage
    (indexed fragments and rows, unindexed rows) and index version (see
    :func:`lance_ops.maintenance.health.dataset_health`).

    The XCom is the usual result dict with the report under ``metrics``; the log has one line per
    index (with its unindexed share in %; ``metrics["index_coverage"]`` has name, kind, indexed /
    unindexed rows and ``unindexed_pct`` per user index, ``metrics["max_unindexed_pct"]`` the
    largest). Indices with unindexed rows are named in ``metrics["indices_with_unindexed_rows"]``
    (pylance's ``optimize_indices`` adds them; queries still scan those rows, so they stay exact).

    :param target_rows_per_fragment: fragments below this count as small. (templated)
    :param materialize_deletions_threshold: per-fragment deleted ratio reported. (templated)
    """

    template_fields = LanceBaseOperator.template_fields + ("target_rows_per_fragment",
                                                           "materialize_deletions_threshold")
    operation = "health"
    ui_color = "#e2f0d9"

    def __init__(self, *, target_rows_per_fragment: int | str = 1024 * 1024,
                 materialize_deletions_threshold: float | str = 0.1, **kwargs: Any) -> None:
        kwargs.setdefault("emit_asset_event", False)  # nothing changes: downstream DAGs must not fire
        super().__init__(**kwargs)
        self.target_rows_per_fragment = target_rows_per_fragment
        self.materialize_deletions_threshold = materialize_deletions_threshold

    def run(self, context: Any, uri: str, storage_options: dict[str, str], key: str) -> dict[str, Any]:
        """Compute the health report of the latest version and log its indices."""
        from lance_ops.maintenance.health import dataset_health, unindexed_pct

        ds = self.open_dataset(uri, storage_options)
        threshold = as_optional_float(self.materialize_deletions_threshold)
        health = dataset_health(ds, target_rows_per_fragment=as_int(self.target_rows_per_fragment,
                                                                    "target_rows_per_fragment"),
                                materialize_deletions_threshold=0.1 if threshold is None else threshold)
        report = health.to_dict()
        for info in health.indices:
            self.log.info("index %s: %s on %s; indexed %d rows in %d fragments, unindexed %d rows (%.1f%%) in %d "
                          "fragments; index version %d; uuid %s", info.name, info.kind,
                          ", ".join(info.columns) or "-", info.indexed_rows, info.indexed_fragments,
                          info.unindexed_rows, unindexed_pct(info), info.unindexed_fragments, info.index_version,
                          ", ".join(info.uuids))
        report["indices_with_unindexed_rows"] = [i.name for i in health.indices if i.unindexed_rows and not i.system]
        report["max_unindexed_pct"] = round(health.max_unindexed_pct(), 3)
        return {"version": ds.version, "changed": False, "metrics": report}
