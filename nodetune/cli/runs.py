"""`nodetune runs`: past run records."""

from __future__ import annotations

import click

from nodetune import report
from nodetune.cli.common import handle_errors, out_console, print_json


@click.command("runs")
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@handle_errors
def runs_cmd(run_id: str | None, as_json: bool) -> None:
    """List past runs, or show one run's report (by id or unique prefix)."""
    if run_id:
        doc = report.load_run(run_id)
        print_json(doc) if as_json else out_console.print_json(data=doc)
        return
    runs = report.list_runs()
    if as_json:
        print_json(runs)
        return
    if not runs:
        out_console.print(f"no runs recorded under {report.runs_dir()}", markup=False)
        return
    rows = [[r.get("run_id", "?"), r.get("verb", "?"), r.get("inventory", "-"),
             r.get("exit_code", "-"), r.get("duration_s", "-"), r.get("error", "")]
            for r in runs]
    out_console.print(report.format_table(
        ["run", "verb", "inventory", "exit", "seconds", "note"], rows, align="lllrrl"),
        markup=False)
