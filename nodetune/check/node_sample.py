"""What `nodetune check --sample SECONDS` reads on a node over a window, once a second:
stdlib only, Python >= 3.8, run as ``PYTHON -c SOURCE REQUEST_JSON`` (nothing written, only
read; nothing runs on a GPU).

- One long-running ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits -lms 1000``
  (nvidia-smi(1): ``-lms``/``--loop-ms`` probes at that interval until stopped; the fields as
  ``nvidia-smi --help-query-gpu`` names them, read 2026-11-30: ``index``, ``pci.bus_id``,
  ``clocks_event_reasons.active`` (older drivers: ``clocks_throttle_reasons.active``, the
  same bitmask), ``power.draw``, ``pcie.link.gen.current``, ``pcie.link.width.current``,
  ``utilization.gpu``), in a process group of its own, killed with its group at the window's
  end; each line kept with the second it came at.
- ``nvidia-smi nvlink -e`` at the window's start and at its end.
- Each second: every RDMA port's ``state`` and error counters under ``rdma_sysfs``
  (Documentation/ABI/stable/sysfs-class-infiniband; the ports as node_facts' fact script
  lists them for the roles and the probe), and the PCIe ``current_link_speed``/
  ``current_link_width`` (drivers/pci/pci-sysfs.c) and ``aer_dev_*`` counters
  (Documentation/ABI/testing/sysfs-bus-pci-devices-aer) of each RDMA device's PCI function
  and each NVIDIA GPU's under ``pci_sysfs``, and the AER counters of the bridge above each
  (as the health reader reads them). A value is kept only when it differs from the second
  before: ``[[second, value], ...]``.

The whole run is bounded: the window, plus for each ``nvlink -e`` its ``timeout`` and 5 s
to reap it, plus at most 12 s to stop nvidia-smi (SIGTERM and 2 s, SIGKILL to its group
and 5 s, 5 s for the rest of its output); the controller waits that long
(:data:`nodetune.check.sample.MARGIN_S`). Names read from the node
become paths only after a plain-name check.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
FIELDS = ("index", "pci.bus_id", "clocks_event_reasons.active", "power.draw",
          "pcie.link.gen.current", "pcie.link.width.current", "utilization.gpu")
OLD_REASONS = "clocks_throttle_reasons.active"  # the same bitmask before driver 535
COUNTERS = ("link_downed", "symbol_error", "link_error_recovery", "port_rcv_errors",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")
LINK = ("current_link_speed", "current_link_width")
LIMITS = ("max_link_speed", "max_link_width")
AER = ("correctable", "nonfatal", "fatal")
MAX_LINES = 100000  # nvidia-smi lines kept at most (10 min of 16 GPUs is 9600)
# node_run.py (the tool runner, the file reader, the PCI walk), imported as part of the
# package; on a node its text stands in this import's place (node_program.embed).
from nodetune.check import node_run  # noqa: E402 - node_program.embed

read = node_run.read
kill_group = node_run.kill_group
pci_function = node_run.pci_function
nvidia_gpus = node_run.nvidia_gpus
# node_facts' fact script (roles/node_facts/files/nodetune.fact), whose rdma_ports() lists
# the RDMA ports for the roles and every node program: sample.source() puts its text here,
# and fact() runs it as a namespace (node_run.fact_loader) the first time it is asked.
FACT_SOURCE = ""
fact = node_run.fact_loader(FACT_SOURCE)  # its functions


def run(argv: list[str], timeout: float) -> dict[str, Any]:
    """A tool's answer with node_run's runner (its group killed past ``timeout``:
    ``unknown``), and when it came."""
    got: dict[str, Any] = node_run.run(argv, timeout, keep=200000)
    got["time"] = time.time()
    return got


class Loop:
    """The long-running ``nvidia-smi --query-gpu ... -lms 1000``: its lines, as they come."""

    def __init__(self, tool: str, fields: tuple[str, ...], start: float) -> None:
        self.fields = fields
        self.start = start
        self.lines: list[list[Any]] = []
        self.proc = subprocess.Popen(
            [tool, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
             "-lms", "1000"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if len(self.lines) < MAX_LINES:
                self.lines.append([round(time.monotonic() - self.start, 3),
                                   raw.decode("utf-8", "replace").rstrip("\n")[:400]])

    def invalid_field(self) -> bool:
        """It ended at once, saying a field is not one it knows (an older driver)."""
        return self.proc.poll() is not None and any(
            "not a valid field" in str(line[1]) for line in self.lines)

    def stop(self) -> dict[str, Any]:
        """End it: SIGTERM first, so that what it printed but has not flushed into the pipe
        comes out, then SIGKILL to its whole group after at most 2 s (a helper too)."""
        running = self.proc.poll() is None
        if running:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        kill_group(self.proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.reader.join(5)
        out: dict[str, Any] = {"fields": list(self.fields), "lines": self.lines,
                               "rc": None if running else self.proc.returncode,
                               "ran_to_the_end": running}
        if self.reader.is_alive():
            out["unknown"] = "nvidia-smi's output did not close after its group was killed"
        return out


def functions(rdma_root: str, pci_root: str) -> dict[str, dict[str, Any]]:
    """PCI functions to read: each RDMA device's, each NVIDIA GPU's (vendor 0x10de, class
    0x03xxxx): {address: {path, role, max_link_speed, max_link_width}}, and the bridge
    above each ({path, role, bridge: True}: its AER counters only)."""
    found: dict[str, dict[str, Any]] = {}
    bridges: dict[str, str] = {}  # a function's address: the bridge above it ("": none)

    def add(path: str, entry: dict[str, Any]) -> None:
        function = pci_function(path)
        if function is not None and function[0] not in found:
            found[function[0]] = {"path": function[1], **entry}
            bridges[function[0]] = function[2]

    for dev in sorted(glob.glob(rdma_root + "/*/device")):
        name = os.path.basename(os.path.dirname(dev))
        if NAME.match(name) and not os.path.exists(dev + "/physfn"):
            add(dev, {"role": "HCA " + name, "device": name})
    for dev in nvidia_gpus(pci_root):
        add(dev, {"role": "GPU"})
    for addr, entry in list(found.items()):
        entry.update({k: read(entry["path"] + "/" + k) for k in LIMITS})
        # the bridge above each (its link partner): its AER counters only, as the health
        # reader reads them (node_health.pcie), where the link's errors may be counted
        above = bridges[addr]
        if above:
            found.setdefault(os.path.basename(above), {"path": above, "bridge": True,
                                                       "role": "bridge above " + addr})
    return found


def ports(rdma_root: str) -> dict[str, str]:
    """{``mlx5_0/1``: its sysfs directory}: the RDMA ports as the fact script lists them
    (its ``rdma_ports``), those of plain-named devices."""
    return {f"{dev}/{num}": port for dev, found in fact()["rdma_ports"](rdma_root)
            if NAME.match(dev) for num, port in found}


def keep(series: dict[str, list[list[Any]]], key: str, second: float, value: Any) -> None:
    """Add ``[second, value]`` to ``series[key]`` where it differs from the last one."""
    points = series.setdefault(key, [])
    if not points or points[-1][1] != value:
        points.append([second, value])


def sweep(second: float, found: dict[str, dict[str, Any]], rdma: dict[str, str],
          series: dict[str, Any]) -> None:
    """One second's sysfs reads."""
    for key, path in rdma.items():
        keep(series, f"rdma/{key}/state", second, read(path + "/state"))
        for name in COUNTERS:
            value = read(path + "/counters/" + name)
            if value is not None:
                keep(series, f"rdma/{key}/{name}", second, value)
    for addr, entry in found.items():
        for name in () if entry.get("bridge") else LINK:
            keep(series, f"pci/{addr}/{name}", second, read(entry["path"] + "/" + name))
        for kind in AER:
            text = read(f"{entry['path']}/aer_dev_{kind}", 16384)
            if text is not None:
                keep(series, f"pci/{addr}/aer_{kind}", second, text)


def sample(request: dict[str, Any]) -> dict[str, Any]:
    seconds = float(request.get("seconds") or 10)
    timeout = float(request.get("timeout") or 10)
    rdma_root = str(request.get("rdma_sysfs") or "/sys/class/infiniband")
    pci_root = str(request.get("pci_sysfs") or "/sys/bus/pci/devices")
    tool = shutil.which("nvidia-smi")
    found = functions(rdma_root, pci_root)
    rdma = ports(rdma_root)
    doc: dict[str, Any] = {"sample": 1, "seconds": seconds, "tool": tool,
                           "gpus_on_bus": sum(1 for f in found.values() if f["role"] == "GPU"),
                           "functions": {a: {k: v for k, v in f.items() if k != "path"}
                                         for a, f in found.items()}}
    if tool:
        doc["nvlink_start"] = run([tool, "nvlink", "-e"], timeout)
    start = time.monotonic()
    doc["start"] = time.time()
    loop = None
    if tool:
        try:
            loop = Loop(tool, FIELDS, start)
        except OSError as exc:
            doc["smi"] = {"unknown": f"nvidia-smi could not start: {str(exc)[:300]}"}
    series: dict[str, Any] = {}
    ticks = 0
    while True:
        second = time.monotonic() - start
        if second >= seconds:
            break
        sweep(round(second, 3), found, rdma, series)
        ticks += 1
        if loop is not None and ticks == 2 and loop.invalid_field():
            loop.stop()  # a driver before 535 names the bitmask clocks_throttle_reasons
            try:
                loop = Loop(tool or "nvidia-smi", tuple(
                    OLD_REASONS if f == FIELDS[2] else f for f in FIELDS), start)
            except OSError as exc:
                loop = None
                doc["smi"] = {"unknown": f"nvidia-smi could not start: {str(exc)[:300]}"}
        time.sleep(max(0.0, min(ticks - (time.monotonic() - start), seconds - second)))
    if loop is not None:
        doc["smi"] = loop.stop()
    doc["end"] = time.time()
    doc["ticks"] = ticks
    doc["series"] = series
    if tool:
        doc["nvlink_end"] = run([tool, "nvlink", "-e"], timeout)
    return doc


def main() -> None:
    request = json.loads(sys.argv[1])
    sys.stdout.write(json.dumps(sample(request)) + "\n")


if __name__ == "__main__":
    main()
