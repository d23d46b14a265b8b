"""Write docs/pylance-parity.md: pylance 14's public Python API and what lance-ops offers for each name.

The rows come from introspecting both packages (pylance is installed for the tests): for every
public name of the pylance objects listed in ``SURFACES``, the lance-ops counterpart is looked up;
a row is "supported" when the name exists and takes every argument pylance's takes, "differs" when
arguments are missing (named) or a known behaviour differs (``NOTES``), and "not supported" with
the reason (``REASONS``) otherwise. ``python scripts/gen_parity.py --check`` fails when the file is
stale; tests/parity/test_parity_table.py runs it.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = ROOT / "docs" / "pylance-parity.md"

#: (pylance object, lance-ops object): the surfaces a pylance user calls
SURFACES = [
    ("lance", "lance_ops"),
    ("lance.LanceDataset", "lance_ops.api.LanceDataset"),
    ("lance.dataset.LanceScanner", "lance_ops.table.dataset.Scanner"),
    ("lance.dataset.Tags", "lance_ops.table.dataset.Tags"),
    ("lance.dataset.MergeInsertBuilder", "lance_ops.table.merge_insert.MergeInsertBuilder"),
    ("lance.dataset.DatasetOptimizer", "lance_ops.maintenance.compaction.DatasetOptimizer"),
    ("lance.fragment.LanceFragment", "lance_ops.table.fragment.LanceFragment"),
    ("lance.fragment.FragmentMetadata", "lance_ops.table.fragment_meta.FragmentMetadata"),
    ("lance.fragment.DataFile", "lance_ops.table.fragment_meta.DataFile"),
    ("lance.file", "lance_ops.file"),
    ("lance.file.LanceFileReader", "lance_ops.file.LanceFileReader"),
    ("lance.file.LanceFileWriter", "lance_ops.format.writer.V2FileWriter"),
    ("lance.file.ReaderResults", "lance_ops.file.ReaderResults"),
    ("lance.optimize", "lance_ops.optimize"),
    ("lance.optimize.Compaction", "lance_ops.optimize.Compaction"),
    ("lance.optimize.CompactionTask", "lance_ops.optimize.CompactionTask"),
    ("lance.optimize.CompactionPlan", "lance_ops.optimize.CompactionPlan"),
    ("lance.optimize.RewriteResult", "lance_ops.optimize.RewriteResult"),
    ("lance.optimize.CompactionMetrics", "lance_ops.optimize.CompactionMetrics"),
]

#: attributes lance-ops objects set per instance (introspection of the class does not see them)
INSTANCE_ATTRIBUTES = {"lance_ops.api.LanceDataset": ("uri", "storage_options", "default_scan_options")}

#: why a pylance name has no lance-ops counterpart (first matching pattern wins)
REASONS = [
    (r"blob|Blob", "not yet: this blob API (take_blobs and BlobColumn are supported)"),
    (r"index|nearest|vector|fts|search|ivf|pq\b|hnsw|prewarm|describe_indices|optimize_indices|"
     r"list_indices|has_index|index_statistics|load_indices|merge_index|drop_index",
     "out of scope: vector search and index building (lance-ops keeps indices, never builds them; ADR 0011)"),
    (r"add_columns|alter_columns|drop_columns|merge_columns|merge\b|update_columns|replace_schema|"
     r"replace_field_metadata|update_field_metadata|update_schema_metadata|field|schema_evolution",
     "out of scope: schema evolution"),
    (r"delete_rows",
     "not yet: fragment-level row deletes (ds.delete, merge_insert and update are supported)"),
    (r"execute_uncommitted|explain_plan|analyze_plan|execute_batches|"
     r"mark_sstables|target_bases|target_all_bases|write_mode|data_storage_version",
     "not yet: this merge-insert option (ADR 0021 lists the clauses lance-ops runs)"),
    (r"namespace|session|branch|shallow_clone|clone|base|checkout_latest|commit_batch|"
     r"lance_schema|data_storage_version_for|sql|query|to_pandas|to_polars|to_ray|to_torch|"
     r"torch|to_ray|\\bray\\b|hugging|pandas|polars|duckdb|substrait",
     "out of scope: engine integrations, namespaces, branches and sessions"),
    (r"commit|Operation|Transaction|write_fragments|create_from_file|create\b|fragments_from|"
     r"LanceOperation|transaction",
     "not yet: the low-level commit API (lance-ops commits through its own CommitProperties seam)"),
    (r"mem_wal|Lsm|CompactedSsTable|Shard|sharding", "out of scope: MemWAL / LSM writes and sharding"),
    (r"io_stats|bytes_read_counter|iops_counter|set_logger|simd_info|ScanStatistics|ExecutionPlan|explain_plan|"
     r"analyze_plan|FFILanceTableProvider|batch_udf",
     "out of scope: the Rust engine's runtime (query plans, I/O counters, logging, UDFs)"),
    (r"Index|Fts|tokenize|centroids|remap_row_addrs",
     "out of scope: vector search and index building (lance-ops keeps indices, never builds them; ADR 0011)"),
    (r"^(join|join_asof|sort_by|filter|slice|sample|partition_expression)$",
     "not yet: pyarrow.dataset.Dataset methods (pylance's LanceDataset subclasses it); apply pyarrow to "
     "`to_table()` / `scanner().to_reader()`"),
    (r"Cleanup|explain_cleanup|tracked_files|all_files|auto_cleanup",
     "not yet: cleanup explanations, file listings and auto-cleanup (lance-ops' cleanup has `dry_run`, which "
     "lists the paths it would remove; cleanup runs as its own Airflow task)"),
    (r"config|metadata$|schema_metadata|storage_options",
     "not yet: the manifest's config and metadata maps and storage-option providers"),
    (r"DataStatistics|FieldStatistics|^stats$",
     "not yet: pylance's data statistics (lance-ops has page and fragment statistics: `lance-ops rebuild-stats`, `inspect`)"),
    (r"delta|version_refs|get_version|migrate_manifest_paths_v2",
     "not yet: version diffs and refs (lance-ops has `versions()`, `tags`, `checkout_version`)"),
    (r"truncate_table|^drop$|^delete$",
     "not yet: whole-table and fragment-level deletes (use `delete(predicate)` or `mode='overwrite'`)"),
    (r"validate", "not yet: use `lance-ops verify` (maintenance/verify.py)"),
    (r"pydantic|json_to_schema|schema_to_json|from_json|version_meta|^schema$|physical_schema|stable_version",
     "not yet: schema helpers and per-fragment row-version metadata"),
    (r"from_batches|from_dataset|from_fragment|scan_batches|^take$",
     "not yet: scanner constructors, `scan_batches` and `take` (use `ds.scanner(...)`, `ds.take`)"),
    (r"MergeInsertBuilder", "not yet: row-level updates (merge-insert) are the next transaction builder (architecture.md)"),
    (r"BasePath", "out of scope: engine integrations, namespaces, branches and sessions"),
    (r"fragment_ids", "not yet: pylance returns its Bitmap type; use `[f.fragment_id for f in ds.get_fragments()]`"),
    (r"", "not yet"),
]

#: behaviours that differ although the name and arguments match (checked by tests/parity)
NOTES = {
    "lance_ops.file.LanceFileReader.take_rows": "unsorted indices are accepted (pylance: ValueError)",
    "lance_ops.file.LanceFileReader.metadata": "page `encoding` is the proto's text, not Rust debug text",
    "lance_ops.file.LanceFileReader": "also reads legacy 0.1 files",
    "lance_ops.write_dataset": ("`schema=` also casts tables and readers (pylance ignores it for them); "
                                "an iterable of batches needs no schema; arrow.json values must be standard "
                                "JSON (pylance's parser also takes `[1,]`, `'a'`, `01`, `+1`, `.5`); without "
                                "`data_storage_version` a new dataset gets `lance_ops.table.versions.DEFAULT`, "
                                "2.2 as pylance's (ADR 0056)"),
    "lance_ops.maintenance.compaction.DatasetOptimizer.compact_files": (
        "through `ds.optimize` it takes pylance's options and returns `CompactionMetrics`; "
        "`max_bytes_per_file` cuts a task's output by its estimated bytes so each file stays under it "
        "(pylance closes a file once its flushed bytes pass it, so file counts differ); one version per "
        "compaction (pylance 14 commits a ReserveFragments version first)"),
    "lance_ops.api.LanceDataset.cleanup_old_versions": (
        "`delete_concurrency` is checked and always met (deletes go one batch at a time)"),
    "lance_ops.table.dataset.Tags.create": "no branches: `(branch, version)` takes only None or \"main\"",
    "lance_ops.table.dataset.Tags.update": "no branches: `(branch, version)` takes only None or \"main\"",
    "lance_ops.api.LanceDataset.to_table": ("executor knobs (`batch_readahead`, `late_materialization`, "
                                            "`scan_in_order`...) are accepted and change nothing"),
    "lance_ops.api.LanceDataset.to_batches": ("executor knobs are accepted and change nothing; batches end at "
                                              "fragment boundaries unless `strict_batch_size`"),
    "lance_ops.table.merge_insert.MergeInsertBuilder.execute": (
        "the source must give every column (pylance also takes a subset for updates: refused, nothing "
        "written); `retry_timeout` and `use_index` are accepted and change nothing (ADR 0021)"),
    "lance_ops.api.LanceDataset.update": "`retry_timeout` and `data_storage_version` are accepted and change nothing",
    "lance_ops.optimize.CompactionTask.json": "lance-ops' JSON, not pylance's",
    "lance_ops.optimize.CompactionPlan.json": "lance-ops' JSON, not pylance's",
    "lance_ops.optimize.RewriteResult.json": "lance-ops' JSON, not pylance's",
    "lance_ops.api.LanceDataset.to_table:filter": (
        "SQL: `regexp_match` takes the flags i, m, s, U, u, x (pylance also R) as literals; a pattern that "
        "does not compile raises FilterError, a ValueError (pylance: pyarrow's ArrowInvalid, also a "
        "ValueError)"),
}


def _resolve(path: str) -> Any:
    """The object at dotted ``path`` (a module, or attributes of one); None when absent."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if isinstance(obj, property):
                obj = obj.fget.__annotations__.get("return") if obj.fget else None
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        return obj
    return None


def _public(obj: Any) -> list[str]:
    if inspect.ismodule(obj):
        names = getattr(obj, "__all__", None) or [n for n in dir(obj) if not n.startswith("_")]
        return sorted(n for n in names if not inspect.ismodule(getattr(obj, n, None))
                      and getattr(getattr(obj, n, None), "__module__", "") != "typing")
    return sorted(n for n in dir(obj) if not n.startswith("_") or n in ("__len__", "__reduce__"))


def _params(fn: Any) -> tuple[list[str], bool] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    names = [p.name for p in sig.parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")]
    return names, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def _reason(name: str) -> str:
    for pattern, why in REASONS:
        if re.search(pattern, name):
            return why
    return "not yet"


def rows() -> list[tuple[str, str, str, str]]:
    """(pylance name, status, lance-ops name, how it differs / why not)."""
    out = []
    for theirs_path, ours_path in SURFACES:
        theirs = _resolve(theirs_path)
        ours = _resolve(ours_path)
        if theirs is None:
            continue
        for name in _public(theirs):
            t = getattr(theirs, name, None)
            o = getattr(ours, name, None) if ours is not None else None
            if o is None and ours is not None and (name in getattr(ours, "__dataclass_fields__", {})
                                                   or name in INSTANCE_ATTRIBUTES.get(ours_path, ())):
                o = name  # an attribute every instance has
            full = f"{theirs_path}.{name}"
            ours_name = f"{ours_path}.{name}"
            if o is None:
                out.append((full, "not supported", "", _reason(name)))
                continue
            notes = [NOTES[ours_name]] if ours_name in NOTES else []
            tp, op = _params(t) if callable(t) else None, _params(o) if callable(o) else None
            if tp is not None and op is not None and not op[1]:
                missing = [p for p in tp[0] if p not in op[0]]
                if missing:
                    notes.append("arguments not taken: " + ", ".join(f"`{m}`" for m in missing))
            out.append((full, "differs" if notes else "supported", ours_name, "; ".join(notes)))
    for key, note in NOTES.items():
        if ":" in key:
            out.append((key.split(":")[1] + " (behaviour)", "differs", key.split(":")[0], note))
    return out


def render() -> str:
    """The Markdown table."""
    import lance

    table = rows()
    counts = {s: sum(1 for r in table if r[1] == s) for s in ("supported", "differs", "not supported")}
    lines = [
        "# pylance parity",
        "",
        f"pylance {lance.__version__}'s public Python API and lance-ops' counterpart, generated by "
        "`scripts/gen_parity.py` from both packages (do not edit by hand; "
        "`tests/parity/test_parity_table.py` fails when it is stale). Behaviour is checked call by "
        "call against pylance in `tests/parity/`.",
        "",
        f"Supported: {counts['supported']}, differs: {counts['differs']}, "
        f"not supported: {counts['not supported']}.",
        "",
        "| pylance | status | lance-ops | differs how / why not |",
        "|---|---|---|---|",
    ]
    for theirs, status, ours, note in table:
        lines.append(f"| `{theirs}` | {status} | {f'`{ours}`' if ours else ''} | {note} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Write the file, or with ``--check`` fail when it differs from what would be written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/pylance-parity.md is stale")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is stale: run python scripts/gen_parity.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
