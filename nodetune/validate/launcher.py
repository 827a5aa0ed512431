"""``--launcher``: how validate starts its workers, over SSH (the default) or inside one
exclusive Slurm allocation (``slurm``), for the pair verb and the fleet alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from nodetune.ansible.inventory import Host, Inventory
from nodetune.errors import InputError
from nodetune.slurm import allocation
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm.allocation import Allocation
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import CONTROLLER_VAR, SlurmOptions, SlurmPlan
from nodetune.validate import plan as plan_mod
from nodetune.validate.launch import worker_files
from nodetune.validate.slurm_pair import reap_commands

LAUNCHERS = ("ssh", "slurm")


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
             held: Held, progress: Callable[[str], None] = lambda _m: None
             ) -> Iterator[Allocation | None]:
    """None under the SSH launcher; else ``hosts`` in one exclusive allocation, staged,
    and cancelled on the way out (see :func:`nodetune.slurm.allocation.allocated`)."""
    if options is None:
        yield None
        return
    planned = slurm_plan(inv, hosts)
    pythons = {planned.names[h.name]: plan_mod.node_python(h) for h in hosts}
    with allocation.allocated(
            planned, options, files=worker_files(), progress=progress,
            reap=lambda run_id, workdir: reap_commands(pythons, run_id, workdir)) as alloc:
        held.alloc = alloc
        yield alloc
