"""`nodetune check` holds NCCL_SOCKET_IFNAME / NCCL_IB_HCA and net_mtu_interfaces to the node.

The probe runs for real on the fake RoCE node of test_check_probe (interfaces
eth0, ens1f0np0, ens2f0np0; RDMA devices mlx5_0 and mlx5_1, port 1 each, the
hardware's edge), with an /etc/nccl.conf under that tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodetune.check.model import Status
from tests.unit.test_check_probe import by_name, node, run_probe, write

__all__ = ["node"]  # the fixture, imported for the tests below

NCCL_CONF = "# BEGIN nodetune nccl_config\nNCCL_SOCKET_IFNAME=={ifname}\nNCCL_IB_HCA={hca}\n" \
            "# END nodetune nccl_config\nNCCL_IB_HCA=mlx5_7\n"


def nccl(node: Path, *, ifname: str = "ens1f0np0", hca: str = "=mlx5_0:1,mlx5_1:1",
         **vars_: Any) -> dict[str, Any]:
    write(node / "node/etc/nccl.conf", NCCL_CONF.format(ifname=ifname, hca=hca))
    return by_name(run_probe(node, **vars_)[0])


def test_names_the_node_has_pass(node: Path) -> None:
    r = nccl(node, nccl_config_socket_ifname="=ens1f0np0", nccl_config_ib_hca="=mlx5_0:1,mlx5_1:1")
    hca = r["fabric.nccl[NCCL_IB_HCA]"]
    assert hca.status is Status.PASS, hca
    # The first occurrence wins, as NCCL reads the file: the line after the block is ignored.
    assert hca.measured == ("NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 in /etc/nccl.conf "
                            "(matches mlx5_0:1, mlx5_1:1)")
    assert hca.source == "nccl_config_ib_hca (inventory)"
    assert r["fabric.nccl[NCCL_SOCKET_IFNAME]"].status is Status.PASS


def test_an_hca_the_node_lacks_fails_naming_it_and_what_the_node_has(node: Path) -> None:
    r = nccl(node, hca="=mlx5_0:1,mlx5_9:1")["fabric.nccl[NCCL_IB_HCA]"]
    assert r.status is Status.FAIL, r
    assert r.message == (
        "/etc/nccl.conf: NCCL_IB_HCA==mlx5_0:1,mlx5_9:1: mlx5_9:1 matches no RDMA device port "
        "on this node; this node has interfaces ens1f0np0, ens2f0np0, eth0 and RDMA devices "
        "mlx5_0 (port 1), mlx5_1 (port 1)")


def test_an_interface_the_inventory_names_but_the_node_lacks_fails(node: Path) -> None:
    # The example's values on a node that has other names: apply would write them.
    r = nccl(node, nccl_config_socket_ifname="=ens9f0np0")["fabric.nccl[NCCL_SOCKET_IFNAME]"]
    assert r.status is Status.FAIL, r
    assert r.message.startswith("nccl_config_socket_ifname: NCCL_SOCKET_IFNAME==ens9f0np0: "
                                "ens9f0np0 matches no interface on this node; this node has")
    # Set in the inventory only (apply has not written the file yet): the same check.
    write(node / "node/etc/nccl.conf", "NCCL_DEBUG=WARN")
    r = by_name(run_probe(node, nccl_config_ib_hca="=mlx5_0:1")[0])["fabric.nccl[NCCL_IB_HCA]"]
    assert (r.status, r.measured) == (Status.PASS, "unset in /etc/nccl.conf")


def test_an_exclusion_that_leaves_nothing_fails(node: Path) -> None:
    r = nccl(node, ifname="^e")
    assert r["fabric.nccl[NCCL_SOCKET_IFNAME]"].status is Status.FAIL


def test_heterogeneous_nodes_warn_where_allowed(node: Path) -> None:
    r = nccl(node, hca="=mlx5_0:1,mlx5_9:1", nccl_config_allow_absent_nics=True)
    assert r["fabric.nccl[NCCL_IB_HCA]"].status is Status.WARN


def test_without_nccl_settings_the_check_is_skipped(node: Path) -> None:
    r = by_name(run_probe(node)[0])
    assert r["fabric.nccl"].status is Status.SKIP


def test_an_mtu_request_that_selects_nothing_fails_unless_allowed(node: Path) -> None:
    asked = [{"name": "ens1f0np0", "mtu": 9000}, {"name": "ens9f0np0", "mtu": 9000}]
    r = by_name(run_probe(node, net_mtu_interfaces=asked)[0])["fabric.mtu"]
    assert r.status is Status.FAIL, r
    assert r.message.startswith("net_mtu_interfaces[1] (name: ens9f0np0): no such interface on "
                                "this node; this node has interfaces ens1f0np0, ens2f0np0, eth0 "
                                "and RDMA devices mlx5_0 (port 1), mlx5_1 (port 1)")
    allowed = run_probe(node, net_mtu_interfaces=asked, net_mtu_allow_absent_nics=True)[0]
    assert by_name(allowed)["fabric.mtu"].status is Status.WARN


def test_nccl_config_extra_wins_over_the_named_variable_as_the_role_writes_it(
        node: Path) -> None:
    # nccl_config combines nccl_config_extra last: apply writes extra's value, so check
    # holds the node to that one, not to a copied example's absent name beside it.
    r = nccl(node, ifname="ens1f0np0", nccl_config_socket_ifname="=ens9f0np0",
             nccl_config_extra={"NCCL_SOCKET_IFNAME": "=ens1f0np0"})
    ifname = r["fabric.nccl[NCCL_SOCKET_IFNAME]"]
    assert ifname.status is Status.PASS, ifname
    assert ifname.source == "nccl_config_extra.NCCL_SOCKET_IFNAME (inventory)"
