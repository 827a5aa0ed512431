"""`nodetune runs ID`: a recorded run shown again the way a person reads it.

The header (verb, inventory, start, length, exit), then by verb: apply and facts
their host table, failures, changes and the retry file; check its matrix,
findings and verdicts; validate its pairs and node verdicts (a --plan run its
round 1). ``--json`` prints the document itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from nodetune.cli import matrix, tune_view
from nodetune.cli.console import table
from nodetune.reports import model

STATUS_STYLE = {"fail": "bold red", "warn": "yellow", "pass": "green", "skip": "dim"}
VERDICT_STYLE = {"bad": "bold red", "unreachable": "bold red", "unresolved": "yellow",
                 "good": "green"}
EXIT_WORDS = {0: "ok", 1: "a check failed", 2: "bad input", 3: "infrastructure", 4: "timeout",
              130: "interrupted", 143: "terminated"}


def verb_label(doc: Mapping[str, Any]) -> str:
    """The verb as listed: a --plan run is ``validate --plan``, not a validate that passed."""
    verb = str(doc.get("verb", "?"))
    return f"{verb} --plan" if doc.get("status") == "plan" else verb


def render(console: Console, doc: Mapping[str, Any], page: str | None = None) -> None:
    """The run's human view on ``console``."""
    code = doc.get("exit_code")
    console.print(f"[bold]{escape(verb_label(doc))}[/] {escape(str(doc.get('inventory', '')))}"
                  f"  run {escape(str(doc.get('run_id', '?')))}")
    seconds = doc.get("duration_s")
    length = f", {float(seconds):.1f} s" if isinstance(seconds, int | float) else ""
    meaning = EXIT_WORDS.get(code, str(doc.get("status", "?"))) if isinstance(code, int) else "?"
    console.print(f"started {doc.get('started', '?')}{length}; exit {code} ({meaning})",
                  markup=False)
    error = doc.get("error")
    if isinstance(error, Mapping):
        where = f"{error['host']}: " if error.get("host") else ""
        console.print(f"error: {where}{error.get('message', '')}", markup=False)
    verb = doc.get("verb")
    if verb in ("apply", "facts"):
        _apply(console, doc)
    elif verb == "tune":
        tune_view.render_doc(console, doc)
    elif doc.get("status") == "plan":
        _plan(console, doc)
    else:
        _checks(console, doc)
        _pairs(console, doc)
        _nodes(console, doc)
    if page:
        console.print(f"\npage: {page}   document: nodetune runs {doc.get('run_id')} --json",
                      markup=False)


def _apply(console: Console, doc: Mapping[str, Any]) -> None:
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    if hosts:
        console.print(table(["host", "result", "ok", "changed", "failed", "unreachable",
                             "skipped"],
                            [[h.get("host"), h.get("state"), h.get("ok"), h.get("changed"),
                              h.get("failed"), h.get("unreachable"), h.get("skipped")]
                             for h in hosts], right=range(2, 7)))
    problems = doc.get("input_problems") or []
    if problems:
        console.print("\nBad input (nothing was changed on any node):", markup=False)
        for p in problems:
            console.print(f"  {p.get('host')}: {p.get('role')}: {p.get('message')}",
                          markup=False)
    failed = doc.get("failed_tasks") or []
    if failed and not problems:
        console.print("\nFailed:", markup=False)
        for t in failed:
            console.print(f"  {t.get('host')}: [{t.get('task')}] {t.get('message')}",
                          markup=False)
    changed = doc.get("changed_tasks") or []
    if changed:
        tasks: dict[str, list[str]] = {}
        for t in changed:
            tasks.setdefault(str(t.get("task")), []).append(str(t.get("host")))
        console.print(f"\nChanged ({len(changed)} task result(s)):", markup=False)
        for task, names in tasks.items():
            console.print(f"  [{task}] {len(names)} host(s): {', '.join(sorted(names)[:5])}"
                          + (" ..." if len(names) > 5 else ""), markup=False)
    for key, label in (("diff_file", "full diff"), ("retry_file", "retry list")):
        if doc.get(key):
            console.print(f"{label}: {doc[key]}", markup=False)
    if doc.get("reboot_required"):
        console.print("\nReboot needed: " + ", ".join(sorted(doc["reboot_required"])),
                      markup=False)


def _plan(console: Console, doc: Mapping[str, Any]) -> None:
    fleet = doc.get("fleet") or {}
    rows = [[i + 1, *p.get("hosts", ["?", "?"])[:2], p.get("why")]
            for i, p in enumerate(fleet.get("round_one") or [])]
    console.print("plan only: nothing was contacted", markup=False)
    console.print(table(["pair", "node rank 0", "node rank 1", "why"], rows,
                        title=f"round 1 (seed {fleet.get('seed')})"))


def _checks(console: Console, doc: Mapping[str, Any]) -> None:
    checks = model.checks_of(doc)
    if not checks:
        return
    nodes = list(dict.fromkeys(c.node for c in checks))
    groups = list(dict.fromkeys(c.name.split("[", 1)[0] for c in checks))
    order = {s: i for i, s in enumerate(("fail", "warn", "pass", "skip"))}
    cells = []
    for node in nodes:
        row = []
        for g in groups:
            mine = [c.status for c in checks if c.node == node and c.name.split("[", 1)[0] == g]
            worst = min(mine, key=lambda s: order.get(s, 0)) if mine else "-"
            row.append(f"[{STATUS_STYLE.get(worst, '')}]{escape(worst)}[/]" if mine else "-")
        cells.append(row)
    for part in matrix.tables(nodes, matrix.headings(groups), cells,
                              width=console.width):
        console.print(part)
    findings = [c for c in checks if c.status in ("fail", "warn")]
    if findings:
        console.print("\n[bold]findings[/]")
    for c in sorted(findings, key=lambda c: order.get(c.status, 0)):
        console.print(f"  [{STATUS_STYLE[c.status]}]{c.status.upper()}[/] {escape(c.node)} "
                      f"[bold]{escape(c.name)}[/]: {escape(c.measured)}, expected "
                      f"{escape(c.expected)}")
        console.print(f"       {escape(c.message)}")


def _pairs(console: Console, doc: Mapping[str, Any]) -> None:
    pairs = model.pairs_of(doc)
    if pairs:
        console.print(table(["pair", "verdict", "busbw(GB/s)", "min", "path", "reason"],
                            [[p.label, p.verdict, p.busbw_gbps, p.threshold_gbps, p.path,
                              p.reason] for p in pairs], right=(2, 3), title="pairs"))


def _nodes(console: Console, doc: Mapping[str, Any]) -> None:
    nodes = model.nodes_of(doc)
    if not nodes:
        return
    console.print("\n[bold]verdicts[/]")
    for n in nodes:
        console.print(f"  {escape(n.name)}: [{VERDICT_STYLE.get(n.verdict, '')}]"
                      f"{escape(n.verdict)}[/] {escape(n.reason)}")
