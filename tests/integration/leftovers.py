"""What a validation could leave on a lab node: one look, shared by the lab tests of the
SSH and Slurm launchers (the fleet and ``--launcher slurm``)."""

from __future__ import annotations

import subprocess

from tests import node_exec


def leftovers(nodes: tuple[str, ...]) -> dict[str, str]:
    """Worker processes or run directories a validation could have left on a node."""
    found = {}
    for node in nodes:
        out = subprocess.run(
            node_exec.argv(node, "sh", "-c",
                           "pgrep -af '[n]odetune_worker|[t]orch[.]distributed'; "
                           "ls -d /tmp/nodetune-validate.* 2>/dev/null; true"),
            capture_output=True, text=True, check=False, timeout=60).stdout.strip()
        if out:
            found[node] = out
    return found
