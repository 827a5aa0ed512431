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

from nodetune.ansible import truth
from nodetune.ansible.inventory import Host, Inventory
from nodetune.ansible.results import PlaybookOptions
from nodetune.errors import NodetuneError
from nodetune.slurm import prepare
from nodetune.slurm.model import NODENAME_VAR, SLURM_NAME, SlurmOptions
from nodetune.slurm.scontrol import configured, connect

BUSY_VAR = "nodetune_busy_hosts"
VIA_SLURM_VAR = "nodetune_reboot_via_slurm"  # playbooks/reboot.yml: `scontrol reboot ASAP`


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """What Slurm said of apply's hosts."""

    busy: tuple[prepare.Busy, ...] = ()
    unknown: tuple[str, ...] = ()  # hosts Slurm lists under no name: applied as idle ones


def find(inv: Inventory, hosts: Sequence[Host], *, allow_busy: bool) -> Found:
    """The ``hosts`` Slurm has allocated, with their jobs, and those it does not list;
    nothing under ``allow_busy`` or where Slurm is not configured (nothing is contacted
    then).

    Raises:
        InputError: a host's nodetune_slurm_nodename is not valid, or the controller is not
            an inventory host (exit 2).
        SlurmError: Slurm cannot be asked (exit 3): which nodes run jobs is unknown,
            so nothing is applied.
    """
    if allow_busy or not hosts or not configured(hosts):
        return Found()
    # A host named like no Slurm node (and not given one) is no node Slurm knows:
    # applied as it always was. A bad nodetune_slurm_nodename is bad input.
    named = [h for h in hosts if NODENAME_VAR in h.vars or SLURM_NAME.match(h.name)]
    unnamed = tuple(sorted(h.name for h in hosts if h not in named))
    if not named:
        return Found(unknown=unnamed)
    asked = prepare.plan(inv, named, SlurmOptions(allow_busy=allow_busy))
    with connect(asked) as scontrol:
        found = scontrol.nodes(list(asked.names.values()))
        busy = prepare.busy_nodes(asked.names, found, scontrol)
    unknown = tuple(sorted({*unnamed, *(n for n, sn in asked.names.items() if sn not in found)}))
    return Found(busy, unknown)


def with_busy(options: PlaybookOptions, busy: Sequence[prepare.Busy]) -> PlaybookOptions:
    """``options`` with the busy hosts passed to the play (after the operator's ``-e``)."""
    if not busy:
        return options
    names = sorted(b.node for b in busy)
    return dataclasses.replace(
        options, extra_vars=(*options.extra_vars, json.dumps({BUSY_VAR: names})))


def _via_slurm(host: Host | None, extra: Mapping[str, Any]) -> bool:
    """Whether reboot.yml reboots ``host`` through Slurm (``scontrol reboot ASAP``, which
    waits for the node's jobs): its ``nodetune_reboot_via_slurm`` is true (by
    nodetune.ansible.truth's rule) and it names its controller; ``extra``: the run's ``-e``
    variables, which win over the inventory's, as in the play.

    Raises:
        InputError: the variable is not a boolean (names host and variable).
    """
    if host is None:
        return False
    variables = {**host.vars, **extra}
    if "nodetune_slurm_controller" not in variables:
        return False
    return truth.setting(variables, VIA_SLURM_VAR, default=False, host=host.name)


def check_via_slurm(hosts: Sequence[Host], extra: Mapping[str, Any]) -> None:
    """Read every host's ``nodetune_reboot_via_slurm`` before the play runs, so that a value
    that is not a boolean is bad input (exit 2) with nothing changed, not an error after it.

    Raises:
        InputError: a value that is not a boolean (names host and variable).
    """
    for host in hosts:
        _via_slurm(host, extra)


def reboots(inv: Inventory, needed: Sequence[str], busy: Sequence[prepare.Busy], *,
            allow_busy: bool, recheck: bool = True, extra: Mapping[str, Any] | None = None
            ) -> tuple[list[str], list[str], tuple[prepare.Busy, ...], str | None]:
    """``--reboot``'s hosts: (rebooted now, whose reboot waits, the busy hosts as now
    known, why Slurm could not be asked again).

    A busy node is rebooted only through Slurm (``scontrol reboot ASAP`` waits for its
    jobs). The nodes to be rebooted directly are asked about again first (``recheck``;
    a job may have started on one while the play ran): one Slurm gave a job meanwhile
    waits too, and if Slurm cannot be asked, every direct reboot waits."""
    if allow_busy:
        return sorted(needed), [], tuple(busy), None
    hosts = {h.name: h for h in inv.hosts}
    busy_names = {b.node for b in busy}
    via_slurm = {h for h in needed if _via_slurm(hosts.get(h), extra or {})}
    direct = sorted(h for h in needed if h not in busy_names and h not in via_slurm)
    held = {h for h in needed if h in busy_names and h not in via_slurm}
    if not recheck or not direct:
        return sorted(via_slurm | set(direct)), sorted(held), tuple(busy), None
    try:
        now = find(inv, [hosts[h] for h in direct if h in hosts], allow_busy=False).busy
    except NodetuneError as exc:
        return sorted(via_slurm), sorted(held | set(direct)), tuple(busy), exc.message
    arrived = {b.node for b in now}
    return (sorted(via_slurm | (set(direct) - arrived)), sorted(held | arrived),
            (*busy, *now), None)


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
    for node in reboot:  # Slurm could not be asked again before the reboots
        out.setdefault(node, {"slurm_node": None, "state": "unknown", "jobs": [],
                              "deferred": ["reboot (--reboot)"]})
    return out
