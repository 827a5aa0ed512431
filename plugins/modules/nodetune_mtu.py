#!/usr/bin/python
"""Choose, check and set interface MTUs; never the connection's interface unless allowed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nodetune_mtu
short_description: Resolve MTU requests to interfaces, check ranges, set the ones that differ
author:
  - nodetune maintainers (@nodetune)
description:
  - Each request selects interfaces by exact C(name), by C(name_regex), or with
    C(rdma=true) the interfaces backed by an RDMA device; later requests win.
  - Checks the MTU per link type (Ethernet 68-9216, IPoIB 2044/4092/65520) for every
    interface before changing any.
  - Interfaces holding one of I(connection_addresses) are skipped unless
    I(allow_connection_interface) is true.
options:
  interfaces:
    type: list
    elements: dict
    required: true
    description:
      - MTU requests, each with C(mtu) and one of C(name), C(name_regex) or C(rdma=true).
  connection_addresses:
    type: list
    elements: str
    default: []
    description: Addresses Ansible reaches the node on.
  connection_host:
    type: str
    description:
      - The name or address Ansible reaches the node by (C(ansible_host)), resolved on the
        node (like C(getent ahosts)); its addresses and C(SSH_CONNECTION)'s server address
        count as the connection's. Ignored when I(connection_addresses) is given.
  detect_connection:
    type: bool
    default: false
    description:
      - Without I(connection_addresses), take C(SSH_CONNECTION)'s server address from the
        module's environment (and I(connection_host)'s addresses) as the connection's.
  detect_persistence:
    type: bool
    default: false
    description:
      - Also report what can persist MTUs here (C(persistence)) - netplan files, active
        NetworkManager / systemd-networkd, ifupdown - and the first of them, else udev.
  allow_connection_interface:
    type: bool
    default: false
    description: Also change the connection's interface.
  udev_rules_dir:
    type: path
    default: /etc/udev/rules.d
    description: Reported on in C(persistence).
  udev_rules:
    type: path
    description:
      - With I(state=applied), keep this udev rules file (C(ATTR{mtu}) on C(add) for every
        managed interface, after I(udev_header)) when the persistence mechanism is udev -
        I(network_manager=udev), or C(auto) and nothing else detected - and some interface
        is managed. Written where it differs, with the file arguments I(mode), I(owner),
        I(group); its directory is created when missing. C(--diff) shows the change.
  udev_header:
    type: str
    default: ''
    description: Comment lines put first in I(udev_rules).
  network_manager:
    type: str
    default: auto
    description:
      - The persistence mechanism chosen (C(auto) takes the detected one); only C(udev)
        makes this module write I(udev_rules).
  sysfs_root:
    type: path
    default: /sys
    description: Where /sys is.
  state:
    type: str
    choices: [probed, applied]
    default: probed
    description: C(probed) only plans; C(applied) also sets the MTUs that differ.
  live:
    type: bool
    default: true
    description:
      - With I(state=applied), set the MTUs that differ on the live interfaces. C(false)
        leaves the live MTUs as they are (a node running jobs) and lists the changes left
        in C(deferred); the udev rules file is still kept.
extends_documentation_fragment: [ansible.builtin.files]
"""

EXAMPLES = r"""
- name: Plan only - which interfaces would change, and what persists MTUs here
  nodetune.cluster.nodetune_mtu:
    interfaces:
      - {name: eth1, mtu: 9000}
      - {name_regex: "^ens[0-9]+f[01]$", mtu: 9000}
    detect_connection: true
    detect_persistence: true
  register: mtu_plan

- name: Set 4092 on every RDMA-backed IPoIB interface, never the one SSH uses
  nodetune.cluster.nodetune_mtu:
    interfaces:
      - {rdma: true, mtu: 4092}
    connection_host: "{{ ansible_host | default(inventory_hostname) }}"
    detect_connection: true
    state: applied
"""

RETURN = r"""
plan:
  description: One entry per selected interface, sorted by name.
  type: list
  elements: dict
  returned: success
  contains:
    name:
      description: The interface.
      type: str
    kind:
      description: Its link type - C(ethernet), C(ipoib), C(loopback) or C(other).
      type: str
    before:
      description: Its MTU when the task started.
      type: int
    after:
      description: The MTU requested for it.
      type: int
    action:
      description:
        - C(ok) (already so), C(change) (set, or would be in check mode) or
          C(skipped_connection) (carries the connection; see I(allow_connection_interface)).
      type: str
managed:
  description: Interfaces the role owns (not the connection's) and their mtu.
  type: list
  elements: dict
  returned: success
missing:
  description: Names requested that the node does not have.
  type: list
  elements: str
  returned: success
unmatched:
  description: One message per request that selects no interface here.
  type: list
  elements: str
  returned: success
connection_interfaces:
  description: Interfaces holding one of the connection's addresses.
  type: list
  elements: str
  returned: success
connection_addresses:
  description: Addresses taken as the connection's.
  type: list
  elements: str
  returned: success
persistence:
  description:
    - With I(detect_persistence) - netplan, networkmanager, systemd-networkd, ifupdown
      (booleans), detected (the first found, else udev); always - udev_rules_dir (whether
      the udev rules directory exists) and netplan_file (whether the netplan file the role
      writes, /etc/netplan/90-nodetune-mtu.yaml, exists).
  type: dict
  returned: success
files_changed:
  description: I(udev_rules) when written (or, in check mode, would be).
  type: list
  elements: str
  returned: with I(state=applied) when udev persists the MTUs and some interface is managed
deferred:
  description:
    - With I(live=false), the live changes left undone (C(name), C(before), C(after)),
      for a later call with I(live=true) or the next boot to make.
  type: list
  elements: dict
  returned: with I(state=applied) and I(live=false)
"""

import json
import os
import re
import socket
import stat
from typing import Any

# read_links, select: shared with the input checks (the roles' filters, on node_facts'
# interfaces) and with `nodetune check`, which imports module_utils/nics.py by path.
from ansible_collections.nodetune.cluster.plugins.module_utils.nics import (
    read_links,
    select,
    unmatched_requests,
)

# Ethernet: 68 is the IPv4 minimum (RFC 791); 9216 the largest jumbo frame
# common switch ASICs accept. IPoIB: datagram mode is the IB MTU minus the
# 4-byte IPoIB header (2044, 4092); connected mode allows 65520 (kernel
# Documentation/infiniband/ipoib.rst).
ETHERNET_RANGE = (68, 9216)
IPOIB_MTUS = (2044, 4092, 65520)


# Names the role can write into udev, netplan, networkd and shell files; the
# same rule as the net_mtu_ifname filter (a quote or comma would add udev keys).
SAFE_IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,14}")


def check_name(name: str) -> str | None:
    """Return an error for an interface name that cannot be written safely."""
    if SAFE_IFNAME.fullmatch(name):
        return None
    return (f"net_mtu_interfaces: interface {name!r} has characters nodetune does not write "
            "into udev/netplan/shell files (only letters, digits and _.@+-); rename it or "
            "narrow name_regex to leave it out")


def check_range(name: str, kind: object, mtu: int) -> str | None:
    """Return an error for an MTU the link type cannot take, else None."""
    if kind == "ipoib" and mtu not in IPOIB_MTUS:
        allowed = ", ".join(map(str, IPOIB_MTUS))
        return f"net_mtu_interfaces: {name} is IPoIB; MTU {mtu} is not one of {allowed}"
    if kind != "ipoib" and not ETHERNET_RANGE[0] <= mtu <= ETHERNET_RANGE[1]:
        low, high = ETHERNET_RANGE
        return f"net_mtu_interfaces: {name} is {kind}; MTU {mtu} is outside {low}-{high}"
    return None


def connection_interfaces(addr_json: str, addresses: list[str]) -> set[str]:
    """Names of interfaces that hold any of addresses, from `ip -j addr` output."""
    held = set()
    for link in json.loads(addr_json or "[]"):
        for info in link.get("addr_info", []):
            if info.get("local") in addresses:
                held.add(link["ifname"])
    return held


def resolve(host: str) -> list[str]:
    """Addresses ``host`` resolves to on this node (what `getent ahosts` lists), in order."""
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def detect_addresses(override: list[str], ssh_connection: str, host: str | None) -> list[str]:
    """The connection's addresses: the override, else SSH_CONNECTION's server address and
    the addresses ``host`` resolves to."""
    if override:
        return list(override)
    addresses = ssh_connection.split()[2:3]
    if host:
        addresses += resolve(host)
    return list(dict.fromkeys(addresses))


# Written by the role itself; not a sign that netplan manages the node.
NETPLAN_DIR = "/etc/netplan"
NETPLAN_OWN = "90-nodetune-mtu.yaml"


def netplan_configured(etc_netplan: str) -> bool:
    """Whether /etc/netplan holds a configuration file (*.yaml, *.yml) other than ours."""
    try:
        names = os.listdir(etc_netplan)
    except OSError:
        return False
    return any(name.endswith((".yaml", ".yml")) and name != NETPLAN_OWN
               and not name.startswith(".")
               and stat.S_ISREG(os.lstat(os.path.join(etc_netplan, name)).st_mode)
               for name in names)


def choose_manager(found: dict[str, bool]) -> str:
    """The first persistence mechanism found, in the role's order; udev when none is."""
    for name in ("netplan", "networkmanager", "systemd-networkd", "ifupdown"):
        if found.get(name):
            return name
    return "udev"


def persistence_state(module: Any, udev_rules_dir: str) -> dict[str, object]:
    """What can persist MTUs on this node, read in one go (files, then systemctl)."""
    found = {"netplan": netplan_configured(NETPLAN_DIR),
             "ifupdown": all(os.path.lexists(p) for p in ("/etc/network/interfaces",
                                                          "/sbin/ifup"))}
    states = ["", ""]
    systemctl = module.get_bin_path("systemctl")
    if systemctl:
        _rc, out, _err = module.run_command(
            [systemctl, "is-active", "NetworkManager.service", "systemd-networkd.service"])
        states = [*out.splitlines(), "", ""][:2]
    found["networkmanager"] = states[0].strip() == "active"
    found["systemd-networkd"] = states[1].strip() == "active"
    return {**found, "detected": choose_manager(found),
            "udev_rules_dir": os.path.isdir(udev_rules_dir)}


def plan(
    wanted: dict[str, int], links: dict[str, dict[str, object]], conn: set[str], allow_conn: bool
) -> list[dict[str, object]]:
    """Return one plan entry per selected interface."""
    entries = []
    for name, mtu in sorted(wanted.items()):
        before = links[name]["mtu"]
        if name in conn and not allow_conn:
            action = "skipped_connection"
        elif before == mtu:
            action = "ok"
        else:
            action = "change"
        entries.append(
            {
                "name": name,
                "kind": links[name]["kind"],
                "before": before,
                "after": mtu,
                "action": action,
            }
        )
    return entries


def udev_rules(header: str, managed: list[dict[str, object]]) -> str:
    """The udev rules file for ``managed`` links (names already passed check_name).

    The same text as the role's template etc/udev/rules.d/90-nodetune-mtu.rules.j2,
    which systemd-networkd nodes still use for the links networkd does not manage.
    """
    head = header if not header or header.endswith("\n") else header + "\n"
    return head + "# Names are checked by net_mtu_ifname: a quote or comma would add udev keys.\n" \
        + "".join(f'ACTION=="add", SUBSYSTEM=="net", KERNEL=="{link["name"]}", '
                  f'ATTR{{mtu}}="{int(str(link["mtu"]))}"\n' for link in managed)


def persist_udev(module: Any, params: dict[str, Any], result: dict[str, Any]) -> list[Any]:
    """Keep the udev rules file when udev is the persistence mechanism; the file diffs."""
    from ansible_collections.nodetune.cluster.plugins.module_utils.files import (  # pylint: disable=import-outside-toplevel
        sync_files,
    )

    manager = params["network_manager"]
    if manager == "auto":
        manager = result["persistence"].get("detected", "")
    if not params["udev_rules"] or manager != "udev" or not result["managed"]:
        return []
    path = params["udev_rules"]
    folder = os.path.dirname(path)
    diffs: list[Any] = []
    if not os.path.isdir(folder):
        diffs.append({"before": {"path": folder, "state": "absent"},
                      "after": {"path": folder, "state": "directory"}})
        if not module.check_mode:
            os.makedirs(folder, mode=0o755, exist_ok=True)
    # In check mode with no directory yet, sync_files reads the file as absent and
    # predicts it (it writes nothing then).
    changed, file_diffs = sync_files(module, [{
        "path": path, "content": udev_rules(params["udev_header"], result["managed"])}])
    diffs += file_diffs
    result["files_changed"] = changed
    return diffs if changed else []


def main() -> None:
    """Run the module."""
    from ansible.module_utils.basic import AnsibleModule  # pylint: disable=import-outside-toplevel

    module = AnsibleModule(
        argument_spec={
            "interfaces": {"type": "list", "elements": "dict", "required": True},
            "connection_addresses": {"type": "list", "elements": "str", "default": []},
            "connection_host": {"type": "str"},
            "detect_connection": {"type": "bool", "default": False},
            "detect_persistence": {"type": "bool", "default": False},
            "udev_rules_dir": {"type": "path", "default": "/etc/udev/rules.d"},
            "udev_rules": {"type": "path"},
            "udev_header": {"type": "str", "default": ""},
            "network_manager": {"type": "str", "default": "auto"},
            "allow_connection_interface": {"type": "bool", "default": False},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "state": {"type": "str", "choices": ["probed", "applied"], "default": "probed"},
            "live": {"type": "bool", "default": True},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    params = module.params
    links = read_links(params["sysfs_root"])
    try:
        wanted, missing = select(params["interfaces"], links)
    except re.error as exc:
        module.fail_json(msg=f"net_mtu_interfaces: a name_regex is not a valid regular "
                             f"expression ({exc})")
    errors = [err for name in wanted if (err := check_name(name))]
    errors += [
        err for name, mtu in wanted.items() if (err := check_range(name, links[name]["kind"], mtu))
    ]
    if errors:
        module.fail_json(msg="; ".join(errors))
    conn: set[str] = set()
    addresses = list(params["connection_addresses"])
    if not addresses and params["detect_connection"]:
        addresses = detect_addresses([], os.environ.get("SSH_CONNECTION", ""),
                                     params["connection_host"])
    if addresses:
        rc, out, err = module.run_command(["ip", "-j", "addr", "show"])
        if rc != 0:
            module.fail_json(msg=f"net_mtu: cannot list addresses: {err}")
        conn = connection_interfaces(out, addresses)
    entries = plan(wanted, links, conn, params["allow_connection_interface"])
    changes = [e for e in entries if e["action"] == "change"]
    managed = [
        {"name": e["name"], "kind": e["kind"], "mtu": e["after"]}
        for e in entries
        if e["action"] != "skipped_connection"
    ]
    result = {
        "changed": False,
        "plan": entries,
        "managed": managed,
        "missing": missing,
        "unmatched": unmatched_requests(params["interfaces"], links),
        "connection_interfaces": sorted(conn),
        "connection_addresses": addresses,
        "persistence": (persistence_state(module, params["udev_rules_dir"])
                        if params["detect_persistence"]
                        else {"udev_rules_dir": os.path.isdir(params["udev_rules_dir"])}),
    }
    # The role removes its netplan file where netplan has nothing to hold (a file an
    # earlier run left), and needs no call where there is none.
    result["persistence"]["netplan_file"] = os.path.lexists(
        os.path.join(NETPLAN_DIR, NETPLAN_OWN))
    diffs: list[Any] = []
    if params["state"] == "applied" and not params["live"]:
        # The live MTU waits (a node running jobs); the persistent configuration does not.
        result["deferred"] = [{"name": e["name"], "before": e["before"], "after": e["after"]}
                              for e in changes]
        changes = []
    if params["state"] == "applied" and changes:
        diffs.append({
            "before": "".join(f"{e['name']} mtu {e['before']}\n" for e in changes),
            "after": "".join(f"{e['name']} mtu {e['after']}\n" for e in changes),
        })
        if not module.check_mode:
            for entry in changes:
                module.run_command(
                    ["ip", "link", "set", "dev", entry["name"], "mtu", str(entry["after"])],
                    check_rc=True,
                )
    if params["state"] == "applied":
        # Persisted after the live change, as the role's other mechanisms are.
        diffs += persist_udev(module, params, result)
    if diffs:
        result["changed"] = True
        result["diff"] = diffs[0] if len(diffs) == 1 else diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
