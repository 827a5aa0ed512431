"""After a run over SSH: the nodes Slurm allocated to a job while the run measured them.

Over SSH nothing holds the nodes: the busy refusal (:mod:`nodetune.slurm.prepare`) saw
them idle when the run began, but a job may start on one mid-measurement. Its number is
then no verdict: Slurm is asked again once the measurement is over and before any
verdict is acted on, and every node whose result the newcomer may have disturbed (the
node, and every node measured with it) is made unresolved, with the job named, and is
neither drained nor resumed. What is asked is what holds the nodes then, and each
node's LastBusyTime against the first answer's: a job that started and ended between the
two questions leaves no job behind, but moved that time (slurmctld sets it when a node's
jobs end; shown on a real slurmctld by tests/integration/test_slurm.py). A slurmctld
restart moves it too; such a node gets no verdict either, which errs on the safe side.

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

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.errors import NodetuneError
from nodetune.remote import ssh
from nodetune.slurm.model import SlurmPlan
from nodetune.slurm.prepare import Prepared, busy_nodes
from nodetune.slurm.scontrol import connect
from nodetune.verdicts import NodeState, NodeVerdict


@dataclass(frozen=True, slots=True)
class Watch:
    """The nodes to ask Slurm about after the run: those the busy refusal found idle, with
    the last busy time the busy refusal read for each (by Slurm name; absent: unknown)."""

    slurm_plan: SlurmPlan
    last_busy: Mapping[str, float] = field(default_factory=dict)


def watch(prepared: Prepared) -> Watch | None:
    """What to re-check after a run over SSH (None: nothing), as the busy refusal
    (:func:`nodetune.slurm.prepare.prepare`) decided and read it. Nothing is contacted, nor
    the inventory read again."""
    if prepared.recheck is None:
        return None
    before = {name: node.last_busy for name in prepared.recheck.names.values()
              if (node := prepared.seen.get(name)) is not None
              and node.last_busy is not None}
    return Watch(prepared.recheck, before)


@dataclass(frozen=True, slots=True)
class Arrived:
    """What Slurm said after the run: the watched nodes it has allocated, with their jobs;
    or why it could not be asked (then no watched node's verdict stands)."""

    jobs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str | None = None
    watched: tuple[str, ...] = ()
    # Nodes idle again whose last busy time moved during the run: the new time.
    ended: Mapping[str, float] = field(default_factory=dict)

    def why(self, node: str) -> str | None:
        """Why ``node``'s own measurement is no verdict (None: it stands)."""
        if self.error is not None:
            return (f"Slurm could not be asked after the run whether a job was allocated "
                    f"this node during it: {self.error}") if node in self.watched else None
        if node in self.ended:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.ended[node]))
            return ("a job ran on it during the run and had ended by its end (Slurm's last "
                    f"busy time moved to {when})")
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
        if self.ended:
            doc["busy_and_idle_again_during_run"] = dict(sorted(self.ended.items()))
        if self.error is not None:
            doc["error"] = self.error
        return doc


def recheck(watched: Watch | None, *,
            opener: Callable[[Host], ssh.Session] = ssh.connect) -> Arrived:
    """Ask Slurm which watched nodes it has allocated (ALLOCATED or MIXED) now, and to
    which jobs, and which had a job that has ended since the first question (their last
    busy time moved). Never raises: a Slurm that cannot be asked is :attr:`Arrived.error`."""
    if watched is None:
        return Arrived()
    names = watched.slurm_plan.names
    try:
        with connect(watched.slurm_plan, opener=opener) as scontrol:
            now = scontrol.nodes(list(names.values()))
            busy = busy_nodes(names, now, scontrol)
    except NodetuneError as exc:
        return Arrived(error=exc.message, watched=tuple(sorted(names)))
    jobs = {b.node: b.jobs for b in busy}
    ended = {node: after for node, name in names.items()
             if node not in jobs and name in watched.last_busy and name in now
             and (after := now[name].last_busy) is not None
             and after > watched.last_busy[name]}
    return Arrived(jobs=jobs, watched=tuple(sorted(names)), ended=ended)


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
