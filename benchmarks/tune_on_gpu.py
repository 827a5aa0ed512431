#!/usr/bin/env python3
"""`nodetune tune` on one multi-GPU machine, then its recommendation checked by validate.

Two inventory hosts with ``ansible_connection: local`` stand for two nodes, each given its
own GPUs (``nodetune_cuda_visible_devices``), as in benchmarks/validate_vs_nccl_tests.py.
tune A/B-tests the NCCL settings given after ``--``; when it recommends one, validate then
runs with it and without it, alternating, ``--check-runs`` times each, and the busbw at
each size is printed side by side (the recommendation's own proof).

  python3 benchmarks/tune_on_gpu.py [--gpus-per-node 1] [--check-runs 3] [--out DIR] \\
      -- --algo Ring --algo Tree --proto LL128 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from validate_vs_nccl_tests import SAFE_ENV, inventory  # beside this script

NODETUNE = [sys.executable, "-m", "nodetune"]


def run_json(argv: list[str], out: Path, name: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([*NODETUNE, *argv, "--json"], capture_output=True, text=True,
                          env={**os.environ, **SAFE_ENV}, check=False, timeout=1200)
    (out / f"{name}.json").write_text(proc.stdout)
    (out / f"{name}.err").write_text(proc.stderr)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        return proc.returncode, {}


def busbw(doc: dict[str, Any]) -> dict[int, float]:
    """Size -> busbw GB/s of a validate report (the pair's result)."""
    rows = doc.get("result", doc).get("sizes", []) if doc else []
    return {int(row["bytes"]): float(row["busbw"]) for row in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus-per-node", type=int, default=1)
    ap.add_argument("--check-runs", type=int, default=3)
    ap.add_argument("--sizes", default="1M:1G")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("tune_args", nargs="*", help="after --: nodetune tune's options")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", args.gpus_per_node, {})
        common = ["--backend", "nccl", "--sizes", args.sizes,
                  "--nproc-per-node", str(args.gpus_per_node)]
        code, doc = run_json(["tune", str(inv), "--pair", "gpu-node-0,gpu-node-1", *common,
                              *args.tune_args], args.out, "tune")
        print(f"tune exit {code}")
        if not doc:
            print((args.out / "tune.err").read_text()[-3000:])
            return 1
        rec = doc.get("recommendation") or {}
        print("recommendation:", json.dumps(rec))
        for j in doc.get("judged", []):
            last = (j.get("sizes") or [{}])[-1]
            print(f"  {j.get('combo', '?'):<28} {j.get('verdict', '?'):<14} "
                  f"median {last.get('median', 0):.1f} spread {last.get('spread_pct', 0):.1f} % "
                  f"gain {j.get('gain_pct') or 0:+.1f} %")
        if not rec.get("env"):
            return 0
        tuned = inventory(Path(tmp) / "tuned.json", args.gpus_per_node, rec["env"])
        side: dict[str, list[dict[int, float]]] = {"default": [], "tuned": []}
        for run in range(args.check_runs):
            for name, path in (("default", inv), ("tuned", tuned)):
                code, vdoc = run_json(["validate", str(path), *common], args.out,
                                      f"validate-{name}-{run + 1}")
                print(f"validate {name} run {run + 1}: exit {code}")
                side[name].append(busbw(vdoc))
        sizes = sorted(set().union(*side["default"], *side["tuned"]))
        print(f"{'bytes':>12} {'default GB/s (runs)':>30} {'tuned GB/s (runs)':>30} ratio")
        for size in sizes:
            d = [r.get(size, 0.0) for r in side["default"]]
            t = [r.get(size, 0.0) for r in side["tuned"]]
            ratio = statistics.median(t) / statistics.median(d) if statistics.median(d) else 0
            print(f"{size:>12} {' '.join(f'{x:7.1f}' for x in d):>30} "
                  f"{' '.join(f'{x:7.1f}' for x in t):>30} {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
