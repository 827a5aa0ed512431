#!/usr/bin/env python3
"""Where the test suite's CPU goes: each part's CPU seconds over one run of the command.

    sudo python3 benchmarks/suite_cpu.py --out /tmp/suite-cpu.json -- ./scripts/test.sh

Runs the command and, every ``--interval`` seconds (default 1), moves every process of
the machine's root cpuacct cgroup (cgroup v1) into a group named for the part it belongs
to, read from its nearest ancestor's command line: the lab's integration tests, each
molecule scenario, the ansible-core 2.21 pass and the collection checks, the unit tests,
or the rest (set-up, lints). A process started after its ancestor was moved is born in
that group, so each group's cpuacct.usage counts every process of that part, the
short-lived ones included. podman's containers have cgroups of their own
(libpod_parent/libpod-<id>, or under scripts/test.sh's cpu tier for the 2.21 pass's
container, whose conmon is then not counted apart); each is read at every sweep while it
runs (a restarted one's count before the restart kept) and named from its conmon's
command line (`-n NAME`): the lab's nodes, molecule's instances and the 2.21 pass's
container count apart. Processes that do not descend from the command (a shell beside
it) count as outside; conmon,
podman's monitor of each container and each `podman exec`, counts in one group for every
container. One measurement at a time: a second one would move the first one's processes.
What a container used in its last interval before removal is lost. The machine's whole
busy CPU from /proc/stat is printed beside the sum, so the share left unattributed shows.

Needs root and cgroup v1's cpuacct hierarchy at /sys/fs/cgroup/cpuacct.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/cpuacct")
OURS = ROOT / "nodetune-suite"
PARTS = ("integration", "molecule", "next", "unit", "rest", "outside")
# podman's container monitors (one per container and per `podman exec`), a group of their own
CONMON = ROOT / "libpod_parent" / "conmon" / "cpuacct.usage"
CONTAINER_CG = re.compile(r"libpod-([0-9a-f]{64})")


def part_of_argv(argv: list[str]) -> str | None:
    """The part one command line starts, or None where its ancestors decide."""
    text = " ".join(argv)
    if "ansible-next.sh" in text or "collection-check.sh" in text:
        return "next"
    if any(Path(a).name == "molecule" for a in argv[:2]):
        # each scenario apart: `molecule test -s NAME`
        named = argv[argv.index("-s") + 1] if "-s" in argv[:-1] else ""
        return f"molecule.{named}" if re.fullmatch(r"[a-z0-9_]+", named) else "molecule"
    if "pytest" in text and "tests/integration" in text:
        return "integration"
    if "pytest" in text and "tests/unit" in text:
        return "unit"
    return None


def read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def argv_of(pid: str) -> list[str]:
    return [a for a in read(Path("/proc", pid, "cmdline")).split("\0") if a]


def parent_of(pid: str) -> str | None:
    stat = read(Path("/proc", pid, "stat"))
    fields = stat.rpartition(")")[2].split()
    return fields[1] if len(fields) > 1 else None


def start_time(pid: str) -> str:
    """When the process started (/proc/PID/stat's field 22): a pid and it name one process."""
    fields = read(Path("/proc", pid, "stat")).rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def cpuacct_path(pid: str) -> str | None:
    for line in read(Path("/proc", pid, "cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return path
    return None


def classify(pid: str, top: str) -> str:
    """The part of ``pid``: its own or its nearest classified ancestor's below the command,
    rest for the command's other processes, outside for the machine's others."""
    found = None
    seen = 0
    while pid and pid not in ("0", "1") and seen < 64:
        found = found or part_of_argv(argv_of(pid))
        if pid == top:
            return found or "rest"
        pid = parent_of(pid) or ""
        seen += 1
    return "outside"


def busy_ticks() -> int:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return user + nice + system + irq + softirq


def sweep(top: str, containers: dict[str, dict[str, float | str]],
          placed: dict[str, str], start: dict[str, float], *, baseline: bool = False) -> None:
    """Move each process into its part's group (a process born in its parent's group moves
    on where its own command line names another part), and read each container's CPU."""
    names: dict[str, str] = {}
    for entry in os.scandir("/proc"):
        pid = entry.name
        if not pid.isdigit():
            continue
        path = cpuacct_path(pid)
        if path == "/" or (path or "").startswith(f"/{OURS.name}/"):
            key = pid + ":" + start_time(pid)
            if key not in placed:  # a new process: its part from its command line's ancestry
                placed[key] = classify(pid, top)
            if placed[key] not in PARTS:  # a molecule scenario's group, made when first seen
                (OURS / placed[key]).mkdir(exist_ok=True)
                start.setdefault(placed[key], usage(placed[key]))
            if path != f"/{OURS.name}/{placed[key]}":
                with contextlib.suppress(OSError):  # gone already, or a kernel thread
                    (OURS / placed[key] / "cgroup.procs").write_text(pid)
        argv = argv_of(pid)
        if argv and Path(argv[0]).name == "conmon" and "-c" in argv and "-n" in argv:
            names[argv[argv.index("-c") + 1]] = argv[argv.index("-n") + 1]
    # podman's default parent, and the background tier scripts/test.sh puts the ansible-core
    # 2.21 pass's container in (tests/cpu_tiers.py: --cgroup-parent)
    for cg in (*ROOT.glob("libpod_parent/libpod-*"), *ROOT.glob("nodetune-test-*/libpod-*")):
        found = CONTAINER_CG.search(cg.name)
        if not found:
            continue
        cid = found.group(1)
        used = read(cg / "cpuacct.usage").strip()
        if not used:
            continue
        # a container that ran before the command counts from the command's start on; one
        # stopped and started again (a test restarting a node) gets a new group whose count
        # starts at 0: what the old one had counted is kept
        now = int(used) / 1e9
        row = containers.setdefault(cid, {"name": "", "cpu_s": 0.0, "last": 0.0, "before": 0.0,
                                          "base": now if baseline else 0.0})
        if now < float(row["last"]):
            row["before"] = float(row["before"]) + float(row["last"])
        row["last"] = now
        row["cpu_s"] = float(row["before"]) + now - float(row["base"])
        if cid in names:
            row["name"] = names[cid]


def usage(part: str) -> float:
    """The CPU seconds the part's group has counted since it was made."""
    return int(read(OURS / part / "cpuacct.usage") or 0) / 1e9


def container_part(name: str) -> str:
    if name.startswith(("nodetune-molecule", "molecule-")):
        return "molecule"
    if name.startswith("nodetune-ansible-next"):
        return "next"
    return "integration"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON document written")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("command", nargs="+")
    args = ap.parse_args()
    if not (ROOT / "cpuacct.usage").exists():
        sys.exit(f"{ROOT}: no cgroup v1 cpuacct hierarchy here")
    for part in PARTS:
        (OURS / part).mkdir(parents=True, exist_ok=True)
    containers: dict[str, dict[str, float | str]] = {}
    placed: dict[str, str] = {}
    busy0, t0 = busy_ticks(), time.monotonic()
    start = {p: usage(p) for p in PARTS}  # the groups outlive a run: counted from here
    conmon0 = int(read(CONMON) or 0) / 1e9
    sweep("0", containers, {}, start, baseline=True)  # the containers already running
    proc = subprocess.Popen(args.command)
    (OURS / "rest" / "cgroup.procs").write_text(str(proc.pid))
    try:
        while proc.poll() is None:
            sweep(str(proc.pid), containers, placed, start)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
    wall = time.monotonic() - t0
    busy = (busy_ticks() - busy0) / os.sysconf("SC_CLK_TCK")
    parts = {p: usage(p) - start[p] for p in start}
    parts["conmon"] = int(read(CONMON) or 0) / 1e9 - conmon0
    by_part: dict[str, float] = {}
    for row in containers.values():
        key = container_part(str(row["name"])) + " containers"
        by_part[key] = by_part.get(key, 0.0) + float(row["cpu_s"])
    doc = {"command": args.command, "exit": proc.returncode, "wall_s": round(wall, 1),
           "busy_cpu_s": round(busy, 1),
           "processes_cpu_s": {k: round(v, 1) for k, v in parts.items()},
           "containers_cpu_s": {k: round(v, 1) for k, v in sorted(by_part.items())},
           "containers": sorted(({"name": r["name"], "cpu_s": round(float(r["cpu_s"]), 1)}
                                 for r in containers.values()), key=lambda r: -float(r["cpu_s"]))}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    attributed = sum(parts.values()) + sum(by_part.values())
    print(f"\nwall {wall:.0f} s, busy CPU {busy:.0f} s, attributed {attributed:.0f} s")
    for key, value in sorted({**parts, **by_part}.items(), key=lambda kv: -kv[1]):
        print(f"{value:8.0f} s  {key}")
    return proc.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
