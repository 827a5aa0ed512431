"""A real lab of two podman nodes over real SSH, shared by every integration test.

The lab is the suite's own (tests/integration/session_lab.py): its own name and
files, started for the session and removed at its end, also when tests fail. A
lab the operator runs is never reused, resized or removed.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodetune.lab import nodes as lab_mod
from tests import lab_name
from tests.integration import cpu_log
from tests.integration.session_lab import Lab, suite_lab

REPO = Path(__file__).resolve().parents[2]


def answers_ssh(address: str) -> bool:
    """Whether an SSH server greets this machine on ``address`` port 22 (within 3 s)."""
    try:
        with socket.create_connection((address, 22), timeout=3) as sock:
            return sock.recv(4).startswith(b"SSH")
    except OSError:
        return False


# The modules that reshape the session's lab, in the order they run after every other
# module (those run by name on the two plain nodes the session starts with): fleet grows
# it to four nodes and back; the Slurm modules (check_health's drains too) add Slurm, which
# stays; the launcher's grows it to five. A module on the plain lab thus never pays for
# Slurm being asked on every apply and validate.
RESHAPING = ("test_fleet.py", "test_check_health.py", "test_slurm.py",
             "test_slurm_healthcheck.py", "test_slurm_launcher.py")
# NODETUNE_TEST_PART picks a part of them: "slurm", the modules that add Slurm to their
# lab, or "plain", every other (fleet last); unset, all. Two sessions, each with its own
# NODETUNE_TEST_LAB, can run the two parts side by side on two labs.
PART_ENV = "NODETUNE_TEST_PART"
SLURM_PART = RESHAPING[1:]
PARTS = ("plain", "slurm")


def part_of(module: str) -> str:
    """Which part (NODETUNE_TEST_PART) holds ``module``."""
    return "slurm" if module in SLURM_PART else "plain"


def pytest_configure(config: pytest.Config) -> None:
    cpu_log.configure(config)  # NODETUNE_TEST_CPU_LOG: each test's wall and CPU (a measurement)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if "/integration/" in str(item.fspath)]
    for item in ours:
        item.add_marker(pytest.mark.integration)
    part = os.environ.get(PART_ENV, "")
    if part and part not in PARTS:
        raise pytest.UsageError(f"{PART_ENV}={part!r}: expected one of {', '.join(PARTS)}")
    if part:
        dropped = [item for item in ours if part_of(item.path.name) != part]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            ours = [item for item in ours if part_of(item.path.name) == part]
            items[:] = [item for item in items
                        if "/integration/" not in str(item.fspath) or item in ours]

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return RESHAPING.index(name) + 1 if name in RESHAPING else 0

    # A stable sort: within a module, and among the plain modules, pytest's order stays.
    ordered = iter(sorted(ours, key=rank))
    items[:] = [next(ordered) if "/integration/" in str(item.fspath) else item
                for item in items]


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run scripts/bootstrap.sh (make test does)")
    # The suite acts only on its own lab: NODETUNE_LAB (claimed in tests/conftest.py before
    # nodetune.lab.nodes was imported) names it, never the operator's (demo.sh's) lab.
    own = os.environ[lab_name.SUITE_ENV]
    if not (lab_mod.NAME == os.environ.get("NODETUNE_LAB") == own != lab_name.DEFAULT):
        pytest.fail(f"the lab in effect ({lab_mod.NAME}) is not the suite's own ({own}): "
                    "nodetune.lab.nodes was imported before tests/conftest.py claimed the name")
    with suite_lab(REPO) as lab_:
        yield lab_
