"""lance_ops vs pylance: adding appended rows to an IVF vector index (issue 22, vector updater).

    .venv/bin/python benchmarks/bench_index_upkeep_vector.py [--rows 1000000] [--new 100000] [--dim 32]
        [--kind IVF_PQ] [--partitions 64] [--rounds 3] [--max-ratio 1.5] [--dir /tmp]

Builds one 2.2 dataset (``rows`` indexed rows, then ``new`` appended unindexed rows), then on two
copies: pylance's ``optimize_indices(num_indices_to_merge=n)`` and lance_ops'
(``lance_ops.maintenance.optimize_indices``, plan to commit). ``n`` = 0 (delta) then 1 (merged).
Rounds alternate A/B on fresh copies (copy untimed) and the minimum of each side is kept. After the
last round both results are checked through pylance: no unindexed rows left, and recall@10 of 20
queries against exact search (ours may not fall more than 0.05 below pylance's). Prints the ratio
table (ours/pylance, lower is better) and exits 1 when a ratio is above ``--max-ratio`` or a check
fails.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance  # noqa: E402

from benchmarks.bench_file_v22 import ab_rounds, report  # noqa: E402
from lance_ops.maintenance import optimize_indices  # noqa: E402
from lance_ops.table.dataset import LanceDataset  # noqa: E402


def table(rng: np.random.Generator, n: int, start: int, dim: int) -> pa.Table:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim)})


def build(uri: str, rows: int, new: int, dim: int, kind: str, partitions: int) -> None:
    rng = np.random.default_rng(7)
    ds = lance.write_dataset(table(rng, rows, 0, dim), uri, data_storage_version="2.2")
    params = {"num_partitions": partitions}
    if kind == "IVF_PQ":
        params["num_sub_vectors"] = dim // 4
    ds.create_index("vec", kind, **params)
    lance.write_dataset(table(rng, new, rows, dim), uri, mode="append")


def ours(uri: str, merge: bool) -> None:
    """lance_ops' public ``optimize_indices`` (plan, segment, CreateIndex commit), as a task runs it."""
    optimize_indices(LanceDataset(uri), num_indices_to_merge=1 if merge else 0)


def check(uri: str, queries: np.ndarray, exact: list[set[int]], k: int) -> tuple[int, float]:
    """(unindexed rows, recall@k against exact search) of ``uri`` as pylance sees it."""
    ds = lance.dataset(uri)
    name = ds.list_indices()[0]["name"]
    unindexed = int(ds.stats.index_stats(name)["num_unindexed_rows"])
    hits = 0
    for q, truth in zip(queries, exact):
        got = ds.to_table(columns=["id", "_distance"], nearest={"column": "vec", "q": q, "k": k, "nprobes": 8})
        hits += len(truth & set(got.column("id").to_pylist()))
    return unindexed, hits / (k * len(queries))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--kind", default="IVF_PQ")
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    root = tempfile.mkdtemp(dir=args.dir)
    rows = []
    failed = []
    try:
        src = os.path.join(root, "src")
        build(src, args.rows, args.new, args.dim, args.kind, args.partitions)
        queries = np.random.default_rng(11).standard_normal((20, args.dim)).astype(np.float32)
        plain = lance.dataset(src)
        exact = [set(plain.to_table(columns=["id", "_distance"], nearest={"column": "vec", "q": q, "k": 10, "use_index": False})
                     .column("id").to_pylist()) for q in queries]
        for merge in (False, True):
            work = [os.path.join(root, "ours"), os.path.join(root, "theirs")]

            def fresh(side: int) -> None:
                shutil.rmtree(work[side], ignore_errors=True)
                shutil.copytree(src, work[side])
                os.sync()

            t_o, t_t, _, _ = ab_rounds(
                args.rounds, lambda: ours(work[0], merge),
                lambda: lance.dataset(work[1]).optimize.optimize_indices(num_indices_to_merge=1 if merge else 0),
                setup=fresh)
            label = f"{args.kind} {'merged' if merge else 'delta'}"
            rows.append((label, t_o, t_t, None, None))
            (u_o, r_o), (u_t, r_t) = check(work[0], queries, exact, 10), check(work[1], queries, exact, 10)
            print(f"{label}: unindexed rows ours {u_o} pylance {u_t}; recall@10 ours {r_o:.3f} pylance {r_t:.3f}")
            if u_o != 0 or u_t != 0 or r_o < r_t - 0.05:
                failed.append(label)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    over = report(f"optimize_indices, {args.kind}: {args.rows} indexed + {args.new} new rows, dim {args.dim}, "
                  f"{args.partitions} partitions", rows, None, args.max_ratio)
    if failed:
        print("check failed:", ", ".join(failed))
    sys.exit(1 if over or failed else 0)


if __name__ == "__main__":
    main()
