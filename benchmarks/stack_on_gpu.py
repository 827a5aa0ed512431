#!/usr/bin/env python3
"""The 2026 GPU stack's detection on a real GPU node (``ansible_connection: local``).

Runs the real commands against a one-host inventory for this machine and
records what each said (issue 28's proof on the lent GPU machine):

1. ``nodetune apply --check --diff`` as the inventory comes (no driver
   variables): on a node whose loaded driver no package manages (a runfile or
   a host-provided module), the inputs pass stops with exit 2 naming what is
   loaded and how to go on, before any change;
2. the same with ``nvidia_driver_userspace_only: true`` (the host provides the
   module): every role's detection runs and check mode says what it would
   change;
3. ``nodetune facts``: the module flavour and the fabric state;
4. ``nodetune check --skip-allreduce`` with ``nvidia_driver_version`` set to
   the running version: ``gpu.driver`` passes.

  python3 benchmarks/stack_on_gpu.py --driver 580.159.04 [--out DIR]

Nothing is installed or changed on the machine: apply runs in check mode only.
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


def inventory(path: Path, **extra: Any) -> Path:
    host = {
        "ansible_connection": "local",
        "ansible_host": "127.0.0.1",
        "ansible_python_interpreter": sys.executable,
        "nodetune_python": sys.executable,
        "nodetune_env": SAFE_ENV,
        **extra,
    }
    doc = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-local": host}}}}}
    path.write_text(json.dumps(doc, indent=2))
    return path


def nodetune(out: Path, name: str, *argv: str) -> tuple[int, dict[str, Any], float]:
    """Run ``nodetune ARGV --json``, keep its stdout/stderr under OUT/NAME.*, return the doc."""
    started = time.monotonic()
    env = {**os.environ, **SAFE_ENV, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "nodetune", *argv, "--json"],
                          capture_output=True, text=True, cwd=REPO, check=False, env=env)
    wall = time.monotonic() - started
    (out / f"{name}.json").write_text(proc.stdout)
    (out / f"{name}.stderr").write_text(proc.stderr)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    print(f"== nodetune {' '.join(argv)}: exit {proc.returncode}, {wall:.1f} s")
    return proc.returncode, doc, wall


def find(doc: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a nested JSON document (None: absent)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for item in doc:
            if (found := find(item, key)) is not None:
                return found
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", required=True, help="the driver version this machine runs")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        plain = inventory(Path(tmp) / "plain.json")
        code, doc, _ = nodetune(args.out, "apply-check-plain", "apply", str(plain),
                                "--check", "--diff")
        problems = doc.get("input_problems") or []
        for p in problems:
            print(f"  {p.get('host')}: {p.get('role')}: {p.get('message')}")
        ok &= code == 2 and any(p.get("role") == "nvidia_driver" for p in problems)

        hosted = inventory(Path(tmp) / "hosted.json", nvidia_driver_userspace_only=True)
        code, doc, _ = nodetune(args.out, "apply-check-userspace", "apply", str(hosted),
                                "--check", "--diff")
        for h in doc.get("hosts") or []:
            print(f"  {h}")
        for t in doc.get("failed_tasks") or []:
            print(f"  FAILED {t.get('host')}: [{t.get('task')}] {t.get('message')}")
        for t in (doc.get("changed_tasks") or [])[:60]:
            print(f"  would change: [{t.get('task') if isinstance(t, dict) else t}]")
        ok &= code == 0

        code, doc, _ = nodetune(args.out, "facts", "facts", str(hosted))
        node = (doc.get("facts") or {}).get("gpu-local") or {}
        flavour, fabric = find(node, "kernel_module_flavour"), find(node, "fabric")
        print(f"  kernel_module_flavour: {flavour!r}  fabric: {fabric!r}")
        ok &= code == 0 and flavour in ("open", "proprietary")

        pinned = inventory(Path(tmp) / "pinned.json", nvidia_driver_version=args.driver,
                           net_sysctl_enabled=False)
        code, doc, _ = nodetune(args.out, "check", "check", str(pinned), "--skip-allreduce")
        checks = {c["name"]: c for c in (doc.get("checks") or {}).get("gpu-local", [])}
        for name in sorted(checks):
            c = checks[name]
            print(f"  {name:<34} {c['status']:<5} {c.get('measured', '')}")
        ok &= checks.get("gpu.driver", {}).get("status") == "pass"
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
