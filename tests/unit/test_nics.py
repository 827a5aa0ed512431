"""Names in the inventory against a node's interfaces and RDMA devices (module_utils/nics.py).

The roles' input checks read the node's interfaces from node_facts' fact (from_facts);
the MTU module reads sysfs itself (read_links): both are run on one stand-in sysfs tree.

NCCL's list syntax is matched as NCCL reads it (NVIDIA/nccl src/misc/utils.cc
parseStringList / matchIfList): ``^`` excludes, ``=`` asks for exact names
(else each entry is a prefix), ``NAME:PORT`` names one HCA port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import load_plugin

nics = load_plugin("plugins/module_utils/nics.py")
net_mtu_filter = load_plugin("plugins/filter/net_mtu.py")
nccl_filter = load_plugin("plugins/filter/nccl_config.py")
FACT_SCRIPT = Path(__file__).resolve().parents[2] / "roles/node_facts/files/nodetune.fact"

IFACES = ["lo", "eth0", "ens1f0np0", "ens1f1np1", "ib0"]
HCAS = {"mlx5_0": [1], "mlx5_1": [1], "mlx5_10": [1, 2]}
SOCKETS = nics.socket_candidates(IFACES)
PORTS = nics.hca_candidates(HCAS)


@pytest.mark.parametrize(("value", "parsed"), [
    ("eth0", (False, False, [("eth0", None)])),
    ("=eth0,ens1", (False, True, [("eth0", None), ("ens1", None)])),
    ("^lo,docker", (True, False, [("lo", None), ("docker", None)])),
    ("^=mlx5_0:1,mlx5_1", (True, True, [("mlx5_0", 1), ("mlx5_1", None)])),
    ("mlx5_0:1x,,mlx5_1:", (False, False, [("mlx5_0", 1), ("mlx5_1", 0)])),
])
def test_nccl_lists_parse_as_nccl_reads_them(value: str, parsed: tuple[Any, ...]) -> None:
    got = nics.parse_nccl_list(value)
    assert (got.exclude, got.exact, [tuple(e) for e in got.entries]) == (
        parsed[0], parsed[1], parsed[2])


@pytest.mark.parametrize(("value", "selected"), [
    ("ens", ["ens1f0np0", "ens1f1np1"]),              # a prefix
    ("=ens", []),                                     # exact: no interface is called "ens"
    ("=ens1f0np0", ["ens1f0np0"]),
    ("^lo,docker", ["ens1f0np0", "ens1f1np1", "eth0", "ib0"]),
    ("^=ens1f0np0,lo", ["ens1f1np1", "eth0", "ib0"]),
])
def test_socket_ifname_selects_what_nccl_would(value: str, selected: list[str]) -> None:
    assert nics.nccl_selected(value, SOCKETS) == selected


@pytest.mark.parametrize(("value", "selected"), [
    ("mlx5_1", ["mlx5_1:1", "mlx5_10:1", "mlx5_10:2"]),  # mlx5_1 is a prefix of mlx5_10
    ("=mlx5_1", ["mlx5_1:1"]),
    ("=mlx5_10:2", ["mlx5_10:2"]),
    ("mlx5_0:1,mlx5_1:1", ["mlx5_0:1", "mlx5_1:1", "mlx5_10:1"]),
    ("^=mlx5_0", ["mlx5_1:1", "mlx5_10:1", "mlx5_10:2"]),
])
def test_ib_hca_selects_what_nccl_would(value: str, selected: list[str]) -> None:
    assert nics.nccl_selected(value, PORTS) == selected


@pytest.mark.parametrize(("key", "value", "candidates", "problem"), [
    ("NCCL_SOCKET_IFNAME", "=ens1f0np0", SOCKETS, None),
    ("NCCL_SOCKET_IFNAME", "=ens1f0np0", nics.socket_candidates(["lo", "eth0", "eth1"]),
     "ens1f0np0 matches no interface on this node"),
    ("NCCL_SOCKET_IFNAME", "eth", nics.socket_candidates(["eth1"]), None),
    # An exclusion of names the node lacks harms nothing ...
    ("NCCL_SOCKET_IFNAME", "^docker,virbr", SOCKETS, None),
    # ... but one that excludes everything the node has leaves NCCL nothing.
    ("NCCL_SOCKET_IFNAME", "^e,l,i", SOCKETS, "leaves no interface of this node for NCCL"),
    ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1", PORTS, None),
    ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1", [], "mlx5_0:1, mlx5_1:1 matches no RDMA device port"),
    ("NCCL_IB_HCA", "=mlx5_0:2", PORTS, "mlx5_0:2 matches no RDMA device port"),
    ("NCCL_IB_HCA", "=mlx5", PORTS, "mlx5 matches no RDMA device port"),
    ("NCCL_IB_HCA", "^mlx5_3", [], None),  # no HCA at all: an exclusion asks for nothing
])
def test_nccl_problem(key: str, value: str, candidates: list[Any], problem: str | None) -> None:
    got = nics.nccl_problem(key, value, candidates)
    assert got == problem or (problem is not None and got is not None and problem in got), got


LINKS = {"lo": {"kind": "loopback", "rdma": False}, "eth0": {"kind": "ethernet", "rdma": False},
         "eth1": {"kind": "ethernet", "rdma": False}}


def test_mtu_requests_that_select_nothing_are_named() -> None:
    requests = [{"name": "eth1", "mtu": 9000}, {"name": "ens1f0np0", "mtu": 9000},
                {"name_regex": "^ens", "mtu": 9000}, {"rdma": True, "mtu": 9000},
                {"name_regex": "^eth[01]$", "mtu": 9000}, {"name_regex": "(", "mtu": 9000}]
    problems = nics.unmatched_requests(requests, LINKS)
    assert problems[:3] == [
        "net_mtu_interfaces[1] (name: ens1f0np0): no such interface on this node",
        "net_mtu_interfaces[2] (name_regex: ^ens): matches no interface on this node",
        "net_mtu_interfaces[3] (rdma: true): no interface on this node is backed by an RDMA "
        "device"]
    assert problems[3].startswith("net_mtu_interfaces[5] (name_regex: (): not a valid regular")
    assert len(problems) == 4


def test_select_is_the_roles_selection() -> None:
    wanted, missing = nics.select([{"name_regex": "^eth", "mtu": 9000},
                                   {"name": "eth1", "mtu": 1500},
                                   {"name": "ens9", "mtu": 9000}], LINKS)
    assert wanted == {"eth0": 9000, "eth1": 1500} and missing == ["ens9"]


def _node_facts(sysfs: Path) -> dict[str, Any]:
    """node_facts' fact script, run on the sysfs tree ``sysfs`` (its /proc is empty)."""
    out = subprocess.run([sys.executable, str(FACT_SCRIPT)], capture_output=True, text=True,
                         check=True, env={**os.environ, "PATH": "/nonexistent",
                                          "NODETUNE_FACTS_SYSFS": str(sysfs),
                                          "NODETUNE_FACTS_PROCFS": str(sysfs / "none")})
    facts: dict[str, Any] = json.loads(out.stdout)
    return facts


def test_node_facts_give_the_links_and_ports_sysfs_has(tmp_path: Path) -> None:
    """Two readers of /sys/class/net that cannot share code: the MTU module reads sysfs
    itself (read_links, bundled into the module, run on the node after earlier changes),
    the roles' input checks read node_facts' fact (its script, installed alone under
    facts.d and run by setup, can import neither module_utils nor nodetune). Held to one
    answer on one tree of the real layout: the same interfaces in the same order (the
    loopback too, not the bonding driver's file), kinds, MTUs, RDMA backing and ports."""
    for name, kind, rdma, mtu in (("lo", 772, False, 65536), ("eth0", 1, False, 9000),
                                  ("ib0", 32, True, 2044), ("ib0.8001", 32, True, 4092),
                                  ("bond0", 1, False, 1500), ("tun0", 65534, False, 1400)):
        # A netdev is a link to its device's directory, as in sysfs.
        link = tmp_path / "devices/virtual/net" / name
        link.mkdir(parents=True)
        (link / "mtu").write_text(f"{mtu}\n")
        (link / "type").write_text(f"{kind}\n")
        if rdma:
            (link / "device/infiniband/mlx5_0").mkdir(parents=True)
        (tmp_path / "class/net").mkdir(parents=True, exist_ok=True)
        (tmp_path / "class/net" / name).symlink_to(link)
    (tmp_path / "class/net/bonding_masters").write_text("bond0\n")  # not a netdev
    for port in ("1", "2"):
        (tmp_path / "class/infiniband/mlx5_0/ports" / port).mkdir(parents=True)
    (tmp_path / "class/infiniband/mlx5_1").mkdir()  # a device without ports
    links = {"bond0": {"mtu": 1500, "kind": "ethernet", "rdma": False},
             "eth0": {"mtu": 9000, "kind": "ethernet", "rdma": False},
             "ib0": {"mtu": 2044, "kind": "ipoib", "rdma": True},
             "ib0.8001": {"mtu": 4092, "kind": "ipoib", "rdma": True},
             "lo": {"mtu": 65536, "kind": "loopback", "rdma": False},
             "tun0": {"mtu": 1400, "kind": "other", "rdma": False}}
    read = nics.read_links(str(tmp_path))
    facts, devices = nics.from_facts(_node_facts(tmp_path))
    assert list(read.items()) == list(facts.items()) == list(links.items())
    assert devices == {"mlx5_0": [1, 2], "mlx5_1": []}


@pytest.mark.parametrize("facts", [None, {}, {"schema": 1, "interfaces": []}, "text"])
def test_facts_of_an_older_script_or_none_are_refused_not_read_as_no_interface(
        facts: Any) -> None:
    with pytest.raises(ValueError, match=r"node_facts' fact .* was not gathered"):
        nics.from_facts(facts)


def test_the_roles_messages_name_the_variable_and_what_the_node_has() -> None:
    # node_facts' fact, as its script reports the interfaces of LINKS.
    node = {"schema": 2, "rdma_devices": [], "interfaces": [
        {"name": name, "mtu": 1500, "type": {"loopback": 772}.get(link["kind"], 1),
         "rdma": link["rdma"]} for name, link in LINKS.items()]}
    msg = net_mtu_filter.net_mtu_absent_nics([{"rdma": True, "mtu": 9000}], node)
    assert msg == ("net_mtu_interfaces[0] (rdma: true): no interface on this node is backed by "
                   "an RDMA device; this node has interfaces eth0, eth1 and RDMA devices none; "
                   "set net_mtu_allow_absent_nics: true where nodes differ and a name may be "
                   "absent")
    assert net_mtu_filter.net_mtu_absent_nics([{"name": "eth1", "mtu": 9000}], node) == ""
    msg = nccl_filter.nccl_config_absent_nics(
        {"NCCL_SOCKET_IFNAME": "=ens1f0np0", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_DEBUG": "WARN"},
        {"NCCL_SOCKET_IFNAME": "nccl_config_socket_ifname"}, node)
    assert msg.startswith(
        "nccl_config_socket_ifname (NCCL_SOCKET_IFNAME==ens1f0np0): ens1f0np0 matches no "
        "interface on this node; nccl_config_extra.NCCL_IB_HCA (NCCL_IB_HCA==mlx5_0:1): "
        "mlx5_0:1 matches no RDMA device port on this node; this node has interfaces eth0, "
        "eth1 and RDMA devices none; set nccl_config_allow_absent_nics: true"), msg
    assert nccl_filter.nccl_config_absent_nics({"NCCL_SOCKET_IFNAME": "=eth1"}, {}, node) == ""
