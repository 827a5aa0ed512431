"""`nodetune tune`: one line per run as it goes, then busbw per size per combination with
its spread, each combination's verdict, and the recommendation as group_vars."""

from __future__ import annotations

from rich.markup import escape

from nodetune.cli.common import err_console, out_console, table
from nodetune.tune.verb import Outcome, RunDone
from nodetune.validate.result import human_bytes

HEADERS = ("combination", "size", "busbw median", "low", "high", "spread %", "vs default %")


def starting(done: RunDone) -> None:
    """Before a run: which one of how many."""
    err_console.print(f"[cyan]{'run':>9}[/] {done.index}/{done.total} "
                      f"(repeat {done.repeat + 1}): {escape(done.combo.name)}")


def finished(done: RunDone) -> None:
    """After a run: busbw at its largest size."""
    if done.sizes:
        top = done.sizes[-1]
        err_console.print(f"[cyan]{'measured':>9}[/] {escape(done.combo.name)}: "
                          f"{top.busbw:.2f} GB/s at {human_bytes(top.bytes)}")


def render(outcome: Outcome) -> None:
    """The table, the verdicts and the recommendation, on stdout."""
    base = {s.bytes: s for j in outcome.judged if j.combo.is_default for s in j.sizes}
    rows: list[list[object]] = []
    for judged in outcome.judged:
        for s in judged.sizes:
            ref = base.get(s.bytes)
            versus = (f"{100.0 * (s.median - ref.median) / ref.median:+.1f}"
                      if ref is not None and ref.median and not judged.combo.is_default
                      else "-")
            rows.append([judged.combo.name, human_bytes(s.bytes), s.median, s.low, s.high,
                         f"{s.spread_pct:.1f}", versus])
    out_console.print(table(HEADERS, rows, right=range(1, len(HEADERS))))
    out_console.print()
    for judged in outcome.judged:
        note = f" ({judged.note})" if judged.note else ""
        verdict = "the baseline" if judged.combo.is_default else judged.verdict
        out_console.print(f"{judged.combo.name}: {verdict}{note}", markup=False)
    rec = outcome.recommendation
    if rec.combo is None:
        out_console.print(f"\nno recommendation: {rec.reason}", markup=False)
        return
    out_console.print(f"\nrecommended: {rec.reason}", markup=False)
    written = outcome.doc.get("written")
    if written:
        out_console.print(f"written to {written}", markup=False)
    if outcome.snippet:
        out_console.print(outcome.snippet, markup=False, end="")
