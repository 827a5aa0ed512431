"""Tests for the net_mtu role's filter plugin."""

from __future__ import annotations

from pathlib import Path

from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]




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
