"""What `apply` and `facts` print once the playbook has run: the results.

Up to :data:`~nodetune.cli.apply_view.ROWS` hosts, the result table has a row per
host. Above that (hundreds of nodes) it rolls up: counts per state and the hosts
that failed or could not be reached. The full per-host table is in the run
record (``nodetune runs ID``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group, RenderableType

from nodetune.ansible.results import PlaybookResult, TaskOutcome
from nodetune.apply import changes
from nodetune.apply import run as apply_mod
from nodetune.cli.apply_view import COUNTERS, ROWS
from nodetune.cli.console import out_console, table

DIFF_LINES = 200   # --diff: lines printed before pointing at diff.txt


def host_table(result: PlaybookResult, *, rows: int = ROWS) -> RenderableType:
    """The result per host; above ``rows`` hosts, counts per state and the hosts not ok."""
    headers = ["host", "result", *COUNTERS]

    def row(h: Any) -> list[object]:
        return [h.host, h.state.value, h.ok, h.changed, h.failed, h.unreachable, h.skipped]

    if len(result.hosts) <= rows:
        return table(headers, [row(h) for h in result.hosts], right=range(2, 7))
    counts = Counter(h.state.value for h in result.hosts)
    states = [s for s in ("ok", "changed", "failed", "unreachable") if counts.get(s)]
    summary = table(states, [[counts[s] for s in states]], right=range(len(states)),
                    title=f"{len(result.hosts)} hosts")
    bad = [h for h in result.hosts if h.state.value in ("failed", "unreachable")]
    if not bad:
        return summary
    return Group(summary, table(headers, [row(h) for h in bad], right=range(2, 7),
                                title="hosts not ok (every host: nodetune runs ID)"))


def print_changes(console: Console, result: PlaybookResult, doc: Mapping[str, Any], *,
                  diff: bool) -> None:
    """With ``diff``: the diffs (the drift report of --check --diff). Without: one line per
    changed file or setting. Either way, the path of the full diff in the run record."""
    if diff:
        if result.diffs:
            _print_diffs(console, result, doc)
        return
    summary = changes.summarize(result.changed_tasks)
    if not summary:
        return
    verb = "Would change" if doc.get("options", {}).get("check") else "Changed"
    console.print(f"\n{verb} ({len(summary)} file(s)/setting(s)):", markup=False)
    for change in summary:
        console.print(f"  {change.line(len(result.hosts))}", markup=False, highlight=False)
    if doc.get("diff_file"):
        console.print(f"full diff: {doc['diff_file']} (or rerun with --diff)", markup=False)


def _print_diffs(console: Console, result: PlaybookResult, doc: Mapping[str, Any]) -> None:
    lines = [ln for t in result.diffs
             for ln in [f"=== {t.host}: [{t.task}]", *t.diff.rstrip("\n").splitlines()]]
    console.print("\nDiff:", markup=False)
    console.print("\n".join(lines[:DIFF_LINES]), markup=False, highlight=False)
    hosts = len({t.host for t in result.diffs})
    more = f", first {DIFF_LINES} lines shown" if len(lines) > DIFF_LINES else ""
    console.print(f"{len(result.diffs)} diff(s) on {hosts} host(s){more}; full diff: "
                  f"{doc.get('diff_file')}", markup=False)


def print_failures(console: Console, failed: tuple[TaskOutcome, ...], *,
                   limit: int | None = None) -> None:
    """Failed tasks, one line each (``limit``: at most that many, then a count)."""
    console.print("\nFailed:", markup=False)
    shown = failed if limit is None else failed[:limit]
    for t in shown:
        console.print(f"  {t.host}: [{t.task}] {t.message}", markup=False)
    if len(failed) > len(shown):
        console.print(f"  ... and {len(failed) - len(shown)} more (nodetune runs ID)",
                      markup=False)


def print_deferred(console: Console, deferred: Mapping[str, Any]) -> None:
    """The nodes Slurm had allocated to jobs, and per node what apply left for later."""
    if not deferred:
        return
    console.print("\nBusy nodes (Slurm had allocated them to jobs; --allow-busy acts anyway). "
                  "Deferred until the node is idle and apply runs again:", markup=False)
    for host, d in deferred.items():
        jobs = f"job{'s' if len(d['jobs']) > 1 else ''} {', '.join(d['jobs'])}" \
            if d["jobs"] else "no job listed by squeue"
        what = "; ".join(d["deferred"]) or "nothing (no restart, module load or reboot needed)"
        console.print(f"  {host} ({d['state']}: {jobs}): {what}", markup=False)


def render_apply(outcome: apply_mod.ApplyOutcome, *, diff: bool) -> None:
    result, doc = outcome.result, outcome.report
    out_console.print(host_table(result))
    if result.input_problems:
        out_console.print("\nBad input (nothing was changed on any node):", markup=False)
        for p in result.input_problems:
            out_console.print(f"  {p.host}: {p.role}: {p.message}", markup=False)
    elif result.failed_tasks:
        print_failures(out_console, result.failed_tasks,
                       limit=None if len(result.hosts) <= ROWS else 50)
    print_changes(out_console, result, doc, diff=diff)
    if doc.get("reboot"):
        rebooted = [h["host"] for h in doc["reboot"]["hosts"] if h["state"] in ("ok", "changed")]
        out_console.print(f"\nRebooted and re-checked: {', '.join(rebooted) or 'none'}",
                          markup=False)
        for t in doc["reboot"]["failed_tasks"]:
            out_console.print(f"  {t['host']}: [{t['task']}] {t['message']}", markup=False)
    elif doc["reboot_required"]:
        out_console.print("\nReboot needed (nodetune never reboots on its own; "
                          "`nodetune apply INVENTORY --reboot` does it in batches):", markup=False)
        for host, reasons in doc["reboot_required"].items():
            out_console.print(f"  {host}: {reasons}", markup=False)
    print_deferred(out_console, doc.get("deferred") or {})
    if doc.get("retry_file"):
        out_console.print(f"\nRerun the hosts that failed: nodetune apply "
                          f"{doc['inventory']} --limit @{doc['retry_file']}", markup=False)
    verdict = {0: "all hosts ok", 1: "some hosts failed", 2: "bad input, nothing changed",
               3: "some hosts unreachable",
               4: "timed out"}.get(doc["exit_code"], result.status)
    if doc.get("fail_on_change"):
        verdict = "changes found (--fail-on-change)"
    changed = sum(h.changed for h in result.hosts)
    held = sum(1 for d in (doc.get("deferred") or {}).values() if d["deferred"])
    later = f"; deferred on {held} busy node(s)" if held else ""
    out_console.print(f"\n{verdict}; {changed} change(s) in {result.duration_s:.1f} s{later}",
                      markup=False)
