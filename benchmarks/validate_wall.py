#!/usr/bin/env python3
"""validate's wall time by phase, side by side with one ``import torch`` on the node.

Alternates, in each round:

    import     PYTHON -c 'import torch' on the pair's first node, over the same
               connection validate uses (SSH, or local for ansible_connection: local),
               timed from the controller: process start and import
    validate   python -m nodetune validate INVENTORY --json [VALIDATE_ARG ...], timed
               from the controller; its phases from the report's result.phases_s

and prints every round, the medians, and preflight + launch as a multiple of
the median import (the goal of issue 17: at most 1.5x on the lab). NCCL's or
gloo's init is split out of launch by validate itself and shown on its own.

Run it with the venv's python from the repository root, so that
``python -m nodetune`` runs this tree's code:

    .venv/bin/python benchmarks/validate_wall.py inventory/lab --rounds 5
    .venv/bin/python benchmarks/validate_wall.py INV --rounds 3 -- --backend nccl

validate_vs_nccl_tests.py calls :func:`rounds` for its ``--wall-runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodetune.ansible.inventory import load  # noqa: E402
from nodetune.measure.host_env import node_python  # noqa: E402
from nodetune.remote import ssh  # noqa: E402 - this tree's package, not an installed one

PHASES = ("connect", "preflight", "launch", "nccl_init", "init", "measure", "cleanup")


def import_once(inventory: Path, env: Mapping[str, str]) -> float:
    """Wall seconds of ``PYTHON -c 'import torch'`` on the inventory's first GPU node."""
    host = next(h for h in load(inventory).hosts if "gpu_nodes" in h.groups)
    session = ssh.connect(host)
    try:
        started = time.monotonic()
        res = session.run([node_python(host), "-c", "import torch"], timeout=300, env=env)
        took = time.monotonic() - started
    finally:
        session.close()
    if res.exit_status != 0:
        raise SystemExit(f"{host.name}: import torch failed: {res.stderr[-500:]}")
    return took


def run_validate_json(inventory: Path, args: Sequence[str], env: Mapping[str, str]
                      ) -> tuple[int, dict[str, Any], float, str]:
    """``nodetune validate INVENTORY --json ARGS`` from this tree: exit code, its JSON
    document ({} when none), wall seconds from the controller, and stderr."""
    cmd = [sys.executable, "-m", "nodetune", "validate", str(inventory), "--json", *args]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False,
                          env={**os.environ, **env})
    wall = time.monotonic() - started
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    return proc.returncode, doc, wall, proc.stderr


def validate_once(inventory: Path, args: Sequence[str], env: Mapping[str, str]
                  ) -> dict[str, Any]:
    code, doc, wall, stderr = run_validate_json(inventory, args, env)
    phases = (doc.get("result") or {}).get("phases_s") or {}
    if code not in (0, 1) or not phases:
        raise SystemExit(f"validate failed (exit {code}): {stderr[-2000:]}")
    return {"exit": code, "wall_s": wall, **{p: phases.get(p, 0.0) for p in PHASES}}


def rounds(inventory: Path, n: int, validate_args: Sequence[str] = (),
           env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``n`` alternating rounds of import and validate; prints them and returns the summary."""
    env = dict(env or {})
    validate_once(inventory, validate_args, env)  # untimed: page cache, first connections
    rows = []
    for i in range(1, n + 1):
        imp = import_once(inventory, env)
        row = {"round": i, "import_s": imp, **validate_once(inventory, validate_args, env)}
        row["preflight_launch_s"] = row["preflight"] + row["launch"]
        rows.append(row)
    cols = ("import_s", "wall_s", *PHASES, "preflight_launch_s")
    print(f"{'round':>5} " + " ".join(f"{c:>18}" for c in cols))
    for row in rows:
        print(f"{row['round']:>5} " + " ".join(f"{row[c]:>18.2f}" for c in cols))
    med = {c: statistics.median(r[c] for r in rows) for c in cols}
    print(f"{'med':>5} " + " ".join(f"{med[c]:>18.2f}" for c in cols))
    ratios = [r["preflight_launch_s"] / r["import_s"] for r in rows]
    summary = {"rounds": rows, "median": med,
               "preflight_launch_over_import": {"median": statistics.median(ratios),
                                                "min": min(ratios), "max": max(ratios)}}
    print(f"preflight + launch = {statistics.median(ratios):.2f}x one import torch "
          f"(per round {min(ratios):.2f}-{max(ratios):.2f}); validate wall median "
          f"{med['wall_s']:.1f} s")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inventory", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, help="write the summary as JSON here")
    ap.epilog = "Arguments after -- are passed to nodetune validate."
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    summary = rounds(args.inventory, args.rounds, argv[cut + 1:])
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
