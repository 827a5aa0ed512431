#!/usr/bin/env python3
"""nodetune validate beside nccl-tests' <collective>_perf on one multi-GPU machine.

Two inventory hosts with ``ansible_connection: local`` stand for two nodes,
each given its own GPUs through ``nodetune_cuda_visible_devices``; the same
launch path as SSH runs them. nccl-tests must already be built against the
NCCL that torch uses (pass the binary with --nccl-tests); this script never
builds it.

  python3 benchmarks/validate_vs_nccl_tests.py --nccl-tests PATH/all_reduce_perf \\
      [--gpus-per-node 1] [--sizes 1M:4G] [--repeat 3] [--out DIR]

With --collective all_gather|reduce_scatter|alltoall (pass that collective's
nccl-tests binary), validate measures that collective and is compared with the
binary's out-of-place column (torch's all_gather_into_tensor, reduce_scatter_tensor
and all_to_all_single write a separate output buffer); all_reduce is in place and is
compared with the in-place column.

Prints both tables, the per-size busbw ratio against the goals (all_reduce: >= 0.98
from 16 MiB, >= 0.95 from 1 MiB; the other collectives: >= 0.95 from 64 MiB), the
validate wall time by phase, and the forced network path (NCCL_P2P_DISABLE=1
NCCL_SHM_DISABLE=1) with --expect-transport ib.
With --repeat N, validate and all_reduce_perf run N times, alternating, and the
goals must hold in every run (the forced network path runs once). With
--wall-runs N, validate's default sweep then runs N times beside one
``import torch`` (benchmarks/validate_wall.py), for its wall time by phase.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from validate_wall import rounds, run_validate_json  # beside this script

REPO = Path(__file__).resolve().parents[1]
# NVLink multicast stays off on shared multi-GPU hosts, in every environment.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.*)$")


def inventory(path: Path, gpus_per_node: int, extra_env: dict[str, str]) -> Path:
    hosts = {}
    for node in range(2):
        gpus = ",".join(str(node * gpus_per_node + g) for g in range(gpus_per_node))
        hosts[f"gpu-node-{node}"] = {
            "ansible_connection": "local",
            "ansible_host": "127.0.0.1",
            "nodetune_python": sys.executable,
            "nodetune_cuda_visible_devices": gpus,
            "nodetune_env": {**SAFE_ENV, **extra_env},
        }
    doc = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}
    path.write_text(json.dumps(doc, indent=2))
    return path


def run_validate(inv: Path, args: argparse.Namespace, *extra: str) -> tuple[int, dict[str, Any],
                                                                            float, str]:
    return run_validate_json(
        inv, ["--backend", "nccl", "--sizes", args.sizes, "--nproc-per-node",
              str(args.gpus_per_node), "--iters", str(args.iters), "--warmup", str(args.warmup),
              "--launch", args.launch,
              *(["--collective", args.collective] if args.collective != "all_reduce" else []),
              *extra], SAFE_ENV)


def run_nccl_tests(binary: str, args: argparse.Namespace) -> tuple[dict[int, dict[str, float]],
                                                                   str]:
    """all_reduce_perf's busbw per size; with --nccl-tests-cycles N (its -N), the median of
    the N cycles' rows, with the fastest and slowest in-place busbw beside it."""
    lo, hi = args.sizes.split(":")
    cmd = [binary, "-b", lo, "-e", hi, "-f", "4", "-g", str(2 * args.gpus_per_node),
           "-n", str(args.iters), "-w", str(args.warmup), "-N", str(args.nccl_tests_cycles),
           *args.nccl_tests_arg]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, **SAFE_ENV})
    cycles: dict[int, list[dict[str, float]]] = {}
    for line in proc.stdout.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cols = m.group(6).split()
        # time algbw busbw #wrong (out-of-place), then the same in place ("N/A" where the
        # collective has no in-place form).
        cycles.setdefault(int(m.group(1)), []).append(
            {"oop_us": _num(cols[0]), "oop_busbw": _num(cols[2]),
             "ip_us": _num(cols[4]) if len(cols) > 6 else float("nan"),
             "ip_busbw": _num(cols[6]) if len(cols) > 6 else float("nan")})
    rows = {}
    for size, seen in cycles.items():
        row = {k: statistics.median(c[k] for c in seen) for k in seen[0]}
        column = _ref_column(args.collective)
        row["ref_busbw"] = row[column]
        row["ref_busbw_min"] = min(c[column] for c in seen)
        row["ref_busbw_max"] = max(c[column] for c in seen)
        row["cycles"] = len(seen)
        rows[size] = row
    return rows, " ".join(cmd) + "\n" + proc.stdout


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # N/A
        return float("nan")


def _ref_column(collective: str) -> str:
    """nodetune's all_reduce is in place (torch has no out-of-place all_reduce); the other
    collectives write a separate output buffer, as nccl-tests' out-of-place column does."""
    return "ip_busbw" if collective == "all_reduce" else "oop_busbw"


def goal_for(collective: str, nbytes: int) -> float | None:
    """The ratio a size must reach (None: reported, no goal)."""
    if collective == "all_reduce":
        return 0.98 if nbytes >= 16 << 20 else 0.95 if nbytes >= 1 << 20 else None
    return 0.95 if nbytes >= 64 << 20 else None


def compare_sizes(doc: dict[str, Any], ref: dict[int, dict[str, float]],
                  collective: str = "all_reduce") -> list[dict[str, Any]]:
    """Per size: nodetune's busbw against nccl-tests', printed and returned."""
    sizes = doc.get("result", doc).get("sizes", []) if doc else []
    column = "in-place" if _ref_column(collective) == "ip_busbw" else "out-of-place"
    print(f"\n{collective}: {'size':>12} {'nodetune':>10} {'nccl oop':>10} {'nccl ip':>10} "
          f"{'vs ref':>7} {'vs oop':>7}  goal (vs {column})   nccl min-max   ours min-max")
    compare = []
    for row in sizes:
        nbytes, ours = int(row["bytes"]), float(row["busbw"])
        r = ref.get(nbytes)
        ratio = ours / r["ref_busbw"] if r and r["ref_busbw"] > 0 else None
        ratio_oop = ours / r["oop_busbw"] if r and r["oop_busbw"] > 0 else None
        goal = goal_for(collective, nbytes)
        ok = goal is None or (ratio is not None and ratio >= goal)
        compare.append({"bytes": nbytes, "nodetune_busbw": ours,
                        "nccl_tests_oop_busbw": r and r["oop_busbw"],
                        "nccl_tests_ip_busbw": r and r["ip_busbw"], "ratio": ratio,
                        "ratio_vs_oop": ratio_oop,
                        "nccl_tests_ref_min": r and r["ref_busbw_min"],
                        "nccl_tests_ref_max": r and r["ref_busbw_max"],
                        "goal": goal, "met": ok})
        print(f"{nbytes:>12} {ours:>10.2f} {r['oop_busbw'] if r else float('nan'):>10.2f} "
              f"{r['ip_busbw'] if r else float('nan'):>10.2f} "
              f"{ratio or float('nan'):>7.3f} {ratio_oop or float('nan'):>7.3f}"
              f"  {('>=' if ok else '<') if goal else '  '} {goal or '-'!s:<16}"
              f"  {r['ref_busbw_min'] if r else float('nan'):.1f}-"
              f"{r['ref_busbw_max'] if r else float('nan'):.1f}"
              f"  {_busbw(row, 'time_us_max'):.1f}-{_busbw(row, 'time_us_min'):.1f}")
    return compare


def _busbw(row: dict[str, Any], time_key: str) -> float:
    """busbw of a size's fastest or slowest timed round (validate reports their times)."""
    t = row.get(time_key)
    return float(row["busbw"]) * float(row["time_us"]) / float(t) if t else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl-tests", required=True,
                    help="path to nccl-tests' <collective>_perf (all_reduce_perf by default)")
    ap.add_argument("--collective", default="all_reduce",
                    choices=("all_reduce", "all_gather", "reduce_scatter", "alltoall"))
    ap.add_argument("--gpus-per-node", type=int, default=1)
    ap.add_argument("--sizes", default="1M:4G")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--launch", default="auto", choices=("auto", "graph", "eager"))
    ap.add_argument("--nccl-tests-arg", action="append", default=[], metavar="ARG",
                    help="extra all_reduce_perf argument, e.g. --nccl-tests-arg=-G1 for its "
                         "CUDA-graph mode (repeatable)")
    ap.add_argument("--nccl-tests-cycles", type=int, default=1, metavar="N",
                    help="all_reduce_perf -N N: run its sweep N times and compare against "
                         "each size's median (default 1: its single figure)")
    ap.add_argument("--skip-forced-network", action="store_true",
                    help="skip the NCCL_P2P_DISABLE/NCCL_SHM_DISABLE run")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run validate and all_reduce_perf N times, alternating (default 1)")
    ap.add_argument("--wall-runs", type=int, default=0, metavar="N",
                    help="then time validate's default sweep N times beside one import torch")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", args.gpus_per_node, {})
        for run in range(1, max(1, args.repeat) + 1):
            code, doc, wall, err = run_validate(inv, args)
            res = doc.get("result") or {}
            print(f"== run {run}/{args.repeat}: nodetune validate (exit {code}, wall {wall:.1f} s,"
                  f" phases {res.get('phases_s')}, transport "
                  f"{(res.get('transport') or {}).get('kind')}, notes {res.get('notes')})")
            print(err[-4000:])
            ref, ref_text = run_nccl_tests(args.nccl_tests, args)
            print(f"== run {run}/{args.repeat}: nccl-tests\n" + ref_text)
            compare = compare_sizes(doc, ref, args.collective)
            runs.append({"run": run, "validate_exit": code, "validate_wall_s": round(wall, 2),
                         "validate": doc, "nccl_tests": ref, "compare": compare,
                         "met": bool(compare) and all(c["met"] for c in compare) and code == 0})
        net_code, net_doc, net_wall = 1, {}, 0.0
        if not args.skip_forced_network:
            net_inv = inventory(Path(tmp) / "net.json", args.gpus_per_node,
                                {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
            net_code, net_doc, net_wall, net_err = run_validate(
                net_inv, args, "--expect-transport", "ib")
            reasons = (net_doc.get("result") or {}).get("reasons")
            kind = ((net_doc.get("result") or {}).get("transport") or {}).get("kind")
            print(f"== forced network path, --expect-transport ib (exit {net_code}, "
                  f"wall {net_wall:.1f} s): transport {kind}; reasons {reasons}\n"
                  + net_err[-3000:])

        wall: dict[str, Any] | None = None
        if args.wall_runs:
            print(f"\n== validate's default sweep beside one import torch, {args.wall_runs} "
                  "rounds")
            wall = rounds(inv, args.wall_runs, ["--backend", "nccl", "--nproc-per-node",
                                                str(args.gpus_per_node)], env=SAFE_ENV)

    worst = {}
    for run in runs:
        for c in run["compare"]:
            if c["ratio"] is not None:
                worst[c["bytes"]] = min(worst.get(c["bytes"], c["ratio"]), c["ratio"])
    print(f"\n{args.collective}: worst ratio over the runs: "
          + ", ".join(f"{b}: {r:.3f}" for b, r in sorted(worst.items())))
    summary = {"collective": args.collective, "runs": runs, "worst_ratio": worst, "wall": wall,
               "forced_network": {"exit": net_code, "wall_s": round(net_wall, 2),
                                  "report": net_doc}}
    (args.out / "compare.json").write_text(json.dumps(summary, indent=2, default=str))
    return 0 if runs and all(r["met"] for r in runs) and net_code == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
