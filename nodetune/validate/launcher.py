"""``--launcher``: how validate starts its workers, over SSH (the default) or inside one
exclusive Slurm allocation (``slurm``), for the pair verb and the fleet alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from nodetune.ansible.inventory import Host
from nodetune.collective import plan as plan_mod
from nodetune.collective.launch import worker_files
from nodetune.collective.plan import Options
from nodetune.container import slurm_probe
from nodetune.measure.host_env import node_python
from nodetune.measure.sizes import parse_sizes
from nodetune.slurm import allocation
from nodetune.slurm.allocation import Allocation, Held
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmPlan
from nodetune.validate.slurm_pair import reap_commands

LAUNCHERS = ("ssh", "slurm")
# Phases of one test besides its sizes: stage, connect, preflight, launch, cleanup.
PHASES = 5


def run_seconds(options: Options, *, tests: int = 1) -> float:
    """The longest a run can take: --timeout for each phase of each of ``tests`` tests run
    one after another (every size a phase): one for a pair or ``--all``; a fleet's rounds
    of pairs (:attr:`~nodetune.fleet.run.FleetPlan.tests`). salloc's default ``--time``
    follows it (:meth:`~nodetune.slurm.commands.AllocOptions.time`)."""
    sizes = len(parse_sizes(options.sizes or plan_mod.DEFAULT_SIZES_GPU))
    return options.timeout * (sizes + PHASES) * tests


@contextmanager
def launched(hosts: Sequence[Host], options: AllocOptions | None, *, held: Held,
             run_s: float, timeout_s: float, progress: Callable[[str], None] = lambda _m: None,
             image: str | None = None, slurm_plan: SlurmPlan | None = None
             ) -> Iterator[Allocation | None]:
    """None under the SSH launcher (``options`` None); else ``hosts`` in one exclusive
    allocation, staged, and cancelled on the way out (see
    :func:`nodetune.slurm.allocation.allocated`), where ``slurm_plan`` says
    (:attr:`nodetune.slurm.prepare.Prepared.launcher`, checked before this), its
    default time limit from ``run_s`` and its cancel's wait from ``timeout_s``; with
    ``image``, the cluster's container support is asked for before the allocation
    (:func:`~nodetune.container.slurm_probe.require_runtime`) and the checklist's probe
    staged too.

    Raises:
        ValueError: ``options`` without ``slurm_plan``.
    """
    if options is None:
        yield None
        return
    if slurm_plan is None:
        raise ValueError("--launcher slurm needs the launcher's plan (Prepared.launcher)")
    options = dataclasses.replace(options, run_s=run_s, timeout_s=timeout_s)
    pythons = {slurm_plan.names[h.name]: node_python(h) for h in hosts}
    before = None if image is None else (
        lambda session: slurm_probe.require_runtime(session, hosts, image,
                                                    where=slurm_plan.where))
    with allocation.allocated(
            slurm_plan, options, files={**worker_files(), **slurm_probe.staged_files(image)},
            progress=progress, before=before,
            reap=lambda run_id, workdir: reap_commands(pythons, run_id, workdir)) as alloc:
        held.alloc = alloc
        yield alloc
