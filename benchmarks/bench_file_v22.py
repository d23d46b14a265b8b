"""lance_ops vs pylance on one Lance 2.2 (or 2.1) data file: write, full read, projected read,
take 1000 rows, file size and compression ratio.

    .venv/bin/python benchmarks/bench_file_v22.py [--rows 1000000] [--repeat 3] [--version 2.2] [--dir /tmp]

Uses the table of ``benchmarks/bench_file.py``. Each implementation writes its own file; the read
steps run each reader on its own writer's file and also cross-read (pylance reads ours; our
reader -- ``LanceFileReaderV21`` when importable -- reads pylance's). The compression ratio is
file bytes / Arrow bytes (lower is better). Timings are printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_file import best_of, make_table  # noqa: E402
from lance_ops.file import LanceFileWriter  # noqa: E402

try:
    from lance_ops.file.reader_v2_1 import LanceFileReaderV21 as OurReader
except ImportError:  # the 2.1+ reader is developed separately
    OurReader = None


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
    t_ours, _ = best_of(args.repeat, write_ours)
    t_theirs, _ = best_of(args.repeat, write_theirs)
    rows.append(("write", t_ours, t_theirs))
    size_ours, size_theirs = os.path.getsize(ours_path), os.path.getsize(theirs_path)
    print(f"file sizes: ours {size_ours:,} B, pylance {size_theirs:,} B (ours/pylance {size_ours / size_theirs:.3f})")
    print(f"compression ratio (file bytes / arrow bytes): ours {size_ours / arrow_bytes:.3f}, "
          f"pylance {size_theirs / arrow_bytes:.3f}")

    # correctness first: pylance must read back exactly what we wrote
    back = PyReader(ours_path).read_all().to_table()
    print(f"pylance reads our file back identically: {back.equals(table)}")

    projection = ["id", "name", "info"]
    indices = np.sort(np.random.default_rng(1).choice(args.rows, size=min(1000, args.rows), replace=False))
    checks = [
        ("full read (pylance reader)", lambda: PyReader(ours_path).read_all().to_table(),
         lambda: PyReader(theirs_path).read_all().to_table()),
        ("projected read (3 cols)", lambda: PyReader(ours_path, columns=projection).read_all().to_table(),
         lambda: PyReader(theirs_path, columns=projection).read_all().to_table()),
        ("take_rows (1000 random)", lambda: PyReader(ours_path).take_rows(indices).to_table(),
         lambda: PyReader(theirs_path).take_rows(indices).to_table()),
    ]
    print("read steps: 'lance_ops' column = pylance's reader on OUR file, 'pylance' = on pylance's file")
    for label, ours_fn, theirs_fn in checks:
        t_ours, got = best_of(args.repeat, ours_fn)
        t_theirs, expected = best_of(args.repeat, theirs_fn)
        same = got.equals(expected)
        rows.append((label + ("" if same else " [RESULTS DIFFER]"), t_ours, t_theirs))
    if OurReader is None:
        print("lance_ops.file.reader_v2_1.LanceFileReaderV21 is not importable: our-reader steps skipped")
    else:
        ours_checks = [
            ("full read (our reader)", lambda: OurReader(ours_path).read_all(),
             lambda: PyReader(theirs_path).read_all().to_table()),
            ("projected (our reader)", lambda: OurReader(ours_path).read_all(columns=projection),
             lambda: PyReader(theirs_path, columns=projection).read_all().to_table()),
            ("take 1000 (our reader)", lambda: OurReader(ours_path).take_rows(indices),
             lambda: PyReader(theirs_path).take_rows(indices).to_table()),
        ]
        for label, ours_fn, theirs_fn in ours_checks:
            t_ours, got = best_of(args.repeat, ours_fn)
            t_theirs, expected = best_of(args.repeat, theirs_fn)
            same = got.equals(expected)
            rows.append((label + ("" if same else " [RESULTS DIFFER]"), t_ours, t_theirs))

    print(f"{'step':<34}{'lance_ops (s)':>14}{'pylance (s)':>13}{'ratio':>8}")
    for label, t_ours, t_theirs in rows:
        print(f"{label:<34}{t_ours:>14.4f}{t_theirs:>13.4f}{t_ours / t_theirs:>8.2f}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
