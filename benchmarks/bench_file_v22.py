"""lance_ops vs pylance on one Lance 2.2 (or 2.1) data file: write, read, 3-column read, take 1000.

    .venv/bin/python benchmarks/bench_file_v22.py [--rows 300000] [--rounds 5] [--version 2.2]
        [--max-ratio 1.5] [--dir /tmp] [--hw]

Each implementation writes its own file (table of ``benchmarks/bench_file.py``); every read step
runs each reader on its own file. Rounds alternate A/B (ours, pylance, ours, ...) and the table
keeps the minimum of each side; every result is consumed page by page (one byte of every 4 KiB of
every Arrow buffer is read) on both sides, so lazily mapped results pay their cost. Results are
checked equal to the source table. Prints a ratio table (ours/pylance, lower is better) and exits
1 when a ratio is above ``--max-ratio``. ``--hw`` also measures this machine's page-cache read and
buffered write bandwidth and prints how close each step gets (bytes moved / time vs the limit).

The helpers (:func:`consume`, :func:`ab_rounds`, :func:`hardware_limits`, :func:`report`) are
shared by ``bench_dataset_v22.py`` and ``bench_memory.py``.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_file import make_table  # noqa: E402
from lance_ops.file import LanceFileReader, LanceFileWriter  # noqa: E402

PAGE = 4096


def _touch_array(arr: pa.Array) -> int:
    total = 0
    for buf in arr.buffers():
        if buf is not None and buf.size:
            total += int(np.frombuffer(buf, dtype=np.uint8)[::PAGE].sum())
    return total


def consume(result: Any) -> int:
    """Read one byte of every 4 KiB page of every buffer of ``result`` (table, batch, reader, iterator)."""
    if isinstance(result, pa.Table):
        return sum(_touch_array(chunk) for col in result.columns for chunk in col.chunks)
    if isinstance(result, pa.RecordBatch):
        return sum(_touch_array(col) for col in result.columns)
    return sum(consume(part) for part in result)  # an iterator of batches


#: a round of a millisecond-scale operation calls each side this long (at least): one call of a few
#: milliseconds is at the mercy of a timer tick or a page fault, on either side
ROUND_SECONDS = 0.2
#: calls per side and round at most (with a fresh copy before each call: at most ``COPIED_CALLS``)
MAX_CALLS, COPIED_CALLS = 25, 3


def calls_per_round(first: float, copied: bool) -> int:
    """Calls per side in each round after the first, for an operation whose slower side took
    ``first`` seconds in round one (both sides make the same number of calls)."""
    if first <= 0:
        return MAX_CALLS
    return max(1, min(COPIED_CALLS if copied else MAX_CALLS, math.ceil(ROUND_SECONDS / first)))


def ab_rounds(rounds: int, ours: Callable[[], Any], theirs: Callable[[], Any],
              setup: Callable[[int], None] | None = None) -> tuple[float, float, Any, Any]:
    """Minimum wall times of ``ours`` and ``theirs`` over ``rounds`` alternating rounds (A, B, A, B...).

    ``setup(side)`` (untimed; side 0 is ours, 1 pylance's) runs before every call (a fresh copy of
    that side's dataset for a delete, a sync after a write). Rounds after the first make
    :func:`calls_per_round` calls per side (the same on both sides), so a millisecond-scale
    operation's minimum is taken over enough calls.
    Each result is consumed page by page inside the timed region; the last results are returned.
    """
    best = [float("inf"), float("inf")]
    last: list[Any] = [None, None]
    calls = 1
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for side in order:
            for _ in range(calls):
                if setup is not None:
                    setup(side)
                fn = ours if side == 0 else theirs
                start = time.perf_counter()
                res = fn()
                if isinstance(res, (pa.Table, pa.RecordBatch)) or hasattr(res, "__next__"):
                    res = consume(res) if hasattr(res, "__next__") else (consume(res), res)[1]
                best[side] = min(best[side], time.perf_counter() - start)
                last[side] = res
        if r == 0:
            calls = calls_per_round(max(best), setup is not None)
    return best[0], best[1], last[0], last[1]


def hardware_limits(scratch: str, size: int = 512 << 20) -> dict[str, float]:
    """Page-cache read, buffered write and memory copy bandwidth of this machine in bytes/s (best of 3)."""
    path = os.path.join(scratch, "hw.bin")
    data = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    write = read = copy = float("inf")
    for _ in range(3):
        if os.path.exists(path):
            os.remove(path)
        os.sync()
        t = time.perf_counter()
        with open(path, "wb") as f:
            f.write(memoryview(data))
        write = min(write, time.perf_counter() - t)
    out = np.zeros_like(data)
    out[::PAGE] = 1  # fault the destination pages in before timing
    for _ in range(3):
        t = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            f.readinto(memoryview(out))
        read = min(read, time.perf_counter() - t)
        t = time.perf_counter()
        np.copyto(out, data)
        copy = min(copy, time.perf_counter() - t)
    os.remove(path)
    return {"page-cache read": size / read, "buffered write": size / write, "memory copy": size / copy}


def load() -> str:
    """The 1-minute load average and the core count, for the report."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def report(title: str, rows: list[tuple[str, float, float, float | None, str | None]],
           hw: dict[str, float] | None, max_ratio: float) -> int:
    """Print the ratio table (with the share of the hardware limit where bytes are known); 1 if over."""
    print(f"\n{title} ({load()}; minimum of alternating rounds)")
    head = f"{'step':<28}{'lance_ops (s)':>14}{'pylance (s)':>13}{'ratio':>8}"
    if hw:
        head += f"{'ours %hw':>10}{'pylance %hw':>13}"
    print(head)
    over = 0
    for label, a, b, nbytes, kind in rows:
        ratio = a / b
        flag = " OVER" if ratio > max_ratio else ""
        over += ratio > max_ratio
        line = f"{label:<28}{a:>14.4f}{b:>13.4f}{ratio:>8.2f}"
        if hw:
            if nbytes and kind:
                line += f"{100 * nbytes / a / hw[kind]:>9.0f}%{100 * nbytes / b / hw[kind]:>12.0f}%"
            else:
                line += f"{'-':>10}{'-':>13}"
        print(line + flag)
    if hw:
        print("hardware limit: " + ", ".join(f"{k} {v / 2**30:.2f} GiB/s" for k, v in hw.items())
              + " (%hw = bytes of the file or result / time / limit)")
    return over


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--version", default="2.2", choices=["2.1", "2.2"])
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--hw", action="store_true", help="measure and report the hardware limit")
    args = parser.parse_args()

    # pylance is the oracle; only the benchmarks and the tests import it
    from lance.file import LanceFileReader as PyReader
    from lance.file import LanceFileWriter as PyWriter

    table = make_table(args.rows)
    scratch = tempfile.mkdtemp(prefix="bench_file_v22_", dir=args.dir)
    hw = hardware_limits(scratch) if args.hw else None
    ours_path = os.path.join(scratch, "ours.lance")
    theirs_path = os.path.join(scratch, "pylance.lance")

    def write_ours() -> None:
        with LanceFileWriter(ours_path, table.schema, version=args.version) as w:
            w.write_batch(table)

    def write_theirs() -> None:
        with PyWriter(theirs_path, table.schema, version=args.version) as w:
            w.write_batch(table)

    rows: list[tuple[str, float, float, float | None, str | None]] = []
    # a sync before each write: neither side pays for the other's background write-back
    t_o, t_t, _, _ = ab_rounds(args.rounds, write_ours, write_theirs, setup=lambda side: os.sync())
    size_o, size_t = os.path.getsize(ours_path), os.path.getsize(theirs_path)
    rows.append(("write", t_o, t_t, float(size_t), "buffered write"))
    print(f"table: {args.rows} rows, {table.nbytes / 2**20:.0f} MiB in Arrow, file version {args.version}; "
          f"file sizes ours {size_o:,} B, pylance {size_t:,} B")

    projection = ["id", "name", "info"]
    indices = np.sort(np.random.default_rng(1).choice(args.rows, size=min(1000, args.rows), replace=False))
    steps = [
        ("read", lambda: LanceFileReader(ours_path).read_all(),
         lambda: PyReader(theirs_path).read_all().to_table(), table, float(size_t)),
        ("3-column read", lambda: LanceFileReader(ours_path).read_all(columns=projection),
         lambda: PyReader(theirs_path, columns=projection).read_all().to_table(), table.select(projection),
         float(table.select(projection).nbytes)),
        ("take 1000 rows", lambda: LanceFileReader(ours_path).take_rows(indices),
         lambda: PyReader(theirs_path).take_rows(indices).to_table(), table.take(indices), None),
    ]
    failures = 0
    for label, f_o, f_t, expected, nbytes in steps:
        t_o, t_t, got, ref = ab_rounds(args.rounds, f_o, f_t)
        same = got.equals(expected) and ref.equals(expected)
        failures += not same
        rows.append((label + ("" if same else " [DIFFERS]"), t_o, t_t, nbytes, "page-cache read"))
        del got, ref
    over = report(f"2.{args.version[-1]} file, {args.rows} rows", rows, hw, args.max_ratio)
    shutil.rmtree(scratch, ignore_errors=True)
    if failures or over:
        print(f"{failures} step(s) differ, {over} ratio(s) above {args.max_ratio}")
        sys.exit(1)


if __name__ == "__main__":
    main()
