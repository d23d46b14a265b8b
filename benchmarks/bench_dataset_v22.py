"""lance_ops vs pylance on a Lance 2.2 dataset: write, scan, 2-column scan, filter, take, delete, compact.

    .venv/bin/python benchmarks/bench_dataset_v22.py [--rows 400000] [--rounds 5] [--version 2.2]
        [--compact-fragments 40] [--max-ratio 1.5] [--dir /tmp] [--hw]

Each implementation writes its own dataset (the table of ``benchmarks/bench_file.py``, pylance's
default file size, so one fragment) and every step runs on its own dataset. Every timed call opens
the dataset afresh (``lance.dataset(uri)`` / ``lance_ops.dataset(uri)``), as an Airflow or Spark
task does; rounds alternate A/B and the minimum of each side is kept (a millisecond-scale step
makes several calls per side in each round after the first, ``bench_file_v22.calls_per_round``);
results are consumed page by page on both sides (``bench_file_v22.consume``). Delete runs on a
fresh copy of the dataset every call (the copy is not timed). Compaction: ``--compact-fragments`` appends of equal size, then
``optimize.compact_files()`` on a fresh copy every round. Results are checked equal across the two
libraries. Prints the ratio table (ours/pylance, lower is better) and the CPU seconds (all threads)
of each side; exits 1 when a wall ratio is above ``--max-ratio``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance_ops  # noqa: E402
from benchmarks.bench_file import make_table  # noqa: E402
from benchmarks.bench_file_v22 import ab_rounds, hardware_limits, report  # noqa: E402


class Cpu:
    """CPU seconds (user+sys of all threads, ``time.process_time``) of each timed call, per side and
    step: under load the CPU ratio is steadier than the wall ratio."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    def pair(self, fo, ft):
        acc: tuple[list[float], list[float]] = ([], [])

        def wrap(fn, side: int):
            def run():
                start = time.process_time()
                try:
                    return fn()
                finally:
                    acc[side].append(time.process_time() - start)
            return run
        return wrap(fo, 0), wrap(ft, 1), acc

    def add(self, label: str, acc: tuple[list[float], list[float]]) -> None:
        self.rows.append((label, min(acc[0]), min(acc[1])))

    def print(self) -> None:
        print(f"\nCPU seconds, all threads (minimum per side; load average now {os.getloadavg()[0]:.2f})")
        print(f"{'step':<28}{'lance_ops cpu':>14}{'pylance cpu':>13}{'ratio':>8}")
        for label, a, b in self.rows:
            print(f"{label:<28}{a:>14.4f}{b:>13.4f}{a / b if b else float('inf'):>8.2f}")


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--version", default="2.2", choices=["2.0", "2.1", "2.2"])
    parser.add_argument("--compact-fragments", type=int, default=40)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--hw", action="store_true", help="measure and report the hardware limit")
    parser.add_argument("--skip", default="", help="comma-separated steps to skip (write,compact,...)")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    import lance  # the oracle: only benchmarks and tests import it

    version = args.version
    table = make_table(args.rows)
    scratch = tempfile.mkdtemp(prefix="bench_dataset_v22_", dir=args.dir)
    hw = hardware_limits(scratch) if args.hw else None
    ours, theirs = os.path.join(scratch, "ours"), os.path.join(scratch, "pylance")
    work_o, work_t = os.path.join(scratch, "ours_work"), os.path.join(scratch, "pylance_work")
    projection = ["id", "x"]
    predicate = "x > 1.5 AND id % 3 = 0"
    indices = np.sort(np.random.default_rng(1).choice(args.rows, 1000, replace=False))
    rows: list = []
    cpu = Cpu()
    failures = 0

    def write_ours() -> None:
        shutil.rmtree(ours, ignore_errors=True)
        lance_ops.write_dataset(table, ours, data_storage_version=version)

    def write_theirs() -> None:
        shutil.rmtree(theirs, ignore_errors=True)
        lance.write_dataset(table, theirs, data_storage_version=version)

    if "write" in skip:
        write_ours(), write_theirs()
    else:
        w_o, w_t, acc = cpu.pair(write_ours, write_theirs)
        t_o, t_t, _, _ = ab_rounds(args.rounds, w_o, w_t, setup=lambda side: os.sync())
        rows.append(("write", t_o, t_t, float(_dir_bytes(theirs)), "buffered write"))
        cpu.add("write", acc)
    size = float(_dir_bytes(theirs))

    steps = [
        ("scan", lambda: lance_ops.dataset(ours).to_table(), lambda: lance.dataset(theirs).to_table(), size),
        ("2-column scan", lambda: lance_ops.dataset(ours).to_table(columns=projection),
         lambda: lance.dataset(theirs).to_table(columns=projection), float(table.select(projection).nbytes)),
        ("filter", lambda: lance_ops.dataset(ours).to_table(filter=predicate),
         lambda: lance.dataset(theirs).to_table(filter=predicate), None),
        ("take 1000", lambda: lance_ops.dataset(ours).take(indices), lambda: lance.dataset(theirs).take(indices), None),
    ]
    for label, f_o, f_t, nbytes in steps:
        if label in skip:
            continue
        f_o, f_t, acc = cpu.pair(f_o, f_t)
        t_o, t_t, got, ref = ab_rounds(args.rounds, f_o, f_t)
        cpu.add(label, acc)
        same = got.equals(ref)
        failures += not same
        rows.append((label + ("" if same else " [DIFFERS]"), t_o, t_t, nbytes, "page-cache read"))
        del got, ref

    def fresh_copies(src_o: str, src_t: str):
        def setup(side: int) -> None:
            src, dst = ((src_o, work_o), (src_t, work_t))[side]
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
            os.sync()
        return setup

    if "delete" not in skip:
        d_o, d_t, acc = cpu.pair(lambda: lance_ops.dataset(work_o).delete("id % 97 = 5"),
                                 lambda: lance.dataset(work_t).delete("id % 97 = 5"))
        t_o, t_t, _, _ = ab_rounds(args.rounds, d_o, d_t, setup=fresh_copies(ours, theirs))
        cpu.add("delete (1% of rows)", acc)
        same = lance_ops.dataset(work_o).to_table().equals(lance.dataset(work_t).to_table())
        failures += not same
        rows.append(("delete (1% of rows)" + ("" if same else " [DIFFERS]"), t_o, t_t, None, None))

    if "compact" not in skip:
        c_o, c_t = os.path.join(scratch, "ours_c"), os.path.join(scratch, "pylance_c")
        per = max(1, args.rows // args.compact_fragments)
        for i in range(args.compact_fragments):
            part = table.slice(i * per, per)
            mode = "create" if i == 0 else "append"
            lance_ops.write_dataset(part, c_o, mode=mode, data_storage_version=version)
            lance.write_dataset(part, c_t, mode=mode, data_storage_version=version)
        csize = float(_dir_bytes(c_t))
        k_o, k_t, acc = cpu.pair(lambda: lance_ops.dataset(work_o).optimize.compact_files(),
                                 lambda: lance.dataset(work_t).optimize.compact_files())
        t_o, t_t, _, _ = ab_rounds(args.rounds, k_o, k_t, setup=fresh_copies(c_o, c_t))
        cpu.add(f"compact {args.compact_fragments} frags", acc)
        d_o, d_t = lance_ops.dataset(work_o), lance.dataset(work_t)
        same = d_o.to_table().equals(d_t.to_table()) and len(d_o.get_fragments()) == len(d_t.get_fragments())
        failures += not same
        rows.append((f"compact {args.compact_fragments} frags" + ("" if same else " [DIFFERS]"), t_o, t_t,
                     csize, "buffered write"))

    over = report(f"{version} dataset, {args.rows} rows (each call opens the dataset)", rows, hw, args.max_ratio)
    cpu.print()
    shutil.rmtree(scratch, ignore_errors=True)
    if failures or over:
        print(f"{failures} step(s) differ, {over} ratio(s) above {args.max_ratio}")
        sys.exit(1)


if __name__ == "__main__":
    main()
