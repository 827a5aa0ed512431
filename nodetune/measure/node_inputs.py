"""What one node's health reading is told, from its inventory variables (checked before any
node is contacted); ``check`` reads all of it, ``validate --rdma-bw`` the RDMA class directory.

- ``nodetune_kernel_log``: where the kernel log's records are read (default
  ``/dev/kmsg``); a file in /dev/kmsg's format stands in for it (the lab's ``xid`` fault).
- ``nodetune_rdma_sysfs``: the RDMA sysfs class directory (default
  ``/sys/class/infiniband``); a tree of the same layout stands in for it (``rdma-flap``).
- ``nodetune_pci_sysfs``: the PCI devices directory where the GPUs' functions and their AER
  counters are read (default ``/sys/bus/pci/devices``); a tree of the same layout stands in.
- ``nodetune_hca_pcie_speed_fails``: whether an HCA's PCIe link below its maximum speed
  fails ``fabric.pcie`` (default false: it warns, as links may train down while idle).
- ``nodetune_pcie_aer_correctable_per_hour``: new correctable AER errors per PCI function
  and hour above which ``node.pcie_aer`` warns (default 60).
- ``nodetune_nvlink_crc_errors_per_s``: NVLink CRC errors per second on one link, since the
  previous check, at which ``gpu.nvlink_errors`` fails (default 100, DCGM's limit; fewer warn).
- ``nvidia_driver_peermem_enabled``: whether GPUDirect RDMA is wanted (the role's default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodetune.ansible import truth
from nodetune.ansible.inventory import Host
from nodetune.ansible.role_defaults import Value, role_defaults
from nodetune.errors import InputError
from nodetune.measure.result import HelpLines

VAR_KERNEL_LOG = "nodetune_kernel_log"
VAR_RDMA_SYSFS = "nodetune_rdma_sysfs"
VAR_PCI_SYSFS = "nodetune_pci_sysfs"
VAR_SPEED_FAILS = "nodetune_hca_pcie_speed_fails"
VAR_AER_PER_HOUR = "nodetune_pcie_aer_correctable_per_hour"
VAR_NVLINK_CRC = "nodetune_nvlink_crc_errors_per_s"
# Its inventory variables' lines in check's --help (nodetune.check.listing).
VARS_HELP: HelpLines = (
    (VAR_KERNEL_LOG, "kernel log source, /dev/kmsg format (default /dev/kmsg)"),
    (VAR_RDMA_SYSFS, "RDMA sysfs class dir (default /sys/class/infiniband)"),
    (VAR_PCI_SYSFS, "PCI devices dir for GPUs' AER (default /sys/bus/pci/devices)"),
    (VAR_SPEED_FAILS, "HCA PCIe link below max speed fails (default false: warns)"),
    (VAR_AER_PER_HOUR, "correctable AER errors/h per function to warn (60)"),
    (VAR_NVLINK_CRC, "NVLink CRC errors/s on a link that fail (100, DCGM's)"),
)
_PATH = re.compile(r"^/[A-Za-z0-9_.@+/-]{0,250}$")


@dataclass(frozen=True, slots=True)
class HealthInputs:
    """What one node's health reading is told."""

    kernel_log: str
    rdma_sysfs: str
    peermem_enabled: Value
    pci_sysfs: str = "/sys/bus/pci/devices"
    hca_speed_fails: bool = False
    aer_per_hour: int = 60
    nvlink_crc_per_s: float = 100.0


def _path(host: Host, name: str, default: str) -> str:
    value = host.vars.get(name, default)
    if not isinstance(value, str) or not _PATH.match(value) or "/../" in f"{value}/":
        raise InputError(f"{name}={value!r}: expected an absolute path of plain characters",
                         host=host.name)
    return value


def inputs(host: Host) -> HealthInputs:
    """The node's health inputs from its variables.

    Raises:
        InputError: a variable that is not a plain absolute path (names host and variable).
    """
    name = "nvidia_driver_peermem_enabled"
    inv = name in host.vars
    raw = host.vars[name] if inv else role_defaults("nvidia_driver").get(name, True)
    enabled = truth.boolean(raw, name=name, host=host.name)
    speed_fails = truth.setting(host.vars, VAR_SPEED_FAILS, default=False, host=host.name)
    per_hour = host.vars.get(VAR_AER_PER_HOUR, 60)
    if isinstance(per_hour, str) and re.fullmatch(r"[0-9]{1,9}", per_hour.strip()):
        per_hour = int(per_hour)  # an INI inventory's text
    if isinstance(per_hour, bool) or not isinstance(per_hour, int) or per_hour < 0:
        raise InputError(f"{VAR_AER_PER_HOUR}={per_hour!r}: expected a whole number >= 0",
                         host=host.name)
    return HealthInputs(_path(host, VAR_KERNEL_LOG, "/dev/kmsg"),
                        _path(host, VAR_RDMA_SYSFS, "/sys/class/infiniband"),
                        Value(name, enabled, inv),
                        _path(host, VAR_PCI_SYSFS, "/sys/bus/pci/devices"),
                        speed_fails, per_hour, _rate(host, VAR_NVLINK_CRC, 100.0))


def _rate(host: Host, name: str, default: float) -> float:
    """A rate > 0 (a number, or an INI inventory's text of one)."""
    value = host.vars.get(name, default)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,6})?", value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise InputError(f"{name}={value!r}: expected a number > 0", host=host.name)
    return float(value)
