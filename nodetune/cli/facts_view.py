"""Human view of `nodetune facts`: one block per host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.padding import Padding

from nodetune.cli.console import table


def render_facts(console: Console, facts: Mapping[str, Any]) -> None:
    """Print per-host node facts as text blocks and one sysctl table."""
    if not facts:
        console.print("no facts gathered", markup=False)
        return
    for host, f in sorted(facts.items()):
        if not isinstance(f, Mapping) or "error" in f:
            error = f.get("error") if isinstance(f, Mapping) else f
            console.print(f"{host}: {error}\n", markup=False)
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
        if drv.get("kernel_module_flavour"):
            gpu_line += f"; {drv['kernel_module_flavour']} kernel module"
        fab = f.get("fabric") or {}
        if fab.get("state"):
            gpu_line += f"; fabric {fab['state']}" + (f"/{fab['status']}" if fab.get("status")
                                                      else "")
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
        console.print("\n".join(lines), markup=False)
        # The loopback (ARPHRD 772) is in the facts for the roles' checks, not in the table.
        ifaces = [[i["name"], i["mtu"], i.get("speed_mbps") or "-", i.get("operstate") or "-",
                   i.get("rdma_device") or "-"] for i in f.get("interfaces") or []
                  if i.get("type") != 772]
        if ifaces:
            console.print(Padding(table(["interface", "mtu", "speed Mb/s", "state", "rdma"],
                                        ifaces, right=(1, 2)), (0, 0, 0, 2)))
        console.print()
    hosts = sorted(h for h, f in facts.items() if isinstance(f, Mapping) and "error" not in f)
    keys = sorted({k for h in hosts for k in (facts[h].get("sysctl") or {})})
    rows = [[k, *[_short((facts[h].get("sysctl") or {}).get(k)) for h in hosts]] for k in keys
            if k != "net.ipv4.tcp_available_congestion_control"]
    if rows:
        console.print(table(["sysctl", *hosts], rows))


def _short(value: Any) -> str:
    return "(absent)" if value is None else str(value)
