"""Every input of one ``validate`` run, checked once and in order before the first node
is contacted; what comes out is the checked plan the run carries out.

The order: the options, every selected host's connection variables (the values that
go into its ssh_config), every selected host's master address, the ``--image`` request,
the ``--rdma-bw`` inputs, then the plan of the pair (or of ``--all``'s group). A fleet
plans its pairs itself (:mod:`nodetune.fleet`), from the same checked hosts: its plan
(:func:`nodetune.fleet.verb.planned`) plans every host, partners included, as node rank 0
of a pair before the verb contacts anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from nodetune.ansible.inventory import Host, Inventory
from nodetune.collective.addresses import check_master_addrs
from nodetune.collective.plan import Options, Plan, plan_pair, select_pair
from nodetune.container import runtime as ct
from nodetune.errors import InputError
from nodetune.measure import node_inputs
from nodetune.remote import ssh_config
from nodetune.slurm.commands import AllocOptions
from nodetune.validate.job_wide import plan_all

Group = Literal["pair", "all", "fleet"]


def checked(inventory: Inventory, options: Options, *, group: Group,
            launcher: AllocOptions | None = None) -> Plan | None:
    """The run's plan (None for a fleet) once every input is checked; ``launcher``: the
    workers start in a Slurm allocation (``--launcher slurm``; None: over SSH).

    Raises:
        InputError: the first bad option or inventory variable (exit 2), naming the host
            and the variable or option.
    """
    options.check()
    ssh_config.check_hosts(inventory.hosts)
    check_master_addrs(inventory.hosts)
    ct.check_request(inventory.hosts, options.image,
                     launcher="ssh" if launcher is None else "slurm")
    if options.rdma_bw:
        check_rdma_bw(inventory.hosts, launcher=launcher)
    if group == "fleet":
        return None
    if group == "all":
        return plan_all(inventory.hosts, options)
    return plan_pair(select_pair(inventory), options)


def check_rdma_bw(hosts: Sequence[Host], *, launcher: AllocOptions | None) -> None:
    """``--rdma-bw``'s inputs: every host's health inputs (``nodetune_rdma_sysfs``,
    ``nvidia_driver_peermem_enabled``: where ib_write_bw finds the ports, and whether GPU
    memory is measured); its master address, where the partner reaches it, is checked with
    every host's above.

    Raises:
        InputError: with ``--launcher slurm`` (ib_write_bw runs over SSH after the pair,
            when the allocation is gone and the nodes may run another job), or a host's
            variable that is not usable (named).
    """
    if launcher is not None:
        raise InputError("--rdma-bw takes no --launcher slurm: ib_write_bw runs over SSH "
                         "after each pair, when the allocation is gone and the nodes may "
                         "run another job")
    for host in hosts:
        node_inputs.inputs(host)
