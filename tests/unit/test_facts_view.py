"""The human view of `nodetune facts`: the driver's kernel module flavour and the fabric state."""

from __future__ import annotations

import io

from rich.console import Console

from nodetune.cli.facts_view import render_facts


def test_a_gpu_node_shows_its_module_flavour_and_fabric_state() -> None:
    out = io.StringIO()
    render_facts(Console(file=out, width=200), {"gpu-a": {
        "os": {"pretty_name": "Ubuntu 24.04.3 LTS"}, "kernel": "6.18.0",
        "gpus": [{"name": "NVIDIA H200", "driver_version": "580.159.04"}] * 4,
        "nvidia_driver": {"kernel_module_version": "580.159.04",
                          "kernel_module_flavour": "open", "userspace_version": "580.159.04"},
        "fabric": {"state": "Completed", "status": "Success"},
    }})
    assert ("GPUs: 4 x NVIDIA H200 (driver 580.159.04); open kernel module; "
            "fabric Completed/Success") in out.getvalue()


def test_the_table_lists_the_interfaces_but_not_the_loopback() -> None:
    out = io.StringIO()
    render_facts(Console(file=out, width=200), {"gpu-a": {"interfaces": [
        {"name": "lo", "mtu": 65536, "type": 772, "operstate": "unknown", "rdma": False},
        {"name": "ens1np0", "mtu": 9000, "type": 1, "speed_mbps": 400000, "operstate": "up",
         "rdma": True, "rdma_device": "mlx5_0"}]}})
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert ["ens1np0", "9000", "400000", "up", "mlx5_0"] in [r for r in rows if len(r) == 5], rows
    assert not [r for r in rows if r and r[0] == "lo"], rows
