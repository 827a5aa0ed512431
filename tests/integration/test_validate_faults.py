"""validate when a node freezes or its SSH connection drops mid-run: the right node is
named, cleanup removes what it can reach and says what it could not."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_validate import (
    FAST,
    _start_and_wait_measuring,
    leftovers,
    nodes,
    run_cli,
)

pytestmark = pytest.mark.integration

TIMEOUT = 30  # validate --timeout of the frozen run (importing torch takes 15 s under load)


def _wait_clean(lab: Any, node: str, timeout: float = 60) -> str:
    """Wait until no worker process is left on ``node``; return its leftover temp dirs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not lab.sh(node, "sh", "-c", "pgrep -af '[n]odetune_worker' || true"):
            break
        time.sleep(1)
    return str(lab.sh(node, "sh", "-c", "ls -d /tmp/nodetune-validate.* 2>/dev/null || true"))


def test_frozen_node_is_named_in_time_and_its_guard_removes_its_leftovers(lab: Any) -> None:
    inventory = Path(lab.inventory)
    first, frozen = nodes(inventory)
    proc, seen = _start_and_wait_measuring(inventory, str(TIMEOUT))
    # podman pause freezes every process of the node (cgroup freezer), sshd included.
    subprocess.run(["podman", "pause", frozen], check=True, capture_output=True, timeout=60)
    paused = time.monotonic()
    try:
        _, rest = proc.communicate(timeout=200)
        named_after = time.monotonic() - paused
        print(f"{frozen} named {named_after:.1f} s after the pause (--timeout {TIMEOUT})")
    finally:
        subprocess.run(["podman", "unpause", frozen], check=False, capture_output=True,
                       timeout=60)
    stderr = "".join(seen) + rest
    try:
        assert proc.returncode == 4, stderr
        assert f"{frozen}: stopped answering" in stderr
        # README: exit 4 within --timeout + 15 s of the node's last progress.
        assert named_after < TIMEOUT + 15, f"named {named_after:.1f} s after the pause"
        said = re.search(rf"{frozen}: could not clean up: temp dir "
                         r"(/tmp/nodetune-validate\.\w+) (?:and worker processes .*)?left on "
                         r"the node \(the next validate that reaches it removes them, by run id "
                         r"(\w+)\)", stderr)
        assert said, stderr
        assert not re.search(r"^\s*cleanup stopped remote processes, removed temp dirs$",
                             stderr, re.MULTILINE), "claimed a cleanup it did not do"
        assert first not in leftovers(lab)
        left, _run_id = said.groups()
        # ...and so do the last line and the run record (the error's message).
        assert re.search(rf"^error: {frozen}: stopped answering: .*; not cleaned up on "
                         rf"{frozen}: temp dir {re.escape(left)}", stderr, re.MULTILINE), stderr
        # Once the node thaws, its launch guard finds the connection gone: it ends the
        # ranks and, after GUARD_REMOVE_AFTER_S, removes the run's own temp dir.
        assert _wait_clean(lab, frozen) == ""
        # The next run that reaches the node finds nothing of it to remove.
        again = run_cli(str(inventory), *FAST)  # no threshold: the load here is not the point
        assert again.returncode == 0, again.stderr
        assert "removed what earlier runs left here" not in again.stderr
    finally:
        _wait_clean(lab, frozen)
        lab.sh(frozen, "sh", "-c", "rm -rf /tmp/nodetune-validate.*")
    assert not leftovers(lab)


def test_dropped_connection_is_cleaned_over_a_new_one(lab: Any) -> None:
    inventory = Path(lab.inventory)
    _, victim = nodes(inventory)
    proc, seen = _start_and_wait_measuring(inventory, "30")
    # End the sshd process that serves validate's connection to the node: every channel
    # of it (the worker's, the one cleanup would use) is gone; sshd itself keeps running.
    lab.sh(victim, "pkill", "-f", "^sshd: root@")
    _, rest = proc.communicate(timeout=200)
    stderr = "".join(seen) + rest
    assert proc.returncode == 3, stderr
    assert "could not clean up" not in stderr
    assert "removed temp dirs" in stderr
    assert not leftovers(lab)
