"""The check matrix fits 80-100 columns without cutting a node name."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from nodetune.cli import matrix

# The check groups `nodetune check` reports (nodetune/check/*.py), short names as shown.
CHECKS = ["allreduce", "clocks", "count", "driver", "ecc", "nvlink", "pcie", "persistence",
          "cuda", "nccl", "shm", "torch", "mtu", "nccl", "rdma", "roce", "sysctl", "ipv4"]
NODES = ["gpu-node-a17.rack12.example.internal", "gpu-node-a18.rack12.example.internal",
         "n1", "ubuntu-2404-h100-sxm-node-0003"]


def _render(width: int) -> str:
    cells = [["[green]pass[/]"] * len(CHECKS) for _ in NODES]
    cells[0][5] = "[bold red]fail[/]"
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    for t in matrix.tables(NODES, CHECKS, cells, width=width):
        console.print(t)
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 90, 100])
def test_node_names_are_whole_and_lines_fit(width: int) -> None:
    out = _render(width)
    lines = out.splitlines()
    assert all(len(ln) <= width for ln in lines)
    assert "…" not in out
    parts = sum(ln.startswith("node ") for ln in lines)  # one header per table
    assert parts >= 2, "18 checks do not fit 100 columns in one table"
    for name in NODES:
        assert sum(ln.startswith(name + " ") for ln in lines) == parts
    headings = " ".join(ln for ln in lines if ln.startswith("node "))
    assert all(h in headings.split() for h in CHECKS)
    assert "fail" in out


def test_one_table_when_it_fits() -> None:
    assert matrix.chunks(10, ["a", "b"], 80) == [[0, 1]]
    assert matrix.chunks(10, ["x" * 30, "y" * 30, "z"], 60) == [[0], [1, 2]]


def test_groups_that_share_a_short_name_keep_their_full_name() -> None:
    assert matrix.headings(["gpu.count", "software.nccl", "fabric.nccl", "fabric.mtu"]) == [
        "count", "software.nccl", "fabric.nccl", "mtu"]
