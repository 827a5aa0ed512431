#!/usr/bin/env python3
"""What the controller holds while `nodetune validate` runs, under each launcher.

Starts the given `nodetune validate ...` command and samples, every 0.3 s until
it ends, the peak of: processes in its process tree on this machine, their
open file descriptors and, of those, sockets; and on the Slurm controller host
(a lab node, read with `podman exec`) the srun/sbcast/salloc processes and the
SSH session nodetune holds there, each with their descriptors and sockets:

    python3 benchmarks/launcher_footprint.py nt-lab-1 -- \\
        nodetune validate inventory/lab --limit a,b,c,d --launcher slurm ...

Prints one JSON line of peaks and the command's exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import time

# Run on the Slurm controller host: the processes nodetune's launcher puts there.
CTL_SCRIPT = r"""
count() {
  n=0; f=0; s=0
  for p in $1; do
    n=$((n+1))
    for fd in /proc/$p/fd/*; do
      f=$((f+1)); case $(readlink "$fd") in socket:*) s=$((s+1));; esac
    done
  done
  printf '%s %s %s ' $n $f $s
}
count "$( (pgrep -x srun; pgrep -x sbcast; pgrep -x salloc) | sort -u)"
count "$(pgrep -f '[s]shd: root@notty')"
echo
"""


def tree(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True,
                         check=True).stdout
    kids: dict[int, list[int]] = {}
    for line in out.splitlines():
        if line.strip():
            child, parent = (int(x) for x in line.split())
            kids.setdefault(parent, []).append(child)
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen


def fds(pids: list[int]) -> tuple[int, int]:
    total = sockets = 0
    for p in pids:
        try:
            names = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in names:
            total += 1
            with contextlib.suppress(OSError):
                sockets += os.readlink(f"/proc/{p}/fd/{fd}").startswith("socket:")
    return total, sockets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("controller", help="the lab node that runs Slurm's commands")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    keys = ("srun_procs", "srun_fds", "srun_sockets", "sshd_procs", "sshd_fds", "sshd_sockets")
    peak = dict.fromkeys(("procs", "threads", "fds", "sockets", *keys), 0)
    while proc.poll() is None:
        pids = tree(proc.pid)
        total, sockets = fds(pids)
        here = {"procs": len(pids), "fds": total, "sockets": sockets,
                "threads": sum(len(os.listdir(f"/proc/{p}/task")) for p in pids
                               if os.path.isdir(f"/proc/{p}/task"))}
        out = subprocess.run(["podman", "exec", args.controller, "bash", "-c", CTL_SCRIPT],
                             capture_output=True, text=True, check=False).stdout.split()
        if len(out) == len(keys):
            here.update(zip(keys, map(int, out), strict=True))
        for key, value in here.items():
            peak[key] = max(peak[key], value)
        time.sleep(0.3)
    print(json.dumps({**peak, "exit": proc.returncode}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
