#!/usr/bin/env python3
"""On a real GPU machine: the probe's NVML read (nodetune/check/node_nvml.py, run as the probe
runs it) against ``nvidia-smi -q -x``, read the same machine the same minute.

1. Agreement: both read into nodetune's values (check/gpu_read.py: each GPU's ECC counters,
   remapped rows, PCIe link, clock event reasons, persistence, VBIOS, fabric state and
   retired pages); every value that differs is printed, and any difference exits 1.
2. Cost: ``--runs`` alternate runs of each, the CPU time of each child process
   (``os.wait4``'s rusage: user + system) and its wall time; medians and the ratio.

  python3 benchmarks/nvml_vs_smi.py [--python /usr/bin/python3] [--runs 9]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodetune.check import gpu_read, node_program


def timed(argv: list[str]) -> tuple[str, int, float, float]:
    """(stdout, exit status, CPU-s, wall s) of one run."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (out.decode(), proc.returncode, usage.ru_utime + usage.ru_stime,
            time.monotonic() - t0)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Each value that differs between two reads, by its path."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return [d for f in dataclasses.fields(a)
                for d in differences(getattr(a, f.name), getattr(b, f.name),
                                     f"{path}.{f.name}")]
    if isinstance(a, tuple | list) and isinstance(b, tuple | list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: NVML {a!r}, nvidia-smi {b!r}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter the probe "
                    "runs under (the node's python3)")
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    nvml_argv = [args.python, "-S", "-c", node_program.text("node_nvml.py")]
    smi_argv = ["nvidia-smi", "-q", "-x"]
    nvml_out, rc, _, _ = timed(nvml_argv)
    if rc != 0:
        print(f"the NVML read failed (exit {rc}): {nvml_out.strip()[:300]}")
        return 1
    xml, rc, _, _ = timed(smi_argv)
    by_nvml = gpu_read.read({"nvml": {"rc": 0, "stdout": nvml_out}})
    by_xml = gpu_read.read({"tool": "nvidia-smi", "nvml": {"rc": 3, "stdout": "{}"},
                            "query": {"rc": rc, "stdout": xml}})
    found = [*differences(by_nvml.smi, by_xml.smi, "smi"),
             *differences(by_nvml.fabric, by_xml.fabric, "fabric"),
             *differences(by_nvml.retired, by_xml.retired, "retired")]
    gpus = len(by_nvml.smi.gpus) if by_nvml.smi else 0
    print(f"{gpus} GPU(s), driver {by_nvml.smi.driver_version if by_nvml.smi else '?'}: "
          f"{'the two reads agree on every value' if not found else 'they differ:'}")
    for line in found:
        print("  " + line)
    print(json.dumps({"nvml_gpu0": json.loads(nvml_out)["gpus"][:1]}, indent=None)[:1500])
    cost: dict[str, list[tuple[float, float]]] = {"nvml": [], "smi": []}
    for _ in range(args.runs):
        for name, argv in (("nvml", nvml_argv), ("smi", smi_argv)):
            _, rc, cpu, wall = timed(argv)
            assert rc == 0, f"{name} exit {rc}"
            cost[name].append((cpu, wall))
    med = {name: (statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs))
           for name, runs in cost.items()}
    print(f"{args.runs} alternate runs each: NVML read {med['nvml'][0]:.3f} CPU-s, "
          f"{med['nvml'][1]:.3f} s wall; nvidia-smi -q -x {med['smi'][0]:.3f} CPU-s, "
          f"{med['smi'][1]:.3f} s wall; CPU ratio {med['nvml'][0] / med['smi'][0]:.2f}")
    return 1 if found or not gpus else 0


if __name__ == "__main__":
    sys.exit(main())
