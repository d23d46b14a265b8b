"""Peak memory of lance_ops vs pylance: streaming ``to_batches`` over a dataset larger than memory, and compaction.

    .venv/bin/python benchmarks/bench_memory.py [--gib 4] [--version 2.2] [--budget-mib 1024]
        [--compact-rows 1000000,3000000] [--dir /tmp] [--keep]

``--gib 0`` skips part 1 (streaming) and measures compaction only.

1. Writes (with pylance, streamed in 100k-row batches) a dataset of about ``--gib`` GiB of the table
   of ``benchmarks/bench_file.py`` at ``--version``; then each library, in its own fresh process,
   streams ``to_batches()`` over all of it (every batch consumed page by page, then dropped) and
   reports its peak RSS (``resource.getrusage``: ru_maxrss) next to its RSS right after imports.
2. Compaction memory: datasets of each of ``--compact-rows`` rows in 100k-row fragments; each
   library compacts its own copy in a fresh process. Bounded by the task means the peak does not
   grow with the dataset (the tasks are the same size: pylance's 1M-row target).

Prints a table and exits 1 when lance_ops' streaming peak (above its baseline) exceeds
``--budget-mib`` or grows with the compaction dataset by more than half of the smaller one's peak.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BATCH = 100_000


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(side: str, op: str, uri: str) -> None:
    """Run one operation in this (fresh) process and print its peak RSS as JSON."""
    from benchmarks.bench_file_v22 import consume

    if side == "ours":
        import lance_ops as lib
    else:
        import lance as lib  # type: ignore[no-redef]
    import pyarrow  # noqa: F401
    base = _rss_mib()
    start = time.perf_counter()
    rows = 0
    if op == "stream":
        for batch in lib.dataset(uri).to_batches():
            consume(batch)
            rows += batch.num_rows
    else:
        lib.dataset(uri).optimize.compact_files()
        rows = lib.dataset(uri).count_rows()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"base": base, "peak": peak, "rows": rows, "seconds": time.perf_counter() - start}))


def run_child(side: str, op: str, uri: str) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", side, op, uri],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_dataset(uri: str, rows: int, version: str, rows_per_file: int) -> None:
    """Write ``rows`` rows with pylance, generated batch by batch (the generator holds one batch)."""
    import lance
    import pyarrow as pa

    from benchmarks.bench_file import make_table

    schema = make_table(1).schema

    def batches():
        for i, start in enumerate(range(0, rows, BATCH)):
            t = make_table(min(BATCH, rows - start), seed=i)
            t = t.set_column(0, "id", pa.array(range(start, start + t.num_rows), pa.int64()))
            yield from t.to_batches()

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    lance.write_dataset(reader, uri, data_storage_version=version, max_rows_per_file=rows_per_file)


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _stream(args: argparse.Namespace, scratch: str) -> int:
    """Part 1: each side streams ``to_batches`` over a dataset of ``--gib`` GiB; 1 above the budget."""
    failures = 0
    big = os.path.join(scratch, "big")
    rows = int(args.gib * 2**30 / 570)  # about 570 bytes a row
    t = time.perf_counter()
    write_dataset(big, rows, args.version, 1024 * 1024)
    size = _dir_bytes(big)
    print(f"dataset: {rows:,} rows, {size / 2**30:.2f} GiB, version {args.version} "
          f"(written in {time.perf_counter() - t:.0f} s); machine RAM "
          f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"\n{'operation':<34}{'side':<10}{'base MiB':>9}{'peak MiB':>10}{'peak-base':>10}{'seconds':>9}")
    results = {}
    for side in ("ours", "pylance"):
        r = run_child(side, "stream", big)
        assert r["rows"] == rows, r
        results[side] = r
        print(f"{'to_batches over ' + format(size / 2**30, '.1f') + ' GiB':<34}{side:<10}{r['base']:>9.0f}"
              f"{r['peak']:>10.0f}{r['peak'] - r['base']:>10.0f}{r['seconds']:>9.1f}")
    if results["ours"]["peak"] - results["ours"]["base"] > args.budget_mib:
        print(f"lance_ops streaming peak above the {args.budget_mib:.0f} MiB budget")
        failures += 1
    shutil.rmtree(big)
    return failures


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--version", default="2.2")
    parser.add_argument("--budget-mib", type=float, default=1024)
    parser.add_argument("--compact-rows", default="1000000,3000000")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="bench_memory_", dir=args.dir)
    failures = 0
    try:
        if args.gib > 0:
            failures += _stream(args, scratch)
        else:
            print(f"(streaming skipped: --gib 0); load average {os.getloadavg()[0]:.2f}")
            print(f"\n{'operation':<34}{'side':<10}{'base MiB':>9}{'peak MiB':>10}{'peak-base':>10}{'seconds':>9}")

        peaks: dict[str, list[float]] = {"ours": [], "pylance": []}
        for n in (int(x) for x in args.compact_rows.split(",") if x):
            src = os.path.join(scratch, f"small_{n}")
            write_dataset(src, n, args.version, BATCH)
            for side in ("ours", "pylance"):
                work = os.path.join(scratch, f"work_{side}")
                shutil.rmtree(work, ignore_errors=True)
                shutil.copytree(src, work)
                r = run_child(side, "compact", work)
                assert r["rows"] == n, r
                peaks[side].append(r["peak"] - r["base"])
                print(f"{'compact ' + format(n, ',') + ' rows (100k/frag)':<34}{side:<10}{r['base']:>9.0f}"
                      f"{r['peak']:>10.0f}{r['peak'] - r['base']:>10.0f}{r['seconds']:>9.1f}")
                shutil.rmtree(work)
            shutil.rmtree(src)
        ours = peaks["ours"]
        if len(ours) > 1 and ours[-1] - ours[0] > 0.5 * ours[0]:
            print("lance_ops compaction peak grows with the dataset")
            failures += 1
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
