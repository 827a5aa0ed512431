"""What to do about a finding: one ladder, mildest first, shared by every check and output.

``none < re-run < reset-gpu < restart-fabric-manager < reboot < service``: a node's
action is the highest of its checks' (:func:`highest`). ``re-run`` is the finding with no
hardware remedy: fix what the check names (re-apply the roles, end the stray process)
and run the check again; it is also what a check that could not be assessed (``unknown``:
a tool that hung or crashed) asks for. ``service`` is a person with the hardware: reseat,
repair, or return it (RMA).

The rungs follow the recovery actions NVIDIA's driver and catalogue name: NVML's
recovery action None / GPU reset / node reboot ("Error Recovery and Response Flags",
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html,
read 2026-11-29) and the Xid catalogue's immediate-action buckets RESTART_APP / RESET_GPU /
RESTART_BM / CHECK_MECHANICALS (:mod:`nodetune.check.xid`).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Action(Enum):
    """One rung of the ladder; compare them by :attr:`rank`."""

    NONE = "none"
    RERUN = "re-run"
    RESET_GPU = "reset-gpu"
    RESTART_FABRIC_MANAGER = "restart-fabric-manager"
    REBOOT = "reboot"
    SERVICE = "service"

    @property
    def rank(self) -> int:
        """0 for none up to 5 for service."""
        return list(Action).index(self)

    @property
    def words(self) -> str:
        """The action in plain words, for a drain reason or a page."""
        return _WORDS[self]


_WORDS = {
    Action.NONE: "nothing to do",
    Action.RERUN: "fix what the check names and re-run it",
    Action.RESET_GPU: "reset the GPU (nvidia-smi -r, no process on it)",
    Action.RESTART_FABRIC_MANAGER: "restart nvidia-fabricmanager",
    Action.REBOOT: "reboot the node",
    Action.SERVICE: "service the hardware (reseat, repair or RMA)",
}


def highest(actions: Iterable[Action]) -> Action:
    """The highest rung of ``actions`` (none when there are none)."""
    return max(actions, key=lambda a: a.rank, default=Action.NONE)


# Each check's action when it fails. Where a vendor documents the remedy, the source is
# named; the other rungs are nodetune's own reading of what the check finds.
_ON_FAIL: dict[str, Action] = {
    # A GPU on the PCI bus the driver does not see is Xid 79's "fallen off the bus",
    # RESTART_BM in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors/
    # analyzing-xid-catalog.html, read 2026-11-26).
    "gpu.count": Action.REBOOT,
    # A pending row remap is applied "at the next GPU reset"; a remap failure is an RMA
    # matter (NVIDIA, "Error Recovery and Response Flags", docs.nvidia.com/deploy/
    # a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html, read 2026-11-29):
    # gpu.ecc sets service itself where a remap failed.
    "gpu.ecc": Action.RESET_GPU,
    # NVLink errors: Xid 74 "NVLINK Error", a GPU reset or a node reboot (the catalogue).
    "gpu.nvlink": Action.RESET_GPU,
    # Xid 119/120 (GSP) and 46/62 ask for a GPU reset; DCGM's diagnostic failing is
    # nodetune's reading: reset, then run the diagnostic again.
    "dcgm.diag": Action.RESET_GPU,
    # Fabric Manager not running on an NVSwitch system: start it again.
    "gpu.fabric": Action.RESTART_FABRIC_MANAGER,
    # A PCIe link trained below its maximum, a missing kernel module: reboot first.
    "gpu.pcie": Action.REBOOT,
    "fabric.pcie": Action.REBOOT,
    "gpu.kernel_module": Action.REBOOT,
    # Hardware slowdown (power brake, thermal), ports down or erroring, uncorrectable AER:
    # cooling, power, cables or the card itself.
    "gpu.clocks": Action.SERVICE,
    "fabric.rdma": Action.SERVICE,
    "fabric.rdma_errors": Action.SERVICE,
    "node.pcie_aer": Action.SERVICE,
    # New NVLink replay/recovery errors on a link: Xid 74 "NVLINK Error" in the catalogue
    # above, a GPU reset first.
    "gpu.nvlink_errors": Action.RESET_GPU,
    # A fatal SXid leaves the NVSwitch and the GPUs behind it in need of a reset, which on
    # a baseboard of NVSwitches is a node reboot: nodetune's reading of the Fabric Manager
    # guide's fatal-error handling.
    "gpu.sxid": Action.REBOOT,
    # A GPU at DCGM's retired-page limit (gpu.retired_pages cites it) has used up the
    # pages it can retire: service, nodetune's reading.
    "gpu.retired_pages": Action.SERVICE,
    # check --sample's window. HW slowdown for most of it: GPUd asks for a hardware
    # inspection (leptonai/gpud hw-slowdown component.go, RepairActionTypeHardwareInspection,
    # read 2026-11-30). A PCIe link retraining under load, an RDMA port changing state,
    # uncorrectable AER errors in the window: the card, riser, slot or cable. NVLink errors
    # in the window: as gpu.nvlink_errors.
    "gpu.slowdown": Action.SERVICE,
    "pcie.flap": Action.SERVICE,
    "fabric.rdma_window": Action.SERVICE,
    "node.pcie_aer_window": Action.SERVICE,
    "gpu.nvlink_window": Action.RESET_GPU,
}


def for_check(name: str, *, failed: bool) -> Action:
    """The default action for check ``name`` when it failed (``failed``) or could not be
    assessed: re-run for every unknown and for every failure that is configuration (a
    driver version, an MTU, a sysctl, an environment variable: re-apply, then re-run)."""
    group = name.split("[", 1)[0]  # fabric.rdma_errors[mlx5_0/1]: one check per item
    return _ON_FAIL.get(group, Action.RERUN) if failed else Action.RERUN
