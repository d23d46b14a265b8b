"""Our FSST encoder and decoder on the bench table's string columns (no pylance side: it has no FSST API).

    .venv/bin/python benchmarks/bench_fsst.py [--rows 400000] [--rounds 7] [--root CHECKOUT]

Columns of ``bench_file.make_table``: ``name`` (random a-z, 15-25 bytes) and ``info.c`` (random a-z,
5-15 bytes), each compressed as one page (``fsst.compress``) and decoded back (``FsstTable.decode``,
checked equal). Prints, per column, the minimum over ``rounds`` of wall and CPU time (user+sys of the
process) of each side, input MB/s on CPU time, and the output size (symbol table + codes) against
the input. Timings are printed, never asserted. ``--root`` imports ``lance_ops`` from another
checkout (e.g. ``--root /work/main`` before a change), to compare encoders run by run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "--root" in sys.argv:
    sys.path.insert(0, os.path.abspath(sys.argv[sys.argv.index("--root") + 1]))

from benchmarks.bench_file import make_table  # noqa: E402
from lance_ops.format.v2_1.compression import fsst  # noqa: E402
from lance_ops.format.v2_1.compression.fsst_decode import FsstTable  # noqa: E402


def _cpu() -> float:
    return time.process_time()  # user+sys of all the process's threads


def _timed(fn, rounds: int) -> tuple[float, float, object]:
    """(min wall, min CPU, last result) over ``rounds`` calls."""
    wall = cpu = float("inf")
    res = None
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), _cpu()
        res = fn()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, _cpu() - c0)
    return wall, cpu, res


def _columns(rows: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    t = make_table(rows)
    out = {}
    for name, arr in (("name", t.column("name").combine_chunks()),
                      ("info.c", t.column("info").combine_chunks().field("c"))):
        offs = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1).astype(np.int64)
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
        out[name] = (offs, data)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--root", help="a checkout whose lance_ops is measured (default: this one)")
    args = ap.parse_args()
    import lance_ops
    print(f"lance_ops from {os.path.dirname(os.path.dirname(lance_ops.__file__))}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'column':8} {'in MB':>7} {'out MB':>7} {'ratio':>6} {'enc wall ms':>11} {'enc cpu ms':>10} "
          f"{'enc MB/s':>8} {'dec wall ms':>11} {'dec cpu ms':>10} {'dec MB/s':>8}")
    for name, (offs, data) in _columns(args.rows).items():
        size = int(offs[-1] - offs[0])
        ew, ec, (table, coffs, cdata) = _timed(lambda: fsst.compress(offs, data), args.rounds)
        dec = FsstTable(table)
        dw, dc, (doffs, ddata) = _timed(lambda: dec.decode(cdata, coffs), args.rounds)
        if not (np.array_equal(doffs, offs - offs[0]) and np.array_equal(ddata, data[offs[0]:offs[-1]])):
            raise SystemExit(f"{name}: decoded bytes differ from the input")
        out = len(table) + len(cdata)
        print(f"{name:8} {size / 1e6:7.3f} {out / 1e6:7.3f} {out / size:6.3f} {ew * 1e3:11.1f} {ec * 1e3:10.1f} "
              f"{size / 1e6 / max(ec, 1e-9):8.1f} {dw * 1e3:11.1f} {dc * 1e3:10.1f} {size / 1e6 / max(dc, 1e-9):8.1f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
