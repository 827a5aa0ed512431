"""The validate verb on more than two hosts: partners, plan, Slurm, rounds, record, exit code.

The CLI parses options and prints what :class:`Listener` tells it; this module
decides and runs, and never prints or exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nodetune import records
from nodetune.ansible import targets
from nodetune.ansible.inventory import Inventory
from nodetune.collective.plan import Options
from nodetune.errors import ExitCode, NodetuneError
from nodetune.fleet import record as fleet_record
from nodetune.fleet import verdict as fleet_verdict
from nodetune.fleet.run import FleetOptions, FleetPlan, FleetResult, make_plan, run_fleet
from nodetune.reports import history
from nodetune.slurm import act as slurm_act
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm import recheck
from nodetune.slurm.allocation import Held
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmOptions
from nodetune.validate import rdma
from nodetune.validate.launcher import launched, run_seconds
from nodetune.validate.result import good_nodes, node_marks


def _ignore(*_values: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Listener:
    """What a caller hears while a fleet runs; every part is optional."""

    progress: Callable[[str, str], None] = _ignore          # (node, what it is doing)
    result: Callable[[FleetResult], None] = _ignore         # the judged fleet, before Slurm
    slurm: Callable[[str], None] = _ignore                  # each scontrol action
    settled: Callable[[slurm_act.Settled], None] = _ignore  # what Slurm did


@dataclass(frozen=True, slots=True)
class Request:
    """One fleet run as the options asked for it (the selection and the options already
    checked; the plan is made first, by :func:`planned`)."""

    inventory: Inventory
    options: Options
    fleet: FleetOptions
    partners: str | None = None          # --partners PATTERN, as given (for the record)
    pattern: str = targets.GROUP         # the group the verb acts on (-e nodetune_hosts)
    plan_only: bool = False
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    regression: history.RegressionPolicy | None = None
    base: Mapping[str, Any] = field(default_factory=dict)
    report_path: Path | None = None
    launcher: AllocOptions | None = None     # --launcher slurm (None: ssh)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The fleet's plan, its result (none under --plan), its record and exit code."""

    plan: FleetPlan
    result: FleetResult | None
    doc: dict[str, Any]
    code: int
    record: Path


def planned(inventory: Inventory, options: FleetOptions, *, partners: str | None = None,
            pattern: str = targets.GROUP, pair_options: Options | None = None) -> FleetPlan:
    """The fleet's nodes, partners, pairing keys and round 1, from the checked selection:
    an input, made before the verb contacts anything (``pattern``: the group the verb acts
    on, ``-e nodetune_hosts``; ``partners``: ``--partners PATTERN``; ``pair_options``: the
    pair test's options, with which every host's inputs are checked as any pair's rank 0).

    Raises:
        InputError: a partners pattern matching nothing, a missing pairing key, or a bad
            per-host variable (exit 2), naming the host and the variable.
    """
    narrowed = (targets.partners(inventory, partners, pattern=pattern)
                if partners else None)
    return make_plan(inventory, options, partners=narrowed, pair_options=pair_options)


def run(request: Request, *, record: records.RunRecord,
        listen: Listener = Listener()) -> Outcome:
    """Plan the fleet (:func:`planned`), then carry the plan out (--plan stops there,
    contacting nothing): ask Slurm (busy nodes), run the rounds, drain/resume, compare with
    history, write the run record.

    Raises:
        InputError: the plan's inputs are bad (exit 2, before anything is contacted).
        NodetuneError: an error that ended the fleet (bad input a node's answer showed,
            exit 2, among them), after the record is written.
        KeyboardInterrupt: before the rounds began (nothing of ours runs on a node), after
            the record is written.
    """
    fleet = planned(request.inventory, request.fleet, partners=request.partners,
                    pattern=request.pattern, pair_options=request.options)
    base = {**request.base, "partners_pattern": request.partners,
            "fleet_options": asdict(request.fleet)}
    res, slurm_plan, held = None, None, Held("ssh" if request.launcher is None else "slurm")
    logs: dict[str, str] = {}
    arrived, no_verdict = recheck.Arrived(), dict[str, str]()
    if not request.plan_only:
        everyone = list(fleet.hosts.values())
        try:  # a refusal before the run (busy nodes, no controller) writes this record too
            # --launcher slurm: its controller and names, checked before anything runs
            prepared = slurm_prepare.prepare(
                request.inventory, [fleet.hosts[n] for n in fleet.spec.nodes], request.slurm,
                busy=everyone, launcher=None if request.launcher is None else everyone)
            slurm_plan = prepared.plan
            # Over SSH nothing holds the nodes: Slurm is asked again after the rounds.
            watched = recheck.watch(prepared)
            with launched(everyone, request.launcher, held=held,
                          run_s=run_seconds(request.options, tests=fleet.tests),
                          timeout_s=request.options.timeout, image=request.options.image,
                          progress=lambda m: listen.progress("slurm", m),
                          slurm_plan=prepared.launcher) as alloc:
                res = run_fleet(fleet, request.fleet, request.options,
                                progress=listen.progress, stop=threading.Event(), alloc=alloc)
            res, arrived, no_verdict = _recheck(res, watched)
        except (NodetuneError, KeyboardInterrupt) as exc:
            doc = fleet_record.stopped(base, fleet, exc, held.doc())
            record.write(doc, copy_to=request.report_path)
            raise
    if res is None:  # --plan
        doc, code = fleet_record.planned(base, fleet), 0
    else:
        doc, logs = fleet_record.judged(base, res, held.doc(), profile=request.options.profile)
        if arrived.watched:
            doc["slurm_recheck"] = arrived.to_dict()
        code = fleet_record.exit_code(res)
        listen.result(res)
        if slurm_plan is not None and not res.interrupted:
            marks = node_marks(res.pair_results.values(), res.verdicts,
                               good=good_nodes(res.verdicts), rdma_bw=request.options.rdma_bw,
                               rdma_measured=rdma.measured_nodes(res.rdma_bw))
            settled = slurm_act.settle(slurm_plan, res.verdicts, run=record, doc=doc,
                                       progress=listen.slurm, marks=marks,
                                       held={**res.image_held, **no_verdict})
            listen.settled(settled)
            if settled.failed:
                code = int(ExitCode.INFRASTRUCTURE)
                doc["exit_code"] = code
        if request.regression is not None:
            code = history.judge(doc, records.runs_dir(), request.regression, exit_code=code)
    path = record.write(doc, files=logs, copy_to=request.report_path)
    return Outcome(plan=fleet, result=res, doc=doc, code=code, record=path)


def _recheck(res: FleetResult, watched: recheck.Watch | None
             ) -> tuple[FleetResult, recheck.Arrived, dict[str, str]]:
    """The fleet's result once Slurm is asked again: a node allocated to a job during the
    rounds gives no verdict, nor does any node it was measured with (unresolved, left
    alone by Slurm); the exit code follows the verdicts."""
    arrived = recheck.recheck(watched)
    groups = [o.hosts for o in res.outcomes] + [(n,) for n in res.verdicts]
    verdicts, no_verdict = recheck.disturbed(res.verdicts, groups, arrived)
    if not no_verdict:
        return res, arrived, {}
    return (replace(res, verdicts=verdicts,
                    exit_code=fleet_verdict.exit_code(verdicts, res.outcomes)),
            arrived, no_verdict)
