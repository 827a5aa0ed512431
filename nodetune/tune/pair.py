"""Which two hosts ``tune`` measures (``--pair A,B``), and the nodes' own part of the input
(the topology file NCCL would read there), checked before anything is measured."""

from __future__ import annotations

from nodetune.ansible.inventory import Inventory
from nodetune.collective.plan import Pair
from nodetune.errors import InputError, InventoryError
from nodetune.remote import ssh_executor
from nodetune.remote.executor import Command

CHECK_TIMEOUT = 30.0


def select(inventory: Inventory, spec: str) -> Pair:
    """The hosts ``A,B`` names, from the verb's target group (node rank 0 is A).

    Raises:
        InputError: not two distinct names, or a name that is not a host of the group.
    """
    names = [n.strip() for n in spec.split(",")]
    if len(names) != 2 or not all(names):
        raise InputError(f"--pair {spec!r}: name two hosts, A,B")
    if names[0] == names[1]:
        raise InputError(f"--pair {spec!r}: two different hosts")
    hosts = []
    for name in names:
        try:
            hosts.append(inventory.host(name))
        except InventoryError:
            known = ", ".join(h.name for h in inventory.hosts[:8]) or "none"
            raise InputError(f"--pair: host {name!r} is not a node of {inventory.source} "
                             f"that tune may measure (its nodes: {known})",
                             host=name) from None
    return Pair(hosts[0], hosts[1])


def check_topo_files(pair: Pair, paths: tuple[str, ...], *, accept_new_host_keys: bool,
                     timeout: float = CHECK_TIMEOUT) -> None:
    """Each ``--topo-file`` is a readable file on both nodes (NCCL reads it there). A
    read-only look: ``test -f`` and ``test -r``, nothing written.

    Raises:
        InputError: a file missing on a node, naming the node and the file (exit 2).
        SSHError: a node cannot be reached (exit 3).
    """
    if not paths:
        return
    for host in pair.hosts:
        executor = ssh_executor.connect(host, accept_new_host_keys=accept_new_host_keys,
                                        timeout=min(timeout, CHECK_TIMEOUT))
        try:
            for path in paths:
                found = executor.run_node(host.name, Command(["test", "-f", path, "-a", "-r",
                                                              path]), timeout=timeout)
                if found.exit_status != 0:
                    raise InputError(f"--topo-file {path}: no readable file there; NCCL "
                                     "reads NCCL_TOPO_FILE on each node", host=host.name)
        finally:
            executor.close()
