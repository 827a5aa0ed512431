"""validate when a node freezes or its SSH connection drops mid-run: the right node is
named, cleanup removes what it can reach and says what it could not."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_validate import _start_and_wait_joined, leftovers, nodes

pytestmark = pytest.mark.integration


def _wait_clean(lab: Any, node: str, timeout: float = 60) -> str:
    """Wait until no worker process is left on ``node``; return its leftover temp dirs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not lab.sh(node, "sh", "-c", "pgrep -af '[n]odetune_worker' || true"):
            break
        time.sleep(1)
    return str(lab.sh(node, "sh", "-c", "ls -d /tmp/nodetune-validate.* 2>/dev/null || true"))


def test_frozen_node_is_named_and_what_cleanup_left_is_said(lab: Any) -> None:
    inventory = Path(lab.inventory)
    first, frozen = nodes(inventory)
    proc, seen = _start_and_wait_joined(inventory, "15")
    time.sleep(2)  # inside the all_reduce loop
    # podman pause freezes every process of the node (cgroup freezer), sshd included.
    subprocess.run(["podman", "pause", frozen], check=True, capture_output=True, timeout=60)
    try:
        _, rest = proc.communicate(timeout=200)
    finally:
        subprocess.run(["podman", "unpause", frozen], check=False, capture_output=True,
                       timeout=60)
    stderr = "".join(seen) + rest
    try:
        assert proc.returncode == 4, stderr
        assert f"{frozen}: stopped answering" in stderr
        said = re.search(rf"{frozen}: could not clean up: temp dir "
                         r"(/tmp/nodetune-validate\.\w+) (?:and worker processes .*)?left on "
                         "the node", stderr)
        assert said, stderr
        assert not re.search(r"^\s*cleanup stopped remote processes, removed temp dirs$",
                             stderr, re.MULTILINE), "claimed a cleanup it did not do"
        assert first not in leftovers(lab)
        # What it said is what is there (once the node thaws, its launch guard ends the ranks).
        assert _wait_clean(lab, frozen) == said.group(1)
    finally:
        _wait_clean(lab, frozen)
        lab.sh(frozen, "sh", "-c", "rm -rf /tmp/nodetune-validate.*")
    assert not leftovers(lab)


def test_dropped_connection_is_cleaned_over_a_new_one(lab: Any) -> None:
    inventory = Path(lab.inventory)
    _, victim = nodes(inventory)
    proc, seen = _start_and_wait_joined(inventory, "30")
    time.sleep(2)
    # End the sshd process that serves validate's connection to the node: every channel
    # of it (the worker's, the one cleanup would use) is gone; sshd itself keeps running.
    lab.sh(victim, "pkill", "-f", "^sshd: root@")
    _, rest = proc.communicate(timeout=200)
    stderr = "".join(seen) + rest
    assert proc.returncode == 3, stderr
    assert "could not clean up" not in stderr
    assert "removed temp dirs" in stderr
    assert not leftovers(lab)
