"""Filters for the roce_qos role: the RoCE ports from node_facts, the PFC vector, unit names.

Reading and setting the state is the nodetune_roce_qos module's job.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.roce_qos import pfc_vector

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


def roce_qos_pfc_vector(priorities: list[int]) -> list[int]:
    """Return the 8-element enable vector for the given PFC priorities."""
    return pfc_vector(priorities)


def roce_qos_ports(rdma_devices: list[dict[str, Any]], interfaces: list[str]
                   ) -> list[dict[str, str]]:
    """The RoCE ports to configure, from node_facts' ``rdma_devices``.

    Only Ethernet link layers are RoCE. With interfaces given, keep those
    netdevs; otherwise every port that has a netdev.
    """
    ports = []
    for device in rdma_devices or []:
        for entry in device.get("ports") or []:
            if entry.get("link_layer") != "Ethernet":
                continue
            port = {"dev": str(device.get("name")), "port": str(entry.get("port")),
                    "link_layer": "Ethernet", "netdev": str(entry.get("netdev") or "-")}
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
            "roce_qos_pfc_vector": roce_qos_pfc_vector,
            "roce_qos_ports": roce_qos_ports,
            "roce_qos_systemd_device": roce_qos_systemd_device,
        }
