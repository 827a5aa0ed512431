"""``gpu.pcie_acs``: PCIe Access Control Services source validation on a bridge between a
GPU and an RDMA NIC, read from ``lspci -vvv -D``.

NVIDIA's NCCL troubleshooting guide, "PCI Access Control Services (ACS)"
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html, now under
troubleshooting/gpu_troubleshooting.html; read 2026-11-26): IO virtualization can
redirect all PCI point-to-point traffic to the CPU root complex, "causing a significant
performance reduction or even a hang"; ``sudo lspci -vvv | grep ACSCtl`` shows it, "If
lines show SrcValid+, then ACS might be enabled", and "If PCI switches have ACS enabled,
it needs to be disabled". The line is pciutils' (ls-ecaps.c ``cap_acs``, at ``-vv`` and
above): ``\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+
EgressCtrl- DirectTrans-`` under ``Capabilities: [NNN vN] Access Control Services``.

Topology comes from the same output: a bridge is above a device when the device's bus
is within the bridge's ``Bus: secondary=..., subordinate=...`` range (same domain).
A GPU and a NIC under a common bridge (a PCIe switch) talk through that bridge and the
bridges below it down to each of them; those are the bridges judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown
from nodetune.check.signal_read import Judged, SignalRead

NAME = "gpu.pcie_acs"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.pcie_acs",
     "no ACS SrcValid+ on a PCIe bridge between a GPU and a NIC (NCCL guide)"),
)
SOURCE = "NCCL troubleshooting guide, PCI ACS (lspci -vvv ACSCtl SrcValid), 2026-11-26"
_HEAD = re.compile(r"^(?P<addr>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (?P<cls>[^:]+): "
                   r"(?P<desc>.*)$")
_BUS = re.compile(r"Bus: primary=(?P<p>[0-9a-f]{2}), secondary=(?P<s>[0-9a-f]{2}), "
                  r"subordinate=(?P<u>[0-9a-f]{2})")


@dataclass(slots=True)
class Device:
    """One PCI function of the lspci listing."""

    addr: str        # 0000:3b:00.0
    cls: str         # "PCI bridge", "3D controller", ...
    desc: str
    secondary: int | None = None
    subordinate: int | None = None
    acs_ctl: str | None = None   # the ACSCtl line's flags
    kids: list[str] = field(default_factory=list)

    @property
    def domain(self) -> str:
        return self.addr[:4]

    @property
    def bus(self) -> int:
        return int(self.addr[5:7], 16)

    @property
    def is_bridge(self) -> bool:
        return self.secondary is not None

    @property
    def is_gpu(self) -> bool:
        return self.cls in ("3D controller", "VGA compatible controller") and "NVIDIA" in self.desc

    @property
    def is_nic(self) -> bool:
        return self.cls == "Infiniband controller" or (
            self.cls == "Ethernet controller" and "Mellanox" in self.desc)

    @property
    def src_valid(self) -> bool:
        return self.acs_ctl is not None and "SrcValid+" in self.acs_ctl


def parse(text: str) -> list[Device]:
    """Every function of ``lspci -vvv -D``, with its bus range and ACSCtl flags."""
    devices: list[Device] = []
    for line in text.splitlines():
        head = _HEAD.match(line.lower()) if line and not line[0].isspace() else None
        if head:
            devices.append(Device(line[:12].lower(), line[13:].split(":", 1)[0],
                                  line[13:].split(":", 1)[1].strip()))
            continue
        if not devices:
            continue
        if bus := _BUS.search(line):
            devices[-1].secondary, devices[-1].subordinate = int(bus["s"], 16), int(bus["u"], 16)
        elif line.strip().startswith("ACSCtl:"):
            devices[-1].acs_ctl = line.split(":", 1)[1].strip()
    return devices


def _above(dev: Device, bridges: list[Device]) -> list[Device]:
    """The bridges above ``dev``, nearest the root first."""
    up = [b for b in bridges if b.domain == dev.domain and b is not dev
          and b.secondary is not None and b.subordinate is not None
          and b.secondary <= dev.bus <= b.subordinate]
    return sorted(up, key=lambda b: (b.subordinate or 0) - (b.secondary or 0), reverse=True)


def between(devices: list[Device]) -> dict[str, tuple[Device, set[str]]]:
    """Bridge address -> (bridge, {"GPU 0000:3b:00.0 - NIC 0000:3a:00.0", ...}) for every
    bridge on a GPU-NIC path under a common bridge."""
    bridges = [d for d in devices if d.is_bridge]
    out: dict[str, tuple[Device, set[str]]] = {}
    for gpu in (d for d in devices if d.is_gpu):
        for nic in (d for d in devices if d.is_nic):
            ga, na = _above(gpu, bridges), _above(nic, bridges)
            common = [b for b in ga if b in na]
            if not common:
                continue  # through the root complex: no switch between them
            path = [common[-1]] + [b for b in ga + na if b not in common]
            for b in path:
                out.setdefault(b.addr, (b, set()))[1].add(f"GPU {gpu.addr} - NIC {nic.addr}")
    return out


def judge(lspci: dict[str, object] | None) -> CheckResult:
    """Fail on SrcValid+ on a bridge between a GPU and a NIC; name the bridge."""
    if lspci is None:
        return skipped(NAME, "lspci is not installed (pciutils)", source=SOURCE)
    if lspci.get("unknown"):  # lspci hung (its process group killed) or crashed
        return unknown(NAME, f"could not be assessed: {lspci['unknown']}", source=SOURCE)
    if lspci.get("rc") != 0:
        return skipped(NAME, f"lspci -vvv failed (exit {lspci.get('rc')}): "
                       f"{str(lspci.get('stderr') or '').strip()[-200:]}", source=SOURCE)
    devices = parse(str(lspci.get("stdout") or ""))
    if not any(d.is_gpu for d in devices) or not any(d.is_nic for d in devices):
        return skipped(NAME, "no NVIDIA GPU and RDMA NIC both on the PCI bus", source=SOURCE)
    path = between(devices)
    if not path:
        return skipped(NAME, "no GPU and NIC share a PCIe switch (their traffic crosses the "
                       "root complex)", source=SOURCE)
    if "<access denied>" in str(lspci.get("stdout") or ""):
        return skipped(NAME, "lspci could not read the bridges' capabilities (<access "
                       "denied>): the probe runs lspci as its user; check as root",
                       source=SOURCE)
    on = sorted(a for a, (b, _) in path.items() if b.src_valid)
    expected = "ACSCtl SrcValid- on every bridge between a GPU and a NIC"
    measured = (f"SrcValid+ on {', '.join(on)}" if on
                else f"SrcValid off on {len(path)} bridge(s)")
    if on:
        words = [f"bridge {a} ({path[a][0].desc[:60]}): ACS source validation on, between "
                 f"{sorted(path[a][1])[0]}" for a in on]
        return failed(NAME, measured, expected, SOURCE,
                      "; ".join(words) + "; GPUDirect peer-to-peer goes through the CPU: "
                      "disable ACS (setpci ECAP_ACS+0x6.w=0000, or in the BIOS)")
    return passed(NAME, measured, expected, SOURCE)


def judge_signal(read: SignalRead) -> Judged:
    """gpu.pcie_acs from the reader's lspci run."""
    lspci = read.doc.get("lspci")
    return Judged((judge(lspci if isinstance(lspci, dict) else None),))
