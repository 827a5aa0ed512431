"""`validate --rdma-bw`: the ib_write_bw results, one row per node and port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.markup import escape

from nodetune.check.model import CheckResult
from nodetune.cli.console import err_console, out_console, table
from nodetune.validate.rdma import unmeasured_note


def progress(message: str) -> None:
    """Each ib_write_bw run as it starts, on stderr."""
    err_console.print(f"[cyan]{'rdma_bw':>14}[/] {escape(message)}")


def render(results: Mapping[str, Sequence[CheckResult]]) -> None:
    """The table: node, check, status, measured, expected, and why when it did not pass;
    then, where ib_write_bw measured nothing for a node, a line that says so."""
    rows: list[list[object]] = [
        [node, r.name, r.status.value, r.measured or "-", r.expected or "-",
         r.message or "-"] for node, rows in results.items() for r in rows]
    if rows:
        out_console.print("\nRDMA write bandwidth (ib_write_bw, each node the client):",
                          markup=False)
        out_console.print(table(["node", "check", "status", "measured", "expected", "why"],
                                rows))
    if note := unmeasured_note(results):
        out_console.print(note, markup=False)
