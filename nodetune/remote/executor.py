"""One way to run commands on nodes, whatever the launcher, and one table of whose fault
a step that did not answer is.

Two launchers reach the compute nodes: an SSH session per node
(:mod:`nodetune.remote.ssh_executor`, over :mod:`nodetune.remote.ssh`) and ``srun`` steps
of one exclusive allocation started on the Slurm controller
(:mod:`nodetune.slurm.executor`, over :mod:`nodetune.slurm.allocation`). What the verbs
ask of either is :class:`Executor`:

==========  =========================================  ===========================================
operation   over SSH (one session per node)            under Slurm (steps of one allocation)
==========  =========================================  ===========================================
run         ``Session.run`` per node, to its end;      ``Allocation.run_step``: one short step of
            past its timeout ``NodeTimeout`` naming    every node, to its end; past its timeout
            the node                                   the step is scancelled and ``NodeTimeout``
                                                       names the *controller*
run_node    ``Session.run`` of one node, to its end;   ``Allocation.run_step`` of one node, to its
            past its timeout the session's own         end; past its timeout the step is
            ``NodeTimeout`` (naming the node)          scancelled, ``NodeTimeout`` names the
                                                       controller
start       ``Session.start``: the command's process   ``Allocation.start_step``: one
            group, output and stdin (``Process``)      ``srun --label`` step, split into one
                                                       ``NodeStream`` per node
stage       ``mktemp -d`` on the node                  salloc's ``_stage``: one ``mkdir`` step,
            (``SshExecutor.make_workdir``), then       then ``sbcast`` of each file
            ``Session.upload`` of each file
            (``SshExecutor.stage_one``)
stop        close stdin (``SshExecutor.stop_one``,     close every stream (srun's stdin), wait
            from ``collective/cleanup.py``); the       ``CLEANUP_TIMEOUT``, then ``scancel`` of
            worker's launch guard stops its ranks;     the step (``SrunExecutor.stop``:
            :func:`kill_group` after                   :func:`nodetune.slurm.executor.end`)
clean up    the worker's ``reap`` and ``rm -rf`` over  the ``nodetune-clear`` step (reap, rm),
            the run's session, else a fresh one        ``scancel`` of the job, wait for squeue
            (``SshExecutor.reconnect``)                (``slurm/allocation.tear_down``)
==========  =========================================  ===========================================

The faults, what each raises and whom it blames (:func:`blame`: the node, which
``--drain-unreachable`` may drain; the image, for which no node is drained; else the
infrastructure, which names no node of the run):

=================================  ====================  ====  ===============================
fault                              raised as             exit  blames
=================================  ====================  ====  ===============================
a node cannot be reached (SSH)     ``SSHError``          3     the node it names
the node's own command hung        ``NodeTimeout``       4     the node (SSH); under Slurm
(:data:`Stage.NODE`, HUNG)                                     the step names the controller:
                                                               infrastructure
the node's own command gave no     ``LaunchError``       3     the node
answer (:data:`Stage.NODE`,
FAILED): no Python, no torch,
the worker died
runtime / image / container step   ``ImageTimeout``      4     the image (no node)
hung (:data:`Stage.RUNTIME`,
``IMAGE``, ``CONTAINER``)
runtime / image / container step   ``ImageError``        3     the image (no node)
gave no answer
the image's container answered     ``ImageCheckFailed``  1     the image (no node)
and fails the checklist
salloc refused, staging, scontrol  ``SlurmError``        3     infrastructure (the controller)
``check --launcher slurm``: a      error of the node's   4     the node
node's report did not come in      check (as NODE, HUNG)
time
``check --launcher slurm``: a      error of the node's   3     the node
node gave no report                check (as NODE,
                                   FAILED)
=================================  ====================  ====  ===============================

A run ended by one of these says it once; ``check`` keeps it as the node's
``NodeChecks.error`` (its exit code and ``error_blames_node``), ``validate`` as the run's
error (:func:`blamed_host`, :func:`left_alone`). The container probe's stages (the bare
probe, the runtime, the image, the container) are :data:`RULES`:
:mod:`nodetune.container.probe` explains them.

Where the two launchers still differ (kept as they are, the lab's tests pin them):
a hung short step under Slurm names the controller, not a node (so a hung bare probe
drains no node there, while over SSH it may); and ``check --image``'s container fault
keeps the node's own checks under both, while a node fault keeps them only under Slurm
(:func:`nodetune.check.model.with_error`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from nodetune.errors import (
    ImageError,
    ImageTimeout,
    LaunchError,
    NodeTimeout,
    NodetuneError,
)

log = logging.getLogger(__name__)


class Stage(StrEnum):
    """Where a step ran."""

    NODE = "node"            # on the node itself, by its own Python
    RUNTIME = "runtime"      # the container runtime itself
    IMAGE = "image"          # the image found, pulled or imported, its digest read
    CONTAINER = "container"  # a command in a container of the image


class Outcome(StrEnum):
    """How it ended without an answer."""

    HUNG = "hung"      # did not end within its time
    FAILED = "failed"  # ended, with no answer


RULES: Mapping[tuple[Stage, Outcome], type[NodetuneError]] = {
    (Stage.NODE, Outcome.HUNG): NodeTimeout,
    (Stage.NODE, Outcome.FAILED): LaunchError,
    (Stage.RUNTIME, Outcome.HUNG): ImageTimeout,
    (Stage.RUNTIME, Outcome.FAILED): ImageError,
    (Stage.IMAGE, Outcome.HUNG): ImageTimeout,
    (Stage.IMAGE, Outcome.FAILED): ImageError,
    (Stage.CONTAINER, Outcome.HUNG): ImageTimeout,
    (Stage.CONTAINER, Outcome.FAILED): ImageError,
}


def fault(stage: Stage, outcome: Outcome, message: str, *, host: str | None) -> NodetuneError:
    """The error of a step at ``stage`` that ended as ``outcome``, naming ``host``."""
    return RULES[(stage, outcome)](message, host=host)


def hung(stage: Stage, exc: NodeTimeout, what: str, *, host: str | None = None
         ) -> NodetuneError:
    """``exc`` (a step past its time) as the error its stage's rule gives, naming ``host``
    (else the host ``exc`` names); ``what``: the step, for the message."""
    return fault(stage, Outcome.HUNG, f"{what} did not end: {exc.message}",
                 host=host or exc.host)


class Blame(StrEnum):
    """Whose fault an error is."""

    NODE = "node"                      # the node it names: --drain-unreachable may drain it
    IMAGE = "image"                    # what the node was asked to run: no node drained
    INFRASTRUCTURE = "infrastructure"  # names no node of the run (the controller, none)


def blame(exc: NodetuneError, names: Sequence[str]) -> Blame:
    """Whose fault ``exc`` is, in a run of the nodes ``names``."""
    if not exc.blames_node:
        return Blame.IMAGE
    return Blame.NODE if exc.host in names else Blame.INFRASTRUCTURE


def blamed_host(exc: NodetuneError, names: Sequence[str]) -> str | None:
    """The node a failed run is blamed on (unreachable, drained under --drain-unreachable):
    the one the error names, unless the fault is in what it was asked to run (a training
    image that is missing, or whose container fails the checklist)."""
    return exc.host if blame(exc, names) is Blame.NODE else None


def left_alone(exc: NodetuneError, names: Sequence[str]) -> dict[str, str] | None:
    """The nodes Slurm must neither drain nor resume after ``exc``, and why: all of them
    where the fault is the training image's (missing, or its container fails the
    checklist), which says nothing of the nodes, even under --drain-unreachable."""
    if blame(exc, names) is not Blame.IMAGE:
        return None
    return {n: "not drained: the failure is the training image's, not the node's: "
               f"{exc.message}" for n in names}


@dataclass(frozen=True, slots=True)
class Command:
    """What one node runs: its argument list, environment and working directory (over
    SSH; under Slurm every step runs in the allocation's own directory)."""

    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class Ran:
    """What a command that ran to its end left on one node: its output as the launcher
    gives it (over SSH stdout and stderr apart; under Slurm the node's lines as
    ``stdout``, srun's own in ``launcher``)."""

    exit_status: int | None
    stdout: str
    stderr: str = ""
    lines: tuple[str, ...] = ()
    launcher: tuple[str, ...] = ()


class Stream(Protocol):
    """A started command's output, read line by line, and its stdin."""

    def lines(self) -> Iterator[str]:
        """Output lines until the command closes its output."""
        ...

    def poll(self) -> int | None:
        """Exit status, or None while it runs."""
        ...

    def send(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin."""
        ...

    def close(self) -> None:
        """Close our end: the command sees EOF on stdin."""
        ...


# Executor.where over SSH, where each node's command is started by its own session
# (under Slurm it is the controller's name, as the Slurm plan gives it).
OVER_SSH = "ssh"


class Executor(Protocol):
    """Commands on a set of nodes (by inventory name), over one launcher."""

    @property
    def where(self) -> str:
        """Where the commands are started from, for messages: :data:`OVER_SSH`, or the
        Slurm controller that starts the steps (``local``: this machine)."""
        ...

    def run(self, commands: Mapping[str, Command], *, name: str, timeout: float,
            stage: Stage, what: str) -> dict[str, Ran]:
        """Run each node's command to its end.

        Raises:
            NodetuneError: past ``timeout``, the error :data:`RULES` gives ``stage`` hung
                (``what``: the step, for the message).
        """
        ...

    def run_node(self, node: str, command: Command, *, timeout: float) -> Ran:
        """``node``'s command alone, to its end, as the launcher answers it: a reader that
        words its own faults (``check``'s probe, health reader and sampler) gets the
        launcher's own errors unchanged.

        Raises:
            NodeTimeout: past ``timeout`` (over SSH naming the node; under Slurm the step
                is scancelled and it names the controller).
            SSHError: the node's session was lost (over SSH).
        """
        ...

    def start(self, commands: Mapping[str, Command], *, name: str) -> dict[str, Stream]:
        """Start each node's command without waiting; stdin stays open until
        :meth:`Stream.close`."""
        ...

    def stage(self, files: Mapping[str, bytes], workdir: str) -> None:
        """Write ``files`` into ``workdir`` on every node."""
        ...

    def stop(self) -> None:
        """Stop what :meth:`start` started (close its stdin, then end it)."""
        ...

    def close(self) -> None:
        """Let go of the nodes (the launcher's own clean-up is its owner's)."""
        ...


class NodeRunner:
    """One node of an executor, bound: what a check of that node runs on it
    (:meth:`Executor.run_node`), without knowing the launcher."""

    __slots__ = ("executor", "node")

    def __init__(self, executor: Executor, node: str) -> None:
        self.executor = executor
        self.node = node

    def run(self, command: Command, *, timeout: float) -> Ran:
        """``command`` on the node, to its end (:meth:`Executor.run_node`)."""
        return self.executor.run_node(self.node, command, timeout=timeout)


def kill_group(runner: NodeRunner, pgid: int, *, grace: float = 3.0) -> bool:
    """SIGTERM process group ``pgid`` on ``runner``'s node, SIGKILL what is left after
    ``grace``.

    Returns:
        True when the group is gone.
    """
    group = f"-{int(pgid)}"

    def kill(signal: str) -> int | None:
        return runner.run(Command(["kill", "-s", signal, "--", group]), timeout=15).exit_status

    kill("TERM")
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if kill("0") != 0:
            return True
        time.sleep(0.2)
    log.warning("%s: process group %d survived SIGTERM; sending SIGKILL", runner.node, pgid)
    kill("KILL")
    time.sleep(0.2)
    return kill("0") != 0


__all__ = ["OVER_SSH", "RULES", "Blame", "Command", "Executor", "NodeRunner", "Outcome", "Ran",
           "Stage", "Stream", "blame", "blamed_host", "fault", "hung", "kill_group",
           "left_alone"]
