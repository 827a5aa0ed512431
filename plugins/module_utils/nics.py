"""A node's network interfaces and RDMA devices, and which names in the inventory match them.

Pure and stdlib-only: the modules run it on the node (AnsiballZ bundles it), the
roles' filters on the controller (on node_facts' fact: :func:`from_facts`), and
``nodetune check`` imports this file by path. Two kinds of name lists are matched:

- ``net_mtu_interfaces`` requests: an exact ``name``, a ``name_regex``
  (``re.search``), or ``rdma: true`` (interfaces backed by an RDMA device);
- NCCL's ``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` lists, as NCCL reads them
  (NVIDIA/nccl ``src/misc/utils.cc`` parseStringList and matchIfList, and the
  callers in ``src/misc/socket.cc`` and ``src/transport/net_ib.cc``): a leading
  ``^`` excludes, then a leading ``=`` asks for exact names instead of
  prefixes; entries are comma-separated; ``NAME:PORT`` names one port of an
  HCA (a socket interface has no port, so any port matches it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

# ARPHRD_* link types from include/uapi/linux/if_arp.h.
ARPHRD = {1: "ethernet", 32: "ipoib", 772: "loopback"}


def read_links(sysfs_root: str) -> dict[str, dict[str, Any]]:
    """Read name -> {mtu, kind, rdma} for every netdev under sysfs_root/class/net.

    node_facts' fact script reads the same (its ``interfaces``, which :func:`from_facts`
    reads); the two cannot share code (this file is bundled into a module run, that
    script is installed alone and run by ``setup``): tests/unit/test_nics.py holds them
    to one answer on one sysfs tree.
    """
    links: dict[str, dict[str, Any]] = {}
    base = os.path.join(sysfs_root, "class", "net")
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        try:
            with open(os.path.join(path, "mtu"), encoding="utf-8") as handle:
                mtu = int(handle.read().strip())
            with open(os.path.join(path, "type"), encoding="utf-8") as handle:
                kind = ARPHRD.get(int(handle.read().strip()), "other")
        except (OSError, ValueError):
            continue
        rdma = os.path.isdir(os.path.join(path, "device", "infiniband"))
        links[name] = {"mtu": mtu, "kind": kind, "rdma": rdma}
    return links


# The node_facts layout (its fact script's SCHEMA) that has what from_facts reads.
FACTS_SCHEMA = 2


def from_facts(facts: Any) -> tuple[dict[str, dict[str, Any]], dict[str, list[int]]]:
    """node_facts' fact (``ansible_local.nodetune``) as (links, RDMA devices).

    Links as :func:`read_links` reads them (name -> mtu, kind, rdma), devices as
    name -> port numbers: what the matchers below compare the inventory with.

    Raises:
        ValueError: no fact of node_facts' layout FACTS_SCHEMA or later (a role
            compares names only after including node_facts).
    """
    if not isinstance(facts, Mapping) or not str(facts.get("schema", "")).isdigit() \
            or int(facts["schema"]) < FACTS_SCHEMA:
        raise ValueError("the node's interfaces are unknown: node_facts' fact (ansible_local."
                         f"nodetune, schema {FACTS_SCHEMA} or later) was not gathered")
    links: dict[str, dict[str, Any]] = {}
    for link in facts.get("interfaces") or []:
        if isinstance(link, Mapping) and link.get("name"):
            links[str(link["name"])] = {"mtu": int(link.get("mtu") or 0),
                                        "kind": ARPHRD.get(int(link.get("type") or 0), "other"),
                                        "rdma": bool(link.get("rdma"))}
    devices = {str(dev["name"]): sorted(int(port["port"]) for port in dev.get("ports") or [])
               for dev in facts.get("rdma_devices") or []
               if isinstance(dev, Mapping) and dev.get("name")}
    return links, devices


# --- net_mtu_interfaces requests ---------------------------------------------------------


def request_selects(request: dict[str, Any], name: str, link: dict[str, Any]) -> bool:
    """Whether one net_mtu_interfaces request selects the link ``name``."""
    if request.get("name"):
        return name == request["name"]
    if request.get("name_regex"):
        return re.search(str(request["name_regex"]), name) is not None
    return bool(request.get("rdma")) and bool(link.get("rdma"))


def select(
    requests: list[dict[str, Any]], links: dict[str, dict[str, Any]]
) -> tuple[dict[str, int], list[str]]:
    """Return (interface -> wanted MTU, requested names the node lacks); later requests win."""
    wanted: dict[str, int] = {}
    missing: list[str] = []
    for request in requests:
        mtu = int(str(request["mtu"]))
        hits = [name for name, link in links.items() if request_selects(request, name, link)]
        if request.get("name") and not hits:
            missing.append(str(request["name"]))
        for name in hits:
            wanted[name] = mtu
    return wanted, missing


def describe_request(request: dict[str, Any]) -> str:
    """The request's selector as the inventory writes it: ``name: eth1``, ``rdma: true``."""
    for key in ("name", "name_regex"):
        if request.get(key):
            return f"{key}: {request[key]}"
    return "rdma: true"


def unmatched_requests(
    requests: list[dict[str, Any]], links: dict[str, dict[str, Any]]
) -> list[str]:
    """One message per request that selects no link here (``net_mtu_interfaces[i] ...``).

    A regex that does not compile is named too: it could never select anything.
    """
    problems = []
    for index, request in enumerate(requests):
        where = f"net_mtu_interfaces[{index}] ({describe_request(request)})"
        try:
            if any(request_selects(request, name, link) for name, link in links.items()):
                continue
        except re.error as exc:
            problems.append(f"{where}: not a valid regular expression ({exc})")
            continue
        if request.get("name"):
            problems.append(f"{where}: no such interface on this node")
        elif request.get("name_regex"):
            problems.append(f"{where}: matches no interface on this node")
        else:
            problems.append(f"{where}: no interface on this node is backed by an RDMA device")
    return problems


# --- NCCL interface / HCA lists ----------------------------------------------------------


class NcclEntry(NamedTuple):
    """One entry of an NCCL list: a name (prefix unless the list is exact) and a port."""

    name: str
    port: int | None


class NcclList(NamedTuple):
    """An NCCL_SOCKET_IFNAME / NCCL_IB_HCA value, parsed."""

    exclude: bool
    exact: bool
    entries: tuple[NcclEntry, ...]


def parse_nccl_list(value: str) -> NcclList:
    """Parse ``^=mlx5_0:1,mlx5_1`` as NCCL does (``^`` first, then ``=``)."""
    text = str(value)
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries = []
    for part in text.split(","):
        name, sep, port = part.partition(":")
        if not name:
            continue
        digits = re.match(r"\d*", port)
        # NCCL reads the port with atoi: digits up to the first other character.
        entries.append(NcclEntry(name, (int(digits.group() or 0) if digits else 0)
                                 if sep else None))
    return NcclList(exclude, exact, tuple(entries))


def _entry_matches(entry: NcclEntry, name: str, port: int | None, exact: bool) -> bool:
    named = name == entry.name if exact else name.startswith(entry.name)
    return named and (entry.port is None or port is None or entry.port == port)


def nccl_selected(value: str, candidates: list[tuple[str, int | None]]) -> list[str]:
    """The candidates (name, port) NCCL would use under ``value``, as ``name`` or ``name:port``."""
    parsed = parse_nccl_list(value)
    out = []
    for name, port in candidates:
        hit = not parsed.entries or any(_entry_matches(e, name, port, parsed.exact)
                                        for e in parsed.entries)
        if hit != parsed.exclude:
            out.append(name if port is None else f"{name}:{port}")
    return out


def nccl_absent(value: str, candidates: list[tuple[str, int | None]]) -> list[str]:
    """The entries of ``value`` that match none of the candidates (none for an exclusion list,
    where an entry the node lacks excludes nothing and harms nothing)."""
    parsed = parse_nccl_list(value)
    if parsed.exclude:
        return []
    return [e.name if e.port is None else f"{e.name}:{e.port}" for e in parsed.entries
            if not any(_entry_matches(e, name, port, parsed.exact) for name, port in candidates)]


def socket_candidates(interfaces: list[str]) -> list[tuple[str, int | None]]:
    """The node's interfaces as NCCL_SOCKET_IFNAME candidates (no port)."""
    return [(name, None) for name in sorted(interfaces)]


def hca_candidates(devices: dict[str, list[int]]) -> list[tuple[str, int | None]]:
    """The node's RDMA device ports as NCCL_IB_HCA candidates."""
    return [(name, port) for name, ports in sorted(devices.items()) for port in ports]


def nccl_problem(key: str, value: str, candidates: list[tuple[str, int | None]]) -> str | None:
    """Why ``key=value`` does not fit this node's interfaces or HCAs, or None.

    Names that match nothing (NCCL ignores them, and with none left it fails to
    initialise or falls back to sockets), or an exclusion that leaves nothing of
    what the node has.
    """
    absent = nccl_absent(value, candidates)
    what = "interface" if key == "NCCL_SOCKET_IFNAME" else "RDMA device port"
    if absent:
        return f"{', '.join(absent)} matches no {what} on this node"
    if candidates and not nccl_selected(value, candidates):
        return f"leaves no {what} of this node for NCCL"
    return None


def node_nics_text(interfaces: list[str], devices: dict[str, list[int]]) -> str:
    """``this node has interfaces eth0, eth1 and RDMA devices mlx5_0 (port 1)``."""
    ifaces = ", ".join(sorted(n for n in interfaces if n != "lo")) or "none"
    hcas = ", ".join(f"{name} (port{'s' if len(ports) != 1 else ''} "
                     f"{', '.join(map(str, ports)) or 'none'})"
                     for name, ports in sorted(devices.items())) or "none"
    return f"this node has interfaces {ifaces} and RDMA devices {hcas}"
