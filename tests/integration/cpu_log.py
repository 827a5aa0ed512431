"""Each lab test's wall time and CPU, when ``NODETUNE_TEST_CPU_LOG`` names a file.

A measurement, not a check: it asserts nothing and changes no test. For each test
(setup, call and teardown together) it writes one tab-separated line: the test's id,
its wall seconds, the CPU seconds of pytest and every process it waited for (nodetune,
ansible-playbook and their children: ``getrusage``), and the CPU seconds of the suite
lab's node containers (their cgroup v1 ``cpuacct.usage``, read at each test's start and
end; a container restarted during a test counts from its restart, what it used between
the test's start and the restart is lost). SSH master connections that outlive their
command (ControlPersist) are nobody's waited-for child and are not counted. At the
session's end the modules are summed, largest first, in the terminal summary.

    NODETUNE_TEST_CPU_LOG=/tmp/cpu.tsv ./scripts/test.sh tests/integration

Needs root and cgroup v1's cpuacct hierarchy for the containers' part: without it the
session says so at its start and that column is 0. The file is written afresh by each
session that names it.
"""

from __future__ import annotations

import json
import os
import re
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetune.lab import nodes as lab_mod

ENV = "NODETUNE_TEST_CPU_LOG"
CGROUPS = Path("/sys/fs/cgroup/cpuacct/libpod_parent")
CONTAINERS = Path("/var/lib/containers/storage/overlay-containers/containers.json")


def _own_cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        use = resource.getrusage(who)
        total += use.ru_utime + use.ru_stime
    return total


_ids_read: tuple[tuple[int, int], set[str]] | None = None


def _lab_ids() -> set[str]:
    """The IDs of the containers whose name is one of the suite lab's nodes (podman's
    containers.json read again only when it changed)."""
    global _ids_read
    try:
        st = CONTAINERS.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if _ids_read is not None and _ids_read[0] == stamp:
            return _ids_read[1]
        entries = json.loads(CONTAINERS.read_text())
    except (OSError, ValueError):
        return set()
    node = re.compile(rf"{re.escape(lab_mod.NAME)}-[0-9]+")  # not a lab whose name extends it
    ids = {e["id"] for e in entries
           if any(node.fullmatch(str(n)) for n in e.get("names") or [])}
    _ids_read = (stamp, ids)
    return ids


class _Containers:
    """The lab containers' CPU, counted across restarts (a reset counter starts again)."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.total_ns = 0

    def sample(self) -> float:
        for cid in _lab_ids():
            try:
                now = int((CGROUPS / f"libpod-{cid}" / "cpuacct.usage").read_text())
            except (OSError, ValueError):
                continue
            last = self.seen.get(cid, 0)
            self.total_ns += now - last if now >= last else now
            self.seen[cid] = now
        return self.total_ns / 1e9


class CpuLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.containers = _Containers()
        self.modules: dict[str, list[float]] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            fh.write("test\twall_s\tprocesses_cpu_s\tcontainers_cpu_s\n")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        wall0, own0, cont0 = time.monotonic(), _own_cpu(), self.containers.sample()
        yield
        wall = time.monotonic() - wall0
        own, cont = _own_cpu() - own0, self.containers.sample() - cont0
        with self.path.open("a") as fh:
            fh.write(f"{item.nodeid}\t{wall:.1f}\t{own:.1f}\t{cont:.1f}\n")
        sums = self.modules.setdefault(item.path.name, [0.0, 0.0, 0.0])
        for i, value in enumerate((wall, own, cont)):
            sums[i] += value

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_sep("=", f"lab tests' wall and CPU by module ({self.path})")
        tr.write_line(f"{'wall s':>8} {'proc CPU-s':>11} {'nodes CPU-s':>12}  module")
        rows = sorted(self.modules.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
        for name, (wall, own, cont) in rows:
            tr.write_line(f"{wall:8.0f} {own:11.0f} {cont:12.0f}  {name}")
        total = [sum(v[i] for v in self.modules.values()) for i in range(3)]
        tr.write_line(f"{total[0]:8.0f} {total[1]:11.0f} {total[2]:12.0f}  all")


def configure(config: pytest.Config) -> None:
    """Register the log when ``NODETUNE_TEST_CPU_LOG`` names a file."""
    path = os.environ.get(ENV)
    if path:
        if not CGROUPS.is_dir():
            print(f"{ENV}: no {CGROUPS} (cgroup v1 cpuacct): the lab nodes' CPU reads 0")
        config.pluginmanager.register(CpuLog(Path(path)), "nodetune-cpu-log")
