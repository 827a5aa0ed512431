"""What `nodetune check` reads on a node for the signs that appear while jobs run:
stdlib only, Python >= 3.8, run as ``PYTHON -c SOURCE REQUEST_JSON`` (nothing written).

It reads, and only reads:

- the kernel log's NVRM Xid and NVSwitch SXid records (every record holding ``Xid``):
  ``/dev/kmsg`` (the kernel's record format, Documentation/ABI/testing/dev-kmsg), or a
  file in that same format named by ``kernel_log`` (a stand-in for the kernel log; the
  lab's ``xid`` fault writes one);
- the RDMA ports' error counters under ``rdma_sysfs`` (default ``/sys/class/infiniband``,
  Documentation/ABI/stable/sysfs-class-infiniband: ``ports/N/counters/*``), the ports as
  node_facts' fact script lists them for the roles and the probe;
- the PCIe link of each RDMA device's PCI function (``DEV/device``: ``current_link_*`` and
  ``max_link_*``, drivers/pci/pci-sysfs.c), and the AER counters (``aer_dev_correctable``,
  ``aer_dev_nonfatal``, ``aer_dev_fatal``: Documentation/ABI/testing/sysfs-bus-pci-devices-aer)
  of those functions, of the GPUs under ``pci_sysfs`` (default ``/sys/bus/pci/devices``) and
  of the bridge just above each (its link partner, where the link's errors may be counted);
- whether Fabric Manager runs and its version (``systemctl is-active
  nvidia-fabricmanager``, ``nv-fabricmanager --version``), NVSwitches on the PCI bus,
  and whether ``nvidia_peermem`` is loaded (``/sys/module/nvidia_peermem``);
- ``lspci -vvv -D`` (bridges' ACSCtl lines), where lspci is installed;
- ``nvidia-imex-ctl -N -j`` (the IMEX domain's status), where IMEX is installed;
- ``dcgmi diag -r LEVEL -j`` where DCGM is installed and a level is asked for.

Names read from the node become paths only after a plain-name check.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import stat
import sys
import time
from typing import Any

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
# The port error counters fabric.rdma_errors judges (sysfs-class-infiniband).
COUNTERS = ("link_downed", "symbol_error", "link_error_recovery", "port_rcv_errors",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")
KMSG_LIMIT = 4 << 20  # bytes of kernel log read at most
LINK = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
AER = ("correctable", "nonfatal", "fatal")
OUT_LIMIT = 200000  # characters of a tool's output kept (lspci -vvv's, the last ones)
# node_run.py (the tool runner, the file reader, the PCI walk), imported as part of the
# package; on a node its text stands in this import's place (node_program.embed).
from nodetune.check import node_run  # noqa: E402 - node_program.embed

read = node_run.read
PCI_ADDR = node_run.PCI_ADDR  # the addresses it reports (health.py)
pci_function = node_run.pci_function
nvidia_gpus = node_run.nvidia_gpus
# node_facts' fact script (roles/node_facts/files/nodetune.fact), whose rdma_ports() lists
# the RDMA ports for the roles and every node program: health.source() puts its text here,
# and fact() runs it as a namespace (node_run.fact_loader) the first time it is asked.
FACT_SOURCE = ""
fact = node_run.fact_loader(FACT_SOURCE)  # its functions


def run(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run a tool with node_run's runner (its group killed on timeout, ``unknown`` where
    it gives no answer), keeping the last :data:`OUT_LIMIT` characters it printed."""
    got: dict[str, Any] = node_run.run(argv, timeout, keep=OUT_LIMIT)
    return got


def _kmsg_device(path: str) -> list[str]:
    """Every record /dev/kmsg holds now: one record per read(), EAGAIN at the end."""
    records: list[str] = []
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while size < KMSG_LIMIT:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten: go on
                    continue
                raise
            if not chunk:
                break
            size += len(chunk)
            records.append(chunk.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return records


def kernel_log(path: str) -> dict[str, Any]:
    """The kernel log's Xid records (kmsg format), with the boot time to date them."""
    out: dict[str, Any] = {"source": path, "records": [], "error": None,
                           "boot_time": None, "now": time.time()}
    for line in (read("/proc/stat", 65536) or "").splitlines():
        if line.startswith("btime "):
            out["boot_time"] = float(line.split()[1])
    try:
        if stat.S_ISCHR(os.stat(path).st_mode):
            lines = _kmsg_device(path)
        else:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read(KMSG_LIMIT).splitlines()
    except OSError as exc:
        out["error"] = f"{path}: {exc.strerror or exc}"
        return out
    out["records"] = [ln.rstrip("\n")[:1000] for ln in lines if "Xid" in ln][-500:]
    return out


def rdma_counters(root: str) -> list[dict[str, Any]]:
    """The state, rate and error counters of each RDMA port under ``root``, the ports as
    the fact script lists them (its ``rdma_ports``), those of plain-named devices."""
    ports: list[dict[str, Any]] = []
    for dev, found in fact()["rdma_ports"](root):
        if not NAME.match(dev):
            continue
        for num, port in found:
            counters = {}
            for key in COUNTERS:
                value = read(port + "/counters/" + key)
                if value is not None:
                    counters[key] = value
            ports.append({"device": dev, "port": num, "state": read(port + "/state"),
                          "rate": read(port + "/rate"), "counters": counters})
    return ports


def _function(path: str, role: str, found: dict[str, dict[str, Any]]) -> str | None:
    """Add the PCI function at ``path`` (and the bridge above it) to ``found``; its address."""
    function = pci_function(path)
    if function is None:
        return None
    addr, real, above = function
    for where, what in ((real, role), (above, "bridge above " + addr)):
        if not where:
            continue
        name = os.path.basename(where)
        entry = found.setdefault(name, {"pci": name, "roles": [], "aer": {
            k: read(f"{where}/aer_dev_{k}", 16384) for k in AER}})
        entry["roles"].append(what)
    return addr


def pcie(rdma_root: str, pci_root: str) -> dict[str, Any]:
    """The RDMA devices' PCIe links, and the AER counters of theirs and the GPUs' functions."""
    found: dict[str, dict[str, Any]] = {}
    hcas = []
    for dev in sorted(glob.glob(rdma_root + "/*/device")):
        name = os.path.basename(os.path.dirname(dev))
        if not NAME.match(name):
            continue
        addr = _function(dev, "HCA " + name, found)
        hcas.append({"device": name, "pci": addr, "vf": os.path.exists(dev + "/physfn"),
                     "link": {k: read(f"{dev}/{k}") for k in LINK}})
    for dev in nvidia_gpus(pci_root):
        _function(dev, "GPU", found)
    return {"hcas": hcas, "functions": [found[k] for k in sorted(found)]}


def fabric_manager(timeout: float) -> dict[str, Any]:
    # NVSwitches: NVIDIA (0x10de) devices of PCI class 0x0680 ("Bridge: other").
    switches = sum(1 for dev in glob.glob("/sys/bus/pci/devices/*")
                   if read(dev + "/vendor") == "0x10de"
                   and (read(dev + "/class") or "").startswith("0x0680"))
    out: dict[str, Any] = {"nvswitches": switches, "active": None, "version": None}
    systemctl = shutil.which("systemctl")
    if systemctl:
        res = run([systemctl, "is-active", "nvidia-fabricmanager"], timeout)
        out["active"] = res["stdout"].strip() or None
    tool = shutil.which("nv-fabricmanager")
    if tool:
        out["version"] = run([tool, "--version"], timeout)["stdout"].strip()[:300]
    return out


def main() -> None:
    request = json.loads(sys.argv[1])
    timeout = float(request.get("timeout", 60))
    lspci = shutil.which("lspci")
    imex = shutil.which("nvidia-imex-ctl")
    dcgmi = shutil.which("dcgmi")
    level = int(request.get("dcgm_level") or 0)
    doc = {
        "health": 1,
        "kernel_log": kernel_log(str(request.get("kernel_log") or "/dev/kmsg")),
        "rdma_counters": rdma_counters(str(request.get("rdma_sysfs") or "/sys/class/infiniband")),
        "pcie": pcie(str(request.get("rdma_sysfs") or "/sys/class/infiniband"),
                     str(request.get("pci_sysfs") or "/sys/bus/pci/devices")),
        "fabric_manager": fabric_manager(timeout),
        "peermem": os.path.isdir("/sys/module/nvidia_peermem"),
        "lspci": run([lspci, "-vvv", "-D"], timeout) if lspci else None,
        "imex": ({"tool": imex, **run([imex, "-N", "-j"], timeout)} if imex else None),
        "dcgm": ({"tool": dcgmi, "level": level,
                  **run([dcgmi, "diag", "-r", str(level), "-j"], float(request.get(
                      "dcgm_timeout", timeout)))} if dcgmi and level else
                 {"tool": dcgmi, "level": level}),
    }
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
