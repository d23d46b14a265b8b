"""lance_ops vs pylance merge_insert: 1M target rows, 100k source rows, 50% of them matching.

    .venv/bin/python benchmarks/bench_merge_insert.py [--rows 1000000] [--source 100000] [--repeat 3]

Each library upserts the same source (``when_matched_update_all().when_not_matched_insert_all()``)
into a fresh copy of the same target dataset (written once by pylance, 2.0, 250k-row fragments);
prints best-of-``repeat`` wall times and the ours/pylance ratio (issue 23 target: <= 1.5), and
checks both results are the same table. Timings are printed, never asserted.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance_ops  # noqa: E402


def table(ids: np.ndarray, tag: str) -> pa.Table:
    rng = np.random.default_rng(len(ids))
    return pa.table({"id": pa.array(ids, pa.int64()), "x": rng.random(len(ids)),
                     "name": pa.array([f"{tag}{i}" for i in ids.tolist()])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--source", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    args = parser.parse_args()

    import lance  # the oracle: only benchmarks and tests import it

    rng = np.random.default_rng(7)
    target = table(np.arange(args.rows), "t")
    half = args.source // 2
    keys = np.concatenate([rng.choice(args.rows, half, replace=False), args.rows + np.arange(args.source - half)])
    rng.shuffle(keys)
    source = table(keys, "s")
    scratch = tempfile.mkdtemp(prefix="bench_merge_")
    seed = os.path.join(scratch, "seed")
    lance.write_dataset(target, seed, max_rows_per_file=args.rows_per_file, data_storage_version="2.0")

    def run(mod, name):
        best = float("inf")
        for _ in range(args.repeat):
            path = os.path.join(scratch, name)
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(seed, path)
            ds = mod.dataset(path)
            start = time.perf_counter()
            res = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
            best = min(best, time.perf_counter() - start)
        return best, res, path

    t_ours, r_ours, p_ours = run(lance_ops, "ours")
    t_theirs, r_theirs, p_theirs = run(lance, "theirs")
    same = (lance.dataset(p_ours).to_table().sort_by("id") == lance.dataset(p_theirs).to_table().sort_by("id"))
    print(f"merge_insert {args.rows} target rows, {args.source} source rows (50% matches)")
    print(f"  lance_ops {t_ours:.3f}s  pylance {t_theirs:.3f}s  ratio {t_ours / t_theirs:.2f}  "
          f"results equal: {r_ours == r_theirs and same}  {r_ours}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
