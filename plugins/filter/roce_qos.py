"""Filters for the roce_qos role: read mlnx_qos output, plan the set-requests."""

from __future__ import annotations

import re
from typing import Any

PRIORITIES = range(8)
# Netdev and RDMA device names go into a shell script and a systemd unit; the
# kernel allows quotes, '$' and more in them, which nodetune refuses to write.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}")


class UnsafeValueError(ValueError):
    """A value that cannot be written safely into the target file format."""


def _safe(kind: str, name: str) -> str:
    if not SAFE_NAME.fullmatch(name):
        raise UnsafeValueError(
            f"roce_qos: {kind} {name!r} has characters nodetune does not write into the "
            "boot script or unit (only letters, digits and _.@+-); leave it out with "
            "roce_qos_interfaces")
    return name


def roce_qos_systemd_device(netdev: str) -> str:
    """The systemd device unit of a network interface, escaped as systemd-escape --path does.

    ``sys-subsystem-net-devices-<escaped name>.device``: characters other than
    ASCII letters, digits, ``:``, ``_`` and ``.`` become ``\\xNN`` (systemd.unit(5),
    "String Escaping for Inclusion in Unit Names").
    """
    name = _safe("interface", str(netdev))
    escaped = "".join(
        c if (c.isascii() and (c.isalnum() or c in ":_.")) and not (i == 0 and c == ".")
        else "".join(f"\\x{b:02x}" for b in c.encode())
        for i, c in enumerate(name)
    )
    return f"sys-subsystem-net-devices-{escaped}.device"


def roce_qos_parse(text: str) -> dict[str, Any]:
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


def roce_qos_pfc_vector(priorities: list[int]) -> list[int]:
    """Return the 8-element enable vector for the given PFC priorities."""
    wanted = {int(p) for p in priorities}
    return [1 if p in wanted else 0 for p in PRIORITIES]


def roce_qos_mlnx_commands(
    text: str, iface: str, trust: str, priorities: list[int], tool: str = "mlnx_qos"
) -> list[list[str]]:
    """Return the mlnx_qos argv lists needed to reach trust + PFC from the current state."""
    current = roce_qos_parse(text)
    commands = []
    if current["trust"] != trust:
        commands.append([tool, "-i", iface, "--trust", trust])
    vector = roce_qos_pfc_vector(priorities)
    if current["pfc"] != vector:
        commands.append([tool, "-i", iface, "--pfc", ",".join(map(str, vector))])
    return commands


def roce_qos_sysfs_plan(lines: list[str]) -> dict[str, list[Any]]:
    """Split "path current wanted" lines into writes and missing paths.

    current is "missing" where the driver has no such file (skip and report)
    and "absent" for a configfs entry that has to be created first.
    """
    writes: list[dict[str, Any]] = []
    missing: list[str] = []
    for line in lines:
        path, current, wanted = line.rsplit(" ", 2)
        if current == "missing":
            missing.append(path)
        elif current != wanted:
            writes.append({"path": path, "value": wanted, "create": current == "absent"})
    return {"writes": writes, "missing": missing}


def roce_qos_ports(lines: list[str], interfaces: list[str]) -> list[dict[str, str]]:
    """Turn "dev port link_layer netdev" lines into the RoCE ports to configure.

    Only Ethernet link layers are RoCE. With interfaces given, keep those
    netdevs; otherwise every port that has a netdev.
    """
    ports = []
    for line in lines:
        fields = line.split()
        if len(fields) != 4 or fields[2] != "Ethernet":
            continue
        port = dict(zip(("dev", "port", "link_layer", "netdev"), fields, strict=True))
        _safe("RDMA device", port["dev"])
        if not port["port"].isdigit():
            raise UnsafeValueError(f"roce_qos: RDMA port {port['port']!r} of {port['dev']} "
                                   "is not a number")
        if (interfaces and port["netdev"] in interfaces) or (
            not interfaces and port["netdev"] != "-"
        ):
            if port["netdev"] != "-":
                _safe("interface", port["netdev"])
            ports.append(port)
    return ports


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        """Return the filters this plugin provides."""
        return {
            "roce_qos_parse": roce_qos_parse,
            "roce_qos_pfc_vector": roce_qos_pfc_vector,
            "roce_qos_mlnx_commands": roce_qos_mlnx_commands,
            "roce_qos_sysfs_plan": roce_qos_sysfs_plan,
            "roce_qos_ports": roce_qos_ports,
            "roce_qos_systemd_device": roce_qos_systemd_device,
        }
