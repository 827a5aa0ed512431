"""Filters for the net_mtu role."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.nics import (
    from_facts,
    node_nics_text,
    unmatched_requests,
)

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


# Link kinds netplan holds under ``ethernets``: IPoIB links are ethernets to netplan
# too (netplan.io >= 0.105 added IPoIB support there, "infiniband-mode").
NETPLAN_KINDS = ("ethernet", "ipoib")


def net_mtu_netplan(managed: Any) -> dict[str, Any]:
    """The netplan document for the links the role manages, or ``{}`` with none to hold.

    ``managed`` is the role's ``net_mtu_result`` (name, kind, mtu). Every name passes
    :func:`net_mtu_ifname` and every MTU is an integer, and the template dumps the
    document with a YAML emitter: no value is written as text of its own. netplan
    refuses an ``ethernets`` key with nothing under it (and then every interface at
    boot), so the role writes no file at all for ``{}``.

    Raises:
        UnsafeValueError: a name or MTU that cannot be written.
    """
    ethernets: dict[str, dict[str, int]] = {}
    for link in managed or []:
        if link.get("kind") not in NETPLAN_KINDS:
            continue
        mtu = str(link.get("mtu"))
        if not re.fullmatch(r"[0-9]{1,5}", mtu):
            raise UnsafeValueError(f"net_mtu: MTU {mtu!r} of {link.get('name')!r} is not "
                                   "an integer; not written into netplan YAML")
        ethernets[net_mtu_ifname(link.get("name"))] = {"mtu": int(mtu)}
    return {"network": {"version": 2, "ethernets": ethernets}} if ethernets else {}


def net_mtu_absent_nics(requests: Any, facts: Any) -> str:
    """Why ``net_mtu_interfaces`` does not fit this node (``""`` when every request selects
    an interface here), naming each request and what the node has.

    ``facts`` is node_facts' fact (``ansible_local.nodetune``: its interfaces and RDMA
    devices). A request that selects nothing would be a silent no-op: the MTU the
    operator asked for never set.

    Raises:
        ValueError: ``facts`` is not node_facts' fact (see ``from_facts``).
    """
    links, devices = from_facts(facts)
    problems = unmatched_requests(list(requests or []), links)
    if not problems:
        return ""
    return ("; ".join(problems) + f"; {node_nics_text(list(links), devices)}"
            "; set net_mtu_allow_absent_nics: true where nodes differ and a name may be absent")


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
        return {"net_mtu_absent_nics": net_mtu_absent_nics,
                "net_mtu_fabric_mismatches": net_mtu_fabric_mismatches,
                "net_mtu_ifname": net_mtu_ifname,
                "net_mtu_netplan": net_mtu_netplan}
