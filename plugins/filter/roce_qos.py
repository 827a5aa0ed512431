"""Filters for the roce_qos role: the RoCE ports from node_facts, the PFC vector, unit names.

Reading and setting the state is the nodetune_roce_qos module's job.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.roce_qos import (
    UnsafeValueError,
    pfc_vector,
    ports,
    safe_name,
)

__all__ = ["UnsafeValueError"]


def roce_qos_systemd_device(netdev: str) -> str:
    """The systemd device unit of a network interface, escaped as systemd-escape --path does.

    ``sys-subsystem-net-devices-<escaped name>.device``: characters other than
    ASCII letters, digits, ``:``, ``_`` and ``.`` become ``\\xNN`` (systemd.unit(5),
    "String Escaping for Inclusion in Unit Names").
    """
    name = safe_name("interface", str(netdev))
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
    """The RoCE ports to configure, from node_facts' ``rdma_devices``."""
    return ports(rdma_devices, interfaces)


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        """Return the filters this plugin provides."""
        return {
            "roce_qos_pfc_vector": roce_qos_pfc_vector,
            "roce_qos_ports": roce_qos_ports,
            "roce_qos_systemd_device": roce_qos_systemd_device,
        }
