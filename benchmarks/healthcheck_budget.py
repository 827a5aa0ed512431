#!/usr/bin/env python3
"""The node-local health check (slurmd's HealthCheckProgram) on a real GPU node: its
wall time and CPU time per run, beside ``nvidia-smi -q``, and whether it ever puts a
process on a GPU.

The budget (issue "Safe on a busy production cluster", item 1): <= 2 s wall and
<= 1 CPU-s per run, no process on any GPU while it runs. The runs alternate with
``nvidia-smi -q`` (the heaviest read the check makes), so both see the same machine.
A thread polls ``nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader``
during every run of the check; any line it sees is printed and fails the budget.

No Slurm is needed: without ``sinfo`` the program exits 3 after writing its report,
having changed nothing. The first run after a boot reads torch's versions (one import)
and is reported apart; the timed runs are the later ones, as slurmd sees them.

  python3 benchmarks/healthcheck_budget.py --python /opt/torch/.venv/bin/python3 \
      [--check-python /usr/bin/python3] [--runs 5] [--out DIR]

CPU time is the children's user + system time (``getrusage(RUSAGE_CHILDREN)``), so it
counts every process the run starts (nvidia-smi, lspci, python helpers).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WALL_S = 2.0
CPU_S = 1.0
QUERY_APPS = ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s of the command and all its children, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


class AppWatch:
    """Polls nvidia-smi for compute processes while the check runs."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(QUERY_APPS, capture_output=True, text=True, check=False)
            self.polls += 1
            self.seen += [line for line in out.stdout.splitlines() if line.strip()]
            self._stop.wait(0.05)

    def __enter__(self) -> AppWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def add_pythons(parser: argparse.ArgumentParser) -> None:
    """``--python`` (the node's, with torch) and ``--check-python`` (the check's)."""
    parser.add_argument("--python", required=True,
                        help="the node's Python with torch (nodetune_python)")
    parser.add_argument("--check-python", default=sys.executable,
                        help="the Python that runs the check, as slurmd starts it (the role's "
                             "slurm_healthcheck_python, /usr/bin/python3 by default; default "
                             "here: this Python). A venv with torch pays for its .pth files on "
                             "every start, which the system Python does not")


@functools.cache
def pyyaml_site(check_python: str) -> str:
    """The directory that holds PyYAML for ``check_python`` (the role's
    NODETUNE_HEALTHCHECK_SITE), asked of that Python once per run."""
    return subprocess.run([check_python, "-c", "import os, yaml; print(os.path.dirname("
                           "os.path.dirname(os.path.abspath(yaml.__file__))))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def check_command(work: Path, python: str, check_python: str) -> tuple[list[str], dict[str, str]]:
    """The node-local check as slurmd runs it (``check_python -S -m
    nodetune.check.slurm_local``) and its environment (this checkout first on PYTHONPATH),
    with its config, state and lock under ``work``.

    The machine is not provisioned by apply here: the drift checks of the network roles
    are off, so the verdict is the GPU's and the node's own.
    """
    config = work / "healthcheck.json"
    config.write_text(json.dumps({
        "version": 1, "host": "gpu-node", "slurm_node": "gpu-node",
        "vars": {"nodetune_python": python, "net_sysctl_enabled": False,
                 "net_mtu_enabled": False, "nccl_config_enabled": False,
                 "roce_qos_enabled": False}}))
    # As the role's wrapper starts it: -S (no site-packages, no .pth files), the package on
    # PYTHONPATH and PyYAML's directory in NODETUNE_HEALTHCHECK_SITE
    env = {**os.environ, "NODETUNE_HEALTHCHECK_SITE": pyyaml_site(check_python),
           "PYTHONPATH": os.pathsep.join(
               p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    check = [check_python, "-S", "-m", "nodetune.check.slurm_local", "--config", str(config),
             "--state-dir", str(work / "state"), "--lock", str(work / "lock")]
    return check, env


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_pythons(parser)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nodetune-hc-budget."))
    check, env = check_command(work, args.python, args.check_python)

    first_wall, first_cpu, first_code = timed(check, env)
    report: dict[str, Any] = json.loads((work / "state" / "report.json").read_text())
    rows: dict[str, list[float]] = {"check_wall": [], "check_cpu": [], "smi_wall": [],
                                    "smi_cpu": []}
    codes = []
    with AppWatch() as watch:
        for _ in range(args.runs):
            wall, cpu, code = timed(check, env)
            rows["check_wall"].append(wall)
            rows["check_cpu"].append(cpu)
            codes.append(code)
            wall, cpu, _ = timed(["nvidia-smi", "-q"], env)
            rows["smi_wall"].append(wall)
            rows["smi_cpu"].append(cpu)
    last: dict[str, Any] = json.loads((work / "state" / "report.json").read_text())
    checks = {c["name"]: c["status"] for c in last["checks"]["gpu-node"]}
    result = {
        "first_run": {"wall_s": first_wall, "cpu_s": first_cpu, "exit": first_code,
                      "versions": report.get("versions_read")},
        "runs": args.runs, "exit_codes": codes,
        **{k: summary(v) for k, v in rows.items()},
        "wall_ratio_to_nvidia_smi_q": statistics.median(rows["check_wall"])
        / statistics.median(rows["smi_wall"]),
        "compute_apps_polls": watch.polls, "compute_apps_seen": watch.seen,
        "versions_source": (last.get("versions_read") or {}).get("source"),
        "active": last.get("active"), "checks": checks,
        "budget": {"wall_s": WALL_S, "cpu_s": CPU_S}, "check_python": args.check_python,
    }
    ok = (max(rows["check_wall"]) <= WALL_S and max(rows["check_cpu"]) <= CPU_S
          and not watch.seen)
    result["within_budget"] = ok
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "healthcheck_budget.json").write_text(text + "\n")
        (args.out / "report.json").write_text(json.dumps(last, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
