#!/usr/bin/env python3
"""validate's wall time, this tree against another checkout, alternating, beside ``import torch``.

Two inventory hosts with ``ansible_connection: local`` and one GPU each (as
validate_vs_nccl_tests.py makes them); each round runs ``import torch`` once, then
``python -m nodetune validate INVENTORY --backend nccl --json`` from this tree and
from OTHER (their order alternating between rounds), and prints each run's wall time
and phases, then the medians and this tree's median over OTHER's.

    git worktree add /tmp/base BASE_COMMIT     # or: git archive BASE | tar -x -C /tmp/base
    python3 benchmarks/validate_wall_ab.py --other /tmp/base --rounds 6

Run with torch's Python on a machine with two or more GPUs; the controller's own
dependencies (ansible-core, ansible-runner, paramiko) must be importable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from validate_vs_nccl_tests import SAFE_ENV, inventory  # noqa: E402 - beside this script


def once(tree: Path, inv: Path) -> tuple[int, float, dict[str, float]]:
    """One validate from ``tree``: exit code, wall seconds, the report's phases."""
    env = {**os.environ, **SAFE_ENV,
           "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nodetune", "validate", str(inv), "--backend",
                           "nccl", "--json"], cwd=tree, env=env, capture_output=True, text=True,
                          check=False)
    wall = time.monotonic() - started
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    phases = (doc.get("result") or {}).get("phases_s") or doc.get("phases_s") or {}
    return proc.returncode, wall, phases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--other", type=Path, required=True, help="the checkout to compare with")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    inv = inventory(Path(tempfile.mkdtemp(prefix="nodetune-wall-ab.")) / "hosts.json", 1, {})
    trees = {"this": HERE.parent, "other": args.other.resolve()}
    for tree in trees.values():  # untimed: page cache, first imports
        once(tree, inv)
    walls: dict[str, list[float]] = {"this": [], "other": [], "import torch": []}
    for i in range(args.rounds):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        walls["import torch"].append(time.monotonic() - started)
        for name in (("this", "other") if i % 2 == 0 else ("other", "this")):
            code, wall, phases = once(trees[name], inv)
            walls[name].append(wall)
            print(f"round {i + 1} {name}: exit {code}, wall {wall:.2f} s, phases {phases}",
                  flush=True)
    for name, values in walls.items():
        print(f"{name}: median {statistics.median(values):.2f} s, "
              f"min {min(values):.2f}, max {max(values):.2f}, n={len(values)}")
    ratio = statistics.median(walls["this"]) / statistics.median(walls["other"])
    print(f"this / other, median wall: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
