#!/usr/bin/env python3
"""`nodetune check`'s wall time on one GPU machine, beside one ``import torch``.

Each round runs, one after the other: ``PYTHON -c 'import torch'``; ``nodetune check
INVENTORY --json`` (every check, the all_reduce across the machine's GPUs included);
and the same with ``--skip-allreduce``. The inventory is one host with
``ansible_connection: local`` (as benchmarks/check_new_on_gpu.py makes it). Prints each
round, the medians, and each check's median over the import's (issue 30's goal: at most
1.2x on H200, 1.4x on H100).

    python3 benchmarks/check_wall.py --gpus 4 --driver 580.159.04 --rounds 3
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

from check_new_on_gpu import REPO, inventory  # noqa: E402 - beside this script


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False, env=env)
    return time.monotonic() - started, proc.returncode, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", driver=args.driver, gpus=args.gpus)
        env = {**os.environ, "NODETUNE_RUNS_DIR": str(Path(tmp) / "runs")}
        check = [sys.executable, "-m", "nodetune", "check", str(inv), "--json"]
        kinds = {"import torch": [sys.executable, "-c", "import torch"], "check": check,
                 "check --skip-allreduce": [*check, "--skip-allreduce"]}
        for cmd in kinds.values():  # untimed: page cache, first imports
            timed(cmd, env)
        walls: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(args.rounds):
            for name, cmd in kinds.items():
                wall, code, out = timed(cmd, env)
                walls[name].append(wall)
                took = ""
                if out.strip().startswith("{"):
                    doc = json.loads(out)
                    took = f", node {(doc.get('summary') or {}).get('duration_s')}"
                print(f"round {i + 1} {name}: exit {code}, wall {wall:.2f} s{took}", flush=True)
    base = statistics.median(walls["import torch"])
    for name, values in walls.items():
        med = statistics.median(values)
        print(f"{name}: median {med:.2f} s (min {min(values):.2f}, max {max(values):.2f}), "
              f"{med / base:.2f}x import torch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
