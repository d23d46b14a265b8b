"""lance_ops vs pylance: full scans of many small 2.2 fragments, one column group at a time.

    .venv/bin/python benchmarks/bench_scan_groups.py [--rows 400000] [--fragments 40] [--rounds 7]
        [--only name,info,tags] [--writer ours|pylance] [--max-ratio 1.5] [--dir /tmp]

What compaction and every scan of an append-heavy dataset pay to read: per column group of
``benchmarks/bench_file.make_table`` (``name``: strings of 15-25 characters, FSST; ``info``: struct
of int32, float32 and a 5-15 character string; ``tags``: list<int32> of 0-8 items; ``x``, ``id``:
float64/int64), one dataset of ``--fragments`` appends of equal size, written once by ``--writer``
(default lance_ops, as lance-ops appends leave them) and scanned by both libraries: each timed
call opens the dataset afresh and reads it whole (``dataset(uri).to_table()``). Rounds alternate
A/B, the minimum of each side is kept, results are consumed page by page (``bench_file_v22.consume``)
and checked equal to the source table on both sides. Prints the wall ratio table and the CPU
seconds (all threads) of each side (the steadier figure under load); exits 1 when a wall ratio is
above ``--max-ratio``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance_ops  # noqa: E402
from benchmarks.bench_dataset_v22 import Cpu  # noqa: E402
from benchmarks.bench_file import make_table  # noqa: E402
from benchmarks.bench_file_v22 import ab_rounds, report  # noqa: E402

GROUPS = {"name": ["name"], "info": ["info"], "tags": ["tags"], "nums": ["id", "x"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--fragments", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default="name,info,tags", help=f"comma-separated groups of {sorted(GROUPS)}")
    parser.add_argument("--writer", default="ours", choices=["ours", "pylance"])
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()

    import lance  # pylance is the oracle; only the benchmarks and the tests import it

    table = make_table(args.rows)
    scratch = tempfile.mkdtemp(prefix="bench_scan_groups_", dir=args.dir)
    write = lance_ops.write_dataset if args.writer == "ours" else lance.write_dataset
    per = max(1, args.rows // args.fragments)
    rows: list[tuple[str, float, float, float | None, str | None]] = []
    cpu = Cpu()
    failures = 0
    for group in args.only.split(","):
        part_table = table.select(GROUPS[group])
        uri = os.path.join(scratch, group)
        for i in range(args.fragments):
            write(part_table.slice(i * per, per), uri, mode="create" if i == 0 else "append",
                  data_storage_version="2.2")
        expected = part_table.slice(0, per * args.fragments)
        k_o, k_t, acc = cpu.pair(lambda: lance_ops.dataset(uri).to_table(), lambda: lance.dataset(uri).to_table())
        t_o, t_t, got, ref = ab_rounds(args.rounds, k_o, k_t)
        label = f"scan {group} ({args.fragments} frags)"
        cpu.add(label, acc)
        same = got.equals(expected) and ref.equals(expected)
        failures += not same
        rows.append((label + ("" if same else " [DIFFERS]"), t_o, t_t, None, None))
        del got, ref
    over = report(f"2.2 scans of {args.fragments} fragments x {per} rows, written by {args.writer}", rows, None,
                  args.max_ratio)
    cpu.print()
    shutil.rmtree(scratch, ignore_errors=True)
    if failures or over:
        print(f"{failures} step(s) differ, {over} ratio(s) above {args.max_ratio}")
        sys.exit(1)


if __name__ == "__main__":
    main()
