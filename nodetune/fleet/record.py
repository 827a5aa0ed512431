"""A fleet's run record: the one place that turns its plan and its :class:`FleetResult`
into report.json's sections (``fleet``, ``nodes``, ``pairs``, ``checks``, ``rdma_bw``,
``reference``) and its pairs' node logs into the record's files.

Each document starts from the verb's ``base`` (inventory, options, partners) and ends
with the launcher's section: ``--plan``'s (:func:`planned`), a fleet stopped before its
rounds were judged (:func:`stopped`), or one whose rounds ran (:func:`judged`). Slurm's
actions and history's judgement are added by the verb once they are known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from nodetune import records
from nodetune.errors import ExitCode, NodetuneError
from nodetune.fleet.planner import FleetSpec, PairOutcome
from nodetune.fleet.run import FleetPlan, FleetResult
from nodetune.measure import thresholds
from nodetune.validate import rdma
from nodetune.validate.result import PairResult
from nodetune.verdicts import worst_first


def plan_doc(fleet: FleetPlan) -> dict[str, Any]:
    """The fleet's set-up as report.json records it."""
    spec: FleetSpec = fleet.spec
    return {"seed": spec.seed, "pairing": spec.pairing, "nodes_under_test": list(spec.nodes),
            "partners": list(spec.partners),
            "round_one": [{"hosts": list(p.hosts), "why": p.why} for p in fleet.round_one]}


def pair_doc(o: PairOutcome, result: PairResult | None) -> dict[str, Any]:
    """One pair as report.json's ``pairs[i]`` (with ``--image``, its nodes' ``container``
    checklist, passed or failed, as the pair path's record has it; under NCCL each node's
    effective NCCL configuration, as the pair's own record has it)."""
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
            # per node: the NCCL configuration its ranks used (measure/nccl_effective.py)
            **({"nccl_effective": dict(result.nccl_effective)}
               if result and result.nccl_effective else {}),
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
        **rdma.note_section(res.rdma_bw),
    }


def planned(base: Mapping[str, Any], fleet: FleetPlan) -> dict[str, Any]:
    """``--plan``'s record: the plan alone, exit 0 (no node was contacted)."""
    return {**base, "status": "plan", "exit_code": 0, "fleet": plan_doc(fleet)}


def stopped(base: Mapping[str, Any], fleet: FleetPlan, exc: BaseException,
            launcher: Mapping[str, Any]) -> dict[str, Any]:
    """The record of a fleet that an error or Ctrl-C ended before its rounds were judged:
    the plan, the launcher, and the error (or ``interrupted``, exit 130)."""
    doc = {**base, "fleet": plan_doc(fleet), **launcher}
    if isinstance(exc, NodetuneError):
        doc.update(status="error", exit_code=int(exc.exit_code),
                   error={"type": type(exc).__name__, "host": exc.host,
                          "message": exc.message})
    else:  # during checks/preflight: nothing of ours runs on a node
        doc.update(status="interrupted", exit_code=130)
    return doc


def judged(base: Mapping[str, Any], res: FleetResult, launcher: Mapping[str, Any], *,
           profile: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The record of a fleet whose rounds ran: every node, every pair, the rounds, the
    launcher, and the nccl-tests reference curve of ``profile`` where it has one; and its
    files, every pair's node logs (``round<N>-<a>-<b>/<node>.log``)."""
    status = "interrupted" if res.interrupted else (
        "pass" if res.exit_code == ExitCode.OK else "fail")
    doc = {**base, "status": status, "exit_code": exit_code(res), **result_doc(res),
           **launcher, **thresholds.reference_section(profile)}
    logs = {name: text for (a, b, number), pair_logs in res.pair_logs.items()
            for name, text in records.node_logs(pair_logs, f"round{number}-{a}-{b}").items()}
    return doc, logs


def exit_code(res: FleetResult) -> int:
    """The fleet's exit code before Slurm and history: 130 when interrupted."""
    return 130 if res.interrupted else int(res.exit_code)

