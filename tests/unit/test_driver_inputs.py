"""The driver stack's bad inputs stop `nodetune apply` with exit 2 before anything runs.

`nodetune apply --playbook drivers.yml --check` on this machine (connection local),
real ansible-runner and the real inputs pass. The GPU a case needs is faked at the
hardware edge only: a STAND-IN sysfs PCI tree that node_facts, the role's one view
of the PCI bus, reads as ``NODETUNE_FACTS_SYSFS``, here a Blackwell B200 (PCI
device 0x2901).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_nodetune


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    return inv


def _standin_pci(tmp_path: Path, device: str) -> Path:
    """A STAND-IN sysfs tree with one NVIDIA GPU function of the given device id."""
    root = tmp_path / "standin-sys"
    dev = root / "bus" / "pci" / "devices" / "0000:18:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "device").write_text(f"{device}\n")
    (dev / "class").write_text("0x030200\n")
    return root


CASES = {
    "proprietary modules on branch 620": (
        {"nvidia_driver_branch": "620", "nvidia_driver_version": "620.10.02-1",
         "nvidia_driver_kernel_modules": "proprietary"},
        None,
        "nvidia_driver_kernel_modules is proprietary, but branch 620 (nvidia_driver_branch) "
        "has no proprietary kernel modules"),
    "proprietary modules on a Blackwell GPU": (
        {"nvidia_driver_kernel_modules": "proprietary"},
        "0x2901",
        "nvidia_driver_kernel_modules is proprietary, but this node's GPU PCI device id(s) "
        "0x2901 (Blackwell or Grace Hopper) run only with the open kernel modules"),
    "Fabric Manager version that is not the driver's": (
        {"nvidia_driver_fabricmanager_version": "580.95.05-1"},
        None,
        'nvidia_driver_fabricmanager_version "580.95.05-1" differs from nvidia_driver_version '
        '"580.159.04-1"'),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_driver_input_exits_2_naming_host_and_variable(
        case: str, tmp_path: Path, runs_dir: Path) -> None:
    extra, gpu, expected = CASES[case]
    # Always a STAND-IN PCI tree, so this machine's own bus is never what decides.
    sysfs = _standin_pci(tmp_path, gpu) if gpu else tmp_path / "empty-sys"
    # --check as well: even a regression could not touch this machine.
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", "drivers.yml", "--check", "-t", "nvidia_driver",
                       "-e", json.dumps(extra), runs_dir=runs_dir, env=_facts_env(sysfs))
    assert res.code == 2, res.stdout + res.stderr
    assert "Bad input (nothing was changed on any node):" in res.stdout
    assert f"me: nvidia_driver: nvidia_driver: {expected}" in " ".join(res.stdout.split()), res.stdout
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert doc["exit_code"] == 2
    assert [(p["host"], p["role"]) for p in doc["input_problems"]] == [("me", "nvidia_driver")]
    assert doc["changed_tasks"] == [], "nothing ran after the inputs pass"


def _facts_env(sysfs: Path) -> dict[str, str]:
    """node_facts reads the STAND-IN tree (the fact script's own hook)."""
    return {"NODETUNE_FACTS_SYSFS": str(sysfs)}


def _standin_proc(tmp_path: Path) -> Path:
    """A STAND-IN /proc whose driver/nvidia/version is the real line of the lent H100 machine
    (a host-provided open module that no package on that machine installed)."""
    root = tmp_path / "standin-proc"
    version = root / "driver" / "nvidia" / "version"
    version.parent.mkdir(parents=True)
    version.write_text((Path(__file__).parent.parent / "fixtures" / "driver" /
                        "proc-driver-nvidia-version-h100-x1.txt").read_text())
    return root


def test_a_loaded_driver_no_package_installed_stops_the_run(tmp_path: Path,
                                                            runs_dir: Path) -> None:
    variables = {"__nvidia_driver_proc_root": str(_standin_proc(tmp_path))}
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", "drivers.yml", "--check",
                       "-t", "nvidia_driver", "-e", json.dumps(variables), runs_dir=runs_dir,
                       env=_facts_env(_standin_pci(tmp_path, "0x2330")))
    assert res.code == 2, res.stdout + res.stderr
    text = " ".join(res.stdout.split())
    assert ("me: nvidia_driver: nvidia_driver: NVIDIA kernel module 580.159.04 (open) is loaded, "
            "but no package installed it") in text, res.stdout
    assert "nvidia_driver_replace_unmanaged: true" in text
    assert "nvidia_driver_userspace_only: true" in text
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert doc["changed_tasks"] == []


def test_the_inventory_may_say_to_replace_it_or_to_use_it(tmp_path: Path,
                                                          runs_dir: Path) -> None:
    base = {"__nvidia_driver_proc_root": str(_standin_proc(tmp_path))}
    sysfs = _standin_pci(tmp_path, "0x2330")
    for extra in ({"nvidia_driver_replace_unmanaged": True},
                  {"nvidia_driver_userspace_only": True}):
        res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", "drivers.yml",
                           "--check", "-t", "nvidia_driver", "--json",
                           "-e", json.dumps({**base, **extra}), runs_dir=runs_dir,
                           env=_facts_env(sysfs))
        assert res.json()["input_problems"] == [], (extra, res.stdout)


def test_the_same_inputs_pass_with_open_modules(tmp_path: Path, runs_dir: Path) -> None:
    """The Blackwell node with the default (open) flavour gets past the inputs pass."""
    variables = {"nvidia_driver_fabricmanager_version": "580.159.04-1"}
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", "drivers.yml", "--check", "-t", "nvidia_driver",
                       "--json", "-e", json.dumps(variables), runs_dir=runs_dir,
                       env=_facts_env(_standin_pci(tmp_path, "0x2901")))
    doc = res.json()
    assert doc["input_problems"] == [], doc["input_problems"]
