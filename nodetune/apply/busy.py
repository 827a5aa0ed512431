"""Which of apply's hosts Slurm has allocated to jobs: their disruptive steps are deferred.

The same lookup validate and tune use to refuse busy nodes
(:func:`nodetune.slurm.prepare.busy_nodes`), without the refusal: ``apply`` still
changes files and settings on a busy node, and the roles defer what would disturb
its jobs (service restarts, module loads, reboots) for the hosts passed to the
play as ``nodetune_busy_hosts``. A node Slurm does not know, or a site without
Slurm, is applied as it always was.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.ansible.inventory import Host, Inventory
from nodetune.ansible.results import PlaybookOptions
from nodetune.slurm import prepare
from nodetune.slurm.model import NODENAME_VAR, SLURM_NAME, SlurmOptions
from nodetune.slurm.scontrol import configured, connect

BUSY_VAR = "nodetune_busy_hosts"


def lookup(inv: Inventory, hosts: Sequence[Host], *,
           allow_busy: bool) -> tuple[prepare.Busy, ...]:
    """The ``hosts`` Slurm has allocated (ALLOCATED or MIXED), with their jobs; none
    under ``allow_busy`` or where Slurm is not configured (nothing is contacted then).

    Raises:
        InputError: a host's nodetune_slurm_nodename is not valid, or the controller is not
            an inventory host (exit 2).
        SlurmError: Slurm cannot be asked (exit 3): which nodes run jobs is unknown,
            so nothing is applied.
    """
    if allow_busy or not hosts or not configured(hosts):
        return ()
    # A host named like no Slurm node (and not given one) is no node Slurm knows:
    # applied as it always was. A bad nodetune_slurm_nodename is bad input.
    named = [h for h in hosts if NODENAME_VAR in h.vars or SLURM_NAME.match(h.name)]
    if not named:
        return ()
    asked = prepare.plan(inv, named, SlurmOptions(allow_busy=allow_busy))
    with connect(asked) as scontrol:
        found = scontrol.nodes(list(asked.names.values()))
        return prepare.busy_nodes(asked.names, found, scontrol)


def with_busy(options: PlaybookOptions, busy: Sequence[prepare.Busy]) -> PlaybookOptions:
    """``options`` with the busy hosts passed to the play (after the operator's ``-e``)."""
    if not busy:
        return options
    names = sorted(b.node for b in busy)
    return dataclasses.replace(
        options, extra_vars=(*options.extra_vars, json.dumps({BUSY_VAR: names})))


def deferred(busy: Sequence[prepare.Busy], from_roles: Mapping[str, Any],
             reboot: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Per busy host: its Slurm state and jobs, and what was deferred there: the
    roles' list (``from_roles``: the play's ``nodetune_deferred`` stats) and the
    reboots ``--reboot`` left out (``reboot``). Busy hosts with nothing deferred
    are listed too, with an empty list: what was left alone is said."""
    out: dict[str, dict[str, Any]] = {}
    for b in busy:
        what = [str(w) for w in from_roles.get(b.node) or ()]
        if b.node in reboot:
            what.append("reboot (--reboot)")
        out[b.node] = {"slurm_node": b.slurm_node, "state": b.state, "jobs": list(b.jobs),
                       "deferred": list(dict.fromkeys(what))}
    return out
