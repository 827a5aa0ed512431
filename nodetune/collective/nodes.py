"""One node's state while a validation runs, shared by the launcher, the watcher and the
cleanup, and the events a run reports as it goes."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodetune.collective.plan import NodePlan
from nodetune.errors import NodetuneError
from nodetune.measure.sweep import SizeResult
from nodetune.remote.executor import Command, NodeRunner
from nodetune.remote.session import Process

if TYPE_CHECKING:
    from nodetune.container.probe import Probed
    from nodetune.container.runtime import Container

# Cleanup and the "who stopped answering" check must not hang on a frozen node.
CLEANUP_TIMEOUT = 10.0
ANSWER_TIMEOUT = 5.0
# The most the cleanup of all nodes may take before the run ends anyway.
CLEANUP_BUDGET = 2 * CLEANUP_TIMEOUT
KEEP_LINES = 20000


@dataclass(frozen=True, slots=True)
class ValidateEvent:
    """Something worth showing while a validation runs (phase, host, a finished size)."""

    phase: str          # connect, preflight, launch, measure, cleanup
    message: str
    host: str | None = None
    size: SizeResult | None = None


OnValidateEvent = Callable[[ValidateEvent], None]


@dataclass(slots=True)
class RunNode:
    """A node of a running validation: how it is reached, its worker and what it has said."""

    plan: NodePlan
    # The node's own commands beside its worker's stream (the stall diagnosis, NCCL's
    # RAS, the cleanup): over SSH, its session in the run's executor; None under Slurm,
    # where the step's own clean-up is srun's.
    runner: NodeRunner | None = None
    tmpdir: str | None = None
    proc: Process | None = None
    pgid: int | None = None
    started: bool = False
    progress_bytes: int = 0
    exit_status: int | None = None
    eof: bool = False
    # Did not answer when the run stalled (frozen): cleanup tries it once, briefly.
    silent: bool = False
    errors: list[str] = field(default_factory=list)
    # --image: how the worker runs in a container there, and what the probe found
    container: Container | None = None
    probed: Probed | None = None
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=KEEP_LINES))

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def rank(self) -> int:
        return self.plan.rank


def ended(node: RunNode, wait: float = 5.0) -> int | None:
    """The worker's exit status, waiting up to ``wait`` s for it (None: still running)."""
    assert node.proc is not None
    deadline = time.monotonic() + wait
    while (status := node.proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


def answers(runner: NodeRunner, timeout: float = ANSWER_TIMEOUT) -> bool:
    """Whether ``runner``'s node runs a trivial command within ``timeout``."""
    try:
        return runner.run(Command(["true"]), timeout=timeout).exit_status == 0
    except (NodetuneError, OSError):
        return False


def tail(text: str, n: int = 3) -> str:
    """The last ``n`` non-blank lines of ``text``, on one line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) or "no output"
