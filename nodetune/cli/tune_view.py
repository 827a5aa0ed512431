"""`nodetune tune`: one line per run as it goes, then busbw per size per combination with
its spread, each combination's verdict, and the recommendation as group_vars."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from nodetune.cli.console import err_console, out_console, table
from nodetune.measure.sweep import human_bytes

if TYPE_CHECKING:  # nodetune runs shows a record without loading the verb
    from nodetune.tune.verb import Outcome, RunDone

HEADERS = ("combination", "size", "busbw median", "low", "high", "spread %", "vs default %")


def starting(done: RunDone) -> None:
    """Before a run: which one of how many."""
    err_console.print(f"[cyan]{'run':>9}[/] {done.index}/{done.total} "
                      f"(repeat {done.repeat + 1}): {escape(done.combo.name)}")


def finished(done: RunDone) -> None:
    """After a run: busbw at its largest size, or why it failed."""
    if done.error:
        err_console.print(f"[yellow]{'failed':>9}[/] {escape(done.combo.name)}: "
                          f"{escape(done.error)} (dropped; the others go on)")
    if done.sizes:
        top = done.sizes[-1]
        err_console.print(f"[cyan]{'measured':>9}[/] {escape(done.combo.name)}: "
                          f"{top.busbw:.2f} GB/s at {human_bytes(top.bytes)}")


def render(outcome: Outcome) -> None:
    """The table, the verdicts and the recommendation, on stdout."""
    render_doc(out_console, outcome.doc)


def render_doc(console: Console, doc: Mapping[str, Any]) -> None:
    """A tune record's table, verdicts and recommendation (also ``nodetune runs ID``)."""
    judged = [j for j in doc.get("judged") or [] if isinstance(j, Mapping)]
    if not judged:
        return
    base = {s["bytes"]: s for j in judged if not j.get("env") for s in j.get("sizes") or []}
    rows: list[list[object]] = []
    for j in judged:
        for s in j.get("sizes") or []:
            ref = base.get(s["bytes"])
            versus = (f"{100.0 * (s['median'] - ref['median']) / ref['median']:+.1f}"
                      if ref is not None and ref["median"] and j.get("env") else "-")
            rows.append([j["combo"], human_bytes(int(s["bytes"])), float(s["median"]),
                         float(s["low"]), float(s["high"]), f"{s['spread_pct']:.1f}", versus])
    console.print(table(HEADERS, rows, right=range(1, len(HEADERS))))
    console.print()
    for j in judged:
        note = f" ({j['note']})" if j.get("note") else ""
        verdict = j["verdict"] if j.get("env") else "the baseline"
        console.print(f"{j['combo']}: {verdict}{note}", markup=False)
    rec = doc.get("recommendation") or {}
    if not rec.get("combo"):
        console.print(f"\nno recommendation: {rec.get('reason', '?')}", markup=False)
        return
    console.print(f"\nrecommended: {rec.get('reason')}", markup=False)
    if doc.get("written"):
        console.print(f"written to {doc['written']}", markup=False)
    if doc.get("snippet"):
        console.print(str(doc["snippet"]), markup=False, end="")
    elif doc.get("snippet_withheld"):
        console.print(f"no group_vars snippet: {doc['snippet_withheld']}", markup=False)
