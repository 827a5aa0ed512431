"""Tests for the net_mtu role's nodetune_mtu module (pure functions)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]




mod = load_plugin("plugins/modules/nodetune_mtu.py")


def _sys(tmp_path: Path) -> Path:
    for name, mtu, kind, rdma in [
        ("lo", 65536, 772, False),
        ("eth0", 1500, 1, False),
        ("ens1f0np0", 1500, 1, True),
        ("ib0", 2044, 32, True),
    ]:
        link = tmp_path / "class" / "net" / name
        link.mkdir(parents=True)
        (link / "mtu").write_text(f"{mtu}\n")
        (link / "type").write_text(f"{kind}\n")
        if rdma:
            (link / "device" / "infiniband" / "mlx5_0").mkdir(parents=True)
    return tmp_path


def test_read_links(tmp_path: Path) -> None:
    links = mod.read_links(str(_sys(tmp_path)))
    assert links["eth0"] == {"mtu": 1500, "kind": "ethernet", "rdma": False}
    assert links["ib0"] == {"mtu": 2044, "kind": "ipoib", "rdma": True}


def test_select_by_name_regex_rdma_later_wins(tmp_path: Path) -> None:
    links = mod.read_links(str(_sys(tmp_path)))
    wanted, missing = mod.select(
        [
            {"rdma": True, "mtu": 4092},
            {"name_regex": "^ens", "mtu": 9000},
            {"name": "ens9", "mtu": 9000},
        ],
        links,
    )
    assert wanted == {"ens1f0np0": 9000, "ib0": 4092}
    assert missing == ["ens9"]


def test_check_range_per_link_type() -> None:
    assert mod.check_range("eth0", "ethernet", 9000) is None
    assert "68-9216" in (mod.check_range("eth0", "ethernet", 9500) or "")
    assert mod.check_range("ib0", "ipoib", 65520) is None
    assert "2044, 4092, 65520" in (mod.check_range("ib0", "ipoib", 9000) or "")


def test_connection_interfaces_from_ip_json() -> None:
    data = json.dumps(
        [
            {"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
            {"ifname": "eno1", "addr_info": [{"local": "10.0.0.5"}, {"local": "fe80::1"}]},
            {"ifname": "ens1f0np0", "addr_info": [{"local": "192.168.100.5"}]},
        ]
    )
    assert mod.connection_interfaces(data, ["10.0.0.5"]) == {"eno1"}
    assert mod.connection_interfaces(data, []) == set()


def test_plan_skips_connection_unless_allowed(tmp_path: Path) -> None:
    links = mod.read_links(str(_sys(tmp_path)))
    wanted = {"eth0": 9000, "ens1f0np0": 9000, "ib0": 2044}
    entries = {e["name"]: e["action"] for e in mod.plan(wanted, links, {"eth0"}, False)}
    assert entries == {"eth0": "skipped_connection", "ens1f0np0": "change", "ib0": "ok"}
    allowed = {e["name"]: e["action"] for e in mod.plan(wanted, links, {"eth0"}, True)}
    assert allowed["eth0"] == "change"


def test_connection_addresses_override_wins() -> None:
    assert mod.detect_addresses(["10.0.0.5"], "10.0.0.1 5555 10.0.0.9 22", "node1") == [
        "10.0.0.5"]


def test_connection_addresses_from_ssh_connection_and_the_host() -> None:
    assert mod.detect_addresses([], "10.0.0.1 5555 10.0.0.9 22", "127.0.0.1") == [
        "10.0.0.9", "127.0.0.1"]
    assert mod.detect_addresses([], "", None) == []
    assert mod.detect_addresses([], "10.0.0.1 5555 10.0.0.9 22", "10.0.0.9") == ["10.0.0.9"]


def test_resolve_unknown_name_is_empty() -> None:
    assert mod.resolve("no-such-host.invalid") == []
    assert mod.resolve("127.0.0.1") == ["127.0.0.1"]


def test_netplan_counts_other_files_only(tmp_path: Path) -> None:
    assert not mod.netplan_configured(str(tmp_path / "absent"))
    (tmp_path / "90-nodetune-mtu.yaml").write_text("network: {}\n")
    (tmp_path / ".hidden.yaml").write_text("network: {}\n")
    (tmp_path / "README").write_text("")
    assert not mod.netplan_configured(str(tmp_path))
    (tmp_path / "01-netcfg.yml").write_text("network: {}\n")
    assert mod.netplan_configured(str(tmp_path))


def test_manager_order_then_udev() -> None:
    assert mod.choose_manager({}) == "udev"
    assert mod.choose_manager({"ifupdown": True, "networkmanager": True}) == "networkmanager"
    assert mod.choose_manager({"netplan": True, "systemd-networkd": True}) == "netplan"
