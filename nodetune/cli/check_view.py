"""What `nodetune check` prints: progress per node, the node x check table with each node's
action, the findings with their actions, the skips, the window each node's counters cover,
and the verdicts."""

from __future__ import annotations

from collections.abc import Mapping

from rich.markup import escape

from nodetune.action import Action
from nodetune.check.model import NodeChecks, Status
from nodetune.check.sample import words
from nodetune.cli import matrix
from nodetune.cli.console import err_console, out_console
from nodetune.verdicts import NodeState, worst_first

STYLE = {Status.FAIL: "bold red", Status.WARN: "yellow", Status.PASS: "green",
         Status.SKIP: "dim", Status.UNKNOWN: "bold magenta"}
VERDICT_STYLE = {NodeState.BAD: "bold red", NodeState.UNREACHABLE: "bold red",
                 NodeState.UNRESOLVED: "yellow", NodeState.NOT_ASSESSED: "bold magenta",
                 NodeState.GOOD: "green"}


def progress(quiet: bool):  # type: ignore[no-untyped-def]
    def show(node: str, message: str) -> None:
        if not quiet:
            err_console.print(f"[cyan]{'check':>9}[/] {escape(node)}: {escape(message)}")
    return show


def _group(name: str) -> str:
    return name.split("[", 1)[0]


def _worst(statuses: list[Status]) -> Status:
    return min(statuses, key=lambda s: s.order) if statuses else Status.SKIP


def render(results: Mapping[str, NodeChecks]) -> None:
    """The node x check table (worst nodes first), the failures and warnings, the verdicts."""
    verdicts = {n: c.verdict() for n, c in results.items()}
    order = [v.node for v in worst_first(verdicts)]
    groups = list(dict.fromkeys(_group(r.name) for c in results.values() for r in c.results))
    cells = []
    for node in order:
        checks = results[node]
        if not checks.reachable:
            cells.append(["[bold red]-[/]"] * (len(groups) + 1))
            continue
        row = []
        for g in groups:
            status = _worst([r.status for r in checks.results if _group(r.name) == g])
            row.append(f"[{STYLE[status]}]{status.value}[/]")
        action = checks.action  # the node's: the highest of its checks' (nodetune.action)
        row.append(f"[bold]{action.value}[/]" if action is not Action.NONE else action.value)
        cells.append(row)
    for part in matrix.tables(order, [*matrix.headings(groups), "action"], cells,
                              width=out_console.width):
        out_console.print(part)
    findings = [(node, r) for node in order
                for r in sorted(results[node].results, key=lambda r: r.status.order)
                if r.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)]
    if findings:
        out_console.print("\n[bold]findings[/]")
    for node, r in findings:
        out_console.print(f"  [{STYLE[r.status]}]{r.status.value.upper()}[/] {escape(node)} "
                          f"[bold]{escape(r.name)}[/]: {escape(r.measured)}, expected "
                          f"{escape(r.expected)} [dim]from {escape(r.source)}[/]")
        out_console.print(f"       {escape(r.message)}")
        if r.recommended is not Action.NONE:
            out_console.print(f"       action: [bold]{r.recommended.value}[/] "
                              f"({escape(r.recommended.words)})")
    skips: dict[tuple[str, str], list[str]] = {}
    for node in order:
        for r in results[node].results:
            if r.status is Status.SKIP:
                skips.setdefault((_group(r.name), r.message), []).append(node)
    if skips:
        out_console.print("\n[bold]skipped[/]")
        for (group, why), nodes in skips.items():
            names = sorted(set(nodes))
            out_console.print(f"  {escape(group)}: {escape(why)} "
                              f"[dim]({escape(', '.join(names))})[/]")
    windows: dict[str, list[str]] = {}
    for node in order:
        for line in words(results[node].window):
            windows.setdefault(line, []).append(node)
    if windows:
        out_console.print("\n[bold]window[/]")
    for line, nodes in windows.items():
        out_console.print(f"  {escape(line)} [dim]({escape(', '.join(nodes))})[/]")
    out_console.print("\n[bold]verdicts[/]")
    for node in order:
        v = verdicts[node]
        act = f" [bold]action {v.action.value}[/]:" if v.action not in (None, Action.NONE) \
            else ""
        out_console.print(f"  {escape(node)}: [{VERDICT_STYLE[v.state]}]{v.state.value}[/]"
                          f"{act} {escape(v.reason)}")
