"""Shared fixtures: the repository root and a way to run the real `nodetune` command."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import lab_name

# Before any test module imports nodetune.lab.nodes, which reads the lab's name once.
SUITE_LAB = lab_name.claim()

REPO = Path(__file__).resolve().parents[1]
NODETUNE = Path(sys.executable).parent / "nodetune"
# A command's prefix that gives it a PID namespace of its own, where /proc holds only what
# it starts: for a test of code that scans every process (the worker's sweep), on a machine
# whose /proc also shows the processes of the suite lab's nodes (their PID namespaces are
# nested in the host's). util-linux's unshare, as root (the suite runs as root); when
# unshare ends (a test's timeout), everything in the namespace goes with it.
IN_OWN_PIDS = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


@functools.cache
def _own_pids_possible() -> bool:
    """Whether a PID namespace of its own can be made here (asked once a session)."""
    try:
        return subprocess.run([*IN_OWN_PIDS, "true"], capture_output=True, timeout=30,
                              check=False).returncode == 0
    except OSError:
        return False


def own_pids_or_skip() -> None:
    """Skip the calling test where no PID namespace can be made (not root, or a container
    without CAP_SYS_ADMIN: scripts/ansible-next.sh's unprivileged controller)."""
    if not _own_pids_possible():
        pytest.skip("no PID namespace of its own can be made here (unshare --pid needs root)")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_nodetune(*args: str, runs_dir: Path, timeout: float = 600,
                 env: dict[str, str] | None = None, cwd: Path = REPO) -> CliResult:
    """Run the installed `nodetune` command for real (from the repository root by default)."""
    proc = subprocess.run(
        [str(NODETUNE), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "NODETUNE_RUNS_DIR": str(runs_dir), **(env or {})}, check=False,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def sigint_default() -> None:
    """preexec_fn for a nodetune child: a background job's children inherit SIGINT ignored,
    and Ctrl-C must reach nodetune."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture()
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each failed test's assertion lines again, last: a CI page often shows only the tail."""
    failed = terminalreporter.stats.get("failed", [])
    if not failed:
        return
    terminalreporter.section("failed tests, in short")
    for report in failed:
        lines = [line for line in str(report.longrepr).splitlines() if line.startswith("E ")]
        terminalreporter.write_line(report.nodeid)
        for line in lines[:12]:
            terminalreporter.write_line(f"    {line[:300]}")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now, for a test's own server (two
    tests running at once, in pytest-xdist's workers, never share a fixed one)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
