"""`nodetune runs`: past run records."""

from __future__ import annotations

from typing import Any

import click

from nodetune import records
from nodetune.cli.common import handle_errors, out_console, print_json, table


@click.command("runs")
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@handle_errors
def runs_cmd(run_id: str | None, as_json: bool) -> None:
    """List past runs, oldest first, or show one run's report (by id or unique prefix).

    Entries of the runs folder that are not readable run records are listed
    with a note saying what is wrong with them.
    """
    if run_id:
        doc = records.load_run(run_id)
        print_json(doc) if as_json else out_console.print_json(data=doc, default=str)
        return
    runs = records.list_runs()
    if as_json:
        print_json(runs)
        return
    if not runs:
        out_console.print(f"no runs recorded under {records.runs_dir()}", markup=False)
        return
    out_console.print(table(["run", "verb", "inventory", "exit", "seconds", "note"],
                            [_row(r) for r in runs], right=(3, 4)))


def _row(run: dict[str, Any]) -> list[object]:
    note = run.get("error", "")
    if isinstance(note, dict):  # a run that ended in an error records it as an object
        note = note.get("message", "")
    return [run.get("run_id", "?"), run.get("verb", "?"), run.get("inventory"),
            run.get("exit_code"), run.get("duration_s"), note]
