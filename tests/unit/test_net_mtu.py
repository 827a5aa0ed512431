"""Tests for the net_mtu role's filter plugin."""

from __future__ import annotations

import pytest
import yaml

from tests.plugins import load_plugin

mod = load_plugin("plugins/filter/net_mtu.py")


def test_no_warning_when_fabric_agrees() -> None:
    hostvars = {
        "a": {"net_mtu_result": [{"name": "ens1", "mtu": 9000}]},
        "b": {"net_mtu_result": [{"name": "ens2", "mtu": 9000}]},
        "c": {},
    }
    assert mod.net_mtu_fabric_mismatches(hostvars, ["a", "b", "c"]) == []


def test_warns_per_fabric_with_hosts_and_values() -> None:
    hostvars = {
        "a": {"net_mtu_result": [{"name": "ens1", "mtu": 9000}], "net_mtu_fabric": "roce"},
        "b": {"net_mtu_result": [{"name": "ens1", "mtu": 1500}], "net_mtu_fabric": "roce"},
        "c": {"net_mtu_result": [{"name": "ib0", "mtu": 4092}], "net_mtu_fabric": "ib"},
    }
    messages = mod.net_mtu_fabric_mismatches(hostvars, ["a", "b", "c"])
    assert messages == ["fabric 'roce' has nodes with different MTUs (a: 9000, b: 1500)"]


def test_filter_registered() -> None:
    assert "net_mtu_fabric_mismatches" in mod.FilterModule().filters()


NETPLAN = "etc/netplan/90-nodetune-mtu.yaml.j2"


def test_netplan_holds_ethernet_and_ipoib_links_and_nothing_else() -> None:
    from tests.unit.test_escaping import render

    managed = [{"name": "ib0", "kind": "ipoib", "mtu": 65520},
               {"name": "ens1f0np0", "kind": "ethernet", "mtu": "9000"},
               {"name": "tun0", "kind": "other", "mtu": 1400}]
    doc = yaml.safe_load(render("net_mtu", NETPLAN, net_mtu_result=managed))
    assert doc == {"network": {"version": 2, "ethernets": {"ib0": {"mtu": 65520},
                                                           "ens1f0np0": {"mtu": 9000}}}}
    # Only IPoIB asked for: still a mapping under ethernets, never an empty key.
    doc = yaml.safe_load(render("net_mtu", NETPLAN, net_mtu_result=managed[:1]))
    assert doc["network"]["ethernets"] == {"ib0": {"mtu": 65520}}


def test_netplan_document_is_empty_without_a_link_and_refuses_a_bad_mtu() -> None:
    assert mod.net_mtu_netplan([]) == {}
    assert mod.net_mtu_netplan([{"name": "tun0", "kind": "other", "mtu": 1400}]) == {}
    with pytest.raises(mod.UnsafeValueError, match="not an integer"):
        mod.net_mtu_netplan([{"name": "eth1", "kind": "ethernet", "mtu": "9000\n  eth0:"}])
