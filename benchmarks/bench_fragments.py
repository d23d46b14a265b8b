"""lance_ops vs pylance on a fragment-heavy dataset, each call opening the dataset as a task would.

    .venv/bin/python benchmarks/bench_fragments.py [--storage 2.0 2.2] [--fragments 2000]
        [--rows-per-fragment 200] [--appends 200] [--rounds 3] [--max-ratio 1.5] [--only scan,filter]
        [--cache-dir DIR] [--rebuild]

The dataset is what Airflow-scheduled ingestion leaves between compactions: ``appends`` appends of
``fragments / appends`` small fragments each, then four deletes removing 5% of the rows (every
fragment carries a deletion file), so about 2,000 fragments and 204 versions. It is written by
**pylance** (``lance.write_dataset(..., data_storage_version=...)``), once per storage version, and
cached under ``--cache-dir`` (default: ``<tmp>/lance_ops_bench_fragments``) keyed by the parameters.

Every timed call opens the dataset afresh (``lance_ops.dataset(uri)`` / ``lance.dataset(uri)``),
as an Airflow or Spark task does, and consumes its result (sums a column, counts rows). Rounds
alternate which library goes first; the minimum over all calls is reported, of wall time (the
ratio that counts) and of CPU time (user+sys of all threads: steadier on a loaded machine). A
millisecond-scale operation makes several calls per side in each round after the first (the same
number on both sides, ``bench_file_v22.calls_per_round``): the minimum of three single calls of a
few milliseconds was mostly noise. Mutating operations
(append, delete, compaction, cleanup) run on a fresh copy of the dataset per call; the
copy is not timed and is flushed to disk (``os.sync``) before the timed call. Prints a ratio table (ours/pylance, lower is better) and exits 1 if any ratio
is above ``--max-ratio``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance  # noqa: E402  (the oracle: only benchmarks and tests import it)
import lance.optimize  # noqa: E402

import lance_ops  # noqa: E402
from lance_ops.maintenance.cleanup import cleanup_old_versions  # noqa: E402
from lance_ops.maintenance.compaction import compact_files, plan_compaction  # noqa: E402
from benchmarks.bench_file_v22 import calls_per_round  # noqa: E402

FILTER = "x > 1.0 AND id % 3 = 0"
DELETE = "id % 100 = 7"
PROJECTION = ["id", "x"]


def make_rows(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    """``n`` rows with ids from ``start``: an int64 key, a double, a short string and a small vector."""
    lengths = rng.integers(8, 24, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    return pa.table({
        "id": np.arange(start, start + n, dtype=np.int64),
        "x": pa.array(rng.standard_normal(n)),
        "name": pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
    })


def build(uri: str, storage: str, fragments: int, rows_per_fragment: int, appends: int) -> None:
    """Write the fragment-heavy dataset with pylance: ``appends`` appends, then four 1.25% deletes."""
    rng = np.random.default_rng(11)
    per_append = max(1, fragments // appends)
    rows = per_append * rows_per_fragment
    for i in range(appends):
        lance.write_dataset(make_rows(i * rows, rows, rng), uri, mode="create" if i == 0 else "append",
                            max_rows_per_file=rows_per_fragment, data_storage_version=storage)
    ds = lance.dataset(uri)
    for k in range(4):                      # 4 x 1.25% = 5% deleted, every fragment has a deletion file
        ds.delete(f"id % 80 = {k * 20 + 3}")


def cached_dataset(root: str, storage: str, args: argparse.Namespace) -> str:
    """The path of the cached source dataset for ``storage``, building it on first use."""
    key = hashlib.sha1(repr((storage, args.fragments, args.rows_per_fragment, args.appends,
                             lance.__version__)).encode()).hexdigest()[:12]
    uri = os.path.join(root, f"frag-{storage}-{key}.lance")
    done = uri + ".done"
    if args.rebuild or not os.path.exists(done):
        shutil.rmtree(uri, ignore_errors=True)
        t0 = time.perf_counter()
        build(uri, storage, args.fragments, args.rows_per_fragment, args.appends)
        open(done, "w").close()
        print(f"built {uri} in {time.perf_counter() - t0:.1f}s", flush=True)
    return uri


def consume_table(t: pa.Table) -> int:
    """Touch every column of ``t`` (sum the numbers and string lengths, count the rest)."""
    total = t.num_rows
    for name in t.column_names:
        col = t.column(name)
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            total += int(pc.sum(col).as_py() or 0)
        elif pa.types.is_string(col.type) or pa.types.is_binary(col.type):
            total += int(pc.sum(pc.binary_length(col)).as_py() or 0)
        else:
            total += int(pc.count(col).as_py())
    return total


def operations(storage: str, uri: str, take_idx: np.ndarray) -> list[tuple[str, bool, Callable, Callable]]:
    """(name, mutates, ours(uri), pylance(uri)) for every timed operation."""
    batch = make_rows(10 ** 9, 1000, np.random.default_rng(3))
    opts = {"target_rows_per_fragment": 1024 * 1024}

    def our_plan(u: str) -> int:
        return len(plan_compaction(lance_ops.dataset(u), **opts).tasks)

    def their_plan(u: str) -> int:
        return len(lance.optimize.Compaction.plan(lance.dataset(u), lance.optimize.CompactionOptions(**opts)).tasks)

    return [
        ("open+count", False, lambda u: lance_ops.dataset(u).count_rows(), lambda u: lance.dataset(u).count_rows()),
        ("full scan", False, lambda u: consume_table(lance_ops.dataset(u).to_table()),
         lambda u: consume_table(lance.dataset(u).to_table())),
        ("2-column scan", False, lambda u: consume_table(lance_ops.dataset(u).to_table(columns=PROJECTION)),
         lambda u: consume_table(lance.dataset(u).to_table(columns=PROJECTION))),
        ("filtered scan", False, lambda u: consume_table(lance_ops.dataset(u).to_table(filter=FILTER)),
         lambda u: consume_table(lance.dataset(u).to_table(filter=FILTER))),
        ("take 100", False, lambda u: consume_table(lance_ops.dataset(u).take(take_idx)),
         lambda u: consume_table(lance.dataset(u).take(take_idx))),
        ("versions()", False, lambda u: len(lance_ops.dataset(u).versions()), lambda u: len(lance.dataset(u).versions())),
        ("compaction plan", False, our_plan, their_plan),
        ("append 1 batch", True, lambda u: lance_ops.write_dataset(batch, u, mode="append").version,
         lambda u: lance.write_dataset(batch, u, mode="append").version),
        ("delete 1%", True, lambda u: lance_ops.dataset(u).delete(DELETE),
         lambda u: lance.dataset(u).delete(DELETE)),
        ("compaction", True, lambda u: compact_files(lance_ops.dataset(u), **opts)["fragments_removed"],
         lambda u: lance.dataset(u).optimize.compact_files(**opts).fragments_removed),
        # equal work: the copy was just made, so every old version was superseded moments ago;
        # lance-ops' safety rule (keep versions superseded less than min_superseded_age ago, 5
        # minutes by default) would keep them all, pylance has no such rule: turn it off here
        ("cleanup", True,
         lambda u: cleanup_old_versions(lance_ops.dataset(u), timedelta(0), delete_unverified=True,
                                        min_superseded_age=timedelta(0)).old_versions,
         lambda u: lance.dataset(u).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True).old_versions),
    ]


def run_storage(storage: str, args: argparse.Namespace, cache: str, scratch: str) -> list[tuple[str, float, float]]:
    """Time every operation at ``storage``; returns (name, ours seconds, pylance seconds) minima."""
    src = cached_dataset(cache, storage, args)
    ds = lance.dataset(src)
    live = ds.count_rows()
    print(f"\n== storage {storage}: {len(ds.get_fragments())} fragments, {live} live rows, "
          f"{len(ds.versions())} versions (written by pylance {lance.__version__})", flush=True)
    take_idx = np.sort(np.random.default_rng(5).choice(live, 100, replace=False))
    wanted = set(args.only.split(",")) if args.only else None
    best: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    answers: dict[str, dict[str, Any]] = {}
    ops = [op for op in operations(storage, src, take_idx) if wanted is None or any(w in op[0] for w in wanted)]
    rows = []
    print(f"\n| {storage} operation | lance_ops s | pylance s | ours/pylance | lance_ops cpu s | pylance cpu s | cpu ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|", flush=True)
    for name, mutates, ours, theirs in ops:
        calls = 1  # per side and round: more for millisecond-scale operations after round one
        for r in range(args.rounds):
            sides = [("lance_ops", ours), ("pylance", theirs)]
            if r % 2:
                sides.reverse()
            for who, fn in sides:
                for _ in range(calls):
                    uri = src
                    if mutates:
                        uri = os.path.join(scratch, f"{who}-{r}.lance")
                        shutil.rmtree(uri, ignore_errors=True)
                        shutil.copytree(src, uri)
                        os.sync()  # the copy's writeback is not charged to whichever side runs next
                    c0 = time.process_time()        # CPU of every thread of this process (both sides)
                    t0 = time.perf_counter()
                    out = fn(uri)
                    dt = time.perf_counter() - t0
                    dc = time.process_time() - c0
                    if mutates:
                        shutil.rmtree(uri, ignore_errors=True)
                    slot = best.setdefault(name, [float("inf"), float("inf")])
                    i = 0 if who == "lance_ops" else 1
                    slot[i] = min(slot[i], dt)
                    cslot = cpu.setdefault(name, [float("inf"), float("inf")])
                    cslot[i] = min(cslot[i], dc)
                    answers.setdefault(name, {})[who] = out
            if r == 0:
                calls = calls_per_round(max(best[name]), mutates)
        o, t = best[name]
        rows.append((name, o, t))
        ratio = o / t if t > 0 else float("inf")
        flag = "  **" if ratio > args.max_ratio else ""
        co, ct = cpu[name]
        print(f"| {name} | {o:.4f} | {t:.4f} | {ratio:.2f}{flag} | {co:.4f} | {ct:.4f} | "
              f"{co / ct if ct > 0 else float('inf'):.2f} |", flush=True)
        a = answers[name]
        if a.get("lance_ops") != a.get("pylance"):
            print(f"  note: {name}: results differ (lance_ops {a.get('lance_ops')!r}, pylance {a.get('pylance')!r})")
    return rows


def main() -> int:
    """Run the benchmark; 1 if any ratio is above ``--max-ratio``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", nargs="+", default=["2.0", "2.2"])
    ap.add_argument("--fragments", type=int, default=2000)
    ap.add_argument("--rows-per-fragment", type=int, default=200)
    ap.add_argument("--appends", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-ratio", type=float, default=1.5)
    ap.add_argument("--only", default=None, help="comma-separated substrings of operation names")
    ap.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "lance_ops_bench_fragments"))
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()

    os.makedirs(args.cache_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="bench_frag_")
    worst = 0.0
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cpus, "
              f"load average {os.getloadavg()[0]:.2f}; {args.rounds} alternating rounds, minimum of each")
        for storage in args.storage:
            rows = run_storage(storage, args, args.cache_dir, scratch)
            worst = max([worst] + [o / t if t > 0 else float("inf") for _, o, t in rows])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nworst ratio {worst:.2f} (max allowed {args.max_ratio}); load average now {os.getloadavg()[0]:.2f}")
    return 1 if worst > args.max_ratio else 0


if __name__ == "__main__":
    sys.exit(main())
