"""The data interface of a validation, decided once: from the inventory, then the node."""

from __future__ import annotations

from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import datapath, plan
from nodetune.collective.answers import NodeProbe
from nodetune.collective.datapath import DataPath, Interfaces, Request, request_for, resolve
from nodetune.errors import InputError

# What a lab node reports (eth0 carries SSH, eth1 is the fabric).
LAB = Interfaces(usable=("lo", "eth0", "eth1"), route="eth0", ssh="eth0")
# A RoCE node: management on eno1, two ConnectX ports.
ROCE = Interfaces(usable=("lo", "eno1", "ens1f0np0", "ens2f0np0"),
                  rdma=("ens1f0np0", "ens2f0np0"), route="eno1", ssh="eno1")
# inventory/example's group_vars/gpu_nodes, as an operator copies it.
EXAMPLE = {"nccl_config_socket_ifname": "=ens1f0np0",
           "net_mtu_interfaces": [{"rdma": True, "mtu": 9000}],
           "nodetune_env": {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}}


def decide(variables: dict[str, Any], found: Interfaces, host: str = "n1") -> DataPath:
    return resolve(host, request_for(host, variables), found)


@pytest.mark.parametrize(("variables", "interface", "source"), [
    # What the inventory already says about the fabric.
    ({"nccl_config_socket_ifname": "=eth1"}, "eth1", "nccl_config_socket_ifname"),
    ({"nccl_config_socket_ifname": "eth"}, "eth0", "nccl_config_socket_ifname"),  # NCCL prefix
    ({"nccl_config_socket_ifname": ["eth1"]}, "eth1", "nccl_config_socket_ifname"),
    ({"nccl_config_extra": {"NCCL_SOCKET_IFNAME": "=eth1"},
      "nccl_config_socket_ifname": "=eth0"}, "eth1", "nccl_config_extra.NCCL_SOCKET_IFNAME"),
    ({"net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}]}, "eth1", "net_mtu_interfaces"),
    ({"net_mtu_interfaces": [{"name_regex": "^eth", "mtu": 9000}]}, "eth1",
     "net_mtu_interfaces"),  # never the SSH interface, as net_mtu leaves it alone
    # An exclusion names no fabric: the next source decides.
    ({"nccl_config_socket_ifname": "^docker,lo",
      "net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}]}, "eth1", "net_mtu_interfaces"),
    # Told otherwise: validate's own variable, then the workers' environment.
    ({"nodetune_socket_ifname": "eth0", "nccl_config_socket_ifname": "=eth1"}, "eth0",
     "nodetune_socket_ifname"),
    ({"nodetune_env": {"GLOO_SOCKET_IFNAME": "eth0"}, "nccl_config_socket_ifname": "=eth1"},
     "eth0", "nodetune_env.GLOO_SOCKET_IFNAME"),
    ({"nodetune_env": {"NCCL_SOCKET_IFNAME": "=eth1"}}, "eth1",
     "nodetune_env.NCCL_SOCKET_IFNAME"),
    # Nothing said: the route to the master (here the SSH interface).
    ({}, "eth0", "route to the master"),
])
def test_the_data_interface_comes_from_what_the_inventory_says(
        variables: dict[str, Any], interface: str, source: str) -> None:
    path = decide(variables, LAB)
    assert (path.interface, path.source, path.ssh_interface) == (interface, source, "eth0")
    assert path.over_ssh is (interface == "eth0")


def test_the_example_inventory_picks_its_fabric_nic() -> None:
    path = decide(EXAMPLE, ROCE)
    assert (path.interface, path.source, path.over_ssh) == (
        "ens1f0np0", "nccl_config_socket_ifname", False)
    rdma_only = decide({"net_mtu_interfaces": EXAMPLE["net_mtu_interfaces"]}, ROCE)
    assert (rdma_only.interface, rdma_only.source) == ("ens1f0np0", "net_mtu_interfaces")


def test_an_absent_named_interface_is_bad_input_naming_host_variable_and_interfaces() -> None:
    with pytest.raises(InputError) as err:
        decide(EXAMPLE, LAB, host="gpu-7")
    assert err.value.host == "gpu-7"
    assert "nccl_config_socket_ifname names ens1f0np0" in err.value.message
    assert "it has lo, eth0, eth1" in err.value.message


def test_net_mtu_hints_that_match_nothing_fall_back_to_the_route_with_a_note() -> None:
    path = decide({"net_mtu_interfaces": [{"rdma": True, "mtu": 9000}]}, LAB)
    assert (path.interface, path.source, path.over_ssh) == ("eth0", "route to the master", True)
    assert "net_mtu_interfaces selects no fabric interface here" in path.notes[0]


def test_a_node_that_lists_no_interfaces_is_taken_at_the_inventorys_word() -> None:
    path = decide({"nccl_config_socket_ifname": "=ib0"}, Interfaces(route="eth9"))
    assert (path.interface, path.ssh_interface) == ("ib0", None)
    assert decide({}, Interfaces(route="eth9")).interface == "eth9"


@pytest.mark.parametrize(("variables", "words"), [
    ({"nodetune_socket_ifname": "eth0; rm -rf /"}, "nodetune_socket_ifname"),
    ({"nccl_config_socket_ifname": "=eth1,$(id)"}, "nccl_config_socket_ifname"),
    ({"nodetune_env": {"GLOO_SOCKET_IFNAME": "a/b"}}, "nodetune_env.GLOO_SOCKET_IFNAME"),
    ({"net_mtu_interfaces": [{"name_regex": "(", "mtu": 9000}]}, "net_mtu_interfaces"),
])
def test_malformed_interface_values_are_refused_before_connecting(
        variables: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError, match=words) as err:
        request_for("n1", variables)
    assert err.value.host == "n1"


def test_the_plan_gives_the_ranks_the_fabric_interface_of_a_copied_example() -> None:
    hosts = [Host(n, ("gpu_nodes",), {**EXAMPLE, "nccl_config_socket_ifname": "=eth1",
                                      "ansible_host": f"10.0.0.{i}"})
             for i, n in enumerate(("a", "b"), start=1)]
    p = plan.plan_pair(plan.Pair(hosts[0], hosts[1]), plan.Options())
    probes = [NodeProbe(n, "3.11", "2.13", 0, port, interfaces=LAB)
              for n, port in (("a", 29500), ("b", None))]
    launch = p.complete(probes)
    assert {e["GLOO_SOCKET_IFNAME"] for e in launch.env.values()} == {"eth1"}
    assert {e["NCCL_SOCKET_IFNAME"] for e in launch.env.values()} == {"eth1"}
    assert [(x.host, x.interface, x.over_ssh) for x in launch.paths] == [
        ("a", "eth1", False), ("b", "eth1", False)]


def test_over_ssh_warning_only_for_socket_transports() -> None:
    a = DataPath("a", "eth0", "route to the master", "eth0")
    b = DataPath("b", "eth1", "nccl_config_socket_ifname", "eth0")
    text = datapath.over_ssh_warning("gloo/TCP", ("eth0",), [a, b])
    assert text is not None and "on a (eth0)" in text and "b (eth0)" not in text
    assert datapath.over_ssh_warning("gloo/TCP", ("eth1",), [b, b]) is None
    assert datapath.over_ssh_warning("IB", ("mlx5_0",), [a, a]) is None
    # NCCL's own log says which socket it used, whatever was asked for.
    assert datapath.over_ssh_warning("Socket", ("eth0",), [b]) is not None


def test_one_node_all_reduce_stays_on_loopback() -> None:
    p = plan.plan_node(Host("a", ("gpu_nodes",), {"nccl_config_socket_ifname": "=eth1"}),
                       plan.Options())
    assert p.nodes[0].data == Request("one node: its loopback", exact=("lo",))


def test_a_templated_fabric_variable_is_evaluated_as_ansible_would() -> None:
    # A valid inventory Ansible writes as =eth1: not refused as "not an interface name".
    variables = {"fabric_if": "eth1", "nccl_config_socket_ifname": "={{ fabric_if }}",
                 "nodetune_env": {"NCCL_DEBUG": "{{ nowhere_defined }}"}}
    path = decide(variables, LAB)
    assert (path.interface, path.source) == ("eth1", "nccl_config_socket_ifname")
    mtu = {"fabric_if": "eth1", "net_mtu_interfaces": [{"name": "{{ fabric_if }}", "mtu": 9000}]}
    assert decide(mtu, LAB).interface == "eth1"


def test_a_template_that_needs_the_node_is_bad_input_naming_the_variable() -> None:
    variables = {"nodetune_env": {"NCCL_SOCKET_IFNAME": "{{ ansible_default_ipv4.interface }}"}}
    with pytest.raises(InputError) as err:
        request_for("n1", variables)
    assert err.value.host == "n1"
    assert err.value.message.startswith("nodetune_env.NCCL_SOCKET_IFNAME: cannot evaluate")


def test_a_role_that_is_off_says_nothing_of_the_fabric() -> None:
    # The example's absent name under a disabled nccl_config is never written: not refused.
    off = {**EXAMPLE, "nccl_config_enabled": False,
           "net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}]}
    path = decide(off, LAB)
    assert (path.interface, path.source) == ("eth1", "net_mtu_interfaces")
    both_off = {**off, "net_mtu_enabled": "false"}
    assert (decide(both_off, LAB).interface, decide(both_off, LAB).source) == (
        "eth0", datapath.ROUTE)
    with pytest.raises(InputError, match="ens1f0np0"):  # on: the absent name is bad input
        decide({**off, "nccl_config_enabled": True}, LAB)
