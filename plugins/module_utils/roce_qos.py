"""RoCE QoS state: read `mlnx_qos -i IF`, the ECN enables and RDMA-CM's ToS; plan the writes.

Shared by the nodetune_roce_qos module (which applies the plan), the roce_qos
role's filters (the RoCE ports, the PFC vector the boot script writes) and
`nodetune check` (which imports this file by path: stdlib only). Pure functions
of text and paths: the module does the reading and writing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

# Netdev and RDMA device names go into a shell script and a systemd unit; the
# kernel allows quotes, '$' and more in them, which nodetune refuses to write.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}")


class UnsafeValueError(ValueError):
    """A value that cannot be written safely into the target file format."""


def safe_name(kind: str, name: str) -> str:
    """``name`` when it can go into the boot script and unit, else UnsafeValueError."""
    if not SAFE_NAME.fullmatch(name):
        raise UnsafeValueError(
            f"roce_qos: {kind} {name!r} has characters nodetune does not write into the "
            "boot script or unit (only letters, digits and _.@+-); leave it out with "
            "roce_qos_interfaces")
    return name


PRIORITIES = range(8)
ECN_POINTS = ("roce_np", "roce_rp")


def parse(text: str) -> dict[str, Any]:
    """Parse `mlnx_qos -i IF` output into {trust, pfc: [8 ints]}.

    The tool prints "Priority trust state: dscp" and a "PFC configuration:"
    table whose "enabled" row has one 0/1 per priority 0-7. Missing parts come
    back as None so the caller sets them.
    """
    trust = re.search(r"^\s*Priority trust state:\s*(\w+)", text, re.MULTILINE)
    pfc = None
    block = re.search(r"PFC configuration:\s*\n(?:.*\n)*?\s*enabled\s+((?:[01]\s*){8})", text)
    if block:
        pfc = [int(v) for v in block.group(1).split()]
    return {"trust": trust.group(1) if trust else None, "pfc": pfc}


def pfc_vector(priorities: list[int]) -> list[int]:
    """Return the 8-element enable vector for the given PFC priorities."""
    wanted = {int(p) for p in priorities}
    return [1 if p in wanted else 0 for p in PRIORITIES]


def mlnx_commands(text: str, iface: str, trust: str, priorities: list[int],
                  tool: str = "mlnx_qos") -> list[list[str]]:
    """Return the mlnx_qos argv lists needed to reach trust + PFC from the current state."""
    current = parse(text)
    commands = []
    if current["trust"] != trust:
        commands.append([tool, "-i", iface, "--trust", trust])
    vector = pfc_vector(priorities)
    if current["pfc"] != vector:
        commands.append([tool, "-i", iface, "--pfc", ",".join(map(str, vector))])
    return commands


def sysfs_plan(ports: list[dict[str, Any]], ecn_priorities: list[int], tos: int,
               sysfs_root: str, configfs_root: str,
               read: Callable[[str], str | None]) -> dict[str, list[Any]]:
    """Plan the ECN enables (sysfs) and RDMA-CM default ToS (configfs) writes.

    ECN per priority lives in /sys/class/net/IF/ecn/roce_{np,rp}/enable/P (NVIDIA
    "DCQCN parameters"); a driver without that tree (inbox mlx5 without MLNX_OFED)
    lists the path under ``missing``. RDMA-CM's default ToS lives in configfs at
    rdma_cm/DEV/ports/PORT/default_roce_tos (what cma_roce_tos sets); the DEV
    directory appears when created, so a write there may need ``create``.
    ``read`` returns a file's stripped text, or None when it does not exist.
    """
    writes: list[dict[str, Any]] = []
    missing: list[str] = []
    for port in ports:
        for prio in ecn_priorities:
            for point in ECN_POINTS:
                path = os.path.join(sysfs_root, "class/net", port["netdev"], "ecn", point,
                                    "enable", str(int(prio)))
                current = read(path)
                if current is None:
                    missing.append(path)
                elif current != "1":
                    writes.append({"path": path, "before": current, "value": "1",
                                   "create": False})
        path = os.path.join(configfs_root, "rdma_cm", port["dev"], "ports", str(port["port"]),
                            "default_roce_tos")
        current = read(path)
        if current != str(int(tos)):
            writes.append({"path": path, "before": current, "value": str(int(tos)),
                           "create": current is None})
    return {"writes": writes, "missing": missing}


def ports(rdma_devices: list[dict[str, Any]], interfaces: list[str]) -> list[dict[str, str]]:
    """The RoCE ports to configure, from node_facts' ``rdma_devices``.

    Only Ethernet link layers are RoCE. With interfaces given, keep those
    netdevs; otherwise every port that has a netdev.
    """
    found = []
    for device in rdma_devices or []:
        for entry in device.get("ports") or []:
            if entry.get("link_layer") != "Ethernet":
                continue
            port = {"dev": str(device.get("name")), "port": str(entry.get("port")),
                    "link_layer": "Ethernet", "netdev": str(entry.get("netdev") or "-")}
            safe_name("RDMA device", port["dev"])
            if not port["port"].isdigit():
                raise UnsafeValueError(f"roce_qos: RDMA port {port['port']!r} of {port['dev']} "
                                       "is not a number")
            if (interfaces and port["netdev"] in interfaces) or (
                not interfaces and port["netdev"] != "-"
            ):
                if port["netdev"] != "-":
                    safe_name("interface", port["netdev"])
                found.append(port)
    return found
