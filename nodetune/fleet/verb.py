"""The validate verb on more than two hosts: partners, plan, Slurm, rounds, record, exit code.

The CLI parses options and prints what :class:`Listener` tells it; this module
decides and runs, and never prints or exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodetune import records
from nodetune.ansible import targets
from nodetune.ansible.inventory import Inventory
from nodetune.errors import ExitCode, NodetuneError
from nodetune.fleet.planner import FleetSpec, PairOutcome, round_limit
from nodetune.fleet.run import FleetOptions, FleetPlan, FleetResult, make_plan, run_fleet
from nodetune.reports import history
from nodetune.reports import model as report_model
from nodetune.slurm import act as slurm_act
from nodetune.slurm import prepare as slurm_prepare
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmOptions
from nodetune.validate import rdma, thresholds
from nodetune.validate.launcher import Held, launched, run_seconds
from nodetune.validate.plan import Options
from nodetune.validate.result import PairResult
from nodetune.verdicts import NodeState, worst_first


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
    """One fleet run as the options asked for it (already checked)."""

    inventory: Inventory
    options: Options
    fleet: FleetOptions
    partners: str | None = None          # --partners PATTERN
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


def plan_doc(fleet: FleetPlan) -> dict[str, Any]:
    """The fleet's set-up as report.json records it."""
    spec: FleetSpec = fleet.spec
    return {"seed": spec.seed, "pairing": spec.pairing, "nodes_under_test": list(spec.nodes),
            "partners": list(spec.partners),
            "round_one": [{"hosts": list(p.hosts), "why": p.why} for p in fleet.round_one]}


def pair_doc(o: PairOutcome, result: PairResult | None) -> dict[str, Any]:
    """One pair as report.json's ``pairs[i]`` (with ``--image``, its nodes' ``container``
    checklist, passed or failed, as the pair path's record has it)."""
    threshold = result.threshold.min_busbw_gbps if result and result.threshold else None
    return {"hosts": list(o.hosts), "round": o.round, "verdict": o.outcome.value,
            "reason": o.reason, "busbw_gbps": o.busbw_gbps, "threshold_gbps": threshold,
            "path": result.path if result else None,
            "transport": result.transport.kind if result else None,
            "interfaces": list(result.transport.interfaces) if result else [],
            "paths": [p.to_dict() for p in result.paths] if result else [],
            "warnings": list(result.warnings) if result else [],
            "sizes": [{k: v for k, v in asdict(s).items() if k != "launch"}
                      for s in (result.sizes if result else ())],
            **({"container": dict(o.container)} if o.container else {})}


def result_doc(res: FleetResult) -> dict[str, Any]:
    """``nodes``, ``pairs`` and the fleet's rounds, as report.json records them."""
    rounds = max((o.round for o in res.outcomes), default=0)
    return {
        "nodes": {v.node: v.to_dict() for v in worst_first(res.verdicts)},
        "pairs": [pair_doc(o, res.pair_results.get((*o.hosts, o.round)))
                  for o in res.outcomes],
        "fleet": {**plan_doc(res.plan), "rounds": rounds, "pair_tests": len(res.outcomes),
                  "interrupted": res.interrupted, "phases_s": dict(res.phases_s)},
        **({"checks": dict(res.checks)} if res.checks else {}),
        **({"rdma_bw": rdma.section(res.rdma_bw)} if res.rdma_bw else {}),
    }


def image_held(res: FleetResult) -> dict[str, str]:
    """The nodes Slurm leaves alone after the fleet: those not proven good or bad whose
    pairs failed for the training image (missing, checklist, its container's step hung),
    which says nothing of the nodes, even under --drain-unreachable."""
    faults = {h: o.reason for o in res.outcomes if o.image_fault for h in o.hosts}
    return {n: f"not drained: the failure is the training image's, not the node's: "
               f"{faults[n]}" for n, v in res.verdicts.items()
            if n in faults and v.state is NodeState.UNRESOLVED}


def run(request: Request, *, record: records.RunRecord,
        listen: Listener = Listener()) -> Outcome:
    """Plan the fleet (--plan stops there, contacting nothing), ask Slurm (busy nodes), run
    the rounds, drain/resume, compare with history, write the run record.

    Raises:
        NodetuneError: bad input (exit 2), found before or while pairing; or an error that
            ended the fleet, after the record is written.
        KeyboardInterrupt: before the rounds began (nothing of ours runs on a node), after
            the record is written.
    """
    inv = request.inventory
    partner_inv = (targets.partners(inv, request.partners, pattern=request.pattern)
                   if request.partners else None)
    fleet = make_plan(inv, request.fleet, partners=partner_inv)
    base = {**request.base, "partners_pattern": request.partners,
            "fleet_options": asdict(request.fleet)}
    if request.plan_only:
        doc = {**base, "status": "plan", "exit_code": 0, "fleet": plan_doc(fleet)}
        path = record.write(doc, copy_to=request.report_path)
        return Outcome(plan=fleet, result=None, doc=doc, code=0, record=path)
    hosts = {h.name: h for h in (*inv.hosts, *(partner_inv.hosts if partner_inv else ()))}
    slurm_plan = slurm_prepare.prepare(
        inv, [hosts[n] for n in fleet.spec.nodes if n in hosts], request.slurm,
        busy=[hosts[n] for n in (*fleet.spec.nodes, *fleet.spec.partners) if n in hosts])
    held = Held(launcher="ssh" if request.launcher is None else "slurm")
    everyone = [hosts[n] for n in (*fleet.spec.nodes, *fleet.spec.partners) if n in hosts]
    try:
        with launched(inv, everyone, request.launcher, held=held,
                      run_s=run_seconds(request.options, nodes=len(everyone),
                                        parallel=request.fleet.parallel, fleet=True,
                                        rounds=round_limit(fleet.spec)),
                      timeout_s=request.options.timeout, image=request.options.image,
                      progress=lambda m: listen.progress("slurm", m)) as alloc:
            res = run_fleet(fleet, request.fleet, request.options, progress=listen.progress,
                            stop=threading.Event(), alloc=alloc)
    except (NodetuneError, KeyboardInterrupt) as exc:
        doc = {**base, "fleet": plan_doc(fleet), **held.doc()}
        if isinstance(exc, NodetuneError):
            doc.update(status="error", exit_code=int(exc.exit_code),
                       error={"type": type(exc).__name__, "host": exc.host,
                              "message": exc.message})
        else:  # during checks/preflight: nothing of ours runs on a node
            doc.update(status="interrupted", exit_code=130)
        record.write(doc, copy_to=request.report_path)
        raise
    code = 130 if res.interrupted else int(res.exit_code)
    status = "interrupted" if res.interrupted else (
        "pass" if res.exit_code == ExitCode.OK else "fail")
    logs = {name: text for (a, b, number), pair_logs in res.pair_logs.items()
            for name, text in records.node_logs(pair_logs, f"round{number}-{a}-{b}").items()}
    doc = {**base, "status": status, "exit_code": code, **result_doc(res), **held.doc()}
    doc.update(thresholds.reference_section(report_model.profile_name(doc)))
    listen.result(res)
    if slurm_plan is not None and not res.interrupted:
        settled = slurm_act.settle(slurm_plan, res.verdicts, run=record, doc=doc,
                                   progress=listen.slurm, held=image_held(res))
        listen.settled(settled)
        if settled.failed:
            code = int(ExitCode.INFRASTRUCTURE)
            doc["exit_code"] = code
    if request.regression is not None:
        code = history.judge(doc, records.runs_dir(), request.regression, exit_code=code)
    path = record.write(doc, files=logs, copy_to=request.report_path)
    return Outcome(plan=fleet, result=res, doc=doc, code=code, record=path)
