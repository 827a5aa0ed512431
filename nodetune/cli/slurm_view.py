"""What Slurm did in a run, as the verbs that end in per-node verdicts print it: progress,
the drain/resume table (the commands under --dry-run), a job that arrived during the run,
and a teardown that could not be shown done."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from rich.markup import escape

from nodetune.cli.console import err_console, out_console, table
from nodetune.slurm import act as slurm_act
from nodetune.slurm.model import SlurmReport


def say(message: str) -> None:
    """Progress of Slurm actions on stderr."""
    err_console.print(f"[dim]slurm:[/] {message}", markup=True, highlight=False)


def render(report: SlurmReport) -> None:
    """The Slurm actions of a run: one row per node; dry-run shows the commands."""
    if not report.actions:
        out_console.print(f"slurm ({report.controller}): nothing to drain or resume",
                          markup=False)
        return
    rows = []
    for a in report.actions:
        what = a.action + (" (dry run)" if a.dry_run and a.command else "")
        if a.error:
            what += " FAILED"
        rows.append([a.node, a.slurm_node, what, a.state_after, a.error or a.reason])
    out_console.print(f"\nslurm (scontrol on {report.controller}):", markup=False)
    out_console.print(table(["node", "slurm node", "action", "state after", "reason"],
                            rows))
    dry = [a for a in report.actions if a.dry_run and a.command]
    if dry:
        out_console.print(f"would run on {report.controller}:", markup=False)
        for a in dry:
            out_console.print("  " + shlex.join(a.command), markup=False)


def show_teardown(doc: Mapping[str, Any]) -> None:
    """A Slurm job the run could not show cancelled (report.json's
    ``slurm_job.teardown_error``), on stderr beside the verdict, which stands."""
    job = doc.get("slurm_job")
    if isinstance(job, Mapping) and job.get("teardown_error"):
        err_console.print(f"[bold yellow]slurm:[/] job {escape(str(job.get('job_id')))} was "
                          f"not shown cancelled: {escape(str(job['teardown_error']))} (the "
                          "verdict above stands)")


def show(settled: slurm_act.Settled, *, quiet: bool = False) -> None:
    """What Slurm did after a run: the actions' table (not under --json), or why Slurm
    could not be asked (always, on stderr)."""
    if settled.error is not None:
        err_console.print(f"[bold red]slurm:[/] {escape(settled.error)}")
    elif settled.report is not None and not quiet:
        render(settled.report)


def show_recheck(doc: dict[str, Any]) -> None:
    """The nodes Slurm allocated to a job during the run (their measurement, and their
    partners', is no verdict), or why Slurm could not be asked again; on stderr."""
    found = doc.get("slurm_recheck") or {}
    if found.get("error"):
        err_console.print(f"[bold yellow]slurm:[/] could not be asked after the run whether a "
                          f"job arrived ({escape(str(found['error']))}): no node's verdict "
                          "stands", highlight=False)
    for node, jobs in (found.get("allocated_during_run") or {}).items():
        held = ", ".join(jobs) or "?"
        err_console.print(f"[bold yellow]slurm:[/] {escape(node)} was allocated to job "
                          f"{escape(held)} during the run: no verdict for it or the nodes "
                          "measured with it (unresolved; not drained or resumed)",
                          highlight=False)
