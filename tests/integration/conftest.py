"""A real lab of two podman nodes over real SSH, shared by every integration test.

A lab that is already running (a developer's) is reused and left running;
a lab this session starts is torn down at the end, also when tests fail.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodetune import lab as lab_mod
from nodetune.inventory import load

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Lab:
    root: Path
    inventory: Path
    nodes: tuple[str, ...]

    def sh(self, node: str, *argv: str, check: bool = True) -> str:
        """Run a command on a lab node (read-back of real state)."""
        proc = subprocess.run(["podman", "exec", node, *argv], capture_output=True, text=True,
                              check=False, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"{node}: {argv} failed: {proc.stderr}")
        return proc.stdout.strip()


def answers_ssh(address: str) -> bool:
    """Whether an SSH server greets this machine on ``address`` port 22 (within 3 s)."""
    try:
        with socket.create_connection((address, 22), timeout=3) as sock:
            return sock.recv(4).startswith(b"SSH")
    except OSError:
        return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run scripts/bootstrap.sh (make test does)")
    inventory = REPO / "inventory" / "lab"
    running = [n for n in lab_mod.status(REPO).nodes if n.state == "running"]
    reuse = (inventory / "hosts.yml").exists() and len(running) >= 2
    lab_mod.up(REPO, nodes=max(2, len(running)) if reuse else 2, with_torch=True)
    nodes = tuple(h.name for h in load(inventory).hosts)
    try:
        yield Lab(root=REPO, inventory=inventory, nodes=nodes)
    finally:
        if not reuse:
            lab_mod.down(REPO)
