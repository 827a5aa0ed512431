"""``gpu.fabric`` (NVLink fabric registration and Fabric Manager) and ``gpu.kernel_module``
(module flavour and nvidia-peermem).

Fabric: ``nvidia-smi -q -x``'s per-GPU ``<fabric><state>``/``<status>`` (``nvidia-smi -q``:
``Fabric`` / ``State`` / ``Status``; NVML ``nvmlGpuFabricInfo``: state Not Supported / Not
Started / In Progress / Completed, and "status must be checked only if state returns
complete", docs.nvidia.com/deploy/nvml-api, read 2026-11-26). A completed registration
can still carry an error status, e.g. ``State: Completed, Status: Insufficient Resources``
(Azure/azhpc-images#506): only Completed with Success passes. On a board with
NVSwitches (NVIDIA PCI class 0x0680, the same test the nvidia_driver role uses) the
NVIDIA Fabric Manager User Guide says CUDA does not initialise until Fabric Manager, at
exactly the driver's version, has configured the switches: it must be active at that
version, read from ``nv-fabricmanager --version`` (``Fabric Manager version is :
535.161.08``).

Kernel module: ``/proc/driver/nvidia/version``'s flavour against
``nvidia_driver_kernel_modules``; where the node has GPUs and RDMA ports,
``nvidia_peermem`` loaded (NVIDIA GPUDirect RDMA documentation: the peer-memory module
lets the NIC reach GPU memory), as the nvidia_driver role loads it
(``nvidia_driver_peermem_enabled``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.ansible.role_defaults import Value
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.signal_read import Judged, SignalRead

FABRIC = "gpu.fabric"
MODULE = "gpu.kernel_module"
# Each signal's lines in check's --help (nodetune.check.listing: judge_signal_fabric's,
# judge_signal_module's; gpu.imex comes between them in the report).
HELP_FABRIC: HelpLines = (
    ("gpu.fabric",
     "NVLink fabric Completed/Success; NVSwitch boards: nvidia-fabricmanager",
     "active at the driver's version (Fabric Manager User Guide)"),
)
HELP_MODULE: HelpLines = (
    ("gpu.kernel_module",
     "module flavour = nvidia_driver_kernel_modules; nvidia_peermem loaded",
     "where the node has RDMA ports (nvidia_driver_peermem_enabled)"),
)
SMI_SOURCE = ("fabric state/status: NVML nvmlDeviceGetGpuFabricInfoV, or nvidia-smi -q (NVIDIA "
              "NVML nvmlGpuFabricInfo, 2026-11-26)")
FM_SOURCE = "NVIDIA Fabric Manager User Guide (FM at the driver's version, 2026-11)"
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


def judge_fabric(smi: SmiLog | None, states: Sequence[tuple[int, str, str]],
                 fm: Mapping[str, Any]) -> CheckResult:
    """Completed/Success on every GPU where the GPUs report a fabric (``states``: (GPU index,
    state, status) as NVML or :func:`nodetune.check.nvidia_smi.fabric_states` read them); FM
    active at the driver's version where NVSwitches are on the bus; skip elsewhere, with the
    reason."""
    if smi is None:
        return skipped(FABRIC, "no GPU data from NVML or nvidia-smi", source=SMI_SOURCE)
    reported = [s for s in states if s[1] not in ("N/A", "Not Supported")]
    switches = int(fm.get("nvswitches") or 0)
    if not reported and not switches:
        return skipped(FABRIC, "no NVSwitch on the PCI bus and the GPUs report no fabric "
                       "state (N/A): not an NVLink-fabric system", source=SMI_SOURCE)
    # Only GPUs that report a fabric are judged by it: an A100 HGX board (NVSwitch, Fabric
    # Manager running) shows "State: N/A, Status: N/A" (bottlerocket-os/bottlerocket#3873,
    # p4d), so there Fabric Manager alone is judged.
    problems = [f"GPU {i}: fabric {state}/{status}" for i, state, status in reported
                if (state, status) != ("Completed", "Success")]
    expected = "fabric Completed/Success on every GPU"
    source = SMI_SOURCE
    fm_measured = ""
    if switches:
        expected += f", nvidia-fabricmanager active at {smi.driver_version}"
        source += f"; {FM_SOURCE}"
        m = _VERSION.search(str(fm.get("version") or ""))
        version = m[1] if m else None
        fm_measured = f"; {switches} NVSwitch(es), fabricmanager {fm.get('active') or '?'} " \
                      f"{version or 'version unknown'}"
        if fm.get("active") != "active":
            problems.append(f"nvidia-fabricmanager is {fm.get('active') or 'not installed'}")
        if version != smi.driver_version:
            problems.append(f"Fabric Manager {version or '(nv-fabricmanager not found)'} is "
                            f"not the driver's {smi.driver_version}")
    done = sum(1 for s in states if s[1:] == ("Completed", "Success"))
    measured = f"{done}/{len(states)} GPUs Completed/Success{fm_measured}"
    if problems:
        return failed(FABRIC, measured, expected, source, "; ".join(problems))
    return passed(FABRIC, measured, expected, source,
                  "" if switches else "no NVSwitch on the PCI bus: Fabric Manager not needed")


def module_flavour(line: str | None) -> str | None:
    """``open`` or ``proprietary`` from /proc/driver/nvidia/version's first line, else None.

    NVIDIA's open modules print "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04",
    the proprietary ones "NVIDIA UNIX x86_64 Kernel Module  550.127.08".
    """
    if not line or "Kernel Module" not in line:
        return None
    return "open" if "Open Kernel Module" in line else "proprietary"


def judge_module(smi: SmiLog | None, flavour: str | None, wanted: Value | None,
                 peermem: bool, ports: Sequence[Mapping[str, Any]],
                 peermem_enabled: Value) -> CheckResult:
    """The loaded module's flavour and nvidia-peermem where RDMA ports exist."""
    if smi is None:
        return skipped(MODULE, "no GPU data from NVML or nvidia-smi", source="/proc/driver/nvidia")
    if flavour is None:
        return skipped(MODULE, "/proc/driver/nvidia/version names no kernel module flavour",
                       source="/proc/driver/nvidia/version")
    sources = [wanted.source] if wanted is not None else []
    problems: list[str] = []
    soft = False
    want_flavour = str(wanted.value) if wanted is not None and wanted.value else None
    if want_flavour and flavour != want_flavour:
        problems.append(f"the {flavour} kernel module is loaded, the driver role installs "
                        f"{want_flavour}")
        soft = not wanted.from_inventory if wanted is not None else True
    need_peermem = bool(ports) and bool(peermem_enabled.value)
    if need_peermem:
        sources.append(peermem_enabled.source)
        if not peermem:
            problems.append(f"nvidia_peermem is not loaded but the node has {len(ports)} RDMA "
                            "port(s): GPUDirect RDMA cannot reach GPU memory through it")
            soft = False
    measured = f"{flavour}, nvidia_peermem {'loaded' if peermem else 'not loaded'}"
    expected = f"{want_flavour or flavour}" + (", nvidia_peermem loaded" if need_peermem
                                               else "")
    source = ", ".join(sources) or "/proc/driver/nvidia/version"
    message = "" if need_peermem else ("no RDMA port: nvidia_peermem not needed" if not ports
                                       else "nvidia_driver_peermem_enabled is false")
    if problems:
        return (warned if soft else failed)(MODULE, measured, expected, source,
                                            "; ".join(problems) + (
                                                " (only the role default asks for it)"
                                                if soft else ""))
    return passed(MODULE, measured, expected, source, message)


def judge_signal_fabric(read: SignalRead) -> Judged:
    """gpu.fabric from the GPUs as read once and the reader's Fabric Manager answer."""
    return Judged((judge_fabric(read.gpus.smi, read.gpus.fabric,
                                read.section("fabric_manager")),))


def judge_signal_module(read: SignalRead) -> Judged:
    """gpu.kernel_module from the probe's module line and the reader's nvidia_peermem, for
    the RDMA ports the probe or the reader found."""
    ports: list[dict[str, Any]] = [{}] * max(read.rdma_ports, len(read.ports))
    return Judged((judge_module(read.gpus.smi, module_flavour(read.nvidia.get("module")),
                                read.exp_modules, bool(read.doc.get("peermem")), ports,
                                read.inp.peermem_enabled),))
