"""The lab's faults for the node-local signals (nodetune.lab.signal_faults): their planting
commands run in a real shell with every stand-in path under tmp_path, and what they plant
is read back by check's own readers (the health reader, the node probe) and judged, so a
stand-in whose format check does not read would fail here before it fails in the lab."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import (
    gpu_read,
    hca_pcie,
    node_health,
    node_probe,
    pcie_aer,
    probe,
    timesync,
)
from nodetune.check.expect import expectations
from nodetune.check.model import Status
from nodetune.check.run import judge
from nodetune.errors import InputError
from nodetune.lab import faults as lab_faults
from nodetune.lab import signal_faults

PATHS = ("PCI_TREE", "PCI_SYSFS", "RDMA_SYSFS", "CHRONYC", "NVIDIA_SMI", "OFED_INFO",
         "OFED_VERSION_FILE", "ENV_SAVED", "ENVIRONMENT", "DATA_DIR", "STANDIN_DIR")


def run(argv: list[str], *, check: bool = True, rc: bool = False) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=check)
    return str(proc.returncode) if rc else proc.stdout


@pytest.fixture()
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in paths under tmp_path: var/lib/nodetune-lab, bin/, etc/, share/."""
    where = {"STANDIN_DIR": "var/lib/nodetune-lab", "PCI_TREE": "var/lib/nodetune-lab/pci-tree",
             "PCI_SYSFS": "var/lib/nodetune-lab/pci-devices",
             "RDMA_SYSFS": "var/lib/nodetune-lab/infiniband",
             "ENV_SAVED": "var/lib/nodetune-lab/environment.saved",
             "CHRONYC": "bin/chronyc", "NVIDIA_SMI": "bin/nvidia-smi",
             "OFED_INFO": "bin/ofed_info", "DATA_DIR": "share/nodetune-lab",
             "OFED_VERSION_FILE": "share/nodetune-lab/ofed_info-version",
             "ENVIRONMENT": "root/etc/environment"}
    assert set(where) == set(PATHS)
    for name, rel in where.items():
        monkeypatch.setattr(signal_faults, name, str(tmp_path / rel))
    (tmp_path / "bin").mkdir()
    (tmp_path / "root/etc/profile.d").mkdir(parents=True)
    return tmp_path


def test_pcie_aer_is_a_downtrained_hca_whose_aer_errors_rise_as_check_reads_them(
        lab: Path) -> None:
    said = signal_faults.apply(run, "pcie-aer")
    assert "mlx5_0 (0000:18:00.0) at x8 of x16" in said
    ib, pci = lab / "var/lib/nodetune-lab/infiniband", lab / "var/lib/nodetune-lab/pci-devices"
    first = node_health.pcie(str(ib), str(pci))
    (link,) = hca_pcie.judge(first, str(ib), speed_fails=False)
    assert link.name == "fabric.pcie[mlx5_0]" and link.status is Status.FAIL, link
    assert "mlx5_0 (0000:18:00.0): link trained at x8, below its x16" in link.message
    roles = {f["pci"]: f["roles"] for f in first["functions"]}
    assert roles == {"0000:17:00.0": ["bridge above 0000:18:00.0"],
                     "0000:17:01.0": ["bridge above 0000:19:00.0"],
                     "0000:18:00.0": ["HCA mlx5_0"], "0000:19:00.0": ["GPU"]}
    counts = pcie_aer.counters_of(first)
    assert counts["0000:18:00.0"] == {"correctable": 4, "nonfatal": 0, "fatal": 0}
    assert counts["0000:19:00.0"] == {"correctable": 0, "nonfatal": 0, "fatal": 0}
    # the kernel's format: every named bit, then the total
    text = (pci / "0000:18:00.0" / "aer_dev_nonfatal").read_text()
    assert text.splitlines()[0] == "Undefined 0" and text.endswith("TOTAL_ERR_NONFATAL 0\n")
    assert pcie_aer.judge(first, None, None, "", 0.0).status is Status.PASS
    # one more round of errors on that link: named since the previous check
    assert "CmpltTO (non-fatal) 1" in signal_faults.apply(run, "pcie-aer")
    second = node_health.pcie(str(ib), str(pci))
    r = pcie_aer.judge(second, counts, 100.0, "the check of 10:00 (run-1)", 200.0)
    assert r.status is Status.FAIL, r
    assert ("uncorrectable PCIe errors since the check of 10:00 (run-1): 0000:18:00.0 "
            "(HCA mlx5_0): nonfatal +1 [CmpltTO 1]") in r.message
    assert "0000:18:00.0 correctable +3, nonfatal +1" in r.measured
    assert signal_faults.active(run) == ["pcie-aer"]
    signal_faults.clear(run)
    # the tree, the links, the RDMA device and the directories they made
    assert not (lab / "var/lib/nodetune-lab").exists()


def probed(lab: Path, **vars_: Any) -> tuple[dict[str, Any], probe.Probe]:
    """The real node probe under ``lab``/root, with only ``lab``/bin on PATH, judged."""
    exp = expectations(Host("lab-2", ("gpu_nodes",), dict(vars_)))
    req = {**probe.request(exp, timeout=20, torch=False), "root": str(lab / "root")}
    out = subprocess.run([sys.executable, "-c", probe.source(), json.dumps(req)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={"PATH": f"{lab / 'bin'}:/usr/bin:/bin"})
    parsed = probe.parse("lab-2", json.loads(out.stdout))
    return {r.name: r for r in judge(parsed, exp, gpu_read.read(parsed.nvidia))}, parsed


def test_clock_skew_is_chronys_tracking_report_past_the_limit(lab: Path) -> None:
    signal_faults.apply(run, "clock-skew")
    results, parsed = probed(lab)
    r = results["node.time_sync"]
    assert r.status is Status.FAIL, r
    assert r.measured == "250.000 ms slow (chrony, 192.168.1.1, stratum 3)"
    assert "the clock is 250.0 ms slow of NTP time (limit 100 ms)" in r.message
    # the text report (an old chronyc without -c) says the same
    text = run([str(lab / "bin/chronyc"), "-n", "tracking"])
    assert "System time     : 0.250000000 seconds slow of NTP time" in text
    assert timesync.section(parsed)["chronyc"] == str(lab / "bin/chronyc")
    signal_faults.clear(run)
    assert not (lab / "bin/chronyc").exists()


@pytest.mark.parametrize(("before", "line"), [
    (None, 2), ("LANG=C.UTF-8", 3), ("PATH=/usr/bin\n", 3)])  # after the comment line
def test_global_env_contradicts_nccl_config_and_clear_puts_the_file_back(
        lab: Path, before: str | None, line: int) -> None:
    env = lab / "root/etc/environment"
    if before is not None:
        env.write_text(before)
    signal_faults.apply(run, "global-env")
    signal_faults.apply(run, "global-env")  # twice: planted once, from the file as it was
    assert env.read_text().count(signal_faults.ENV_LINE) == 1
    results, _ = probed(lab, nccl_config_socket_ifname="=eth1")
    r = results["node.global_env"]
    assert r.status is Status.FAIL, r
    assert (f"NCCL_SOCKET_IFNAME=eth0 set host-wide in /etc/environment:{line} contradicts "
            "NCCL_SOCKET_IFNAME==eth1 in nccl_config_socket_ifname (inventory)") in r.message
    assert signal_faults.active(run) == ["global-env"]
    assert signal_faults.clear(run) == [f"{env} put back as it was"]
    assert (env.read_text() if env.exists() else None) == before
    assert signal_faults.active(run) == []


def test_smi_hang_never_answers_and_its_process_group_is_killed(
        lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signal_faults.apply(run, "smi-hang")
    mark = f"nodetune-test-{uuid.uuid4()}"
    monkeypatch.setenv("NODETUNE_SMI_HANG_MARK", mark)  # inherited by the stand-in's child
    res = node_probe.run([str(lab / "bin/nvidia-smi"), "-q", "-x"], 1.0)
    assert res["rc"] is None and res["unknown"] == (
        "nvidia-smi gave no answer within 1 s (its process group was killed)")
    assert _marked(mark) == []  # neither the stand-in nor its sleeping child is left


def _marked(mark: str) -> list[int]:
    """Running processes (not zombies) whose environment holds ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def test_ofed_version_is_what_ofed_info_s_prints(lab: Path) -> None:
    signal_faults.apply(run, "ofed-version", ofed="OFED-internal-24.10-3.2.5")
    tool = lab / "bin/ofed_info"
    # the stand-in reads its version where the lab plants it; here, under tmp_path
    tool.write_text(tool.read_text().replace("/usr/local/share/nodetune-lab",
                                             str(lab / "share/nodetune-lab")))
    assert run([str(tool), "-s"]) == "OFED-internal-24.10-3.2.5:\n"
    assert probed(lab)[1].ofed == "OFED-internal-24.10-3.2.5"
    signal_faults.clear(run)
    assert not tool.exists() and not (lab / "share/nodetune-lab").exists()


@pytest.mark.parametrize("version", ["", "25.10; reboot", "-rf", "a" * 65, "x y"])
def test_a_bad_ofed_version_is_bad_input_before_any_node(
        version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodetune.lab import podman

    monkeypatch.setattr(podman, "run", lambda *a, **k: pytest.fail(f"podman called: {a}"))
    with pytest.raises(InputError, match="--ofed-version"):
        lab_faults.apply("n1", "ofed-version", ofed_version=version)


def test_every_fault_is_offered_and_cleared() -> None:
    assert set(signal_faults.FAULTS) <= set(lab_faults.FAULTS)
    assert set(signal_faults.planted()) == set(signal_faults.FAULTS)
