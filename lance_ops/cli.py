"""``lance-ops``: inspect and maintain Lance datasets from the command line.

    lance-ops inspect s3://bkt/events.lance -s region=eu-west-1
    lance-ops inspect /data/events.lance/data/0a1b....lance       (one data file)
    lance-ops append /data/events.lance new.parquet
    lance-ops delete /data/events.lance "ts < TIMESTAMP '2024-01-01'" --dry-run
    lance-ops compact /data/events.lance --target-rows-per-fragment 1000000
    lance-ops materialize-deletions /data/events.lance --threshold 0.2
    lance-ops rebuild-stats /data/events.lance
    lance-ops refresh-rowid-index /data/events.lance
    lance-ops cleanup /data/events.lance --older-than 7d --json
    lance-ops keys /data/events.lance [--accept-lost]
    lance-ops verify /data/events.lance --all-versions --deep

Every subcommand takes ``--storage-option KEY=VALUE`` (repeatable, pylance's option names),
``--json``, ``--debug`` (tracebacks, debug logs) and ``--no-progress``. Commands that rewrite or
delete data take ``--dry-run``.

Outcomes (docs/adr/0025-cli-outcomes.md): the exit code says which (:data:`EXIT_CODES`): 0 ok,
1 the command failed, 2 bad usage, 3 not found, 4 ``verify`` found problems, 5 commit conflict,
6 commit outcome unknown, 130 interrupted. Without ``--json`` a result is printed as aligned text
on stdout and an error as ONE line on stderr ("error: ..."; a bad argument gets argparse's usage
line and "lance-ops <command>: error: argument ..."). With ``--json`` every outcome, errors
included, is ONE JSON object on stdout and nothing else is printed: ``{"ok": true, ...result}``,
``{"ok": false, ...result}`` for a result that reports failures (exit 1 or 4), or
``{"ok": false, "error": {"type": ..., "message": ..., "exit_code": ...}}``. (``--help`` and
``--version`` print text; ``--debug`` shows tracebacks instead of error objects.)
Progress bars go to stderr, only when it is a terminal and ``--json`` is not given.

Input is checked before anything is read: numbers are bounded (row counts and fragment ids up to
2**32 - 1, versions up to 2**63 - 1, threads up to 1024, ages up to 36500 days), thresholds are
fractions in [0, 1], ``--fragment`` ids must exist, and ``--storage-option`` keys must be storage
options pylance knows (a typo gets a "did you mean"); a ``--storage-option`` value is never echoed.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Sequence

from lance_ops import errors as _errors
from lance_ops.cli_output import (
    EXIT_CODES, EXIT_CONFLICT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_OUTCOME_UNKNOWN,
    EXIT_USAGE, EXIT_VERIFY_PROBLEMS, Progress, exit_code_for, format_indices, format_text, one_line,
    print_result, report_error, to_jsonable,
)

if TYPE_CHECKING:  # pyarrow and the table layer load only when a command needs them
    import pyarrow as pa

    from lance_ops.table.dataset import LanceDataset

#: what a ``cmd_*`` function returns: a result printed as text or JSON, or already-formatted text
CommandResult = dict[str, Any] | str

#: the exit codes (defined in :mod:`lance_ops.cli_output`), re-exported for scripts and tests
__all__ = ["EXIT_CODES", "EXIT_CONFLICT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_NOT_FOUND", "EXIT_OK",
           "EXIT_OUTCOME_UNKNOWN", "EXIT_USAGE", "EXIT_VERIFY_PROBLEMS", "UsageError", "build_parser", "main",
           "parse_duration", "parse_storage_options"]

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}


#: upper bounds of numeric options (a fragment holds at most 2**32 rows: row offsets are u32)
MAX_ROWS = 2**32 - 1
MAX_FRAGMENT_ID = 2**32 - 1
MAX_VERSION = 2**63 - 1
MAX_THREADS = 1024
MAX_AGE_DAYS = 36500

#: bad command-line input (exit 2); the library's class, so the API and the CLI agree
UsageError = _errors.UsageError


def _shown(text: Any, limit: int = 24) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters."""
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w``, ``1.5h`` or a number of seconds (``0``);
    at most MAX_AGE_DAYS days."""
    m = _DURATION_RE.match(str(text))
    if m is None or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot parse duration {_shown(text)}: use e.g. 7d, 12h, 30m, 45s or 0")
    seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if seconds > MAX_AGE_DAYS * 86400:
        raise UsageError(f"duration {_shown(text)} is too long: at most {MAX_AGE_DAYS} days")
    return timedelta(seconds=seconds)


def parse_storage_options(items: Sequence[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` arguments -> storage options; unknown keys and pairs without ``=`` are
    refused (see :func:`lance_ops.io.options.parse_storage_option_args`)."""
    from lance_ops.io.options import parse_storage_option_args

    return parse_storage_option_args(items)


def _progress(args: argparse.Namespace, label: str) -> Progress:
    enabled = (not getattr(args, "json", False) and not getattr(args, "no_progress", False)
               and hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    return Progress(label, enabled)


# --- helpers ------------------------------------------------------------------------------------
def _open(args: argparse.Namespace, version: int | str | None = None) -> LanceDataset:
    from lance_ops.table.dataset import LanceDataset

    return LanceDataset(args.uri, version, args.storage_options)


def _read_input(path: str, fmt: str, schema: pa.Schema | None = None) -> tuple[pa.RecordBatchReader, int | None]:
    """A RecordBatchReader over a Parquet / CSV / Arrow IPC file, and its row count if known."""
    import pyarrow as pa

    if not os.path.exists(path):
        raise UsageError(f"input file {path} does not exist")
    if fmt == "auto":
        ext = os.path.splitext(path)[1].lower()
        guessed = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".arrow": "arrow", ".ipc": "arrow",
                   ".feather": "arrow", ".arrows": "arrow"}.get(ext)
        if guessed is None:
            raise UsageError(f"cannot tell the format of {path} from its extension; pass --format")
        fmt = guessed
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(path)
            return pa.RecordBatchReader.from_batches(pf.schema_arrow, pf.iter_batches(batch_size=64 * 1024)), \
                pf.metadata.num_rows
        if fmt == "csv":
            import pyarrow.csv as pcsv

            types = {f.name: f.type.storage_type if isinstance(f.type, pa.BaseExtensionType) else f.type
                     for f in schema} if schema else None  # CSV reads no extension types; they are cast after
            convert = pcsv.ConvertOptions(column_types=types)
            return pcsv.open_csv(path, convert_options=convert), None
        if fmt == "arrow":
            try:
                f = pa.ipc.open_file(path)
                return pa.RecordBatchReader.from_batches(
                    f.schema, (f.get_batch(i) for i in range(f.num_record_batches))), None
            except pa.ArrowInvalid:
                return pa.ipc.open_stream(path), None
    except (pa.ArrowException, OSError) as exc:
        raise UsageError(f"cannot read {path} as {fmt}: {exc}") from exc
    raise UsageError(f"unknown input format {fmt!r}")


def _conform(reader: pa.RecordBatchReader, schema: pa.Schema | None, progress: Callable[[int, int | None], None],
             total: int | None) -> pa.RecordBatchReader:
    """Batches of ``reader`` cast to ``schema`` (by column name), counting rows for the progress bar."""
    import pyarrow as pa

    from lance_ops.errors import SchemaMismatchError

    target = schema or reader.schema

    def batches() -> Iterator[pa.RecordBatch]:
        rows = 0
        for batch in reader:
            if schema is not None and batch.schema != schema:
                missing = [n for n in schema.names if n not in batch.schema.names]
                extra = [n for n in batch.schema.names if n not in schema.names]
                if missing or extra:
                    raise SchemaMismatchError(
                        f"input columns do not match the dataset: missing {missing}, not in the dataset {extra}")
                try:
                    batch = pa.Table.from_batches([batch]).select(schema.names).cast(schema).combine_chunks() \
                        .to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], schema=schema)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise SchemaMismatchError(f"input does not fit the dataset schema: {exc}") from exc
            rows += batch.num_rows
            progress(rows, total)
            yield batch

    return pa.RecordBatchReader.from_batches(target, batches())


# --- commands -------------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> CommandResult:
    """``inspect``: the dataset's health report plus statistics coverage, pending stages and indices;
    on a data file (a ``.lance`` file, not a dataset directory) the file itself
    (:func:`lance_ops.cli_file.inspect_file`: version, fields, columns, pages, rows).

    Each index (``lance_ops.table.indices.list_indices``) shows its name, kind, columns, segment
    uuids, coverage (indexed fragments and rows, unindexed rows) and index version; text output
    puts them last, one line each. With ``--versions`` every version's timestamp, rows and
    fragments are listed too.
    """
    from lance_ops import cli_file
    from lance_ops.maintenance.health import dataset_health
    from lance_ops.maintenance.statistics import statistics_coverage

    if cli_file.is_data_file(args.uri, args.storage_options):
        if args.version is not None or args.versions:
            raise UsageError(f"{args.uri} is a data file, not a dataset: --version and --versions do not apply")
        info = cli_file.inspect_file(args.uri, args.storage_options)
        return info if args.json else cli_file.format_file(info)
    ds = _open(args, args.version)
    health = dataset_health(ds, target_rows_per_fragment=args.target_rows_per_fragment,
                            materialize_deletions_threshold=args.deletion_threshold).to_dict()
    health["latest_version"] = ds.latest_version
    cov = statistics_coverage(ds)
    health["statistics_coverage"] = f"{cov['with_stats']}/{cov['data_files']}"
    health["data_files_with_statistics"] = cov["with_stats"]
    # staged results waiting for their commit step (lance_ops.maintenance.staged_commit)
    from lance_ops.maintenance.staged_commit import pending_stages

    health["pending_stages"] = pending_stages(args.uri, storage_options=args.storage_options)
    if args.versions:
        health["versions"] = [
            {"version": v["version"], "timestamp": v["timestamp"], "rows": int(v["metadata"]["total_rows"]),
             "fragments": int(v["metadata"]["total_fragments"])}
            for v in ds.versions()
        ]
    indices = health.pop("indices")
    health["indices"] = indices
    if args.json:
        return health
    text = format_text({k: v for k, v in to_jsonable(health).items() if k != "indices"})
    lines = format_indices(to_jsonable(indices))
    return text + "\nindices:" + ("".join(f"\n  {line}" for line in lines) if lines else "  -")


def cmd_append(args: argparse.Namespace) -> dict[str, Any]:
    """``append``: add the rows of a Parquet, CSV or Arrow IPC file (``--create`` makes the dataset).

    Input columns are matched to the dataset schema by name and cast; a keyed re-run adds nothing.
    """
    from lance_ops.errors import DatasetNotFoundError
    from lance_ops.table.dataset import LanceDataset
    from lance_ops.table.write import write_dataset

    try:
        current = LanceDataset(args.uri, None, args.storage_options)
    except DatasetNotFoundError:
        if not args.create:
            raise DatasetNotFoundError(f"Dataset at path {args.uri} was not found (pass --create to create it)")
        current = None
    schema = current.schema if current is not None else None
    progress = _progress(args, "appending rows")
    reader, total = _read_input(args.file, args.format, schema)
    try:
        data = _conform(reader, schema, progress, total)
        kwargs: dict[str, Any] = {"storage_options": args.storage_options}
        if args.max_rows_per_file:
            kwargs["max_rows_per_file"] = args.max_rows_per_file
        if args.idempotency_key:
            kwargs["idempotency_key"] = args.idempotency_key
        if current is None and args.enable_stable_row_ids:
            kwargs["enable_stable_row_ids"] = True
        if current is None and args.data_storage_version:
            kwargs["data_storage_version"] = args.data_storage_version
        before = current.version if current is not None else 0
        rows_before = current.count_rows() if current is not None else 0
        ds = write_dataset(data, args.uri, mode="append" if current is not None else "create", **kwargs)
    finally:
        progress.close()
    unchanged = ds.version <= before  # a keyed re-run returns the version first committed, never a new one
    rows = (LanceDataset(args.uri, None, args.storage_options) if unchanged else ds).count_rows()
    return {"version": ds.version, "created": current is None, "rows_added": 0 if unchanged else rows - rows_before,
            "rows": rows, "already_committed": unchanged}


def cmd_delete(args: argparse.Namespace) -> dict[str, Any]:
    """``delete``: delete the rows matching a SQL predicate (``--dry-run`` only counts them).

    With ``--idempotency-key`` a re-run reports the first commit instead of deleting again.
    """
    ds = _open(args)
    if args.dry_run:
        return {"num_deleted_rows": ds.count_rows(args.predicate), "dry_run": True, "version": ds.version}
    if args.idempotency_key:
        from lance_ops.table.commit import idempotency

        # the key ledger (delete keys only): a re-run reports the first commit, even once cleaned up
        earlier = idempotency.lookup(ds.store, ds.base, args.idempotency_key, "delete")
        if earlier is not None:
            return {"num_deleted_rows": int(earlier.properties.get("lance_ops.num_deleted_rows", 0)),
                    "version": earlier.version, "already_committed": True}
        result = dict(ds.delete(args.predicate, idempotency_key=args.idempotency_key))
    else:
        result = dict(ds.delete(args.predicate))
    result["version"] = ds.version
    return result


def cmd_keys(args: argparse.Namespace) -> dict[str, Any]:
    """The idempotency-key ledger: coverage, lost version ranges; ``--accept-lost`` forgets them."""
    from lance_ops.table.commit import idempotency

    ds = _open(args)
    out: dict[str, Any] = {}
    if args.accept_lost:
        out["accepted_lost_versions"] = [list(r) for r in idempotency.accept_lost(ds.store, ds.base)]
    out.update(idempotency.ledger_summary(ds.store, ds.base))
    return out


def _compaction() -> ModuleType:
    try:
        from lance_ops.maintenance import compaction
    except ImportError as exc:
        from lance_ops.errors import UnsupportedError

        raise UnsupportedError(f"compaction is not available in this installation: {exc}") from exc
    return compaction


def cmd_compact(args: argparse.Namespace) -> dict[str, Any]:
    """``compact``: merge small fragments and materialize deletions (pylance's ``compact_files``).

    Only the options given on the command line are passed on; the library defaults the rest.
    """
    compaction = _compaction()
    ds = _open(args)
    kwargs: dict[str, Any] = {"dry_run": args.dry_run}
    for name in ("target_rows_per_fragment", "max_rows_per_file", "materialize_deletions_threshold",
                 "max_source_fragments", "num_threads", "idempotency_key"):
        value = getattr(args, name)
        if value is not None:
            kwargs[name] = value
    if args.no_materialize_deletions:
        kwargs["materialize_deletions"] = False
    progress = _progress(args, "compacting (tasks)")
    try:
        return dict(compaction.compact_files(ds, progress=progress, **kwargs), dry_run=args.dry_run)
    finally:
        progress.close()


def cmd_optimize_indices(args: argparse.Namespace) -> dict[str, Any]:
    """``optimize-indices``: extend the indices to the fragments appended since they were built
    (pylance's ``optimize_indices``; one CreateIndex version, none when every index is complete)."""
    from lance_ops.maintenance.index_upkeep.optimize import UpkeepResult, optimize_indices, plan_upkeep

    ds = _open(args)
    if args.dry_run:
        plans = plan_upkeep(ds, args.index, args.num_indices_to_merge)
        result = UpkeepResult(None, int(ds.version), [info for info, _ in plans])
    else:
        result = optimize_indices(ds, index_names=args.index, num_indices_to_merge=args.num_indices_to_merge)
    return dict(result.to_dict(), dry_run=args.dry_run)


def cmd_materialize(args: argparse.Namespace) -> dict[str, Any]:
    """``materialize-deletions``: rewrite fragments whose deleted ratio exceeds ``--threshold``.

    Frees the space of deleted rows without merging fragments.
    """
    compaction = _compaction()
    ds = _open(args)
    kwargs: dict[str, Any] = {"dry_run": args.dry_run}
    for name in ("max_rows_per_file", "max_source_fragments", "num_threads", "idempotency_key"):
        value = getattr(args, name)
        if value is not None:
            kwargs[name] = value
    progress = _progress(args, "materializing deletions (fragments)")
    try:
        return dict(compaction.materialize_deletions(ds, args.threshold, progress=progress, **kwargs),
                    dry_run=args.dry_run)
    finally:
        progress.close()


def _require_fragments(ds: LanceDataset, uri: str, ids: Sequence[int] | None) -> None:
    """UsageError naming the fragment ids (given with --fragment) that ``ds`` does not have."""
    if not ids:
        return
    have = {f.fragment_id for f in ds.get_fragments()}
    missing = sorted(set(ids) - have)
    if missing:
        some = sorted(have)[:10]
        listing = ", ".join(map(str, some)) + (", ..." if len(have) > len(some) else "") if have else "none"
        raise UsageError(f"no fragment {', '.join(map(str, missing))} in {uri} (version {ds.version}; "
                         f"its fragments: {listing})")


def cmd_rebuild_stats(args: argparse.Namespace) -> dict[str, Any]:
    """``rebuild-stats``: write page statistics for data files that have none (or all, ``--force``).

    Reports the new statistics coverage; text output counts files unless ``--list-files``. Exits 2
    when the statistics of some data file could not be written (``status: failed``; ``failures``
    names each file and why).
    """
    from lance_ops.maintenance.statistics import rebuild_statistics, statistics_coverage

    ds = _open(args)
    _require_fragments(ds, args.uri, args.fragment)
    progress = _progress(args, "statistics")
    try:
        result = rebuild_statistics(ds, args.fragment or None, args.force, dry_run=args.dry_run, progress=progress)
    finally:
        progress.close()
    cov = statistics_coverage(ds)
    result["coverage"] = f"{cov['with_stats']}/{cov['data_files']}"
    if result["failed"]:
        args.exit_code = EXIT_FAILED
    if not args.json and not args.list_files:
        result["files"] = len(result["files"])
    return result


def cmd_refresh_rowid_index(args: argparse.Namespace) -> dict[str, Any]:
    """``refresh-rowid-index``: build or update the persisted row-id index of the latest version."""
    from lance_ops.maintenance.rowid_index import refresh_row_id_index

    ds = _open(args)
    progress = _progress(args, "row-id index")
    try:
        return refresh_row_id_index(ds, idempotency_key=args.idempotency_key, progress=progress)
    finally:
        progress.close()


def cmd_cleanup(args: argparse.Namespace) -> dict[str, Any]:
    """``cleanup``: delete old versions and the files only they use.

    Ages come from ``--older-than``; ``--dry-run`` reports what would be deleted.
    """
    from lance_ops.maintenance.cleanup import cleanup_old_versions

    ds = _open(args)
    older_than = parse_duration(args.older_than) if args.older_than is not None else None
    progress = _progress(args, "cleanup (files deleted)")
    try:
        stats = cleanup_old_versions(ds, older_than, args.retain_versions, delete_unverified=args.delete_unverified,
                                     error_if_tagged_old_versions=not args.no_error_if_tagged, dry_run=args.dry_run,
                                     progress=progress)
    finally:
        progress.close()
    out = to_jsonable(stats)
    if isinstance(out, dict):
        out["dry_run"] = args.dry_run
    return out


def cmd_verify(args: argparse.Namespace) -> CommandResult:
    """Check every file the selected manifests reference; exit 4 naming each problem."""
    from lance_ops.maintenance.verify import verify_dataset

    if args.version is not None and args.all_versions:
        raise UsageError("give --version or --all-versions, not both")
    progress = _progress(args, "verifying (fragments)")
    try:
        report = verify_dataset(args.uri, version=args.version, all_versions=args.all_versions, deep=args.deep,
                                storage_options=args.storage_options, progress=progress)
    finally:
        progress.close()
    if not report.ok:
        args.exit_code = EXIT_VERIFY_PROBLEMS
    if args.json:
        return report.to_dict()
    return "\n".join([f"problem: {p}" for p in report.problems] + [report.summary()])


# --- parser -------------------------------------------------------------------------------------
def _bounded_int(low: int, high: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse type: an integer in [low, high], else a message saying the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high}, got {_shown(text)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high}, got {_shown(text)}")
        return value

    parse.__name__ = f"int[{low},{high}]"
    return parse


_positive_int = _bounded_int(1, MAX_ROWS, "a positive integer")
_rows = _bounded_int(1, MAX_ROWS, "a number of rows")
_threads = _bounded_int(1, MAX_THREADS, "a number of threads")
_fragment_id = _bounded_int(0, MAX_FRAGMENT_ID, "a fragment id")
_versions_count = _bounded_int(1, MAX_VERSION, "a number of versions")


def _non_negative_int(text: str) -> int:
    return _bounded_int(0, MAX_VERSION, "an integer")(text)


def _ratio(text: str) -> float:
    """A fraction in [0, 1] (deleted rows / rows)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 1, got {_shown(text)}") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 1 (a ratio of rows), got {_shown(text)}")
    return value


def _duration_arg(text: str) -> str:
    """An age such as 7d (checked here, parsed by the command)."""
    try:
        parse_duration(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _storage_option_arg(text: str) -> str:
    """One ``KEY=VALUE`` storage option with a known key (the value is never shown)."""
    from lance_ops.io.options import parse_storage_option_args

    try:
        parse_storage_option_args([text])
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--storage-option ", "")) from None
    return text


def _version_arg(text: str) -> int | str:
    if not text.isdigit():
        return text
    value = int(text)
    if value > MAX_VERSION:
        raise argparse.ArgumentTypeError(f"expected a version from 0 to {MAX_VERSION} (or a tag), got {_shown(text)}")
    return value


class _ArgumentError(Exception):
    """argparse found bad usage: reported by main() as text or JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are raised (main() prints them), not printed + exited."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(self, message)


def _common(default_suppress: bool) -> _Parser:
    d = argparse.SUPPRESS if default_suppress else None
    p = _Parser(add_help=False)
    g = p.add_argument_group("common options")
    g.add_argument("-s", "--storage-option", dest="storage_option", action="append", metavar="KEY=VALUE",
                   type=_storage_option_arg, default=d,
                   help="object store option (repeatable), e.g. region=eu-west-1; unknown keys are refused")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS if default_suppress else False,
                   help="print the result as JSON on stdout; errors as one JSON object on stderr")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS if default_suppress else False,
                   help="show tracebacks and debug logs")
    g.add_argument("--no-progress", action="store_true",
                   default=argparse.SUPPRESS if default_suppress else False, help="never show progress bars")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The ``lance-ops`` argument parser: one subcommand per ``cmd_*`` function.

    Usage errors are raised (not printed and exited) so :func:`main` can report them as JSON.
    """
    from lance_ops._version import __version__
    from lance_ops.table.versions import DEFAULT as DEFAULT_STORAGE_VERSION

    common = _common(default_suppress=True)
    parser = _Parser(
        prog="lance-ops", parents=[common],
        description="Inspect and maintain Lance datasets (local paths or s3:// URIs).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes:\n" + "".join(f"  {code:<3}  {text}\n" for code, text in EXIT_CODES.items())
               + "\nWith --json every outcome is ONE JSON object on stdout: the result with \"ok\": true, or\n"
               '{"ok": false, "error": {"type", "message", "exit_code"}}. Without it errors are one line on stderr.')
    parser.add_argument("--version", action="version", version=f"lance-ops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                help="what to do (lance-ops COMMAND --help for its options)")

    def add(name: str, func: Callable[[argparse.Namespace], CommandResult], help_text: str,
            dry_run: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.add_argument("uri", help="dataset URI (path or s3://bucket/path)")
        if dry_run:
            p.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
        p.set_defaults(func=func)
        return p

    p = add("inspect", cmd_inspect, "show versions, fragments, rows, deletions, statistics coverage and size; "
            "given a .lance data file, its version, columns, pages and rows")
    p.add_argument("--version", dest="version", type=_version_arg, default=None, metavar="V",
                   help="version number or tag (default: latest)")
    p.add_argument("--target-rows-per-fragment", type=_rows, default=1024 * 1024,
                   help="fragments below this many rows count as small (default 1048576)")
    p.add_argument("--deletion-threshold", type=_ratio, default=0.1,
                   help="deleted ratio above which a fragment needs materialization (default 0.1)")
    p.add_argument("--versions", action="store_true", help="also list every version (datasets only)")

    p = add("keys", cmd_keys, "show the idempotency-key ledger (versions it covers, versions lost to it)")
    p.add_argument("--accept-lost", action="store_true",
                   help="forget lost version ranges (after checking no keyed step committed there will be re-run)")
    p = add("append", cmd_append, "append rows from a Parquet, CSV or Arrow IPC file")
    p.add_argument("file", help="input file")
    p.add_argument("--format", choices=["auto", "parquet", "csv", "arrow"], default="auto",
                   help="input format (default auto: from the file extension)")
    p.add_argument("--create", action="store_true", help="create the dataset if it does not exist")
    p.add_argument("--enable-stable-row-ids", action="store_true", help="with --create: use stable row ids")
    p.add_argument("--data-storage-version", default=None, metavar="VERSION",
                   help="with --create: file format of the new dataset (2.0, 2.1, 2.2/stable, legacy; default "
                        f"{DEFAULT_STORAGE_VERSION}); an existing dataset keeps its own")
    p.add_argument("--max-rows-per-file", type=_rows, default=None, help="cap on rows per written data file")
    p.add_argument("--idempotency-key", default=None, help="a retry with the same key appends nothing")

    p = add("delete", cmd_delete, "delete the rows matching a SQL predicate", dry_run=True)
    p.add_argument("predicate", help="SQL predicate, e.g. \"id < 100 AND name IS NULL\"")
    p.add_argument("--idempotency-key", default=None, help="a retry with the same key reports the first deletion instead of deleting again")

    p = add("compact", cmd_compact, "merge small fragments and materialize deletions", dry_run=True)
    p.add_argument("--target-rows-per-fragment", type=_rows, default=None,
                   help="merge fragments into fragments of about this many rows (default 1048576)")
    p.add_argument("--max-rows-per-file", type=_rows, default=None,
                   help="cap on rows per written data file (default: the target rows per fragment)")
    p.add_argument("--materialize-deletions-threshold", type=_ratio, default=None,
                   help="also rewrite fragments whose deleted ratio exceeds this fraction (default 0.1)")
    p.add_argument("--no-materialize-deletions", action="store_true",
                   help="leave deleted rows in place (only merge small fragments)")
    p.add_argument("--max-source-fragments", type=_positive_int, default=None,
                   help="rewrite at most this many fragments in this run (default: all)")
    p.add_argument("--num-threads", type=_threads, default=None, help="rewrite tasks run side by side (default 1)")
    p.add_argument("--idempotency-key", default=None, help="a retry with the same key commits nothing new and reports the first commit")

    p = add("optimize-indices", cmd_optimize_indices,
            "extend the indices to fragments appended since they were built", dry_run=True)
    p.add_argument("--index", action="append", default=None, metavar="NAME",
                   help="only this index (repeatable; default: every index)")
    p.add_argument("--num-indices-to-merge", type=int, default=None, metavar="N",
                   help="0: add a delta segment; N: fold the newest N segments (default: pylance's)")

    p = add("materialize-deletions", cmd_materialize,
            "rewrite fragments whose deleted ratio exceeds a threshold", dry_run=True)
    p.add_argument("--threshold", type=_ratio, default=0.1,
                   help="deleted ratio from 0 to 1 (default 0.1; 0 = every deletion)")
    p.add_argument("--max-rows-per-file", type=_rows, default=None, help="cap on rows per written data file")
    p.add_argument("--max-source-fragments", type=_positive_int, default=None,
                   help="rewrite at most this many fragments in this run (default: all)")
    p.add_argument("--num-threads", type=_threads, default=None, help="rewrite tasks run side by side (default 1)")
    p.add_argument("--idempotency-key", default=None, help="a retry with the same key commits nothing new and reports the first commit")

    p = add("rebuild-stats", cmd_rebuild_stats, "write page statistics for data files that have none",
            dry_run=True)
    p.add_argument("--fragment", type=_fragment_id, action="append", metavar="ID",
                   help="only this fragment (repeatable; it must exist)")
    p.add_argument("--force", action="store_true", help="recompute statistics that already exist")
    p.add_argument("--list-files", action="store_true", help="list the statistics files in text output")

    p = add("refresh-rowid-index", cmd_refresh_rowid_index,
            "build or update the persisted row-id index of the latest version")
    p.add_argument("--idempotency-key", default=None, help="a retry with the same key commits nothing new and reports the first commit")

    p = add("cleanup", cmd_cleanup, "delete old versions and the files only they use", dry_run=True)
    p.add_argument("--older-than", type=_duration_arg, default=None, metavar="AGE",
                   help="remove versions older than this (7d, 12h, 30m, 0); default 14d unless "
                        "--retain-versions is given")
    p.add_argument("--retain-versions", type=_versions_count, default=None, metavar="N",
                   help="always keep the newest N versions")
    p.add_argument("--delete-unverified", action="store_true",
                   help="also delete unreferenced files younger than 7 days (only safe without concurrent writers)")
    p.add_argument("--no-error-if-tagged", action="store_true",
                   help="skip tagged old versions instead of failing")

    p = add("verify", cmd_verify, "check that every file the manifest references exists, has the recorded size "
            "and decodes; exit 4 naming each problem")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", dest="version", type=_version_arg, default=None, metavar="V",
                   help="version number or tag (default: latest)")
    g.add_argument("--all-versions", action="store_true", help="check every version under _versions/")
    p.add_argument("--deep", action="store_true", help="also decode every page of every data file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    json_errors = "--json" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as exc:  # bad usage: argparse's message (with the usage line), or JSON
        if json_errors:
            return report_error(f"{exc.parser.prog}: {exc.message}", EXIT_USAGE, True, "UsageError")
        exc.parser.print_usage(sys.stderr)
        sys.stderr.write(f"{exc.parser.prog}: error: {exc.message}\n")
        return EXIT_USAGE
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    for name, default in (("json", False), ("debug", False), ("no_progress", False), ("storage_option", None)):
        if not hasattr(args, name):
            setattr(args, name, default)
    debug_log = _DebugLog() if args.debug else None
    try:
        return _run(args)
    finally:
        if debug_log is not None:
            debug_log.close()


class _DebugLog:
    """``--debug``: DEBUG records of every logger to stderr, credentials redacted, for the length
    of one ``main()`` call only (main may run in a longer process: nothing is left attached)."""

    def __init__(self) -> None:
        from lance_ops.io import redact  # botocore logs request headers (credentials) at DEBUG

        self._root = logging.getLogger()
        self._level = self._root.level
        self._handler = logging.StreamHandler(sys.stderr)
        self._handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        redact.install([self._handler])
        self._root.addHandler(self._handler)
        self._root.setLevel(logging.DEBUG)

    def close(self) -> None:
        self._root.removeHandler(self._handler)
        self._root.setLevel(self._level)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; every outcome becomes an exit code (:func:`exit_code_for`) and,
    with ``--json``, one JSON object on stdout."""
    from lance_ops.errors import LanceOpsError

    as_json = bool(args.json)
    try:
        args.storage_options = parse_storage_options(args.storage_option)
        result = args.func(args)
        code = getattr(args, "exit_code", EXIT_OK)
        print_result(result, as_json, exit_code=code)
        return code
    except KeyboardInterrupt as exc:
        if not as_json:
            sys.stderr.write("interrupted\n")
            return EXIT_INTERRUPTED
        return report_error("interrupted", EXIT_INTERRUPTED, as_json, type(exc).__name__)
    except (LanceOpsError, ValueError, KeyError, IndexError, OSError) as exc:
        # lance_ops errors, and bad ids, indexes or arguments reported by the library or the OS
        if args.debug:
            raise
        return report_error(one_line(exc), exit_code_for(exc), as_json, type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - the CLI promises no tracebacks without --debug
        if args.debug:
            raise
        return report_error(f"{type(exc).__name__}: {one_line(exc)} (run with --debug for details)", EXIT_FAILED,
                            as_json, type(exc).__name__)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
