#!/usr/bin/env python3
"""Where the node-local health check's CPU time goes, on a real GPU node: every process
it starts (argv, its CPU time including what it waited for), beside the tools it runs
timed alone and the interpreter's own start and import.

The check runs with ``benchmarks/rusage_site`` on PYTHONPATH, whose sitecustomize records
each child's rusage from ``os.wait4`` in a log; the recording is for this breakdown only
(the budget itself is measured without it, by ``healthcheck_budget.py``).

  python3 benchmarks/healthcheck_parts.py --python /opt/torch/.venv/bin/python3 \
      [--runs 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from healthcheck_budget import add_pythons, check_command  # noqa: E402 - beside this script

ALONE = {
    "nvidia-smi -q -x": ["nvidia-smi", "-q", "-x"],
    "nvidia-smi nvlink -s": ["nvidia-smi", "nvlink", "-s"],
    "nvidia-smi nvlink -e": ["nvidia-smi", "nvlink", "-e"],
    "python3 -c pass": [sys.executable, "-c", "pass"],
    "python3 -s -S -c pass": [sys.executable, "-s", "-S", "-c", "pass"],
    "import nodetune.check.slurm_local": [sys.executable, "-s", "-c",
                                          "import nodetune.check.slurm_local"],
}


def cpu_of(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 0.0, f"could not start: {exc}"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_pythons(parser)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--also", action="append", default=[],
                        help="another command to time alone (a shell line)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nodetune-hc-parts."))
    check, env = check_command(work, args.python, args.check_python)
    # the recorder is a sitecustomize, which only a Python that reads site runs: -s here
    # (the site step's own cost is timed alone below, "python3 -c pass" against -S)
    check = ["-s" if a == "-S" else a for a in check]
    cpu_of(check, env)  # the first run after a boot reads torch's versions: not timed
    whole = []
    logs = []
    for i in range(args.runs):
        log = work / f"rusage-{i}.jsonl"
        traced = {**env, "NODETUNE_RUSAGE_LOG": str(log),
                  "PYTHONPATH": os.pathsep.join((str(ROOT / "benchmarks" / "rusage_site"),
                                                 env["PYTHONPATH"]))}
        whole.append(cpu_of(check, env)[0])
        cpu_of(check, traced)
        logs.append([json.loads(line) for line in log.read_text().splitlines()]
                    if log.exists() else [])
    alone: dict[str, Any] = {}
    own = {f"{args.check_python} -s: import nodetune.check.slurm_local":
           [args.check_python, "-s", "-c", "import nodetune.check.slurm_local"],
           f"{args.check_python} -s -c pass": [args.check_python, "-s", "-c", "pass"]}
    for name, argv in {**ALONE, **own, **{a: ["sh", "-c", a] for a in args.also}}.items():
        runs = [cpu_of(argv, env) for _ in range(args.runs)]
        alone[name] = {"cpu_s_median": statistics.median(r[0] for r in runs),
                       "stdout_head": runs[0][1][:3000]}
    result = {"check_python": args.check_python, "check_cpu_s": whole,
              "check_cpu_s_median": statistics.median(whole),
              "children_of_one_run": logs[-1], "alone": alone}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "healthcheck_parts.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
