"""Carry out a validation plan as one srun step of the run's Slurm allocation.

The step runs the same worker as the SSH launcher (:mod:`~nodetune.collective.launch`),
staged on the nodes by sbcast, one task per node; its output is split per node
(:mod:`nodetune.slurm.step`) and followed by the same probe checks and watcher. No SSH
reaches a compute node: the step is started on the controller. Whatever happens, the
step's stdin is closed (the launch guards stop their ranks) and the step is cancelled
if it still runs. Under ``--image`` the container checklist's two short probe steps
(:mod:`nodetune.container.slurm_probe`) run first, and the worker's step runs in the image.
The step is started and stopped through the Slurm executor
(:class:`~nodetune.slurm.executor.SrunExecutor`); what follows the start is the SSH
launcher's own launcher-neutral code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from nodetune.collective import worker_cmd
from nodetune.collective.at_once import on_each_node
from nodetune.collective.launch import Measurement, measure, probe_answer
from nodetune.collective.nodes import CLEANUP_TIMEOUT, OnValidateEvent, RunNode, ValidateEvent
from nodetune.collective.plan import Plan
from nodetune.container import runtime as ct
from nodetune.container import slurm_probe as sp
from nodetune.container.probe import Probed
from nodetune.errors import NodetuneError
from nodetune.measure import protocol
from nodetune.remote.executor import Command
from nodetune.slurm.allocation import Allocation
from nodetune.slurm.commands import NodeCommand
from nodetune.slurm.executor import SrunExecutor


def worker_commands(plan: Plan, run_id: str,
                    pythons: Mapping[str, str] | None = None) -> dict[str, Command]:
    """Each node's worker (``launch`` guard around ``serve``), by inventory name;
    ``pythons``: the image's Python per node, under ``--image``."""
    return {n.name: Command(
        env={"PYTHONUNBUFFERED": "1", **n.env, protocol.RUN_VAR: run_id},
        argv=worker_cmd.serve_argv((pythons or {}).get(n.name, n.python), worker_cmd.WORKER_NAME,
                                   master_addr=plan.master_addr, free_port=n.rank == 0))
        for n in plan.nodes}


def reap_commands(pythons: dict[str, str], run_id: str,
                  workdir: str) -> dict[str, NodeCommand]:
    """Each node's last step: kill what carries the run's id, remove the run's directory."""
    return {name: NodeCommand(env={}, argv=["sh", "-c", (
        f'"$0" {workdir}/{worker_cmd.WORKER_NAME} reap "$1"; rm -rf -- {workdir}'),
        python, run_id]) for name, python in pythons.items()}


def probe_targets(plan: Plan) -> list[sp.Target]:
    """The plan's nodes as the ``--image`` probe's targets."""
    return [sp.Target(n.host, n.python) for n in plan.nodes]


def preflight(plan: Plan, alloc: Allocation, image: str,
              progress: OnValidateEvent = lambda _e: None
              ) -> tuple[dict[str, ct.Container], dict[str, Probed]]:
    """``--image``: probe every node of ``plan`` bare and in its container (two short
    steps) and judge the checklist.

    Raises:
        ImageError, LaunchError: as :func:`~nodetune.container.slurm_probe.judge_nodes`
            (exit 3).
        NodeTimeout, ImageTimeout: as :func:`~nodetune.container.slurm_probe.probe_steps`
            (exit 4).
    """
    nodes = probe_targets(plan)
    containers, bare, inside = sp.probe_steps(
        nodes, alloc, image, timeout=plan.options.timeout,
        progress=lambda m: progress(ValidateEvent("preflight", m)))
    probed = sp.judge_nodes(nodes, alloc, containers, bare.lines, inside.lines,
                            bare.srun, inside.srun)
    for name, p in probed.items():
        progress(ValidateEvent("preflight", sp.described(p), name))
    return containers, probed


def run_pair_slurm(plan: Plan, alloc: Allocation, *,
                   progress: OnValidateEvent = lambda _e: None) -> Measurement:
    """Carry out ``plan`` as one step of ``alloc`` and collect what the nodes measured.

    Raises:
        LaunchError: no python/torch on a node, or the worker died (exit 3).
        NodeTimeout: a phase made no progress within the plan's timeout (exit 4).
    """
    nodes = [RunNode(n) for n in plan.nodes]
    phases: dict[str, float] = {}
    executor: SrunExecutor | None = None
    names = ",".join(alloc.names[n.name] for n in nodes)
    image = plan.options.image
    probed: dict[str, Probed] = {}
    try:
        t0 = time.monotonic()
        pythons: dict[str, str] = {}
        container: list[str] = []
        if image is not None:  # the checklist's two short steps, before the worker's
            containers, probed = preflight(plan, alloc, image, progress)
            bad = sp.failed(probed)
            if bad is not None:
                raise bad
            pythons = {name: c.python for name, c in containers.items()}
            container = sp.srun_options(containers, alloc.workdir)
        image_s = time.monotonic() - t0
        t0 = time.monotonic()
        progress(ValidateEvent("connect", f"srun step on {names} in job {alloc.job} "
                               f"(from {alloc.where})"))
        executor = SrunExecutor(alloc, container=container, stop_wait=CLEANUP_TIMEOUT)
        streams = executor.start(worker_commands(plan, alloc.run_id, pythons),
                                 name=f"nodetune-pair-{nodes[0].name}-{nodes[1].name}"
                                 if len(nodes) == 2 else "nodetune-all")
        for n in nodes:
            n.proc = streams[n.name]
        phases["connect"] = time.monotonic() - t0
        t0 = time.monotonic()
        probes = on_each_node(lambda n: probe_answer(n, plan.options.timeout, progress), nodes)
        phases["preflight"] = time.monotonic() - t0 + image_s
        m = measure(plan, nodes, probes, phases, progress)
        return replace(m, containers={k: p.to_dict() for k, p in probed.items()})
    except NodetuneError as exc:
        if probed:  # the record keeps what the checklist found, failed or not
            exc.sections = {**(exc.sections or {}),
                            "container": {k: p.to_dict() for k, p in probed.items()}}
        raise
    finally:
        t0 = time.monotonic()
        if executor is not None:
            executor.stop()  # close srun's stdin, wait, else scancel the step
        phases["cleanup"] = time.monotonic() - t0
        progress(ValidateEvent("cleanup", "step ended"))


__all__ = ["preflight", "probe_targets", "reap_commands", "run_pair_slurm", "worker_commands"]
