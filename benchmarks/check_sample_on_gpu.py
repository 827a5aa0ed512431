#!/usr/bin/env python3
"""`nodetune check --sample` on one GPU machine (``ansible_connection: local``), run through
the real command, with the machine's own raw outputs kept as fixtures.

1. At rest: ``check --sample 10s`` (the window beside the probe): every sample check
   (gpu.slowdown, pcie.flap, fabric.rdma_window, node.pcie_aer_window, gpu.nvlink_window)
   must pass, or skip with a true reason (no RDMA device, no NVLink, no AER files); the
   report's window must say it started, ran about 10 s and took about 10 samples per GPU;
   the wall time of the run with the window is set beside one without it.
2. Under load (where ``--load`` is given and torch sees the GPUs): a matmul loop on every
   GPU for the window; the same checks must pass (no link change while busy), and each
   GPU's median power must be above its median at rest.

Raw outputs saved under --out (dated): ``nvidia-smi --query-gpu=FIELDS
--format=csv,noheader,nounits -lms 1000`` for 5 s (the sampler's own command, as the driver
prints it: the fixture the stand-in in tests/unit/test_check_sample.py mirrors),
``nvidia-smi --help-query-gpu``, ``nvidia-smi nvlink -e``, and the GPUs'/HCAs' PCI link and
AER files.

  python3 benchmarks/check_sample_on_gpu.py --gpus 1 --driver 580.159.04 [--load] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from nodetune.check import node_sample  # noqa: E402 - the sampler's own field list

SAMPLE = ("gpu.slowdown", "pcie.flap", "fabric.rdma_window", "node.pcie_aer_window",
          "gpu.nvlink_window")
QUERY = ["nvidia-smi", "--query-gpu=" + ",".join(node_sample.FIELDS),
         "--format=csv,noheader,nounits", "-lms", "1000"]
RAW = {
    "nvidia-smi-help-query-gpu.txt": "nvidia-smi --help-query-gpu 2>&1",
    "nvidia-smi-nvlink-e.txt": "nvidia-smi nvlink -e 2>&1",
    "sysfs-pci-link-aer.txt": "for d in /sys/bus/pci/devices/*; do for f in "
                              "current_link_speed current_link_width max_link_speed "
                              "max_link_width aer_dev_correctable aer_dev_nonfatal "
                              "aer_dev_fatal; do [ -r $d/$f ] && echo \"$d/$f: $(cat $d/$f "
                              "| tr '\\n' ' ')\"; done; done 2>&1 | head -400",
}
LOAD = r"""
import sys, time, torch
end = time.time() + float(sys.argv[1])
xs = [torch.randn(8192, 8192, device=f"cuda:{i}") for i in range(torch.cuda.device_count())]
while time.time() < end:
    for x in xs:
        x @ x
    torch.cuda.synchronize()
"""


def inventory(path: Path, *, driver: str, gpus: int) -> Path:
    host = {"ansible_connection": "local", "ansible_host": "127.0.0.1",
            "nodetune_python": sys.executable, "nodetune_expected_gpus": gpus,
            "nvidia_driver_version": driver, "net_sysctl_enabled": False}
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-local": host}}}}}, indent=2))
    return path


def check(inv: Path, runs: Path, *extra: str) -> tuple[int, dict[str, Any], str, float]:
    env = {**os.environ, "NODETUNE_RUNS_DIR": str(runs), "COLUMNS": "220"}
    cmd = [sys.executable, "-m", "nodetune", "check", str(inv), "--skip-allreduce",
           "--dcgm-level", "0", *extra]
    started = time.monotonic()
    js = subprocess.run([*cmd, "--json"], capture_output=True, text=True, cwd=REPO,
                        check=False, env=env)
    took = time.monotonic() - started
    human = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False, env=env)
    try:
        doc = json.loads(js.stdout)
    except ValueError:
        doc = {"stdout": js.stdout, "stderr": js.stderr}
    return js.returncode, doc, human.stdout + human.stderr, took


def sampled(doc: dict[str, Any]) -> list[dict[str, str]]:
    rows = (doc.get("checks") or {}).get("gpu-local", [])
    return [c for c in rows if c["name"].split("[", 1)[0] in SAMPLE]


def capture(seconds: float) -> str:
    """The sampler's nvidia-smi command for ``seconds``, as it prints."""
    proc = subprocess.Popen(QUERY, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=10)
    return out


def medians(doc: dict[str, Any]) -> dict[str, float]:
    """Each GPU's median power from gpu.slowdown's measured text."""
    out = {}
    for c in sampled(doc):
        if c["name"].startswith("gpu.slowdown[") and "W min/median/max" in c["measured"]:
            watts = c["measured"].split("power ", 1)[1].split(" W", 1)[0].split("/")
            out[c["name"]] = float(watts[1])
    return out


def judged(doc: dict[str, Any], label: str, seconds: float) -> bool:
    ok = True
    for c in sampled(doc):
        print(f"  {c['name']:<32} {c['status']:<5} {c['measured']} | {c['message']}")
        ok &= c["status"] in ("pass", "skip")
    ok &= {c["name"].split("[", 1)[0] for c in sampled(doc)} == set(SAMPLE)
    window = ((doc.get("window") or {}).get("gpu-local") or {}).get("sample") or {}
    print(f"== {label}: window {window}")
    ok &= bool(window.get("start")) and abs(float(window.get("duration_s") or 0) - seconds) < 2
    ok &= int(window.get("gpu_samples") or 0) >= seconds - 2
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--driver", required=True, help="driver version the inventory pins")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--load", action="store_true", help="also sample under a matmul load")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    for name, command in RAW.items():
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                              check=False, timeout=600)
        (args.out / name).write_text(f"# {command}\n# captured {stamp}\n{proc.stdout}")
    (args.out / "nvidia-smi-query-lms.csv").write_text(
        f"# {' '.join(QUERY)} (5 s, then its group killed)\n# captured {stamp}\n"
        + capture(5))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        inv = inventory(Path(tmp) / "hosts.json", driver=args.driver, gpus=args.gpus)
        code0, _, _, plain = check(inv, Path(tmp) / "runs0")
        code, doc, human, took = check(inv, Path(tmp) / "runs", "--sample", f"{args.seconds}s")
        (args.out / "check-sample.json").write_text(json.dumps(doc, indent=2))
        print(f"== {stamp} nodetune check --sample {args.seconds}s at rest (exit {code}, "
              f"{took:.1f} s; without --sample: exit {code0}, {plain:.1f} s)\n{human}")
        ok &= judged(doc, "at rest", args.seconds)
        ok &= args.seconds <= took < plain + args.seconds + 10
        if args.load:
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(2 * args.seconds + 40)],
                                    start_new_session=True)
            time.sleep(5)  # the GPUs busy before the window opens
            try:
                code2, doc2, human2, took2 = check(inv, Path(tmp) / "runs2", "--sample",
                                                   f"{args.seconds}s")
            finally:
                os.killpg(load.pid, signal.SIGKILL)
                load.wait()
            (args.out / "check-sample-load.json").write_text(json.dumps(doc2, indent=2))
            print(f"== under load (exit {code2}, {took2:.1f} s)\n{human2}")
            ok &= judged(doc2, "under load", args.seconds)
            rest, busy = medians(doc), medians(doc2)
            print(f"== median power at rest {rest}, under load {busy}")
            ok &= bool(busy) and all(busy[k] > rest.get(k, 0.0) for k in busy)
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
