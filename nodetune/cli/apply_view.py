"""What `apply` and `facts` show while the playbook runs: the live view.

Up to :data:`ROWS` hosts, the live view has a row per host. Above that (hundreds
of nodes) it rolls up, as Ansible's recap habit does: counts per state and the
hosts that failed or could not be reached. What is printed once the playbook has
run is in :mod:`nodetune.cli.apply_result`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live

from nodetune.ansible.results import PlaybookEvent
from nodetune.apply import run as apply_mod
from nodetune.cli.console import err_console, table

ROWS = 30          # more hosts than this: counts per state instead of a row per host
PROBLEM_ROWS = 20  # failing hosts listed in a rolled-up view before "+N more"
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
