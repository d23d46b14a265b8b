"""The Spark merge job (lance_ops.spark.merge) on local[1] vs local[2], beside pylance's merge_insert.

    PATH=.venv/bin:$PATH SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=.venv/bin/python \\
        .venv/bin/python benchmarks/bench_spark_merge.py [--rows 1000000] [--source 100000] [--rounds 2]

The target (``--rows``, written once by pylance in 250k-row fragments) and the source (a Parquet
file of ``--source`` rows, half of them matching) are those of ``bench_merge_insert.py``. Each
round starts a SparkSession on ``local[1]``, then one on ``local[2]`` (alternating), warms it up
with one merge (Python workers, imports), then times one more merge of a fresh copy of the
target; pylance's in-process merge_insert of the same source is timed in each round too. Prints
the min per setting, the local[2]/local[1] scaling and the load average; checks every result
equals pylance's. Timings are printed, never asserted. On a 2-core machine local[2] can scale at
most 2x, and the driver, the JVM and the Python workers compete for those cores.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_merge_insert import inputs  # noqa: E402


def spark_round(master: str, seed: str, src_path: str, scratch: str) -> tuple[float, float, str]:
    """(session start s, timed merge s, dataset path) of one session on ``master``."""
    from pyspark.sql import SparkSession

    from lance_ops.spark.merge import merge_dataframe

    t0 = time.perf_counter()
    spark = (SparkSession.builder.master(master).appName(f"bench-merge-{master}")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "3g")
             .config("spark.sql.shuffle.partitions", "8").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    start = time.perf_counter() - t0
    assert spark.sparkContext.master == master
    path = os.path.join(scratch, f"spark-{master[6]}")
    try:
        for _ in range(2):  # the first is the warm-up
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(seed, path)
            t0 = time.perf_counter()
            out = merge_dataframe(spark.read.parquet(src_path), path, ["id"])
            took = time.perf_counter() - t0
            assert out["committed"], out
    finally:
        spark.stop()
    return start, took, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--source", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import lance  # the oracle: only benchmarks and tests import it

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    scratch = tempfile.mkdtemp(prefix="bench_spark_merge_")
    try:
        seed, source = inputs(args.rows, args.source, 250_000, "2.0", scratch)
        src_path = os.path.join(scratch, "source.parquet")
        pq.write_table(source, src_path)
        times: dict[str, list[float]] = {"local[1]": [], "local[2]": [], "pylance": []}
        loads = []
        expected = None
        for _ in range(args.rounds):
            for master in ("local[1]", "local[2]"):
                _, took, path = spark_round(master, seed, src_path, scratch)
                times[master].append(took)
                loads.append(os.getloadavg()[0])
                got = lance.dataset(path).to_table().sort_by("id")
                assert expected is None or got.equals(expected), f"{master}: result differs from pylance's"
            oracle = os.path.join(scratch, "pylance")
            shutil.rmtree(oracle, ignore_errors=True)
            shutil.copytree(seed, oracle)
            t0 = time.perf_counter()
            lance.dataset(oracle).merge_insert("id").when_matched_update_all().when_not_matched_insert_all() \
                .execute(pq.read_table(src_path))
            times["pylance"].append(time.perf_counter() - t0)
            expected = lance.dataset(oracle).to_table().sort_by("id")
        one, two, theirs = min(times["local[1]"]), min(times["local[2]"]), min(times["pylance"])
        print(f"Spark merge job: {args.rows} target rows, {args.source} source rows (50% matches), "
              f"{args.rounds} alternating rounds, load average {min(loads):.1f}-{max(loads):.1f}, cores {os.cpu_count()}")
        print("| setting | seconds (min) | vs pylance in-process |")
        print("|---|---|---|")
        for name in ("local[1]", "local[2]", "pylance"):
            print(f"| {name} | {min(times[name]):.2f} | {min(times[name]) / theirs:.1f}x |")
        print(f"scaling local[2] vs local[1]: {one / two:.2f}x")
        # the first round's Spark results were compared with the previous oracle; check the last too
        for master in ("local[1]", "local[2]"):
            path = os.path.join(scratch, f"spark-{master[6]}")
            assert lance.dataset(path).to_table().sort_by("id").equals(expected), master
        print("results equal pylance's: True")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
