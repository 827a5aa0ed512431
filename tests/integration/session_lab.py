"""The integration suite's own lab: its own name, its own files, started and removed by it.

The name is claimed in tests/conftest.py (tests/lab_name.py) before nodetune.lab.nodes
is imported; the lab's files (inventory, SSH key, known_hosts) live under
``.nodetune/test-labs/<name>/`` of the checkout, never in ``inventory/lab``, which
belongs to the operator's lab. A lab of the suite's name that is already there
was left by an earlier run that was killed: it is the suite's own, and is
removed and started afresh. Whatever ends the session, the lab is removed.

For the inner loop, ``NODETUNE_TEST_KEEP_LAB=1`` keeps the suite's lab between
sessions: a session finds it running and reuses it (shrunk back to the session's
two nodes; Slurm, once a module added it, stays), and leaves it running at its
end. A run of scripts/test.sh without the variable removes it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nodetune.ansible.inventory import load
from nodetune.lab import nodes as lab_mod
from tests import lab_name, node_exec


@dataclass(frozen=True)
class Lab:
    root: Path
    inventory: Path
    nodes: tuple[str, ...]

    def sh(self, node: str, *argv: str, check: bool = True) -> str:
        """Run a command on a lab node (read-back of real state)."""
        proc = subprocess.run(node_exec.argv(node, *argv), capture_output=True, text=True,
                              check=False, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"{node}: {argv} failed: {proc.stderr}")
        return proc.stdout.strip()


def root_of(repo: Path) -> Path:
    """Where the suite's lab keeps its files (``lab up``'s root)."""
    return repo / ".nodetune" / "test-labs" / lab_mod.NAME


@contextmanager
def suite_lab(repo: Path, *, nodes: int = 2, with_torch: bool = True) -> Iterator[Lab]:
    """Start the suite's own lab, yield it, and remove it, also when the body fails."""
    claimed = os.environ.get(lab_name.SUITE_ENV)
    if claimed != lab_mod.NAME:  # nodetune.lab.nodes was imported before the name was claimed
        raise RuntimeError(f"the suite's lab is {claimed!r} but nodetune.lab.nodes runs "
                           f"{lab_mod.NAME!r}: it was imported before tests/conftest.py")
    root = root_of(repo)
    keep = keep_lab()
    if lab_mod.status(root).nodes and not keep:  # left by a killed run of the suite: its own
        lab_mod.down(root)
    try:
        lab_mod.up(root, nodes=nodes, shrink=True, with_torch=with_torch)
        inventory = root / "inventory" / "lab"
        yield Lab(root=root, inventory=inventory,
                  nodes=tuple(h.name for h in load(inventory).hosts))
    finally:
        if not keep:
            lab_mod.down(root)


KEEP_ENV = "NODETUNE_TEST_KEEP_LAB"


def keep_lab(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the suite's lab outlives the session (``NODETUNE_TEST_KEEP_LAB=1``)."""
    return environ.get(KEEP_ENV, "") == "1"
