#!/usr/bin/env python3
"""The run-time health checks of `nodetune check` on one GPU machine (``ansible_connection:
local``), run through the real command, with the machine's own raw outputs kept as
fixtures.

1. As the machine is: gpu.xid, gpu.fabric, gpu.kernel_module, fabric.rdma_errors,
   dcgm.diag and gpu.pcie_acs (or the checks ``--names`` lists) must each pass, or skip
   with a true reason (no RDMA device, no NVSwitch, no DCGM, no lspci, no AER files, no
   time-sync tool); any fail or warn is printed with its message.
2. Planted: ``nodetune_kernel_log`` pointed at a file in /dev/kmsg's format holding one
   NVRM Xid 79 record for this machine's first GPU; gpu.xid must fail, naming
   ``GPU 0 (<its bus>)``, and check must exit 1.

Raw outputs saved under --out (dated): ``dmesg`` Xid lines, ``lspci -vvv -D``,
``dcgmi diag -r 1 -j`` (where DCGM is installed), ``nv-fabricmanager --version``,
``/proc/driver/nvidia/version``, ``ls /sys/module | grep nvidia``, the PCI functions'
link and AER files, the time-sync tools' answers and the host-wide environment.

  python3 benchmarks/check_new_on_gpu.py --gpus 1 --driver 580.159.04 [--out DIR]

Run it as root (reading /dev/kmsg and lspci's capabilities needs it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NEW = ("gpu.xid", "gpu.fabric", "gpu.kernel_module", "fabric.rdma_errors", "dcgm.diag",
       "gpu.pcie_acs")
RAW = {
    "dmesg-xid.txt": "dmesg --time-format iso 2>&1 | grep -i xid || true",
    "lspci-vvv-D.txt": "lspci -vvv -D 2>&1",
    "dcgmi-diag-r1-j.json": "command -v dcgmi >/dev/null && dcgmi diag -r 1 -j 2>&1 || "
                            "echo 'no dcgmi'",
    "nv-fabricmanager-version.txt": "nv-fabricmanager --version 2>&1; "
                                    "systemctl is-active nvidia-fabricmanager 2>&1",
    "proc-driver-nvidia-version.txt": "cat /proc/driver/nvidia/version",
    "nvidia-modules.txt": "ls /sys/module | grep -i nvidia",
    "infiniband-counters.txt": "grep -r . /sys/class/infiniband/*/ports/*/counters/ "
                               "2>&1 | head -200 || true",
    "sysfs-pci-link-aer.txt": "for d in /sys/bus/pci/devices/*; do for f in "
                              "current_link_speed current_link_width max_link_speed "
                              "max_link_width aer_dev_correctable aer_dev_nonfatal "
                              "aer_dev_fatal; do [ -r $d/$f ] && echo \"$d/$f: $(cat $d/$f "
                              "| tr '\\n' ' ')\"; done; done 2>&1 | head -400",
    "time-sync.txt": "for c in 'chronyc -c tracking' 'timedatectl show' "
                     "'timedatectl show-timesync --all'; do echo \"\\$ $c\"; "
                     "timeout 5 $c 2>&1; done",
    "global-env.txt": "cat /etc/environment 2>&1; grep -H -E 'NCCL_|CUDA_' "
                      "/etc/profile.d/*.sh 2>&1; timeout 5 systemctl show-environment 2>&1",
}


def inventory(path: Path, *, driver: str, gpus: int, **extra: Any) -> Path:
    host = {"ansible_connection": "local", "ansible_host": "127.0.0.1",
            "nodetune_python": sys.executable, "nodetune_expected_gpus": gpus,
            "nvidia_driver_version": driver, "net_sysctl_enabled": False, **extra}
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-local": host}}}}}, indent=2))
    return path


def check(inv: Path, runs: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "NODETUNE_RUNS_DIR": str(runs), "COLUMNS": "220"}
    cmd = [sys.executable, "-m", "nodetune", "check", str(inv), "--skip-allreduce", *extra]
    js = subprocess.run([*cmd, "--json"], capture_output=True, text=True, cwd=REPO,
                        check=False, env=env)
    human = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False, env=env)
    try:
        doc = json.loads(js.stdout)
    except ValueError:
        doc = {"stdout": js.stdout, "stderr": js.stderr}
    return js.returncode, doc, human.stdout + human.stderr


def new_checks(doc: dict[str, Any], names: tuple[str, ...] = NEW) -> list[dict[str, str]]:
    rows = (doc.get("checks") or {}).get("gpu-local", [])
    return [c for c in rows if c["name"].split("[", 1)[0] in names]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--driver", required=True, help="driver version the inventory pins")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--names", default=",".join(NEW),
                    help="the checks that must pass or skip as the machine is (comma-separated)")
    args = ap.parse_args()
    names = tuple(n for n in args.names.split(",") if n)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    for name, command in RAW.items():
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                              check=False, timeout=600)
        (args.out / name).write_text(f"# {command}\n# captured {stamp}\n{proc.stdout}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", driver=args.driver, gpus=args.gpus)
        started = time.monotonic()
        code, doc, human = check(inv, Path(tmp) / "runs")
        (args.out / "check-new.json").write_text(json.dumps(doc, indent=2))
        print(f"== {stamp} nodetune check as the machine is (exit {code}, "
              f"{time.monotonic() - started:.1f} s)\n{human}")
        found = new_checks(doc, names)
        for c in found:
            print(f"  {c['name']:<28} {c['status']:<5} {c['measured']} | {c['message']}")
            ok &= c["status"] in ("pass", "skip")
        ok &= {c["name"].split("[", 1)[0] for c in found} == set(names)

        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.split()
        pci = bus[0][4:].lower().rsplit(".", 1)[0] if bus else "0000:00:00"  # 0000:3b:00
        log = Path(tmp) / "kmsg"
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        log.write_text(f"4,1,{int(uptime * 1e6)},-;NVRM: Xid (PCI:{pci}): 79, "
                       "GPU has fallen off the bus.\n")
        planted = inventory(Path(tmp) / "planted.json", driver=args.driver, gpus=args.gpus,
                            nodetune_kernel_log=str(log))
        code2, doc2, human2 = check(planted, Path(tmp) / "runs2", "--dcgm-level", "0")
        (args.out / "check-planted-xid.json").write_text(json.dumps(doc2, indent=2))
        print(human2)
        x = next((c for c in new_checks(doc2) if c["name"] == "gpu.xid"), {})
        print(f"== planted Xid 79 on {pci} (exit {code2}): gpu.xid {x.get('status')}: "
              f"{x.get('message')}")
        ok &= code2 == 1 and x.get("status") == "fail" and "GPU 0 (" in str(x.get("message"))
    if shutil.which("dcgmi") is None:
        print("dcgm.diag: no dcgmi on this machine: the skip above is the true reason")
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
