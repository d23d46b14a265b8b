"""Spark ingestion (lance_ops.spark.ingest) with local[1] vs local[2], against single-process writes.

    PATH=.venv/bin:$PATH SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=.venv/bin/python \\
        .venv/bin/python benchmarks/bench_spark.py [--rows 2000000] [--files 8] [--repeat 2] [--version 2.0]

The same Parquet input (``--files`` files) is ingested into a new Lance dataset, storage version
``--version`` on every side (2.0 by default, as in the earlier figures), by:

* pylance ``write_dataset`` in this process (Parquet read included) - the oracle;
* lance_ops ``write_dataset`` in this process (Parquet read included);
* the Spark ingest job on ``local[1]`` and on ``local[2]`` (one SparkSession each, in this
  process; a warm-up run first, so JVM start and Python worker start-up are excluded and printed
  separately), plus a Spark baseline that only converts the same Parquet to Arrow in the Python
  workers (``mapInArrow`` that writes nothing) to show what Spark's own conversion costs.

Prints best-of-``repeat`` wall times, rows/s, the local[2]/local[1] scaling and the ratios to
pylance. Timings are printed, never asserted. On a 2-core machine local[2] can scale at most 2x
and the driver, JVM and Python workers compete for the same cores.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import lance_ops  # noqa: E402


def make_table(start: int, stop: int) -> pa.Table:
    ids = np.arange(start, stop, dtype=np.int64)
    rng = np.random.default_rng(start)
    return pa.table({
        "id": ids,
        "x": rng.standard_normal(ids.size),
        "k": (ids % 1000).astype(np.int32),
        "name": pa.array(np.char.add("name-", (ids % 5000).astype(str)).astype(object)),
        "flag": ids % 3 == 0,
        "ts": pa.array(ids * 1000, pa.timestamp("us", "UTC")),
    })


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _noop_arrow(batches):
    n = 0
    for b in batches:
        n += b.num_rows
    yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])


def spark_runs(master: str, files: list[str], scratch: str, repeat: int, version: str) -> dict[str, float]:
    from pyspark.sql import SparkSession

    from lance_ops.spark import ingest

    t0 = time.perf_counter()
    spark = (SparkSession.builder.master(master).appName(f"bench-{master}")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = {"session_start": time.perf_counter() - t0}
    sc = spark.sparkContext
    assert sc.master == master, (sc.master, master)
    out["parallelism"] = sc.defaultParallelism
    uri = os.path.join(scratch, f"spark-{master.replace('[', '').replace(']', '')}")

    def ingest_once():
        shutil.rmtree(uri, ignore_errors=True)
        paths = [a for f in files for a in ("--path", f)]
        args = ingest.build_parser().parse_args([*paths, "--uri", uri, "--mode", "create",
                                                 "--data-storage-version", version])
        summary = ingest.run(spark, args)
        assert summary["committed"], summary

    def convert_only():
        spark.read.parquet(*files).mapInArrow(_noop_arrow, "n long").collect()

    t0 = time.perf_counter()
    ingest_once()  # warm-up: Python workers, imports, JIT
    out["first_run"] = time.perf_counter() - t0
    out["ingest"] = best_of(repeat, ingest_once)
    out["arrow_only"] = best_of(repeat, convert_only)
    out["rows"] = lance_ops.dataset(uri).count_rows()
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--version", default="2.0", choices=["2.0", "2.1", "2.2"], help="data storage version")
    args = parser.parse_args()

    import lance  # the oracle: only benchmarks and tests import it

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    scratch = tempfile.mkdtemp(prefix="bench_spark_")
    per_file = -(-args.rows // args.files)
    files = []
    for i in range(args.files):
        lo, hi = i * per_file, min(args.rows, (i + 1) * per_file)
        path = os.path.join(scratch, f"part-{i:03d}.parquet")
        pq.write_table(make_table(lo, hi), path, row_group_size=128 * 1024)
        files.append(path)
    size_mb = sum(os.path.getsize(f) for f in files) / 1e6
    print(f"input: {args.rows:,} rows in {args.files} Parquet files, {size_mb:.1f} MB; cores: {os.cpu_count()}")

    theirs_uri, ours_uri = os.path.join(scratch, "pylance"), os.path.join(scratch, "lance_ops")

    def write_pylance():
        shutil.rmtree(theirs_uri, ignore_errors=True)
        lance.write_dataset(pq.ParquetDataset(files).read(), theirs_uri, data_storage_version=args.version)

    def write_ours():
        shutil.rmtree(ours_uri, ignore_errors=True)
        lance_ops.write_dataset(pq.ParquetDataset(files).read(), ours_uri, data_storage_version=args.version)

    t_pylance = best_of(args.repeat, write_pylance)
    t_ours = best_of(args.repeat, write_ours)
    one = spark_runs("local[1]", files, scratch, args.repeat, args.version)
    two = spark_runs("local[2]", files, scratch, args.repeat, args.version)
    assert one["rows"] == two["rows"] == args.rows == lance.dataset(theirs_uri).count_rows()

    def line(name: str, seconds: float) -> None:
        print(f"{name:<44} {seconds:8.2f} s  {args.rows / seconds / 1e6:7.2f} M rows/s  "
              f"{seconds / t_pylance:6.1f}x pylance")

    print()
    line("pylance write_dataset (1 process)", t_pylance)
    line("lance_ops write_dataset (1 process)", t_ours)
    for name, r in (("local[1]", one), ("local[2]", two)):
        line(f"spark ingest {name}", r["ingest"])
        line(f"  spark parquet->arrow only {name}", r["arrow_only"])
        print(f"  {name}: parallelism {r['parallelism']}, session start {r['session_start']:.1f} s, "
              f"first (cold) ingest {r['first_run']:.1f} s")
    print()
    print(f"scaling local[2] vs local[1]: {one['ingest'] / two['ingest']:.2f}x faster "
          f"(Spark conversion alone: {one['arrow_only'] / two['arrow_only']:.2f}x)")
    print(f"load average (1/5/15 min) at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
