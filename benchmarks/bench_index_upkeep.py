"""lance_ops vs pylance: ``optimize_indices`` on scalar indices (issue 22).

    .venv/bin/python benchmarks/bench_index_upkeep.py [--rows 1000000] [--new 100000] [--rounds 3]
        [--max-ratio 1.5] [--profile] [--dir /tmp]

Builds one 2.2 dataset of ``rows`` rows with BTREE (id), BITMAP (k) and LABEL_LIST (labels)
indices, 10% deleted, then appends ``new`` rows. pylance's ``ds.optimize.optimize_indices()`` runs
on one copy, ``lance_ops.maintenance.optimize_indices`` on another (default policy: the newest
segment folded with the new rows). Rounds alternate A/B on fresh copies (copy untimed), the minimum
of each side is kept; prints the ratio table (ours/pylance, lower is better) and exits 1 above
``--max-ratio`` or when, after the last round, either side leaves unindexed rows or answers one of
``FILTERS`` differently from a plain scan (checked through pylance); ``--profile`` adds the cProfile of one more lance_ops run.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
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


def table(start: int, rows: int) -> pa.Table:
    rng = np.random.default_rng(start)
    i = np.arange(start, start + rows)
    labels = pa.ListArray.from_arrays(np.arange(0, 2 * rows + 1, 2, dtype=np.int32),
                                      pa.array(np.char.add("l", (np.repeat(i, 2) % np.tile([13, 7], rows)).astype(str))))
    return pa.table({"id": pa.array(i, pa.int64()), "k": pa.array(rng.integers(0, 100, rows)), "labels": labels})


FILTERS = ["id >= 950000", "id < 1000 OR id >= 1099000", "k = 7", "k IN (3, 50)",
           "array_has_any(labels, ['l3'])", "array_has_all(labels, ['l5', 'l1'])"]


def check(uri: str) -> tuple[int, dict[str, list[int]]]:
    """(unindexed rows over every index, sorted ids each filter returns) of ``uri`` as pylance sees it."""
    ds = lance.dataset(uri)
    unindexed = sum(int(ds.stats.index_stats(i["name"])["num_unindexed_rows"]) for i in ds.list_indices())
    return unindexed, {f: sorted(ds.to_table(columns=["id"], filter=f).column("id").to_pylist()) for f in FILTERS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=100_000)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    args = parser.parse_args()
    root = os.path.join(args.dir, "bench_index_upkeep")
    shutil.rmtree(root, ignore_errors=True)
    base = os.path.join(root, "base")
    ds = lance.write_dataset(table(0, args.rows), base, max_rows_per_file=max(1, args.rows // 10),
                             data_storage_version="2.2")
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("k", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    lance.dataset(base).delete("id % 10 = 3")
    lance.write_dataset(table(args.rows, args.new), base, mode="append")
    work = [os.path.join(root, "ours"), os.path.join(root, "pylance")]

    def fresh(side: int) -> None:
        shutil.rmtree(work[side], ignore_errors=True)
        shutil.copytree(base, work[side])
        os.sync()

    t_ours, t_pylance, _, _ = ab_rounds(args.rounds, lambda: optimize_indices(LanceDataset(work[0])),
                                        lambda: lance.dataset(work[1]).optimize.optimize_indices(), setup=fresh)
    (u_o, got_o), (u_t, got_t) = check(work[0]), check(work[1])
    truth = lance.dataset(work[1])
    want = {f: sorted(truth.to_table(columns=["id"], filter=f, use_scalar_index=False).column("id").to_pylist())
            for f in FILTERS}
    bad = [f for f in FILTERS if got_o[f] != want[f] or got_t[f] != want[f]]
    print(f"unindexed rows after: ours {u_o}, pylance {u_t}; filters answered alike (index vs plain scan): "
          f"{len(FILTERS) - len(bad)}/{len(FILTERS)} {bad or ''}")
    failed = u_o != 0 or u_t != 0 or bool(bad)
    over = report(f"optimize_indices, BTREE + BITMAP + LABEL_LIST: {args.rows} indexed + {args.new} new rows",
                  [("three scalar indices", t_ours, t_pylance, None, None)], None, args.max_ratio)
    if args.profile:
        fresh(0)
        profile = cProfile.Profile()
        profile.enable()
        optimize_indices(LanceDataset(work[0]))
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if over or failed else 0)

if __name__ == "__main__":
    main()
