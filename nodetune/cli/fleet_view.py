"""`nodetune validate` on more than two hosts: the fleet's progress, plan and tables."""

from __future__ import annotations

from rich.markup import escape

from nodetune.cli import rdma_view
from nodetune.cli.console import err_console, out_console, table
from nodetune.fleet.planner import PairOutcome
from nodetune.fleet.run import FleetPlan, FleetResult
from nodetune.validate.result import PairResult
from nodetune.verdicts import NodeState, worst_first

STYLE = {NodeState.BAD: "bold red", NodeState.UNREACHABLE: "bold magenta",
         NodeState.UNRESOLVED: "yellow", NodeState.GOOD: "green"}


def progress(node: str, message: str) -> None:
    """Live fleet progress on stderr, one line per step."""
    err_console.print(f"[cyan]{node:>14}[/] {escape(message)}")


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
    rdma_view.render(res.rdma_bw)
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
