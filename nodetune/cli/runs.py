"""`nodetune runs`: past run records, one run's page, one node's history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nodetune import records
from nodetune.cli import run_view
from nodetune.cli.common import handle_errors, print_json
from nodetune.cli.console import err_console, out_console, table
from nodetune.errors import InputError, NodetuneError, RecordError
from nodetune.reports import history, html
from nodetune.slurm import offenders


@click.command("runs")
@click.argument("run_id", required=False)
@click.option("--open", "open_page", is_flag=True,
              help="With ID: print the path of the run's report.html (e.g. "
                   "xdg-open \"$(nodetune runs ID --open)\").")
@click.option("--node", metavar="NAME",
              help="List NAME's history: its verdict and busbw in every validate and check "
                   "run, oldest first.")
@click.option("--json", "as_json", is_flag=True,
              help="Print as JSON (an error too, as a JSON document).")
@handle_errors
def runs_cmd(run_id: str | None, open_page: bool, node: str | None, as_json: bool) -> None:
    """List past runs, oldest first, or show one run (by id or unique prefix): its tables,
    verdicts and failures; --json prints the run's document.

    Entries of the runs folder that are not readable run records are listed
    with a note saying what is wrong with them.
    """
    try:
        _runs(run_id, open_page, node, as_json)
    except NodetuneError as exc:
        if as_json:  # --json always prints a JSON document, an error included
            print_json({"status": "error", "exit_code": int(exc.exit_code),
                        "error": {"type": type(exc).__name__, "host": exc.host,
                                  "message": exc.message}})
        raise


def _runs(run_id: str | None, open_page: bool, node: str | None, as_json: bool) -> None:
    if open_page and not run_id:
        raise InputError("--open needs a run ID (`nodetune runs` lists them)")
    if node is not None and run_id:
        raise InputError("--node lists a node's history over all runs; give no run ID with it")
    if node is not None:
        _node_history(node, as_json=as_json)
        return
    if run_id:
        doc = records.load_run(run_id)
        if open_page:
            page = _page(doc)
            if as_json:  # --json always prints a JSON document
                print_json({"run_id": doc.get("run_id"), "page": str(page)})
            else:
                click.echo(str(page))
            return
        if as_json:
            print_json(doc)
        else:
            page = records.runs_dir() / str(doc["run_id"]) / html.FILENAME
            run_view.render(out_console, doc, str(page) if page.is_file() else None)
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


def _page(doc: dict[str, Any]) -> Path:
    """The run's report.html; a record from before pages existed gets one now."""
    run_dir = records.runs_dir() / str(doc["run_id"])
    page = run_dir / html.FILENAME
    if not page.is_file():
        try:
            html.write(run_dir, doc)
        except OSError as exc:
            error = RecordError if exc.errno in records.DISK_FULL else InputError
            raise error(f"{page}: missing and cannot be written "
                        f"({exc.strerror or exc})") from None
        err_console.print(f"wrote {page} (the run had none)", markup=False)
    return page.absolute()


def _node_history(node: str, *, as_json: bool) -> None:
    rows = history.history_of(node, records.runs_dir())
    if as_json:
        print_json([o.to_dict() for o in rows])
        return
    drained = offenders.of_runs(node, records.runs_dir())
    said = (f"drained by nodetune {len(drained)} time(s) in the last "
            f"{offenders.WINDOW_DAYS:g} days" + (": " + ", ".join(d.run_id for d in drained)
                                                 if drained else "")
            + (f" (a repeat offender: --resume services it, from {offenders.DRAINS})"
               if len(drained) >= offenders.DRAINS else ""))
    if not rows:
        out_console.print(f"no validate or check run under {records.runs_dir()} names {node}",
                          markup=False)
        out_console.print(said, markup=False)
        return
    out_console.print(table(
        ["run", "verb", "verdict", "busbw(GB/s)", "at bytes", "i_cv%", "over", "profile",
         "partners"],
        [[o.run_id, o.verb, o.verdict, o.busbw_gbps, o.bytes, dict(o.cv_pct).get(o.bytes or -1),
          o.path, o.profile, ",".join(o.partners) or None] for o in rows],
        right=(3, 4, 5), title=f"history of {node}"))
    out_console.print(said, markup=False)


def _row(run: dict[str, Any]) -> list[object]:
    note = run.get("error", "")
    if isinstance(note, dict):  # a run that ended in an error records it as an object
        note = note.get("message", "")
    return [run.get("run_id", "?"), run_view.verb_label(run), run.get("inventory"),
            run.get("exit_code"), run.get("duration_s"), note]
