"""The node x check matrix, fitted to the terminal: never a cut node name.

When the check columns do not fit beside the node column, they are split over
several tables, each repeating the node column (the way a wide listing wraps),
so that at 80 columns a node name is whole and each check heading readable.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

GAP = 1  # rich's default padding: one space between columns (box=None)
MIN_CELL = 4  # "fail", "warn", "pass", "skip"


def headings(groups: Sequence[str]) -> list[str]:
    """Column headings for check groups: ``gpu.count`` -> ``count``, unless two groups share
    the short name (``software.nccl``, ``fabric.nccl``): those keep their full name."""
    short = [g.split(".", 1)[-1] for g in groups]
    return [s if short.count(s) == 1 else g for s, g in zip(short, groups, strict=True)]


def width_of(heading: str) -> int:
    """The width of a check column: its heading, or a status word."""
    return max(MIN_CELL, len(heading))


def chunks(node_width: int, headings: Sequence[str], width: int) -> list[list[int]]:
    """Indexes of ``headings`` per table so that each table fits ``width`` beside the node
    column (a column wider than the room left gets a table of its own)."""
    out: list[list[int]] = []
    used = node_width
    for i, h in enumerate(headings):
        need = width_of(h) + 2 * GAP
        if out and used + need <= width:
            out[-1].append(i)
            used += need
        else:
            out.append([i])
            used = node_width + need
    return out


def tables(nodes: Sequence[str], headings: Sequence[str], cells: Sequence[Sequence[str]], *,
           width: int, title: str = "checks per node") -> list[Table]:
    """The matrix as tables that fit ``width``: ``cells[i][j]`` is node i's markup for check j
    (already escaped); node names and headings are escaped here."""
    node_width = max([len("node"), *(len(n) for n in nodes)])
    out = []
    for part, idx in enumerate(chunks(node_width, headings, width)):
        t = Table(box=None, pad_edge=False, header_style="bold", title_justify="left",
                  title=title if part == 0 else None)
        t.add_column("node", no_wrap=True, min_width=node_width)
        for j in idx:
            t.add_column(escape(headings[j]), no_wrap=True, min_width=width_of(headings[j]))
        for i, node in enumerate(nodes):
            t.add_row(escape(node), *(cells[i][j] for j in idx))
        out.append(t)
    return out
