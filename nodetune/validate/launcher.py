"""``--launcher``: how validate starts its workers, over SSH (the default) or inside one
exclusive Slurm allocation (``slurm``), for the pair verb and the fleet alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from nodetune.ansible.inventory import Host, Inventory
from nodetune.container import slurm_probe
from nodetune.errors import InputError
from nodetune.measure.host_env import node_python
from nodetune.measure.sizes import parse_sizes
from nodetune.slurm import allocation
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm.allocation import Allocation
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import CONTROLLER_VAR, SlurmOptions, SlurmPlan
from nodetune.validate import plan as plan_mod
from nodetune.validate.launch import worker_files
from nodetune.validate.plan import Options
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


@dataclass(slots=True)
class Held:
    """The allocation of a run, once granted (None under the SSH launcher or before)."""

    launcher: str = "ssh"
    alloc: Allocation | None = None

    def doc(self) -> dict[str, Any]:
        """report.json's ``launcher`` (and ``slurm_job`` where a job was granted)."""
        if self.alloc is None:
            return {"launcher": self.launcher}
        return {"launcher": self.launcher, "slurm_job": self.alloc.to_dict()}


def slurm_plan(inv: Inventory, hosts: Sequence[Host]) -> SlurmPlan:
    """Where salloc/srun run and the hosts' Slurm names, checked before anything runs.

    Raises:
        InputError: no host names a Slurm controller (the variable is named), or a bad
            Slurm node name.
    """
    planned = slurm_prepare.plan(inv, hosts, SlurmOptions())
    if planned.controller is None:
        raise InputError(f"--launcher slurm needs {CONTROLLER_VAR}: set it (for example in "
                         "group_vars/all) to the inventory host that runs salloc and srun",
                         host=hosts[0].name if hosts else None)
    return planned


@contextmanager
def launched(inv: Inventory, hosts: Sequence[Host], options: AllocOptions | None, *,
             held: Held, run_s: float, timeout_s: float,
             progress: Callable[[str], None] = lambda _m: None, image: str | None = None
             ) -> Iterator[Allocation | None]:
    """None under the SSH launcher; else ``hosts`` in one exclusive allocation, staged,
    and cancelled on the way out (see :func:`nodetune.slurm.allocation.allocated`), its
    default time limit from ``run_s`` and its cancel's wait from ``timeout_s``; with
    ``image``, the cluster's container support is asked for before the allocation
    (:func:`~nodetune.container.slurm_probe.require_runtime`) and the checklist's probe
    staged too."""
    if options is None:
        yield None
        return
    options = dataclasses.replace(options, run_s=run_s, timeout_s=timeout_s)
    planned = slurm_plan(inv, hosts)
    pythons = {planned.names[h.name]: node_python(h) for h in hosts}
    before = None if image is None else (
        lambda session: slurm_probe.require_runtime(session, hosts, image,
                                                    where=planned.where))
    with allocation.allocated(
            planned, options, files={**worker_files(), **slurm_probe.staged_files(image)},
            progress=progress, before=before,
            reap=lambda run_id, workdir: reap_commands(pythons, run_id, workdir)) as alloc:
        held.alloc = alloc
        yield alloc
