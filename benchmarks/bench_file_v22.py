"""lance_ops vs pylance on one Lance 2.2 (or 2.1) data file: write, full read, projected read,
take 1000 rows, file size and compression ratio.

    .venv/bin/python benchmarks/bench_file_v22.py [--rows 1000000] [--repeat 3] [--version 2.2] [--dir /tmp]

Uses the table of ``benchmarks/bench_file.py``. Each implementation writes its own file. Every read
step then runs OUR reader (``LanceFileReaderV21``) and pylance's reader on the SAME file -- once
on pylance's file and once on ours -- so only the reader differs; the results of the two readers
must be equal (and equal to the source table). A last section times pylance's reader on our
file against its own file (how readable our files are). Read timings alternate between the two
sides and keep the best of ``repeat`` runs each; they are printed, never asserted. The compression
ratio is file bytes / Arrow bytes (lower is better).
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

from benchmarks.bench_file import best_of, make_table  # noqa: E402
from lance_ops.file import LanceFileWriter  # noqa: E402
from lance_ops.format.v2_1.reader import LanceFileReaderV21 as OurReader  # noqa: E402


def paired_best(repeat: int, fa, fb):
    """Best-of-``repeat`` wall times of ``fa`` and ``fb``, run alternately (fairer under noisy load)."""
    ta = tb = float("inf")
    ra = rb = None
    for _ in range(repeat):
        t = time.perf_counter()
        ra = fa()
        ta = min(ta, time.perf_counter() - t)
        t = time.perf_counter()
        rb = fb()
        tb = min(tb, time.perf_counter() - t)
    return ta, ra, tb, rb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--version", default="2.2", choices=["2.1", "2.2"])
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()

    # pylance is the oracle; only the benchmark and the tests import it
    from lance.file import LanceFileReader as PyReader
    from lance.file import LanceFileWriter as PyWriter

    table = make_table(args.rows)
    arrow_bytes = table.nbytes
    print(f"table: {args.rows} rows, {arrow_bytes / 2**20:.0f} MiB in memory, columns {table.column_names}, "
          f"file version {args.version}")
    scratch = tempfile.mkdtemp(prefix="bench_file_v22_", dir=args.dir)
    ours_path = os.path.join(scratch, "ours.lance")
    theirs_path = os.path.join(scratch, "pylance.lance")

    def write_ours():
        with LanceFileWriter(ours_path, table.schema, version=args.version) as w:
            w.write_batch(table)

    def write_theirs():
        with PyWriter(theirs_path, table.schema, version=args.version) as w:
            w.write_batch(table)

    rows = []
    # writes run one side after the other (alternating would make each pay for the other's
    # background write-back of a large file)
    t_ours, _ = best_of(args.repeat, write_ours)
    t_theirs, _ = best_of(args.repeat, write_theirs)
    rows.append(("write", t_ours, t_theirs))
    size_ours, size_theirs = os.path.getsize(ours_path), os.path.getsize(theirs_path)
    print(f"file sizes: ours {size_ours:,} B, pylance {size_theirs:,} B (ours/pylance {size_ours / size_theirs:.3f})")
    print(f"compression ratio (file bytes / arrow bytes): ours {size_ours / arrow_bytes:.3f}, "
          f"pylance {size_theirs / arrow_bytes:.3f}")

    # correctness first: each reader must read the other implementation's file exactly
    back = PyReader(ours_path).read_all().to_table()
    print(f"pylance reads our file back identically: {back.equals(table)}")
    ours_on_theirs = OurReader(theirs_path).read_all()
    print(f"our reader reads pylance's file identically: {ours_on_theirs.equals(table)}")
    del back, ours_on_theirs

    projection = ["id", "name", "info"]
    indices = np.sort(np.random.default_rng(1).choice(args.rows, size=min(1000, args.rows), replace=False))
    expected = {"full read": table, "projected (3 cols)": table.select(projection),
                "take 1000 rows": table.take(indices)}
    failures = 0
    for which, path in (("pylance's file", theirs_path), ("our file", ours_path)):
        steps = [
            ("full read", lambda p=path: OurReader(p).read_all(),
             lambda p=path: PyReader(p).read_all().to_table()),
            ("projected (3 cols)", lambda p=path: OurReader(p).read_all(columns=projection),
             lambda p=path: PyReader(p, columns=projection).read_all().to_table()),
            ("take 1000 rows", lambda p=path: OurReader(p).take_rows(indices),
             lambda p=path: PyReader(p).take_rows(indices).to_table()),
        ]
        for label, ours_fn, theirs_fn in steps:
            t_ours, got, t_theirs, ref = paired_best(args.repeat, ours_fn, theirs_fn)
            same = got.equals(ref) and got.equals(expected[label])
            failures += not same
            rows.append((f"{label}, {which}" + ("" if same else " [RESULTS DIFFER]"), t_ours, t_theirs))
            del got, ref

    print("\nlance_ops column: lance_ops (writer, or OUR reader); pylance column: pylance on the same file")
    print(f"{'step':<40}{'lance_ops (s)':>14}{'pylance (s)':>13}{'ratio':>8}")
    for label, t_ours, t_theirs in rows:
        print(f"{label:<40}{t_ours:>14.4f}{t_theirs:>13.4f}{t_ours / t_theirs:>8.2f}")

    # how pylance's reader fares on our file compared with its own file
    print("\npylance's reader: our file (lance_ops column) vs pylance's file (pylance column)")
    print(f"{'step':<40}{'lance_ops (s)':>14}{'pylance (s)':>13}{'ratio':>8}")
    cross = [
        ("full read", lambda: PyReader(ours_path).read_all().to_table(),
         lambda: PyReader(theirs_path).read_all().to_table()),
        ("projected (3 cols)", lambda: PyReader(ours_path, columns=projection).read_all().to_table(),
         lambda: PyReader(theirs_path, columns=projection).read_all().to_table()),
        ("take 1000 rows", lambda: PyReader(ours_path).take_rows(indices).to_table(),
         lambda: PyReader(theirs_path).take_rows(indices).to_table()),
    ]
    for label, ours_fn, theirs_fn in cross:
        t_ours, got, t_theirs, ref = paired_best(args.repeat, ours_fn, theirs_fn)
        same = got.equals(ref)
        failures += not same
        label = label + ("" if same else " [RESULTS DIFFER]")
        print(f"{label:<40}{t_ours:>14.4f}{t_theirs:>13.4f}{t_ours / t_theirs:>8.2f}")
        del got, ref
    if failures:
        print(f"\n{failures} step(s) returned different results")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
