#!/usr/bin/env python3
"""What `nice` and the suite's background CPU tier (tests/cpu_tiers.py) leave to the critical work.

Two busy loops stand for the lab's tests (each in a session of its own, as ansible-runner
starts ansible-playbook) and two for the background work (molecule, the 2.21 pass), for
the same window of wall time. Once the background loops run at nice 10 in sessions of
their own (what `nice` gave before), once in the suite's tier (``cpu_tiers.SHARES``). Prints the
CPU seconds each side got. Needs root and a cpu cgroup; run from the repository root:

    sudo .venv/bin/python benchmarks/cpu_tier.py [--seconds 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from tests import cpu_tiers

SPIN = ("import sys, time\n"
        "end = float(sys.argv[1])\n"
        "while time.time() < end: pass\n"
        "print(time.process_time())\n")


def window(seconds: float, background: list[str]) -> tuple[float, float]:
    """CPU seconds of the two critical and the two background loops over ``seconds``."""
    end = str(time.time() + seconds + 0.5)
    critical = [subprocess.Popen([sys.executable, "-c", SPIN, end], stdout=subprocess.PIPE,
                                 text=True, start_new_session=True) for _ in range(2)]
    rest = [subprocess.Popen([*background, sys.executable, "-c", SPIN, end],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
            for _ in range(2)]
    outs = [p.communicate()[0] for p in (*critical, *rest)]
    bad = [p.args for p, out in zip((*critical, *rest), outs, strict=True)
           if p.returncode != 0 or not out.strip()]
    if bad:
        raise SystemExit(f"a loop failed: {bad}")
    got = [float(out) for out in outs]
    return sum(got[:2]), sum(got[2:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    print(f"{os.cpu_count()} cores, {args.seconds:.0f} s windows, "
          f"kernel.sched_autogroup_enabled={autogroup}")
    crit, rest = window(args.seconds, ["nice", "-n", "10"])
    print(f"background at nice 10, sessions of its own: critical {crit:.2f} CPU-s, "
          f"background {rest:.2f} CPU-s")
    tier = cpu_tiers.create(f"nodetune-test-{os.getpid()}-bench")
    if tier is None:
        print("no cgroup v1 cpu hierarchy here", file=sys.stderr)
        return 1
    try:
        crit, rest = window(args.seconds, cpu_tiers.run_argv(str(tier), ["nice", "-n", "10"]))
        print(f"background in the tier (weight {cpu_tiers.weight(tier)}):      "
              f"critical {crit:.2f} CPU-s, background {rest:.2f} CPU-s")
    finally:
        cpu_tiers.remove(tier, grace=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
