#!/usr/bin/env python3
"""Two commands' wall time, run alternately (A, B, B, A, ...), and A's median over B's.

On a shared or noisy machine, drift (another job, a cache, the CPU's clock) lands on both
commands alike when they alternate; a ratio of the medians is what the benchmarks in
docs/benchmarks.md report.

    python3 benchmarks/alternate.py -n 9 --timeout 900 --vs 'COMMAND B' -- COMMAND A ...

Each command runs through ``sh -c`` (B) or as given (A); a run that exits non-zero or
passes ``--timeout`` stops the comparison with its output.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time


def timed(argv: list[str], timeout: float) -> float:
    """One run's wall seconds; SystemExit naming the command if it fails."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        sys.exit(f"timed out after {timeout:.0f} s: {shlex.join(argv)}")
    took = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"exit {done.returncode}: {shlex.join(argv)}\n{done.stdout[-2000:]}"
                 f"{done.stderr[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--rounds", type=int, default=5, help="runs of each (default 5)")
    ap.add_argument("--timeout", type=float, default=600.0, help="one run's limit, seconds")
    ap.add_argument("--vs", required=True, help="command B, one shell string")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- command A and its arguments")
    args = ap.parse_args(argv)
    a = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not a or args.rounds < 1:
        ap.error("give command A after --, and --rounds of at least 1")
    b = ["sh", "-c", args.vs]
    times: dict[str, list[float]] = {"A": [], "B": []}
    for i in range(args.rounds):
        order = (("A", a), ("B", b)) if i % 2 == 0 else (("B", b), ("A", a))
        for name, cmd in order:
            times[name].append(timed(cmd, args.timeout))
        print(f"round {i + 1}: A {times['A'][-1]:.3f} s  B {times['B'][-1]:.3f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in ("A", "B"):
        print(f"{k}: median {med[k]:.3f} s (min {min(times[k]):.3f}, max {max(times[k]):.3f})")
    print(f"A / B: {med['A'] / med['B']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
