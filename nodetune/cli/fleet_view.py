"""`nodetune validate` on more than two hosts: the fleet's tables, report and exit code."""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from rich.markup import escape

from nodetune import records
from nodetune.ansible import targets
from nodetune.ansible.inventory import Inventory
from nodetune.cli import report_opts, slurm_opts
from nodetune.cli.common import err_console, out_console, table
from nodetune.errors import ExitCode, NodetuneError
from nodetune.fleet.planner import FleetSpec, PairOutcome, PlannedPair
from nodetune.fleet.run import FleetOptions, FleetPlan, FleetResult, make_plan, run_fleet
from nodetune.slurm import control as slurm
from nodetune.validate.plan import Options, check_master_addrs
from nodetune.validate.result import PairResult
from nodetune.verdicts import NodeState, worst_first

STYLE = {NodeState.BAD: "bold red", NodeState.UNREACHABLE: "bold magenta",
         NodeState.UNRESOLVED: "yellow", NodeState.GOOD: "green"}


def progress(node: str, message: str) -> None:
    """Live fleet progress on stderr, one line per step."""
    err_console.print(f"[cyan]{node:>14}[/] {escape(message)}")


def plan_doc(fleet: FleetPlan) -> dict[str, Any]:
    """The fleet's set-up as report.json records it."""
    spec: FleetSpec = fleet.spec
    return {"seed": spec.seed, "pairing": spec.pairing, "nodes_under_test": list(spec.nodes),
            "partners": list(spec.partners),
            "round_one": [{"hosts": list(p.hosts), "why": p.why} for p in fleet.round_one]}


def render_plan(fleet: FleetPlan) -> None:
    """--plan: round 1's pairs (with --partners: which partner tests which node)."""
    spec = fleet.spec
    what = ("repaired node", "known-good partner") if spec.partners else ("node rank 0",
                                                                          "node rank 1")
    rows: list[list[object]] = [[p.round, p.hosts[0], p.hosts[1], p.why] for p in fleet.round_one]
    out_console.print(f"round 1: {len(rows)} pair(s) of {len(spec.nodes)} node(s) under test"
                      + (f", {len(spec.partners)} known-good partner(s)" if spec.partners else "")
                      + f"; seed {spec.seed}", markup=False)
    out_console.print(table(["round", *what, "why"], rows))
    left = [n for n in spec.nodes if all(n not in p.hosts for p in fleet.round_one)]
    if left:
        out_console.print("not in round 1 (tested in round 2 against a node that passed): "
                          + ", ".join(left), markup=False)
    out_console.print("plan only: nothing was contacted", markup=False)


def pair_doc(o: PairOutcome, result: PairResult | None) -> dict[str, Any]:
    """One pair as report.json's ``pairs[i]``."""
    threshold = result.threshold.min_busbw_gbps if result and result.threshold else None
    return {"hosts": list(o.hosts), "round": o.round, "verdict": o.outcome.value,
            "reason": o.reason, "busbw_gbps": o.busbw_gbps, "threshold_gbps": threshold,
            "path": result.path if result else None,
            "transport": result.transport.kind if result else None,
            "interfaces": list(result.transport.interfaces) if result else [],
            "paths": [p.to_dict() for p in result.paths] if result else [],
            "warnings": list(result.warnings) if result else [],
            "sizes": [{k: v for k, v in asdict(s).items() if k != "launch"}
                      for s in (result.sizes if result else ())]}


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
    }


def render(res: FleetResult) -> None:
    """Per-node table (bad first), then per-pair table, then the counts."""
    nodes = worst_first(res.verdicts)
    out_console.print(f"\nfleet: {len(nodes)} node(s), {len(res.outcomes)} pair test(s) in "
                      f"{max((o.round for o in res.outcomes), default=0)} round(s)",
                      markup=False)
    out_console.print(table(
        ["node", "verdict", "reason", "partners", "busbw(GB/s)"],
        [[v.node, v.state.value, v.reason, ",".join(v.partners) or "-",
          "-" if v.busbw_gbps is None else f"{v.busbw_gbps:.2f}"] for v in nodes]))
    if res.outcomes:
        out_console.print("", markup=False)
        out_console.print(table(
            ["round", "node rank 0", "node rank 1", "verdict", "transport", "busbw(GB/s)",
             "threshold", "reason"],
            [_pair_row(o, res.pair_results.get((*o.hosts, o.round))) for o in res.outcomes]))
    warnings = dict.fromkeys(w for r in res.pair_results.values() for w in r.warnings)
    for warning in warnings:
        out_console.print(f"[bold yellow]warning:[/] {escape(warning)}")
    counts = {s: sum(v.state is s for v in nodes) for s in NodeState}
    summary = ", ".join(f"[{STYLE[s]}]{counts[s]} {s.value}[/]" for s in NodeState if counts[s])
    out_console.print(summary + (" [bold red](interrupted)[/]" if res.interrupted else ""))


def _pair_row(o: PairOutcome, result: PairResult | None) -> list[object]:
    threshold = result.threshold.min_busbw_gbps if result and result.threshold else None
    return [o.round, o.hosts[0], o.hosts[1], o.outcome.value, result.path if result else "-",
            "-" if o.busbw_gbps is None else f"{o.busbw_gbps:.2f}",
            "-" if threshold is None else f"{threshold:g}", o.reason or "-"]


__all__ = ["PlannedPair", "plan_doc", "progress", "render", "render_plan", "result_doc"]


def fleet_command(inventory_path: Path, inv: Inventory, *, partners: str | None,
                  pattern: str = targets.GROUP,
                  fleet_options: FleetOptions, options: Options, plan_only: bool, as_json: bool,
                  report_path: Path | None, base: dict[str, Any],
                  slurm_options: slurm.SlurmOptions | None = None,
                  rec: records.RunRecord) -> NoReturn:
    """Run (or, with --plan, only plan) a fleet validation; write the record; exit (the verb
    prints the record under --json)."""
    partner_inv = (targets.partners(inventory_path, partners, pattern=pattern, vault=inv.vault)
                   if partners else None)
    if partner_inv is not None:
        check_master_addrs(partner_inv.hosts)
    fleet = make_plan(inv, fleet_options, partners=partner_inv)
    slurm_plan = None
    if slurm_options is not None and not plan_only:
        hosts = {h.name: h for h in (*inv.hosts, *(partner_inv.hosts if partner_inv else ()))}
        slurm_plan = slurm_opts.prepare(
            inv, [hosts[n] for n in fleet.spec.nodes if n in hosts], slurm_options,
            busy=[hosts[n] for n in (*fleet.spec.nodes, *fleet.spec.partners) if n in hosts])
    record = rec
    base = {**base, "partners_pattern": partners, "fleet_options": asdict(fleet_options)}
    if plan_only:
        doc = {**base, "status": "plan", "exit_code": 0, "fleet": plan_doc(fleet)}
        record.write(doc, copy_to=report_path)
        if not as_json:
            render_plan(fleet)
        raise SystemExit(0)
    stop = threading.Event()
    try:
        res = run_fleet(fleet, fleet_options, options,
                        progress=(lambda _n, _m: None) if as_json else progress, stop=stop)
    except NodetuneError as exc:
        doc = {**base, "status": "error", "exit_code": int(exc.exit_code), "fleet": plan_doc(fleet),
               "error": {"type": type(exc).__name__, "host": exc.host, "message": exc.message}}
        record.write(doc, copy_to=report_path)
        raise
    except KeyboardInterrupt:  # during checks/preflight: nothing of ours runs on a node
        doc = {**base, "status": "interrupted", "exit_code": 130, "fleet": plan_doc(fleet)}
        record.write(doc, copy_to=report_path)
        raise
    code = 130 if res.interrupted else int(res.exit_code)
    status = "interrupted" if res.interrupted else (
        "pass" if res.exit_code == ExitCode.OK else "fail")
    logs = {name: text for (a, b, number), pair_logs in res.pair_logs.items()
            for name, text in records.node_logs(pair_logs, f"round{number}-{a}-{b}").items()}
    doc = {**base, "status": status, "exit_code": code, **result_doc(res)}
    if not as_json:
        render(res)
    if slurm_plan is not None and not res.interrupted and slurm_opts.act(
            slurm_plan, res.verdicts, record, doc, quiet=as_json):
        code = int(ExitCode.INFRASTRUCTURE)
        doc["exit_code"] = code
    code = report_opts.judge_regressions(doc, code)
    path = record.write(doc, files=logs, copy_to=report_path)
    if not as_json:
        err_console.print(f"run record: {path.parent}")
    raise SystemExit(code)
