#!/usr/bin/env python3
"""``nccl.effective`` in `nodetune check` on one GPU machine: a value nccl_config
provisioned that NCCL did not use fails the check, naming the value NCCL used and its
source.

The machine is set up as ``apply`` leaves a node: ``/etc/nccl.conf`` holds what the
nccl_config role writes for ``nccl_config_extra: {NCCL_BUFFSIZE: 4194304}`` (the same
inventory variable is in the inventory). Then ``check`` runs twice through the real
command (``ansible_connection: local``; the one-node sweep, which needs two GPUs or
more, at small sizes):

1. as provisioned: nccl.effective must pass (NCCL's log shows NCCL_BUFFSIZE 4194304 from
   /etc/nccl.conf);
2. with ``NCCL_BUFFSIZE=8388608`` in the environment the check starts from (a host-wide
   variable, as ``/etc/environment`` would give every login): NCCL takes the environment
   over its config file, so nccl.effective must fail, naming 8388608 and the inherited
   environment, and check must exit 1.

``/etc/nccl.conf`` is put back as it was at the end (removed when there was none).

  python3 benchmarks/effective_check_on_gpu.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = Path("/etc/nccl.conf")
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0"}  # NVLink multicast stays off on shared hosts


def inventory(path: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_host": "127.0.0.1",
            "nodetune_python": sys.executable, "net_sysctl_enabled": False,
            "nodetune_env": SAFE_ENV, "nodetune_check_sizes": "1M:16M",
            "nccl_config_extra": {"NCCL_BUFFSIZE": 4194304}}
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {
        "hosts": {"gpu-local": host}}}}}, indent=2))
    return path


def check(inv: Path, env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "nodetune", "check", str(inv), "--json",
                           "--dcgm-level", "0"],
                          capture_output=True, text=True, cwd=REPO, check=False,
                          env={**os.environ, **SAFE_ENV, **env})
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except ValueError:
        return proc.returncode, {"stdout": proc.stdout}, proc.stderr


def effective(doc: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (doc.get("checks") or {}).get("gpu-local", [])
                 if c["name"] == "nccl.effective"), {"status": "missing"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    before = CONF.read_text() if CONF.exists() else None
    ok = True
    try:
        CONF.write_text("# as the nccl_config role writes it\nNCCL_BUFFSIZE=4194304\n")
        with tempfile.TemporaryDirectory() as tmp:
            inv = inventory(Path(tmp) / "hosts.json")
            for label, env, want, code_want in (
                    ("as provisioned", {}, "pass", 0),
                    ("NCCL_BUFFSIZE=8388608 inherited", {"NCCL_BUFFSIZE": "8388608"}, "fail", 1)):
                code, doc, err = check(inv, env)
                (args.out / f"check-{want}.json").write_text(json.dumps(doc, indent=2))
                got = effective(doc)
                print(f"== {label}: exit {code}; nccl.effective {got.get('status')}: "
                      f"{got.get('measured')} | {got.get('message')}")
                if code not in (0, 1):
                    print(err[-2000:])
                ok &= got.get("status") == want and code == code_want
    finally:
        if before is None:
            CONF.unlink(missing_ok=True)
        else:
            CONF.write_text(before)
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
