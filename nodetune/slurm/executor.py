"""The executor (:mod:`nodetune.remote.executor`) over ``srun`` steps of one exclusive
allocation (:class:`~nodetune.slurm.allocation.Allocation`), started on the controller.

Each operation is the allocation's own call, unchanged: a short step of every node
(``Allocation.run_step``), a long one split per node (``Allocation.start_step``), the
step's stdin closed then the step scancelled (``stop``). A step past its timeout is
scancelled by the allocation and is the error
:data:`~nodetune.remote.executor.RULES` gives its stage; it names the controller, where
the step was started, not a node (as it always has).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodetune.errors import NodeTimeout
from nodetune.remote.executor import Command, Ran, Stage, Stream, hung
from nodetune.slurm.allocation import Allocation, StepOutput
from nodetune.slurm.commands import NodeCommand
from nodetune.slurm.step import PairStep

# How long a stopped step has to end by itself before it is scancelled.
STOP_WAIT_S = 10.0
# The step of one node's command alone (:meth:`SrunExecutor.run_node`).
NODE_STEP = "nodetune-node"


class SrunExecutor:
    """Commands on the nodes of ``alloc`` (by inventory name), in the container that
    ``container``'s srun options start (none: on the nodes themselves)."""

    def __init__(self, alloc: Allocation, *, container: Sequence[str] = (),
                 stop_wait: float = STOP_WAIT_S) -> None:
        self.alloc = alloc
        self.container = list(container)
        self.stop_wait = stop_wait
        self.steps: list[PairStep] = []

    @property
    def where(self) -> str:
        """The controller the steps are started on (the allocation's)."""
        return self.alloc.where

    def _by_slurm_name(self, commands: Mapping[str, Command]) -> dict[str, NodeCommand]:
        return {self.alloc.names[n]: NodeCommand(env=c.env, argv=c.argv)
                for n, c in commands.items()}

    def run_step(self, commands: Mapping[str, Command], *, name: str, timeout: float,
                 stage: Stage, what: str) -> StepOutput:
        """:meth:`run` as the allocation answers it: each node's lines by Slurm name, and
        srun's own."""
        try:
            return self.alloc.run_step(self._by_slurm_name(commands), name=name,
                                       timeout=timeout, container=self.container)
        except NodeTimeout as exc:
            raise hung(stage, exc, what) from None

    def run(self, commands: Mapping[str, Command], *, name: str, timeout: float,
            stage: Stage, what: str) -> dict[str, Ran]:
        """One short step of every node of ``commands``, to its end."""
        out = self.run_step(commands, name=name, timeout=timeout, stage=stage, what=what)
        return {n: self._ran(out, n) for n in commands}

    def run_node(self, node: str, command: Command, *, timeout: float) -> Ran:
        """``command`` alone on ``node``: one short step of that node
        (:data:`NODE_STEP`), to its end, as :meth:`run` answers it; past ``timeout`` the
        step is scancelled and the allocation's ``NodeTimeout`` names the controller."""
        out = self.alloc.run_step(self._by_slurm_name({node: command}), name=NODE_STEP,
                                  timeout=timeout, container=self.container)
        return self._ran(out, node)

    def _ran(self, out: StepOutput, node: str) -> Ran:
        """``node``'s part of a short step's answer: its lines, srun's status and lines."""
        lines = tuple(out.lines.get(self.alloc.names[node], ()))
        return Ran(out.exit_status, "\n".join(lines), "", lines, tuple(out.srun))

    def start(self, commands: Mapping[str, Command], *, name: str) -> dict[str, Stream]:
        step = self.alloc.start_step(self._by_slurm_name(commands), name=name,
                                     container=self.container)
        self.steps.append(step)
        return {n: step.stream(self.alloc.names[n]) for n in commands}

    def stage(self, files: Mapping[str, bytes], workdir: str) -> None:
        """Files are staged when the allocation is taken (salloc, then sbcast:
        :func:`~nodetune.slurm.allocation.allocated`); only its own ``workdir`` is."""
        if files and workdir != self.alloc.workdir:
            raise ValueError(f"files are staged in {self.alloc.workdir} under Slurm")

    def stop(self) -> None:
        for step in self.steps:
            end(step, self.alloc, self.stop_wait)

    def close(self) -> None:
        return None  # the allocation's owner cancels the job (allocated's tear_down)


def end(step: PairStep, alloc: Allocation, wait: float) -> None:
    """Close every node's stream (srun's stdin: the launch guards stop their ranks), wait
    ``wait`` seconds for the step to end, else scancel it."""
    for s in step.streams.values():
        s.close()
    if not step.wait(wait) and step.job_step is not None:
        alloc.cancel_step(step.job_step)


__all__ = ["NODE_STEP", "STOP_WAIT_S", "SrunExecutor", "end"]
