"""The driver stack's hardware reading: node_facts' PCI list, its classification, and the
probe module (the loaded module and the packages; no PCI bus).

Parsers run on real captured output (tests/fixtures/driver); the PCI trees are STAND-IN
sysfs directories of the devices a test machine lacks (GPU, NVSwitch, ConnectX).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.plugins import load_plugin

probe = load_plugin("plugins/modules/nvidia_driver_probe.py")
pci = load_plugin("plugins/filter/nvidia_pci.py")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "driver"
FACT = Path(__file__).resolve().parents[2] / "roles" / "node_facts" / "files" / "nodetune.fact"


def _device(root: Path, addr: str, vendor: str, device: str, cls: str) -> None:
    d = root / "bus" / "pci" / "devices" / addr
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text(device + "\n")
    (d / "class").write_text(cls + "\n")


def _node_facts_pci(sysfs: Path) -> list[dict[str, str]]:
    """node_facts' ``pci`` list (the role's one view of the bus) of a STAND-IN sysfs tree."""
    env = {**os.environ, "NODETUNE_FACTS_SYSFS": str(sysfs), "NODETUNE_FACTS_PROCFS": str(sysfs)}
    out = subprocess.run([sys.executable, str(FACT)], capture_output=True, text=True, check=True,
                         env=env).stdout
    found: list[dict[str, str]] = json.loads(out)["pci"]
    return found


def test_node_facts_lists_nvidia_and_mellanox_only(tmp_path: Path) -> None:
    _device(tmp_path, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    _device(tmp_path, "0000:1a:00.0", "0x15b3", "0x1021", "0x020700")
    _device(tmp_path, "0000:00:1f.0", "0x8086", "0x1234", "0x060100")
    assert [d["address"] for d in _node_facts_pci(tmp_path)] == ["0000:18:00.0", "0000:1a:00.0"]
    assert _node_facts_pci(tmp_path / "none") == []


def test_the_probe_reads_no_pci_bus() -> None:
    assert not hasattr(probe, "pci_devices")
    assert "sysfs_root" not in probe.DOCUMENTATION


def test_loaded_open_module_from_the_h100_machine() -> None:
    text = (FIXTURES / "proc-driver-nvidia-version-h100-x1.txt").read_text()
    assert probe.loaded_module(text) == ("580.159.04", "open")


def test_loaded_proprietary_module_and_none() -> None:
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.08  Tue Oct  8 2024\n"
            "GCC version:  gcc version 12.2.0\n")
    assert probe.loaded_module(text) == ("550.127.08", "proprietary")
    assert probe.loaded_module("") == ("", "")


def test_hgx_h100_board_needs_fabric_manager_and_peermem(tmp_path: Path) -> None:
    _device(tmp_path, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    _device(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")
    _device(tmp_path, "0000:1a:00.0", "0x15b3", "0x1021", "0x020700")
    _device(tmp_path, "0000:00:1f.0", "0x8086", "0x1234", "0x060100")
    s = pci.nvidia_pci_summary(_node_facts_pci(tmp_path))
    assert s == {"gpu": True, "gpus": ["0x2330"], "nvswitch": 1, "nvlink5": False,
                 "fabric": True, "open_required": [], "rdma_nic": True}


def test_pcie_gpu_alone_needs_neither() -> None:
    s = pci.nvidia_pci_summary([{"vendor": "0x10de", "device": "0x2331", "class": "0x030200"},
                                # the GPU's audio function is not a GPU
                                {"vendor": "0x10de", "device": "0x22ba", "class": "0x040300"}])
    assert (s["gpu"], s["fabric"], s["rdma_nic"], s["open_required"]) == (True, False, False, [])


def test_blackwell_and_grace_hopper_need_open_modules_and_b200_is_nvlink5() -> None:
    s = pci.nvidia_pci_summary([{"vendor": "0x10de", "device": "0x2901", "class": "0x030200"},
                                {"vendor": "0x10de", "device": "0x2342", "class": "0x030200"}])
    assert s["open_required"] == ["0x2342", "0x2901"]
    assert s["nvlink5"] and s["fabric"] and s["nvswitch"] == 0
    consumer = pci.nvidia_pci_summary([{"vendor": "0x10de", "device": "0x2b85", "class": "0x030000"}])
    assert consumer["open_required"] == ["0x2b85"] and not consumer["nvlink5"]


def test_no_devices() -> None:
    s = pci.nvidia_pci_summary(None)
    assert not s["gpu"] and not s["fabric"] and not s["rdma_nic"]


def test_cuda_major_of_a_branch() -> None:
    assert [pci.nvidia_cuda_major(b) for b in ("535", "570", "580", "595", "620")] == [
        12, 12, 13, 13, 13]


def test_held_packages_count_as_installed() -> None:
    """dpkg-query's status of a package the role holds is "hi"; removed ones keep "rc"."""
    listing = ("ii \tnvidia-kernel-open-dkms\t580.159.04-1\n"
               "hi \tnvidia-kernel-dkms\t580.159.04-1\n"
               "rc \tnvidia-dkms-580\t580.95.05-0ubuntu1\n"
               "un \tnvidia-kernel-source\t\n")
    assert probe.parse_listing(listing) == {"nvidia-kernel-open-dkms": "580.159.04-1",
                                            "nvidia-kernel-dkms": "580.159.04-1"}
