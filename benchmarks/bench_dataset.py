"""lance_ops vs pylance (and Parquet for reference) on one dataset: write, scans, take, delete.

    .venv/bin/python benchmarks/bench_dataset.py [--rows 1000000] [--repeat 3]

Both libraries write the same table as a Lance 2.0 dataset (1M-row fragments by default), then each
reads its own dataset. Prints best-of-``repeat`` wall times and the ours/pylance ratio (lower is
better); timings are printed, never asserted.
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
import pyarrow.dataset as pads
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance_ops  # noqa: E402
from benchmarks.bench_file import make_table  # noqa: E402


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    args = parser.parse_args()

    import lance  # the oracle: only benchmarks and tests import it

    table = make_table(args.rows)
    scratch = tempfile.mkdtemp(prefix="bench_dataset_")
    ours, theirs, parquet = (os.path.join(scratch, n) for n in ("ours", "pylance", "parquet"))
    projection = ["id", "x", "name"]
    predicate = "x > 1.5 AND id % 3 = 0"
    indices = np.sort(np.random.default_rng(1).choice(args.rows, 1000, replace=False))

    def write_ours():
        shutil.rmtree(ours, ignore_errors=True)
        lance_ops.write_dataset(table, ours, max_rows_per_file=args.rows_per_file, data_storage_version="2.0")

    def write_theirs():
        shutil.rmtree(theirs, ignore_errors=True)
        lance.write_dataset(table, theirs, max_rows_per_file=args.rows_per_file, data_storage_version="2.0")

    def write_parquet():
        shutil.rmtree(parquet, ignore_errors=True)
        pads.write_dataset(table, parquet, format="parquet", max_rows_per_file=args.rows_per_file,
                           max_rows_per_group=min(args.rows_per_file, 1 << 20))

    rows = [("write", best_of(args.repeat, write_ours), best_of(args.repeat, write_theirs),
             best_of(args.repeat, write_parquet))]
    o, t = lance_ops.dataset(ours), lance.dataset(theirs)
    p = pads.dataset(parquet, format="parquet")
    import pyarrow.compute as pc

    pq_filter = (pc.field("x") > 1.5) & (pc.field("id") % 3 == 0) if hasattr(pc.Expression, "__mod__") else (pc.field("x") > 1.5)
    checks = [
        ("full scan", lambda: o.to_table(), lambda: t.to_table(), lambda: p.to_table()),
        ("projected scan (3 cols)", lambda: o.to_table(columns=projection), lambda: t.to_table(columns=projection),
         lambda: p.to_table(columns=projection)),
        ("filtered scan", lambda: o.to_table(filter=predicate), lambda: t.to_table(filter=predicate),
         lambda: p.to_table(filter=pq_filter)),
        ("take 1000 random", lambda: o.take(indices), lambda: t.take(indices), lambda: p.take(pa.array(indices))),
    ]
    for label, f_ours, f_theirs, f_pq in checks:
        rows.append((label, best_of(args.repeat, f_ours), best_of(args.repeat, f_theirs), best_of(args.repeat, f_pq)))

    def delete_ours():
        lance_ops.dataset(ours).delete("id % 97 = 5")

    def delete_theirs():
        lance.dataset(theirs).delete("id % 97 = 5")

    rows.append(("delete (1% of rows)", best_of(1, delete_ours), best_of(1, delete_theirs), float("nan")))
    same = lance_ops.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    print(f"dataset: {args.rows} rows, {args.rows_per_file} rows per file; results equal after delete: {same}")
    print(f"{'step':<26}{'lance_ops (s)':>14}{'pylance (s)':>13}{'parquet (s)':>13}{'ours/pylance':>14}")
    for label, a, b, c in rows:
        print(f"{label:<26}{a:>14.4f}{b:>13.4f}{c:>13.4f}{a / b:>14.2f}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
