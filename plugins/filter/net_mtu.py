"""Filters for the net_mtu role."""

from __future__ import annotations

import re
from typing import Any

# Interface names nodetune writes into udev rules, netplan YAML, networkd
# drop-ins and if-up.d shell hooks. The kernel allows nearly any byte but '/',
# ':' and whitespace (dev_valid_name), including quotes, commas and '=',
# which would break out of a udev value; such names are refused, not written.
SAFE_IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,14}")


class UnsafeValueError(ValueError):
    """A value that cannot be written safely into the target file format."""


def net_mtu_ifname(name: object) -> str:
    """Return ``name`` when it is safe in every file the role writes, else raise.

    Raises:
        UnsafeValueError: the name has characters outside letters, digits and ``_.@+-``
            or is longer than the kernel's 15 characters.
    """
    text = str(name)
    if not SAFE_IFNAME.fullmatch(text):
        raise UnsafeValueError(
            f"net_mtu: interface name {text!r} is not written into udev/netplan/networkd/"
            "shell files: only letters, digits and _.@+- (at most 15) are allowed; "
            "rename the interface or leave it out of net_mtu_interfaces")
    return text


def net_mtu_fabric_mismatches(hostvars: Any, hosts: list[str]) -> list[str]:
    """Return one message per fabric whose hosts ended up with different MTUs.

    Each host contributes the MTUs of the interfaces the role manages on it
    (fact ``net_mtu_result``), grouped by its ``net_mtu_fabric``. Hosts that
    manage no interface are left out.
    """
    fabrics: dict[str, dict[str, list[int]]] = {}
    for host in hosts:
        hv = hostvars[host]
        result = hv.get("net_mtu_result") or []
        if not result:
            continue
        fabric = str(hv.get("net_mtu_fabric", "default"))
        fabrics.setdefault(fabric, {})[host] = sorted({int(entry["mtu"]) for entry in result})
    messages = []
    for fabric, per_host in sorted(fabrics.items()):
        if len({tuple(mtus) for mtus in per_host.values()}) > 1:
            detail = ", ".join(
                f"{host}: {'/'.join(map(str, mtus))}" for host, mtus in sorted(per_host.items())
            )
            messages.append(f"fabric '{fabric}' has nodes with different MTUs ({detail})")
    return messages


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        """Return the filters this plugin provides."""
        return {"net_mtu_fabric_mismatches": net_mtu_fabric_mismatches,
                "net_mtu_ifname": net_mtu_ifname}
