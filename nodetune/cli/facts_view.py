"""Human view of `nodetune facts`: one block per host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodetune.report import format_table


def render_facts(facts: Mapping[str, Any]) -> str:
    """Render per-host node facts as text blocks and one sysctl table."""
    if not facts:
        return "no facts gathered"
    blocks = []
    for host, f in sorted(facts.items()):
        if "error" in f:
            blocks.append(f"{host}: {f['error']}")
            continue
        osr = f.get("os") or {}
        gpus = f.get("gpus") or []
        drv = f.get("nvidia_driver") or {}
        if gpus:
            names = sorted({g["name"] for g in gpus})
            gpu_line = f"{len(gpus)} x {', '.join(names)} (driver {gpus[0]['driver_version']})"
        elif f.get("nvidia_gpu_present"):
            gpu_line = "NVIDIA GPU on PCI, no working driver"
        else:
            gpu_line = "none"
        if drv.get("kernel_module_version") and drv.get("userspace_version") and \
                drv["kernel_module_version"] != drv["userspace_version"]:
            gpu_line += (f"  [kernel module {drv['kernel_module_version']} != "
                         f"userspace {drv['userspace_version']}]")
        rdma = f.get("rdma_devices") or []
        rdma_line = ", ".join(
            f"{d['name']}({'/'.join(str(p.get('link_layer')) for p in d.get('ports', []))})"
            for d in rdma) or "none"
        lines = [
            f"{host}: {osr.get('pretty_name', '?')}, kernel {f.get('kernel', '?')}"
            + (" (container)" if f.get("container") else ""),
            f"  GPUs: {gpu_line}",
            f"  RDMA: {rdma_line}" + (f"; OFED {f['ofed_version']}" if f.get("ofed_version")
                                      else ""),
        ]
        ifaces = [[i["name"], i["mtu"], i.get("speed_mbps") or "-", i.get("operstate") or "-",
                   i.get("rdma_device") or "-"] for i in f.get("interfaces") or []]
        if ifaces:
            lines.append(_indent(format_table(["interface", "mtu", "speed Mb/s", "state", "rdma"],
                                              ifaces, align="lrrll")))
        blocks.append("\n".join(lines))
    hosts = sorted(h for h, f in facts.items() if "error" not in f)
    keys = sorted({k for h in hosts for k in (facts[h].get("sysctl") or {})})
    rows = [[k, *[_short((facts[h].get("sysctl") or {}).get(k)) for h in hosts]] for k in keys
            if k != "net.ipv4.tcp_available_congestion_control"]
    if rows:
        blocks.append(format_table(["sysctl", *hosts], rows, align="l" * (len(hosts) + 1)))
    return "\n\n".join(blocks)


def _short(value: Any) -> str:
    return "(absent)" if value is None else str(value)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
