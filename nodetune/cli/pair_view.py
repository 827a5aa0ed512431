"""`nodetune validate` on two hosts: live progress, nccl-tests' table, the verdict."""

from __future__ import annotations

from rich.markup import escape

from nodetune.cli.console import err_console, out_console, table
from nodetune.collective.launch import ValidateEvent
from nodetune.measure.sweep import SizeResult
from nodetune.validate.result import PairResult, Verdict

# nccl-tests' columns, and -I's i_min, i_max and i_cv% (over rounds of `iters` ops here)
HEADERS = ("size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
           "i_min(us)", "i_max(us)", "i_cv%")


def size_row(row: SizeResult) -> list[object]:
    """One table row, nccl-tests' columns."""
    p = row.per_iter
    return [row.bytes, row.count, row.type, f"{row.time_us:.1f}", row.algbw, row.busbw,
            row.wrong, f"{p.min_us:.1f}" if p else None, f"{p.max_us:.1f}" if p else None,
            f"{p.cv_pct:.2f}" if p else None]


class Printer:
    """Live progress on stderr: one line per step, one per size as it completes."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.header = False

    def __call__(self, event: ValidateEvent) -> None:
        if self.quiet:
            return
        if event.size is not None:
            # One row per size as it completes, in columns of fixed width so that the
            # rows printed one by one line up under the header printed with the first.
            row = table(HEADERS, [size_row(event.size)], right=range(len(HEADERS)))
            for column in row.columns:
                column.min_width = 12
            row.show_header = not self.header
            row.header_style = "dim"
            self.header = True
            err_console.print(row)
            return
        who = f"{event.host}: " if event.host else ""
        err_console.print(f"[cyan]{event.phase:>9}[/] {escape(who + event.message)}")


def render(result: PairResult) -> None:
    who = " <-> ".join(result.hosts) if len(result.hosts) == 2 else (
        f"across all {len(result.hosts)} nodes ({', '.join(result.hosts)})")
    out_console.print(
        f"\n{result.collective} {who}: {result.backend}, "
        f"{result.nproc_per_node} rank(s)/node, n = {result.world}", markup=False)
    out_console.print(table(HEADERS, [size_row(s) for s in result.sizes],
                            right=(0, 1, 3, 4, 5, 6, 7, 8, 9)))
    t = result.transport
    extra = []
    if t.interfaces:
        extra.append("via " + ",".join(t.interfaces))
    if t.backend == "nccl":
        extra.append("GDRDMA" if t.gdrdma else "no GDRDMA")
        if t.local_paths:
            extra.append("intra-node " + ",".join(t.local_paths[:3]))
        if t.nccl_version:
            extra.append(f"NCCL {t.nccl_version}")
    out_console.print(f"transport: {t.kind} ({'; '.join(extra)})", markup=False)
    for path in result.paths:
        out_console.print(f"  {path.host}: data on {path.interface or '?'} ({path.source}); "
                          f"SSH on {path.ssh_interface or '-'}", markup=False)
    for warning in result.warnings:
        out_console.print(f"[bold yellow]warning:[/] {escape(warning)}")
    out_console.print(f"algorithm: {t.algorithm or 'unknown'} [{t.algorithm_source}]",
                      markup=False)
    if result.threshold is not None:
        out_console.print(f"threshold: {result.threshold.min_busbw_gbps:g} GB/s at the largest "
                          f"size ({result.threshold.origin})", markup=False)
    if any(s.per_iter is not None and len(s.per_iter.per_process_max_times_us) > 1
           for s in result.sizes):
        out_console.print("straggler: " + (result.straggler.message if result.straggler
                                           else "none (no rank consistently the slowest)"),
                          markup=False)
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in result.phases_s.items())
    out_console.print(f"time: {phases}", markup=False)
    if result.verdict is Verdict.PASS:
        out_console.print("[bold green]PASS[/]")
    else:
        out_console.print("[bold red]FAIL[/]")
        for reason in result.reasons:
            out_console.print(f"  - {reason}", markup=False)
    for note in result.notes:
        out_console.print(f"  note: {note}", markup=False)
