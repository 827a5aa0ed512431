#!/usr/bin/env python3
"""`nodetune check` on one multi-GPU machine (``ansible_connection: local``).

Writes a one-host inventory for this machine and runs ``nodetune check`` twice
through the real command:

1. as the machine is: every GPU check should pass (count, pinned driver,
   persistence, ECC, PCIe, clocks, NVLink; torch's CUDA and NCCL; the one-node
   all_reduce across all GPUs against its profile);
2. with a planted expectation (``nodetune_expected_gpus`` = twice the GPUs
   found), which must fail gpu.count with a clear message and exit 1
   (``--skip-allreduce``: the all_reduce already ran in step 1).

With ``--nccl-tests PATH/all_reduce_perf`` it then runs
``all_reduce_perf -b 64M -e <largest> -f 4 -g <gpus> -n 20 -w 5`` and prints
check's all_reduce beside it, size by size, with the ratio against the
in-place column (goal >= 0.97 at >= 64 MiB).

  python3 benchmarks/check_gpu_local.py --gpus 4 --driver 580.159.04 \
      [--nccl-tests PATH/all_reduce_perf] [--out DIR]

``--driver`` is the version the inventory pins (``nvidia_driver_version``);
pass the one the fleet is meant to run, not one read from this machine.
The machine is never provisioned by ``apply`` here, so the inventory turns
the sysctl drift check off (``net_sysctl_enabled: false``) and leaves
``net_mtu_interfaces`` empty. The human table and both JSON reports are
printed and written under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# NVLink multicast stays off on shared multi-GPU hosts, in every environment.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0"}
GPU_CHECKS = ("gpu.count", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.pcie", "gpu.clocks",
              "gpu.nvlink", "software.torch", "software.cuda", "software.nccl", "software.shm",
              "gpu.allreduce")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_vs_nccl_tests import ROW  # noqa: E402 - nccl-tests' row format, parsed once


def inventory(path: Path, *, gpus: int, driver: str) -> Path:
    host = {
        "ansible_connection": "local",
        "ansible_host": "127.0.0.1",
        "nodetune_python": sys.executable,
        "nodetune_expected_gpus": gpus,
        "nvidia_driver_version": driver,
        "net_sysctl_enabled": False,
        "nodetune_env": SAFE_ENV,
    }
    doc = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-local": host}}}}}
    path.write_text(json.dumps(doc, indent=2))
    return path


def check(inv: Path, *extra: str) -> tuple[int, dict[str, Any], str, float]:
    started = time.monotonic()
    env = {**os.environ, **SAFE_ENV, "COLUMNS": "200"}
    js = subprocess.run([sys.executable, "-m", "nodetune", "check", str(inv), "--json", *extra],
                        capture_output=True, text=True, cwd=REPO, check=False, env=env)
    wall = time.monotonic() - started
    human = subprocess.run([sys.executable, "-m", "nodetune", "check", str(inv), *extra],
                           capture_output=True, text=True, cwd=REPO, check=False, env=env)
    try:
        doc = json.loads(js.stdout)
    except ValueError:
        doc = {"stdout": js.stdout, "stderr": js.stderr}
    return js.returncode, doc, human.stdout + human.stderr, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, required=True, help="GPUs this machine should have")
    ap.add_argument("--driver", required=True, help="driver version the inventory pins")
    ap.add_argument("--nccl-tests", help="path to nccl-tests' all_reduce_perf, for the ratio")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", gpus=args.gpus, driver=args.driver)
        code, doc, human, wall = check(inv)
        (args.out / "check.json").write_text(json.dumps(doc, indent=2))
        print(f"== nodetune check, as the machine is (exit {code}, wall {wall:.1f} s)\n{human}")
        checks = {c["name"]: c for c in (doc.get("checks") or {}).get("gpu-local", [])}
        for name in GPU_CHECKS:
            c = checks.get(name, {"status": "missing"})
            print(f"  {name:<17} {c['status']:<5} {c.get('measured', '')}")
            ok &= c["status"] == "pass"
        ok &= code == 0

        planted = inventory(Path(tmp) / "planted.json", gpus=2 * args.gpus, driver=args.driver)
        code2, doc2, human2, wall2 = check(planted, "--skip-allreduce")
        (args.out / "check-planted.json").write_text(json.dumps(doc2, indent=2))
        print(f"== nodetune check, nodetune_expected_gpus={2 * args.gpus} planted "
              f"(exit {code2}, wall {wall2:.1f} s)\n{human2}")
        count = next((c for c in (doc2.get("checks") or {}).get("gpu-local", [])
                      if c["name"] == "gpu.count"), {})
        print(f"  gpu.count: {count.get('status')}: {count.get('message')}")
        ok &= code2 == 1 and count.get("status") == "fail"
        sweep = (doc.get("allreduce") or {}).get("gpu-local") or []
        if args.nccl_tests and sweep:
            compare(args.nccl_tests, sweep, args.gpus, args.out)
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


def compare(binary: str, sweep: list[dict[str, Any]], gpus: int, out: Path) -> None:
    """nccl-tests at check's sizes, in-place busbw beside check's, with the ratio."""
    low, high = min(s["bytes"] for s in sweep), max(s["bytes"] for s in sweep)
    cmd = [binary, "-b", str(low), "-e", str(high), "-f", "4", "-g", str(gpus), "-n", "20",
           "-w", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, **SAFE_ENV})
    (out / "all_reduce_perf.txt").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    ref = {}
    for line in proc.stdout.splitlines():
        if m := ROW.match(line):
            cols = m.group(6).split()
            ref[int(m.group(1))] = float(cols[6])  # in-place busbw
    print(f"== check gpu.allreduce beside {' '.join(cmd)} (in-place busbw, GB/s)")
    print(f"{'size':>12} {'check':>9} {'nccl-tests':>11} {'ratio':>7}  goal")
    for s in sorted(sweep, key=lambda s: s["bytes"]):
        theirs = ref.get(s["bytes"])
        ratio = s["busbw"] / theirs if theirs else float("nan")
        goal = "met" if ratio >= 0.97 else "NOT met"
        print(f"{s['bytes']:>12} {s['busbw']:>9.2f} {theirs or float('nan'):>11.2f} "
              f"{ratio:>7.3f}  {goal} (>= 0.97)")


if __name__ == "__main__":
    raise SystemExit(main())
