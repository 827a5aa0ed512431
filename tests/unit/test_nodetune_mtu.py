"""Tests for the net_mtu role's nodetune_mtu module (pure functions)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plugins import load_plugin

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


class _Module:
    """The parts of AnsibleModule that persist_udev uses, writing for real under tmp_path."""

    def __init__(self, check_mode: bool) -> None:
        self.check_mode = check_mode
        self.params: dict[str, object] = {}

    def atomic_move(self, src: str, dest: str) -> None:
        Path(src).replace(dest)

    def load_file_common_arguments(self, params: object, path: str) -> dict[str, object]:
        return {"path": path}

    def set_fs_attributes_if_different(self, *_args: object) -> bool:
        return False


def _params(rules: Path, manager: str = "auto") -> dict[str, object]:
    return {"udev_rules": str(rules), "udev_header": "#\n# Ansible managed\n#",
            "network_manager": manager}


MANAGED = [{"name": "ens1f0np0", "kind": "ethernet", "mtu": 9000},
           {"name": "ib0", "kind": "ipoib", "mtu": 4092}]


def test_the_udev_rules_are_the_templates_text() -> None:
    from tests.unit.test_escaping import render

    template = render("net_mtu", "etc/udev/rules.d/90-nodetune-mtu.rules.j2",
                      net_mtu_result=MANAGED)
    assert mod.udev_rules("#\n# Ansible managed\n#", MANAGED) == template


def test_udev_rules_are_written_only_where_udev_persists(tmp_path: Path) -> None:
    rules = tmp_path / "rules.d" / "90-nodetune-mtu.rules"
    for manager, detected in (("auto", "netplan"), ("ifupdown", "udev"), ("auto", None)):
        result = {"managed": MANAGED, "persistence": {"detected": detected} if detected else {}}
        assert mod.persist_udev(_Module(False), _params(rules, manager), result) == []
        assert not rules.parent.exists()
    result = {"managed": [], "persistence": {"detected": "udev"}}
    assert mod.persist_udev(_Module(False), _params(rules), result) == []


def test_udev_rules_check_mode_predicts_then_apply_writes_once(tmp_path: Path) -> None:
    rules = tmp_path / "rules.d" / "90-nodetune-mtu.rules"
    result: dict[str, object] = {"managed": MANAGED, "persistence": {"detected": "udev"}}
    diffs = mod.persist_udev(_Module(True), _params(rules), result)
    assert result["files_changed"] == [str(rules)] and not rules.parent.exists()
    assert 'KERNEL=="ib0", ATTR{mtu}="4092"' in diffs[-1]["after"]
    assert mod.persist_udev(_Module(False), _params(rules, "udev"), result)
    assert rules.read_text() == mod.udev_rules("#\n# Ansible managed\n#", MANAGED)
    again: dict[str, object] = {"managed": MANAGED, "persistence": {"detected": "udev"}}
    assert mod.persist_udev(_Module(False), _params(rules), again) == []
    assert again["files_changed"] == []
