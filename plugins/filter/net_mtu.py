"""Filters for the net_mtu role."""

from __future__ import annotations

from typing import Any


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
        return {"net_mtu_fabric_mismatches": net_mtu_fabric_mismatches}
