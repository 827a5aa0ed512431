"""Where every verb writes: the output streams (stdout for results and --json, stderr for
progress and logs), the one table style, and logging set up for the CLI alone."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table


class _Unpadded:
    """A stream for output that is not a terminal: lines lose the trailing spaces rich pads
    table cells with, so logs and pipes hold only the text. Writes go to the stream in force
    (``sys.stdout`` or ``sys.stderr`` at write time)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pending = ""

    def _stream(self) -> Any:
        return getattr(sys, self.name)

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream().write("".join(f"{ln.rstrip(' ')}\n" for ln in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream().write(self._pending)
            self._pending = ""
        self._stream().flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return int(self._stream().fileno())


def _console(name: str) -> Console:
    # Off a terminal (logs, CI, pipes) tables get room instead of being folded at 80
    # columns, and no line ends in padding.
    if getattr(sys, name).isatty():
        return Console(stderr=name == "stderr", highlight=False, soft_wrap=True)
    return Console(file=_Unpadded(name), highlight=False, soft_wrap=True, width=200)  # type: ignore[arg-type]


# Live progress and diagnostics go to stderr so that stdout stays clean for --json.
err_console = _console("stderr")
out_console = _console("stdout")



def setup_logging(verbose: int) -> None:
    """Send the library's log records to stderr; -v shows INFO, -vv DEBUG."""
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = RichHandler(console=err_console, show_time=False, show_path=False)
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)
    # paramiko logs each failed handshake with a traceback (paramiko.transport); nodetune
    # reports the same failure as one SSHError line naming the node. -vv shows it all.
    logging.getLogger("paramiko").setLevel(logging.DEBUG if verbose >= 2 else logging.CRITICAL)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
          right: Sequence[int] = (), title: str | None = None) -> Table:
    """The one table style of every verb (rich; ``right``: indexes of right-aligned columns)."""
    out = Table(box=None, pad_edge=False, show_edge=False, title=title, title_justify="left",
                header_style="bold")
    for i, h in enumerate(headers):
        out.add_column(h, justify="right" if i in right else "left")
    for row in rows:
        out.add_row(*(escape(cell(v)) for v in row))
    return out


def cell(value: object) -> str:
    """A table cell: floats with two decimals, None as '-'."""
    if isinstance(value, float):
        return f"{value:.2f}"
    if value is None:
        return "-"
    return str(value)
