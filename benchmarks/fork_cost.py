#!/usr/bin/env python3
"""What one fork costs a process of a given size on this machine (docs/benchmarks.md,
§ Issue 41 item 6: the floor, and what a task start costs).

ansible-playbook forks one worker for each host of each task (one for a `run_once` task,
none for a `meta` task), and its process peaks at about 69 MiB on a converged site.yml.
This allocates and touches SIZE MiB, then forks a child that exits at once, 50 times, and
prints the mean fork-and-reap time:

    python3 benchmarks/fork_cost.py 10 70 200
"""

from __future__ import annotations

import os
import sys
import time

ROUNDS = 50
PAGE = 4096
MIB = 1024 * 1024


def fork_ms(mib: int) -> float:
    """Mean milliseconds of one fork and reap with ``mib`` MiB allocated and touched."""
    blob = [bytearray(MIB) for _ in range(mib)]
    for chunk in blob:  # one byte a page, so that every page is the process's own
        chunk[::PAGE] = b"\x01" * (MIB // PAGE)
    start = time.perf_counter()
    for _ in range(ROUNDS):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return (time.perf_counter() - start) / ROUNDS * 1000


def main(argv: list[str]) -> int:
    for size in [int(a) for a in argv] or [70]:
        print(f"{size} MiB: fork and reap {fork_ms(size):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
