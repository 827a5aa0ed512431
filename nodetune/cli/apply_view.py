"""What `apply` and `facts` print: the live view while the playbook runs, and the results.

Up to :data:`ROWS` hosts, the live view and the result table have a row per
host. Above that (hundreds of nodes) they roll up, as Ansible's recap habit
does: counts per state and the hosts that failed or could not be reached. The
full per-host table is in the run record (``nodetune runs ID``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live

from nodetune.ansible.results import PlaybookEvent, PlaybookResult, TaskOutcome
from nodetune.apply import changes
from nodetune.apply import run as apply_mod
from nodetune.cli.console import err_console, out_console, table

ROWS = 30          # more hosts than this: counts per state instead of a row per host
PROBLEM_ROWS = 20  # failing hosts listed in a rolled-up view before "+N more"
DIFF_LINES = 200   # --diff: lines printed before pointing at diff.txt
COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped")
STATES = ("waiting", "running", "ok", "changed", "failed", "unreachable")


class LiveView:
    """Per-host rows (current task, counters) redrawn while the playbook runs."""

    def __init__(self, hosts: list[str], *, rows: int = ROWS) -> None:
        self.rows: dict[str, dict[str, Any]] = {
            h: {"task": "waiting", **dict.fromkeys(COUNTERS, 0)} for h in hosts
        }
        self.max_rows = rows
        self.play = ""
        self.started = time.monotonic()

    def update(self, event: PlaybookEvent) -> None:
        if event.kind == "play":
            self.play = event.task or ""
            return
        if not event.host:
            return
        row = self.rows.setdefault(event.host, {"task": "", **dict.fromkeys(COUNTERS, 0)})
        if event.kind == "task":
            row["task"] = event.task or ""
        elif event.kind == "result" and event.status in COUNTERS:
            row[event.status] += 1
            if event.status == "changed":
                row["ok"] += 1
            if event.status in ("failed", "unreachable"):
                row["last_problem"] = f"{event.status}: {event.task or ''}"

    @staticmethod
    def state(row: Mapping[str, Any]) -> str:
        """A host's state so far: the worst of its results, else waiting or running."""
        for name in ("unreachable", "failed", "changed"):
            if row[name]:
                return name
        if row["ok"] or row["skipped"]:
            return "ok"
        return "waiting" if row["task"] == "waiting" else "running"

    def table(self) -> RenderableType:
        title = f"{self.play}  [{time.monotonic() - self.started:4.0f} s]"
        if len(self.rows) > self.max_rows:
            return self.rollup(title)
        out = table(["host", "current task", *COUNTERS],
                    [[h, r["task"], *(r[c] for c in COUNTERS)] for h, r in self.rows.items()],
                    right=range(2, 2 + len(COUNTERS)), title=title)
        _fold_task(out.columns[1])
        return out

    def rollup(self, title: str) -> RenderableType:
        """Counts per state, then the hosts with a failed or unreachable result."""
        counts = Counter(self.state(r) for r in self.rows.values())
        summary = table(list(STATES), [[counts.get(s, 0) for s in STATES]],
                        right=range(len(STATES)),
                        title=f"{title}  {len(self.rows)} hosts")
        bad = [(h, r) for h, r in self.rows.items() if r["failed"] or r["unreachable"]]
        if not bad:
            return summary
        shown = table(["failing host", "result"],
                      [[h, r.get("last_problem", "")] for h, r in bad[:PROBLEM_ROWS]])
        _fold_task(shown.columns[1])
        more = len(bad) - PROBLEM_ROWS
        parts: list[RenderableType] = [summary, shown]
        if more > 0:
            parts.append(f"+{more} more failing host(s)")
        return Group(*parts)


def _fold_task(column: Any) -> None:
    column.overflow = "ellipsis"
    column.max_width = 60
    column.no_wrap = True


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


@contextmanager
def live(view: LiveView, *, quiet: bool,
          verbose: bool) -> Iterator[tuple[apply_mod.OnEvent, threading.Event]]:
    """A progress callback for the library (live table, plain lines, or ansible's own
    output with -v) and the event that cancels the playbook on Ctrl-C."""
    cancel = threading.Event()

    def quiet_event(_stage: str, _event: PlaybookEvent) -> None:
        return None

    def plain(stage: str, event: PlaybookEvent) -> None:
        # Logs and CI: one line per play and per failed/unreachable result.
        view.update(event)
        if event.kind == "play" and not verbose:
            err_console.print(f"PLAY [{event.task}]", markup=False)
        elif event.kind == "result" and event.status in ("failed", "unreachable") \
                and not verbose:
            err_console.print(f"  {event.host}: {event.status}: {event.task}", markup=False)
        elif event.kind == "output" and event.text:
            err_console.print(event.text, markup=False, highlight=False)

    try:
        if quiet:
            yield quiet_event, cancel
        elif verbose or not err_console.is_terminal:
            yield plain, cancel
        else:
            with Live(view.table(), console=err_console, refresh_per_second=4,
                      transient=True) as live:
                def on_event(_stage: str, event: PlaybookEvent) -> None:
                    view.update(event)
                    live.update(view.table())

                yield on_event, cancel
    except KeyboardInterrupt:
        cancel.set()
        raise


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
