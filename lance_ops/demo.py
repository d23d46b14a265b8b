"""End-to-end demo: Spark ingestion and Airflow maintenance of a local Lance dataset.

    python -m lance_ops.demo [--dir .demo] [--rows 60000]        (what ``./run demo`` runs)

On an embedded default (everything under ``--dir``, default ``./.demo``):

1. an Airflow 3 home on SQLite (``airflow db migrate``), the repository's ``dags/`` as DAG folder,
   ``spark_default`` = Spark ``local[*]``;
2. two batches of Parquet source files;
3. ``lance_ingest`` twice (Spark stages, a small task commits): a first batch of big fragments,
   then a second batch cut into many small ones;
4. a delete of 20 % of the rows (deletion files, no rewrite);
5. ``lance_maintenance`` end to end with demo thresholds: compaction of the small fragments,
   materialization of the deletions in the big ones, statistics, row-id index, verify, and
   cleanup with ``cleanup_older_than="0s"`` (fine for a demo, not for production) — versions
   superseded in the last 5 minutes stay anyway, as concurrent writers may still build on them
   (``LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS``);
6. a before/after table (versions, fragments, rows, deleted ratio, bytes) and a pylance read-back.

DAG runs use ``dag.test()`` in this process (Airflow's own "run a DAG without a scheduler"); their
logs go to ``<dir>/demo.log``. Exit status 1 if any DAG run (or any of its tasks) fails.

This is the only module of ``lance_ops`` that imports Airflow, and only inside :func:`main`.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]


def example_dags_folder() -> Path:
    """The folder of the provider's example DAGs (``lance_ops_airflow.example_dags``), installed or not.

    Found by name, not imported: the demo runs them through Airflow, which parses the folder.
    """
    spec = importlib.util.find_spec("lance_ops_airflow.example_dags")
    if spec is None or not spec.submodule_search_locations:
        return ROOT / "dags"
    return Path(list(spec.submodule_search_locations)[0])
OK_STATES = ("success", "skipped")


def _say(text: str = "") -> None:
    print(text, flush=True)


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Send this process's stdout/stderr (Airflow and spark-submit chatter) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def airflow_environment(home: Path) -> dict[str, str]:
    """Environment for the Airflow processes of the demo, rooted at ``home``.

    Points Airflow at the repository's DAGs and a local Spark connection, and puts this venv's
    ``bin`` and the repository on PATH/PYTHONPATH so tasks run the code being demonstrated.
    """
    venv_bin = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if venv_bin not in path.split(os.pathsep):
        path = venv_bin + os.pathsep + path
    pythonpath = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in pythonpath.split(os.pathsep):
        pythonpath = str(ROOT) + (os.pathsep + pythonpath if pythonpath else "")
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(example_dags_folder()),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PATH": path,
        "PYTHONPATH": pythonpath,
    }


def make_source(directory: Path, start: int, rows: int, files: int) -> None:
    """Write ``rows`` synthetic event rows (ids from ``start``) as ``files`` Parquet files.

    The ingest DAG reads them; a fixed seed per batch keeps the demo's numbers reproducible.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    per = rows // files
    rng = np.random.default_rng(start)
    for i in range(files):
        lo = start + i * per
        ids = np.arange(lo, lo + per, dtype=np.int64)
        pq.write_table(pa.table({
            "id": ids,
            "user": pa.array([f"user-{j % 977}" for j in ids.tolist()]),
            "amount": pa.array(np.round(rng.gamma(2.0, 20.0, per), 2)),
            "country": pa.array(rng.choice(["NL", "DE", "FR", "US", "JP"], per).tolist()),
            "ts": pa.array(ids * 1_000_000 + 1_700_000_000_000_000, pa.timestamp("us", "UTC")),
        }), directory / f"part-{i:03d}.parquet")


def health(uri: str, target: int) -> dict[str, Any]:
    """The dataset health report of ``uri`` (as a dict) plus its live row count.

    Shown before and after maintenance, so the demo can print what the DAGs changed.
    """
    import lance_ops
    from lance_ops.maintenance.health import dataset_health

    ds = lance_ops.dataset(uri)
    h = dataset_health(ds, target_rows_per_fragment=target).to_dict()
    h["rows_counted"] = ds.count_rows()
    return h


def run_dag(dag_id: str, conf: dict[str, Any], log: Path) -> tuple[bool, list[tuple[str, str]], dict[str, Any], float]:
    """dag.test() one DAG run: (every task succeeded or was skipped, [(task, state)] in run
    order, {task: XCom return value}, seconds)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    t0 = time.monotonic()
    with _logs_to(log):
        dag = DagBag(dag_folder=str(example_dags_folder())).get_dag(dag_id)
        dr = dag.test(run_conf=conf)
        with create_session() as session:
            tis = sorted(dr.get_task_instances(session=session),
                         key=lambda ti: (ti.start_date is None, ti.start_date or 0, ti.task_id))
            states = [(ti.task_id, str(getattr(ti.state, "value", ti.state))) for ti in tis]
            xcoms = {}
            for row in session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == dr.run_id,
                                                       XComModel.key == "return_value"):
                value = row.value
                try:
                    value = json.loads(value) if isinstance(value, (str, bytes)) else value
                except ValueError:
                    pass
                xcoms[row.task_id] = value
    run_state = str(getattr(dr.state, "value", dr.state))
    ok = run_state == "success" and all(s in OK_STATES for _, s in states)
    return ok, states, xcoms, time.monotonic() - t0


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def summary_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """A before/after text table of the health reports ``before`` and ``after``.

    One row per metric the demo's maintenance is expected to change.
    """
    rows: list[tuple[str, str, Callable[[Any], str]]] = [
        ("versions", "num_versions", str),
        ("fragments", "fragments", str),
        ("small fragments", "small_fragments", str),
        ("data files", "data_files", str),
        ("rows (live)", "rows", lambda v: f"{v:,}"),
        ("deleted rows", "deleted_rows", lambda v: f"{v:,}"),
        ("deleted ratio", "deleted_ratio", lambda v: f"{v:.1%}"),
        ("bytes", "bytes", _fmt_bytes),
        ("current version", "version", str),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"  {'':<{width}}  {'before':>12}  {'after':>12}", f"  {'-' * width}  {'-' * 12}  {'-' * 12}"]
    for label, key, fmt in rows:
        lines.append(f"  {label:<{width}}  {fmt(before[key]):>12}  {fmt(after[key]):>12}")
    return "\n".join(lines)


def _print_run(dag_id: str, ok: bool, states: list[tuple[str, str]], xcoms: dict[str, Any], seconds: float) -> None:
    _say(f"  {dag_id}: {'OK' if ok else 'FAILED'} in {seconds:.1f} s")
    for task_id, state in states:
        note = ""
        out = xcoms.get(task_id)
        if isinstance(out, dict) and state == "success":
            if "summary" in out and isinstance(out["summary"], dict):
                note = f"staged {out['summary'].get('rows')} rows in {out['summary'].get('fragments')} fragments"
            elif "reasons" in out:
                note = "; ".join(out["reasons"])
            elif "version" in out:
                changed = "changed" if out.get("changed") else "unchanged"
                metrics = out.get("metrics") or {}
                picked = {k: metrics[k] for k in ("num_rows", "fragments_removed", "fragments_added",
                                                  "old_versions", "bytes_removed", "written", "rows")
                          if isinstance(metrics.get(k), (int, float)) and metrics.get(k)}
                note = f"version {out['version']} ({changed}) {picked if picked else ''}".rstrip()
        _say(f"      {task_id:<26} {state:<8} {note}")


def main(argv: list[str] | None = None) -> int:
    """Run the demo: ingest with Spark via Airflow, then run maintenance and show the effect.

    Returns the process exit code (0 when every DAG run succeeded).
    """
    parser = argparse.ArgumentParser(prog="python -m lance_ops.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.environ.get("LANCE_OPS_DEMO_DIR", ".demo"),
                        help="working directory (default: ./.demo; the dataset and sources are recreated)")
    parser.add_argument("--rows", type=int, default=60_000, help="rows ingested in total (default: 60000)")
    args = parser.parse_args(argv)

    if not (example_dags_folder() / "lance_ingest.py").exists():
        _say("the demo needs the Lance provider's example DAGs: pip install 'lance-ops[airflow,spark]'")
        return 2
    work = Path(args.dir).resolve()
    home, data = work / "airflow", work / "data"
    uri, raw1, raw2 = str(data / "events.lance"), data / "raw" / "batch1", data / "raw" / "batch2"
    log = work / "demo.log"
    shutil.rmtree(data, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    os.environ.update(airflow_environment(home))
    t_start = time.monotonic()

    _say(f"lance-ops demo in {work}  (logs: {log})")
    _say("[1/6] Airflow home on SQLite: airflow db migrate")
    proc = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True,
                          text=True, env=dict(os.environ))
    with open(log, "a") as fh:
        fh.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        _say(f"  airflow db migrate failed (exit {proc.returncode}); see {log}")
        return 1

    big, small = args.rows * 2 // 3, args.rows - args.rows * 2 // 3
    target = max(1000, big // 6)  # batch 1: 4 fragments of ~1.5x target; batch 2: 8 of ~0.4x target
    _say(f"[2/6] Parquet sources: {big:,} + {small:,} rows")
    make_source(raw1, 0, big, 4)
    make_source(raw2, big, small, 8)

    failed = False
    _say("[3/6] lance_ingest x2 (spark-submit --stage-only, then one commit task each)")
    for raw, partitions in ((raw1, 4), (raw2, 8)):  # one fragment per Spark partition
        ok, states, xcoms, secs = run_dag("lance_ingest", {"dataset_uri": uri, "source_path": str(raw),
                                                           "partitions": partitions}, log)
        _print_run("lance_ingest", ok, states, xcoms, secs)
        failed |= not ok
    if failed:
        _say(f"ingestion failed; see {log}")
        return 1

    import lance_ops

    _say("[4/6] delete 20 % of the rows (id % 5 = 0): deletion files only")
    deleted = lance_ops.dataset(uri).delete("id % 5 = 0")["num_deleted_rows"]
    _say(f"  deleted {deleted:,} rows")
    before = health(uri, target)

    _say("[5/6] lance_maintenance (sensor -> compaction -> materialization -> index upkeep -> statistics -> row-id index -> verify -> cleanup)")
    conf = {
        "dataset_uri": uri, "target_rows_per_fragment": target, "small_fragments_threshold": 4,
        "deleted_ratio_threshold": 0.05, "materialize_deletions_threshold": 0.1,
        "cleanup_older_than": "0s", "spark_threshold_rows": 1_000_000,
    }
    ok, states, xcoms, secs = run_dag("lance_maintenance", conf, log)
    _print_run("lance_maintenance", ok, states, xcoms, secs)
    failed |= not ok
    after = health(uri, target)

    _say("[6/6] before / after maintenance")
    _say(summary_table(before, after))
    expected = args.rows - deleted
    consistent = after["rows_counted"] == expected == before["rows_counted"]
    _say(f"  rows check: {after['rows_counted']:,} live rows before and after maintenance "
         f"({'OK' if consistent else 'MISMATCH, expected %d' % expected})")
    failed |= not consistent
    _say("  (tests/airflow checks the same DAG runs against pylance; lance_ops never imports it)")
    _say(f"done in {time.monotonic() - t_start:.0f} s: {'FAILED' if failed else 'all DAG runs succeeded'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
