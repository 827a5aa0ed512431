#!/usr/bin/env python3
"""`nodetune check`'s wall time on one GPU machine, beside one ``import torch``.

Each round runs (wall time, and CPU time with every child process), one after the
other: ``PYTHON -c 'import torch'``; ``nodetune check
INVENTORY --json`` (every check, the all_reduce across the machine's GPUs included);
and the same with ``--skip-allreduce``. The inventory is one host with
``ansible_connection: local`` (as benchmarks/check_new_on_gpu.py makes it). Prints each
round, the medians, and each check's median over the import's (issue 30's goal: at most
1.2x on H200, 1.4x on H100).

    python3 benchmarks/check_wall.py --gpus 4 --driver 580.159.04 --rounds 3
    python3 benchmarks/check_wall.py --gpus 4 --driver 580.159.04 --rounds 3 --vs OLD_TREE

``--vs`` runs another checkout's ``nodetune check`` (its own tree on ``PYTHONPATH``) in
every round too, alternating which goes first, and prints the medians' ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from check_new_on_gpu import REPO, inventory  # noqa: E402 - beside this script

CPU: list[float] = []  # CPU-s of each timed() command, its children included, in order


def timed(cmd: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, int, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False, env=env)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, proc.returncode, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vs", type=Path, help="another checkout, timed beside this one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", driver=args.driver, gpus=args.gpus)
        env = {**os.environ, "NODETUNE_RUNS_DIR": str(Path(tmp) / "runs")}
        check = [sys.executable, "-m", "nodetune", "check", str(inv), "--json"]
        trees = {"": REPO} if args.vs is None else {"": REPO, " (--vs)": args.vs.resolve()}
        kinds: dict[str, tuple[list[str], Path]] = {
            "import torch": ([sys.executable, "-c", "import torch"], REPO)}
        for label, tree in trees.items():
            kinds["check" + label] = (check, tree)
            kinds["check --skip-allreduce" + label] = ([*check, "--skip-allreduce"], tree)

        def run(name: str, cmd: list[str], tree: Path) -> tuple[float, int, str]:
            path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
            return timed(cmd, {**env, "PYTHONPATH": path}, cwd=tree)

        for name, (cmd, tree) in kinds.items():  # untimed: page cache, first imports
            run(name, cmd, tree)
        walls: dict[str, list[float]] = {k: [] for k in kinds}
        cpus: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(args.rounds):
            names = list(kinds) if i % 2 == 0 else [next(iter(kinds)), *reversed(list(kinds)[1:])]
            for name in names:
                cmd, tree = kinds[name]
                wall, code, out = run(name, cmd, tree)
                walls[name].append(wall)
                cpus[name].append(CPU[-1])
                took = ""
                if out.strip().startswith("{"):
                    doc = json.loads(out)
                    took = f", node {(doc.get('summary') or {}).get('duration_s')}"
                print(f"round {i + 1} {name}: exit {code}, wall {wall:.2f} s, "
                      f"CPU {CPU[-1]:.2f} s{took}", flush=True)
    base = statistics.median(walls["import torch"])
    for name, values in walls.items():
        med = statistics.median(values)
        cpu = statistics.median(cpus[name])
        print(f"{name}: median {med:.2f} s (min {min(values):.2f}, max {max(values):.2f}), "
              f"{med / base:.2f}x import torch; CPU median {cpu:.2f} s, "
              f"{cpu / statistics.median(cpus['import torch']):.2f}x import torch's")
    for name in [k for k in walls if k.endswith(" (--vs)")]:
        this = statistics.median(walls[name.removesuffix(" (--vs)")])
        print(f"{name.removesuffix(' (--vs)')}: this tree / --vs tree, median: "
              f"{this / statistics.median(walls[name]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
