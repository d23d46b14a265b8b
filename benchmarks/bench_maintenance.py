"""lance_ops vs pylance on table maintenance: compact_files and cleanup_old_versions.

    .venv/bin/python benchmarks/bench_maintenance.py [--fragments 200] [--rows 5000] [--repeat 3]
        [--target 1048576] [--threads 1] [--dir /tmp]

Builds one dataset (``fragments`` appends of ``rows`` rows, Lance 2.0 files, a few deletes so
that some fragments carry deletion files and some get materialised), copies it per run, and
compacts each copy with pylance's ``ds.optimize.compact_files`` and with
``lance_ops.maintenance.compaction.compact_files``. Then both clean up the old versions of
their compacted copy (``older_than=0``, ``delete_unverified=True``). Prints best-of-``repeat``
wall times and the ours/pylance ratio (lower is better). Timings are printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance  # noqa: E402

import lance_ops  # noqa: E402
from lance_ops.maintenance.compaction import compact_files  # noqa: E402

try:
    from lance_ops.maintenance.cleanup import cleanup_old_versions as our_cleanup
except ImportError:  # written separately
    our_cleanup = None


def make_rows(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    lengths = rng.integers(8, 24, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    return pa.table({
        "id": ids,
        "x": pa.array(rng.standard_normal(n)),
        "name": pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16),
    })


def build(uri: str, fragments: int, rows: int) -> None:
    rng = np.random.default_rng(7)
    for i in range(fragments):
        lance.write_dataset(make_rows(i * rows, rows, rng), uri, mode="create" if i == 0 else "append",
                            data_storage_version="2.0")
    total = fragments * rows
    ds = lance.dataset(uri)
    ds.delete(f"id % 97 = 0")                                   # ~1% everywhere: below the threshold
    ds.delete(f"id >= {total // 4} AND id < {total // 4 + 3 * rows}")  # wipe part of 3-4 fragments
    ds.delete(f"id >= {total // 2} AND id < {total // 2 + rows // 2} AND id % 3 = 0")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fragments", type=int, default=200)
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", type=int, default=1024 * 1024)
    ap.add_argument("--threads", type=int, default=1, help="lance_ops tasks executed at once")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="bench_maint_", dir=args.dir)
    try:
        src = os.path.join(work, "src.lance")
        t, _ = timed(lambda: build(src, args.fragments, args.rows))
        ds = lance.dataset(src)
        print(f"dataset: {len(ds.get_fragments())} fragments, {ds.count_rows()} live rows, "
              f"version {ds.version} (built in {t:.1f}s); target_rows_per_fragment={args.target}")

        best = {"pylance": [float("inf"), None], "lance_ops": [float("inf"), None]}
        cleanup_best = {"pylance": [float("inf"), None], "lance_ops": [float("inf"), None]}
        for r in range(args.repeat):
            for who in ("pylance", "lance_ops"):
                uri = os.path.join(work, f"{who}-{r}.lance")
                shutil.copytree(src, uri)
                if who == "pylance":
                    t, m = timed(lambda: lance.dataset(uri).optimize.compact_files(
                        target_rows_per_fragment=args.target))
                    summary = (m.fragments_removed, m.fragments_added, m.files_removed, m.files_added)
                else:
                    t, m = timed(lambda: compact_files(lance_ops.dataset(uri), target_rows_per_fragment=args.target,
                                                       num_threads=args.threads))
                    summary = (m["fragments_removed"], m["fragments_added"], m["files_removed"], m["files_added"])
                if t < best[who][0]:
                    best[who] = [t, summary]
                # cleanup of the versions the compaction made obsolete
                if who == "pylance":
                    t, s = timed(lambda: lance.dataset(uri).cleanup_old_versions(
                        older_than=timedelta(0), delete_unverified=True))
                    cleaned = (s.old_versions, s.bytes_removed)
                elif our_cleanup is not None:
                    t, s = timed(lambda: our_cleanup(lance_ops.dataset(uri), timedelta(0), None,
                                                     delete_unverified=True))
                    cleaned = (s.old_versions, s.bytes_removed)
                else:
                    t, cleaned = float("nan"), None
                if t < cleanup_best[who][0] or cleanup_best[who][1] is None:
                    cleanup_best[who] = [t, cleaned]
                shutil.rmtree(uri)

        print(f"\n{'step':<28}{'pylance s':>12}{'lance_ops s':>14}{'ratio':>9}")
        (tp, sp), (to, so) = best["pylance"], best["lance_ops"]
        print(f"{'compact_files':<28}{tp:>12.3f}{to:>14.3f}{to / tp:>9.2f}")
        (cp, csp), (co, cso) = cleanup_best["pylance"], cleanup_best["lance_ops"]
        ratio = f"{co / cp:>9.2f}" if our_cleanup is not None and cp > 0 else f"{'n/a':>9}"
        print(f"{'cleanup_old_versions':<28}{cp:>12.3f}{co:>14.3f}{ratio}")
        print(f"\ncompaction (fragments removed, added, files removed, added): pylance {sp}, lance_ops {so}")
        print(f"cleanup (old versions, bytes removed): pylance {csp}, lance_ops {cso}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
