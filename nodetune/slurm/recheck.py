"""After a run over SSH: the nodes Slurm allocated to a job while the run measured them.

Over SSH nothing holds the nodes: the busy refusal (:mod:`nodetune.slurm.prepare`) saw
them idle when the run began, but a job may start on one mid-measurement. Its number is
then no verdict: Slurm is asked again once the measurement is over and before any
verdict is acted on, and every node whose result the newcomer may have disturbed (the
node, and every node measured with it) is made unresolved, with the job named, and is
neither drained nor resumed. What is asked is what holds the nodes then: a job that
starts and ends between the two questions is not seen (sinfo and squeue keep no such
history; Slurm's accounting does, where a site runs it).

A re-check rather than a Slurm reservation that holds the nodes for the run: creating a
reservation is for root, SlurmUser or an operator (Slurm's reservations guide,
https://slurm.schedmd.com/reservations.html, read 2026-11-29: "Reservations can be
created, updated, or destroyed only by user root or the configured SlurmUser using the
scontrol command", and scontrol(1): an Operator or Administrator), which the account that
runs nodetune usually is not, and a reservation left behind by a killed run keeps the
nodes from every job until someone deletes it. The run that must hold its nodes is
``--launcher slurm``: its steps run inside its own exclusive allocation.

Under ``--allow-busy`` the operator accepted jobs on the nodes: nothing is re-checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodetune.ansible.inventory import Host, Inventory
from nodetune.errors import NodetuneError
from nodetune.remote import ssh
from nodetune.slurm.model import SlurmOptions, SlurmPlan
from nodetune.slurm.prepare import busy_nodes, plan
from nodetune.slurm.scontrol import configured, connect
from nodetune.verdicts import NodeState, NodeVerdict


@dataclass(frozen=True, slots=True)
class Watch:
    """The nodes to ask Slurm about after the run: those the busy refusal found idle."""

    slurm_plan: SlurmPlan


def watch(inv: Inventory, hosts: Sequence[Host], options: SlurmOptions) -> Watch | None:
    """What to re-check after a run over SSH on ``hosts`` (None: nothing, as Slurm is not
    configured for them or ``--allow-busy`` was given). Nothing is contacted.

    Raises:
        InputError: a bad Slurm node name or controller (as the busy refusal's).
    """
    if options.allow_busy or not configured(hosts):
        return None
    return Watch(plan(inv, hosts, SlurmOptions()))


@dataclass(frozen=True, slots=True)
class Arrived:
    """What Slurm said after the run: the watched nodes it has allocated, with their jobs;
    or why it could not be asked (then no watched node's verdict stands)."""

    jobs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str | None = None
    watched: tuple[str, ...] = ()

    def why(self, node: str) -> str | None:
        """Why ``node``'s own measurement is no verdict (None: it stands)."""
        if self.error is not None:
            return (f"Slurm could not be asked after the run whether a job was allocated "
                    f"this node during it: {self.error}") if node in self.watched else None
        if node not in self.jobs:
            return None
        held = self.jobs[node]
        return (f"allocated to job{'s' if len(held) > 1 else ''} {', '.join(held)} during "
                "the run" if held else "allocated to a job during the run")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``slurm_recheck``."""
        doc: dict[str, Any] = {"watched": list(self.watched),
                               "allocated_during_run": {n: list(j) for n, j in
                                                        sorted(self.jobs.items())}}
        if self.error is not None:
            doc["error"] = self.error
        return doc


def recheck(watched: Watch | None, *,
            opener: Callable[[Host], ssh.Session] = ssh.connect) -> Arrived:
    """Ask Slurm which watched nodes it has allocated (ALLOCATED or MIXED) now, and to
    which jobs. Never raises: a Slurm that cannot be asked is :attr:`Arrived.error`."""
    if watched is None:
        return Arrived()
    names = watched.slurm_plan.names
    try:
        with connect(watched.slurm_plan, opener=opener) as scontrol:
            busy = busy_nodes(names, scontrol.nodes(list(names.values())), scontrol)
    except NodetuneError as exc:
        return Arrived(error=exc.message, watched=tuple(sorted(names)))
    return Arrived(jobs={b.node: b.jobs for b in busy}, watched=tuple(sorted(names)))


def disturbed(verdicts: Mapping[str, NodeVerdict], groups: Iterable[Sequence[str]],
              arrived: Arrived) -> tuple[dict[str, NodeVerdict], dict[str, str]]:
    """The verdicts with every node measured together with a node that a job arrived on
    (``groups``: the nodes each measurement took part in; a node alone is a group of one)
    made unresolved, naming the job; and those nodes with the reason, for Slurm to leave
    alone (neither drained, even under ``--drain-unreachable``, nor resumed)."""
    held: dict[str, str] = {}
    for group in groups:
        reasons = [f"{n}: {why}" for n in group if (why := arrived.why(n))]
        if not reasons:
            continue
        for node in group:
            if node in verdicts and node not in held:
                held[node] = "no verdict: " + "; ".join(reasons)
    out = dict(verdicts)
    for node, why in held.items():
        out[node] = replace(verdicts[node], state=NodeState.UNRESOLVED, reason=why)
    return out, held
