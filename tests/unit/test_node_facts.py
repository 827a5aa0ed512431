"""The node_facts fact script, run on fake sysfs/procfs trees (hardware a test machine lacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "node_facts" / "files" / "nodetune.fact"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture()
def fake_node(tmp_path: Path) -> dict[str, str]:
    """A fake /sys with one H100 and one ConnectX-7 RoCE port, and a fake /proc (named fakes)."""
    sys_ = tmp_path / "sys"
    gpu = sys_ / "bus/pci/devices/0000:1b:00.0"
    _write(gpu / "vendor", "0x10de")
    _write(gpu / "device", "0x2330")
    _write(gpu / "class", "0x030200")
    audio = sys_ / "bus/pci/devices/0000:1b:00.1"  # NVIDIA function that is not a GPU
    _write(audio / "vendor", "0x10de")
    _write(audio / "class", "0x040300")
    nic = sys_ / "bus/pci/devices/0000:3d:00.0"
    _write(nic / "vendor", "0x15b3")
    _write(nic / "device", "0x1021")
    _write(nic / "class", "0x020000")
    ib = sys_ / "class/infiniband/mlx5_0"
    _write(ib / "ports/1/state", "4: ACTIVE")
    _write(ib / "ports/1/link_layer", "Ethernet")
    _write(ib / "ports/1/rate", "400 Gb/sec (4X NDR)")
    _write(ib / "fw_ver", "28.39.1002")
    (ib / "device/net/ens1np0").mkdir(parents=True)
    eth = sys_ / "class/net/ens1np0"
    _write(eth / "mtu", "9000")
    _write(eth / "speed", "400000")
    _write(eth / "operstate", "up")
    _write(eth / "type", "1")
    (eth / "device/infiniband/mlx5_0").mkdir(parents=True)
    lo = sys_ / "class/net/lo"
    _write(lo / "mtu", "65536")
    _write(lo / "type", "772")
    # The bonding driver's file beside the netdevs: not an interface.
    _write(sys_ / "class/net/bonding_masters", "")
    proc = tmp_path / "proc"
    _write(proc / "sys/net/ipv4/tcp_rmem", "4096\t87380\t16777216")
    _write(proc / "sys/net/ipv4/tcp_congestion_control", "bbr")
    _write(proc / "driver/nvidia/version",
           "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024")
    return {"NODETUNE_FACTS_SYSFS": str(sys_), "NODETUNE_FACTS_PROCFS": str(proc)}


def _run(env: dict[str, str]) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, str(SCRIPT)], env={**os.environ, **env,
                         "PATH": "/nonexistent"}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_detects_gpu_nic_rdma_and_sysctls(fake_node: dict[str, str]) -> None:
    facts = _run(fake_node)
    assert facts["nvidia_gpu_present"] is True
    assert facts["mellanox_nic_present"] is True
    assert facts["rdma_devices"] == [{
        "name": "mlx5_0", "fw_ver": "28.39.1002",
        "ports": [{"port": 1, "state": "4: ACTIVE", "phys_state": None, "link_layer": "Ethernet",
                   "rate": "400 Gb/sec (4X NDR)", "netdev": "ens1np0"}],
    }]
    iface, lo = facts["interfaces"]  # bonding_masters is no netdev
    assert (iface["name"], iface["mtu"], iface["speed_mbps"], iface["rdma"],
            iface["rdma_device"]) == ("ens1np0", 9000, 400000, True, "mlx5_0")
    # The loopback too: NCCL_SOCKET_IFNAME may name it.
    assert (lo["name"], lo["mtu"], lo["type"], lo["rdma"], lo["rdma_device"]) == \
        ("lo", 65536, 772, False, None)
    assert facts["sysctl"]["net.ipv4.tcp_rmem"] == "4096 87380 16777216"
    assert facts["sysctl"]["net.core.netdev_max_backlog"] is None  # absent key → null
    assert facts["nvidia_driver"]["kernel_module_version"] == "550.90.07"
    assert facts["nvidia_driver"]["userspace_version"] is None  # no nvidia-smi on PATH
    assert facts["gpus"] == []


def test_node_without_hardware(tmp_path: Path) -> None:
    facts = _run({"NODETUNE_FACTS_SYSFS": str(tmp_path), "NODETUNE_FACTS_PROCFS": str(tmp_path)})
    assert facts["nvidia_gpu_present"] is False
    assert facts["mellanox_nic_present"] is False
    assert facts["rdma_devices"] == [] and facts["interfaces"] == []
    assert facts["schema"] == 2


def test_the_script_reports_itself_as_installed(tmp_path: Path) -> None:
    # node_facts skips its install call where this is what it would install.
    import hashlib

    installed = tmp_path / "facts.d" / "nodetune.fact"
    installed.parent.mkdir()
    installed.write_bytes(SCRIPT.read_bytes())
    installed.chmod(0o750)
    out = subprocess.run([sys.executable, str(installed)], capture_output=True, text=True,
                         check=True, env={**os.environ, "NODETUNE_FACTS_SYSFS": str(tmp_path),
                                          "NODETUNE_FACTS_PROCFS": str(tmp_path)})
    assert json.loads(out.stdout)["script"] == {
        "path": str(installed), "sha256": hashlib.sha256(SCRIPT.read_bytes()).hexdigest(),
        "mode": "0750", "uid": os.getuid(), "gid": os.getgid()}


def test_module_flavour_and_fabric_state_from_the_h200_machine(tmp_path: Path) -> None:
    """The open module line of the lent H100 machine and the real `nvidia-smi -q -x` of the
    4x H200 one (Fabric State Completed), through a STAND-IN nvidia-smi that prints it."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    proc = tmp_path / "proc"
    _write(proc / "driver/nvidia/version",
           (fixtures / "driver" / "proc-driver-nvidia-version-h100-x1.txt").read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    smi = bin_ / "nvidia-smi"
    xml = fixtures / "check" / "h200-x4" / "nvidia-smi-q-x.xml"
    smi.write_text(f"#!/bin/sh\n[ \"$1\" = -q ] && exec cat {xml}\nexit 9\n")
    smi.chmod(0o755)
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PATH": f"{bin_}:/usr/bin:/bin",
                              "NODETUNE_FACTS_SYSFS": str(tmp_path / "sys"),
                              "NODETUNE_FACTS_PROCFS": str(proc)})
    facts = json.loads(out.stdout)
    assert facts["nvidia_driver"]["kernel_module_version"] == "580.159.04"
    assert facts["nvidia_driver"]["kernel_module_flavour"] == "open"
    assert facts["fabric"] == {"state": "Completed", "status": "Success"}
