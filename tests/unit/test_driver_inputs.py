"""The driver stack's bad inputs stop `nodetune apply` with exit 2 before anything runs.

`nodetune apply --playbook drivers.yml --check -t nvidia_driver` on this machine (connection
local), real ansible-runner and the real inputs pass. The GPU a case needs is faked at the
hardware edge only: a STAND-IN sysfs PCI tree that node_facts, the role's one view of the
PCI bus, reads as ``NODETUNE_FACTS_SYSFS``, e.g. a Blackwell B200 (PCI device 0x2901).

One run checks every case: the inventory has one host per case (each host's variables
are its case), and the inputs pass checks and reports every host on its own, so each case
asserts on its own host's message and problems. Each host gets its own STAND-IN tree: its
ansible_python_interpreter is this Python, started with NODETUNE_FACTS_SYSFS set to that
host's tree, so the fact script (run by that interpreter's setup module) reads it. The cases
that must pass the inputs pass share the run with those that must not: their own checks
still run to the end (the pass stops every host only after all were checked), and they
must show no input problem of their own. Input problems come from the inputs pass alone
(playbooks/inputs.yml records them; the roles after it skip their own copy of the checks),
so such a case needs none of the role's plays to run after it.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_nodetune

ROLE = "nvidia_driver"
# The inputs pass's last task, which stops every host when any host has bad input.
STOP = "Stop every host when any host has invalid input"


@dataclass(frozen=True)
class Run:
    code: int
    text: str  # stdout, whitespace collapsed
    stdout: str
    stderr: str
    report: dict[str, Any]

    def problems(self, host: str) -> list[tuple[str, str]]:
        return [(p["host"], p["role"]) for p in self.report["input_problems"]
                if p["host"] == host]

    def failures(self, host: str) -> list[tuple[str, str]]:
        """``host``'s failed tasks: (task, message)."""
        return [(t["task"], t["message"]) for t in self.report["failed_tasks"]
                if t["host"] == host]


def _standin_pci(root: Path, device: str) -> Path:
    """A STAND-IN sysfs tree with one NVIDIA GPU function of the given device id."""
    dev = root / "bus" / "pci" / "devices" / "0000:18:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "device").write_text(f"{device}\n")
    (dev / "class").write_text("0x030200\n")
    return root


def _standin_proc(root: Path) -> Path:
    """A STAND-IN /proc whose driver/nvidia/version is the real line of the lent H100 machine
    (a host-provided open module that no package on that machine installed)."""
    version = root / "driver" / "nvidia" / "version"
    version.parent.mkdir(parents=True)
    version.write_text((Path(__file__).parent.parent / "fixtures" / "driver" /
                        "proc-driver-nvidia-version-h100-x1.txt").read_text())
    return root


def _interpreter(tmp: Path, name: str, sysfs: Path) -> str:
    """This Python, with node_facts reading ``sysfs`` (the fact script's own hook)."""
    path = tmp / f"python-{name}"
    path.write_text(f"#!/bin/sh\nNODETUNE_FACTS_SYSFS={shlex.quote(str(sysfs))} "
                    f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One `nodetune apply` of drivers.yml, one host (connection local) per case.

    No GPU (an empty STAND-IN sysfs, so this machine's own bus is never what decides), a
    Blackwell B200 (0x2901), or an H100 (0x2330) whose open 580.159.04 module no package
    installed: as it is, and with the inventory saying to replace it or to use it.
    """
    tmp = tmp_path_factory.mktemp("drivers")
    pythons = {"none": _interpreter(tmp, "none", tmp / "empty-sys"),
               "0x2901": _interpreter(tmp, "blackwell",
                                      _standin_pci(tmp / "blackwell-sys", "0x2901")),
               "0x2330": _interpreter(tmp, "h100", _standin_pci(tmp / "h100-sys", "0x2330"))}
    loaded = {"__nvidia_driver_proc_root": str(_standin_proc(tmp / "standin-proc"))}
    hosts: dict[str, tuple[dict[str, Any], str]] = {
        HOSTS[case]: (extra, gpu or "none") for case, (extra, gpu, _) in CASES.items()}
    others = {  # the other tests' hosts
        "open_modules": ({"nvidia_driver_fabricmanager_version": "580.159.04-1"}, "0x2901"),
        "loaded": (loaded, "0x2330"),
        "replace": ({**loaded, "nvidia_driver_replace_unmanaged": True}, "0x2330"),
        "userspace": ({**loaded, "nvidia_driver_userspace_only": True}, "0x2330"),
    }
    assert len(hosts) == len(CASES) and not hosts.keys() & others.keys(), "a host per case"
    hosts.update(others)
    inv = tmp / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": pythons[gpu],
               **host_vars}
        for name, (host_vars, gpu) in hosts.items()}}}))
    runs_dir = tmp / "runs"
    # --check as well: even a regression could not touch this machine.
    res = run_nodetune("apply", str(inv), "--playbook", "drivers.yml", "--check", "-t", ROLE,
                       runs_dir=runs_dir)
    report = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    return Run(res.code, " ".join(res.stdout.split()), res.stdout, res.stderr, report)


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
# Each case's host in the run.
HOSTS = {
    "proprietary modules on branch 620": "branch620",
    "proprietary modules on a Blackwell GPU": "blackwell_proprietary",
    "Fabric Manager version that is not the driver's": "fabricmanager",
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_driver_input_exits_2_naming_host_and_variable(case: str, run: Run) -> None:
    _extra, _gpu, expected = CASES[case]
    host = HOSTS[case]
    res = run
    assert res.code == 2, (case, res.stdout + res.stderr)
    assert "Bad input (nothing was changed on any node):" in res.stdout, case
    assert f"{host}: nvidia_driver: nvidia_driver: {expected}" in res.text, (case, res.stdout)
    assert res.report["exit_code"] == 2, case
    assert res.problems(host) == [(host, ROLE)], (case, res.report["input_problems"])
    assert res.report["changed_tasks"] == [], f"{case}: nothing ran after the inputs pass"


def test_a_loaded_driver_no_package_installed_stops_the_run(run: Run) -> None:
    res = run
    assert res.code == 2, res.stdout + res.stderr
    assert ("loaded: nvidia_driver: nvidia_driver: NVIDIA kernel module 580.159.04 (open) is "
            "loaded, but no package installed it") in res.text, res.stdout
    assert "nvidia_driver_replace_unmanaged: true" in res.text
    assert "nvidia_driver_userspace_only: true" in res.text
    # Both in this host's own message, not another host's.
    [message] = [p["message"] for p in res.report["input_problems"] if p["host"] == "loaded"]
    flat = " ".join(message.split())
    assert "nvidia_driver_replace_unmanaged: true" in flat, flat
    assert "nvidia_driver_userspace_only: true" in flat, flat
    assert res.problems("loaded") == [("loaded", ROLE)], res.report["input_problems"]
    assert res.report["changed_tasks"] == []


def _stopped_by_others(res: Run, host: str) -> None:
    """``host``'s checks ran to the end: its one failure is the stop for other hosts'
    bad input."""
    [(task, message)] = res.failures(host)
    assert task == STOP, (host, res.report["failed_tasks"])
    assert message.startswith("not changed: invalid input on "), (host, message)
    assert host not in message.removeprefix("not changed: invalid input on ").split(", "), \
        (host, message)


def test_the_inventory_may_say_to_replace_it_or_to_use_it(run: Run) -> None:
    """Hosts ``replace`` and ``userspace`` (the loaded module of host ``loaded``, with
    nvidia_driver_replace_unmanaged or nvidia_driver_userspace_only) have no input problem."""
    for host in ("replace", "userspace"):
        assert run.problems(host) == [], (host, run.report["input_problems"])
        _stopped_by_others(run, host)


def test_the_same_inputs_pass_with_open_modules(run: Run) -> None:
    """The Blackwell node with the default (open) flavour (host ``open_modules``) gets past
    the inputs pass: no input problem of its own."""
    assert run.problems("open_modules") == [], run.report["input_problems"]
    _stopped_by_others(run, "open_modules")



def test_switches_written_as_the_string_false_are_false(tmp_path: Path) -> None:
    """``nvidia_driver_force: "false"`` (a string, as ``-e`` or an INI inventory gives it) is
    false to the gate as to the probe: the node without a GPU is skipped, nothing fails; and
    ``nvidia_driver_userspace_only: "false"`` does not make its module state userspace-only."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"cpu_node": {
        "ansible_connection": "local",
        "ansible_python_interpreter": _interpreter(tmp_path, "none", tmp_path / "empty-sys"),
        "nvidia_driver_force": "false", "nvidia_driver_userspace_only": "false"}}}}))
    runs_dir = tmp_path / "runs"
    res = run_nodetune("apply", str(inv), "--playbook", "drivers.yml", "--check", "-t", ROLE,
                       runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    report = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    ok = {e["event_data"]["task"]: e["event_data"]
          for p in Path(report["artifacts"]).glob("job_events/*.json")
          if (e := json.loads(p.read_text()))["event"] == "runner_on_ok"}
    assert ok["Say why the driver is skipped"]["host"] == "cpu_node", res.stdout
    gate = ok["Record whether an NVIDIA GPU is present, and start with no reboot needed"]
    assert gate["res"]["ansible_facts"]["nvidia_driver_module_state"] == "unknown", gate["res"]
