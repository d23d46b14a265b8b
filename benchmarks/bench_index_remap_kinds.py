"""lance_ops vs pylance: compaction of a dataset carrying BITMAP, LABEL_LIST, NGRAM, ZONEMAP and
BLOOMFILTER indices (issue 19), and each lance_ops remapper on its own.

    .venv/bin/python benchmarks/bench_index_remap_kinds.py [--rows 1000000] [--fragments 10] [--dir /tmp]

Builds one 2.2 dataset (``rows`` rows in ``fragments`` fragments, the five indices, 10% deleted),
compacts a copy with pylance's ``ds.optimize.compact_files`` and another with
``lance_ops.maintenance.compaction.compact_files`` (both rewrite the data and carry the indices:
pylance remaps three kinds and leaves ZONEMAP / BLOOMFILTER stale, lance_ops remaps three and
rebuilds two). Prints wall times, the ours/pylance ratio, and the time each remapper took in
lance_ops' run (from a third copy, remappers timed one by one). Timings are printed, never asserted.
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

import lance  # noqa: E402
from lance.indices import IndexConfig  # noqa: E402

import lance_ops  # noqa: E402
from lance_ops.maintenance.compaction import compact_files  # noqa: E402
from lance_ops.maintenance.index_remap import registry  # noqa: E402


def build(uri: str, rows: int, fragments: int) -> None:
    rng = np.random.default_rng(7)
    i = np.arange(rows)
    table = pa.table({
        "id": pa.array(i, pa.int64()),
        "k": pa.array(rng.integers(0, 100, rows)),
        "labels": pa.array([[f"l{a % 13}", f"l{a % 7}"] for a in i]),
        "t": pa.array([f"w{a % 1000} z{a % 77}" for a in i]),
        "x": pa.array(rng.random(rows)),
    })
    ds = lance.write_dataset(table, uri, max_rows_per_file=rows // fragments, data_storage_version="2.2")
    ds.create_scalar_index("k", "BITMAP")
    ds.create_scalar_index("labels", "LABEL_LIST")
    ds.create_scalar_index("t", "NGRAM")
    ds.create_scalar_index("x", "ZONEMAP")
    ds.create_scalar_index("id", IndexConfig(index_type="bloomfilter", parameters={"number_of_items": 8192}))
    lance.dataset(uri).delete("id % 10 = 3")


def timed_remappers() -> dict[str, float]:
    """Wrap every registered remapper to record its wall time (kind -> seconds)."""
    times: dict[str, float] = {}
    for kind, fn in list(registry.REMAPPERS.items()):
        def wrapper(request, fn=fn, kind=kind):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return fn(request)
            finally:
                times[kind] = times.get(kind, 0.0) + time.perf_counter() - start
        registry.REMAPPERS[kind] = wrapper
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fragments", type=int, default=10)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench_remap_kinds_", dir=args.dir)
    try:
        source = os.path.join(root, "source")
        start = time.perf_counter()
        build(source, args.rows, args.fragments)
        print(f"built {args.rows} rows, {args.fragments} fragments, 5 indices in {time.perf_counter() - start:.1f} s")
        theirs, ours = os.path.join(root, "pylance"), os.path.join(root, "ours")
        shutil.copytree(source, theirs)
        shutil.copytree(source, ours)
        start = time.perf_counter()
        lance.dataset(theirs).optimize.compact_files()
        pylance_s = time.perf_counter() - start
        times = timed_remappers()
        start = time.perf_counter()
        compact_files(lance_ops.dataset(ours))
        ours_s = time.perf_counter() - start
        print(f"compact_files  pylance {pylance_s:.2f} s   lance_ops {ours_s:.2f} s   ratio {ours_s / pylance_s:.2f}")
        for kind, seconds in sorted(times.items()):
            print(f"  {kind:<12} {seconds:.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
