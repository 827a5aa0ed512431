"""Tests for the net_mtu role's nodetune_mtu module: its functions, and the module run
through Ansible on this machine against a stand-in sysfs tree and a STAND-IN `ip` on PATH
(it logs what it is asked and sets the MTU in that tree; no spare NIC here).

The module's runs share ansible-playbook runs, in rounds: one local inventory host per
case, each with a tree and an `ip` of its own; a case that runs the module again (the same
tree) does so in the next round."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import load_plugin, run_module

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


def _case(root: Path) -> dict[str, Path]:
    """A case's own _sys tree, `ip` stand-in (it logs its arguments to ip.log and writes
    the MTU into that tree) and udev rules path, under ``root``."""
    sysfs = root / "sys"
    _sys(sysfs)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    ip = bin_dir / "ip"
    ip.write_text(f'#!/bin/sh\necho "ip $*" >> {root}/ip.log\n'
                  '[ "$1 $2 $3" = "link set dev" ] && [ "$5" = mtu ] && '
                  f'echo "$6" > {sysfs}/class/net/"$4"/mtu\nexit 0\n')
    ip.chmod(0o755)
    return {"root": root, "sys": sysfs, "bin": bin_dir,
            "rules": root / "rules.d" / "90-nodetune-mtu.rules"}


def _round(tmp_path: Path, cases: dict[str, tuple[dict[str, Path], dict[str, Any], bool]]
           ) -> dict[str, Any]:
    """One ansible-playbook run of nodetune_mtu (connection local): a host per case, with
    its tree, its `ip` first on PATH (the task's environment), its module arguments over
    the defaults here and whether check mode (the task's check_mode, as --check sets it
    for a run of one); each case's own task result."""
    hosts = {}
    for case, (paths, args, check) in cases.items():
        module_args = {"interfaces": [{"name": "ens1f0np0", "mtu": 9000},
                                      {"name": "ib0", "mtu": 4092}],
                       "sysfs_root": str(paths["sys"]), "network_manager": "udev",
                       "udev_rules": str(paths["rules"]),
                       "udev_rules_dir": str(paths["rules"].parent), "state": "applied",
                       **args}
        hosts[case] = (module_args, {
            "environment": {"PATH": f"{paths['bin']}:{os.environ['PATH']}"},
            "check_mode": check})
    return run_module(tmp_path, "nodetune_mtu", hosts)


def _live(paths: dict[str, Path]) -> dict[str, str]:
    net = paths["sys"] / "class" / "net"
    return {name: (net / name / "mtu").read_text().strip() for name in ("ens1f0np0", "ib0")}


def _ip_calls(paths: dict[str, Path]) -> list[str]:
    log = paths["root"] / "ip.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's calls, in three rounds (three ansible-playbook runs), and what each
    case's tree, rules and `ip` log held after each of its calls.

    busy: check mode with live false, then live false, then live false again. waits: live
    false (busy's second call: busy's first, in check mode, changed nothing), then live
    (an idle node, the default), then live false. default: one call as the role makes it."""
    tmp = tmp_path_factory.mktemp("mtu_module")
    paths = {case: _case(tmp / case) for case in ("busy", "waits", "default")}
    seen: dict[str, list[dict[str, Any]]] = {case: [] for case in paths}

    def look(*cases: str) -> None:
        for case in cases:
            rules = paths[case]["rules"]
            seen[case].append({"live": _live(paths[case]), "ip": _ip_calls(paths[case]),
                               "rules": rules.read_text() if rules.exists() else None})

    results: dict[str, list[dict[str, Any]]] = {case: [] for case in paths}
    for i, cases in enumerate([
        {"busy": ({"live": False}, True), "waits": ({"live": False}, False),
         "default": ({}, False)},
        {"busy": ({"live": False}, False), "waits": ({}, False)},
        {"busy": ({"live": False}, False), "waits": ({"live": False}, False)},
    ]):
        got = _round(tmp / f"round{i + 1}", {case: (paths[case], args, check)
                                             for case, (args, check) in cases.items()})
        for case, res in got.items():
            results[case].append(res)
        look(*cases)
    return {"paths": paths, "results": results, "seen": seen}


WAITING = [{"name": "ens1f0np0", "before": 1500, "after": 9000},
           {"name": "ib0", "before": 2044, "after": 4092}]


def test_live_false_writes_the_rules_and_leaves_the_live_mtus(rounds: dict[str, Any]) -> None:
    """A node running jobs: the persistent configuration is written, no live MTU is set
    (check mode predicts the same), and the changes left are listed for a later call."""
    rules = rounds["paths"]["busy"]["rules"]
    checked, res, again = rounds["results"]["busy"]
    after_check, after_res, _after_again = rounds["seen"]["busy"]
    assert checked["changed"] and not checked.get("failed"), checked
    assert checked["deferred"] == WAITING and checked["files_changed"] == [str(rules)]
    assert after_check["rules"] is None
    assert res["changed"] and res["deferred"] == WAITING, res
    assert 'KERNEL=="ens1f0np0", ATTR{mtu}="9000"' in after_res["rules"]
    assert after_res["ip"] == []
    assert after_res["live"] == {"ens1f0np0": "1500", "ib0": "2044"}
    # Nothing else to write: still listed, and nothing changed.
    assert not again["changed"] and again["deferred"] == WAITING, again


def test_the_next_live_call_sets_what_waited(rounds: dict[str, Any]) -> None:
    """waits: live false, as busy's second call (and the same), then a call on an idle node
    (live, the default) sets them; live false after that lists nothing."""
    rules = rounds["paths"]["waits"]["rules"]
    first, done, last = rounds["results"]["waits"]
    after_first, after_done, _after_last = rounds["seen"]["waits"]
    assert first["changed"] and first["deferred"] == WAITING, first
    assert first["files_changed"] == [str(rules)]
    assert after_first["ip"] == [] and after_first["rules"] is not None
    assert after_first["live"] == {"ens1f0np0": "1500", "ib0": "2044"}
    assert done["changed"] and "deferred" not in done, done
    assert after_done["ip"] == ["ip link set dev ens1f0np0 mtu 9000",
                                "ip link set dev ib0 mtu 4092"]
    assert after_done["live"] == {"ens1f0np0": "9000", "ib0": "4092"}
    assert last["deferred"] == []


def test_the_default_still_sets_the_live_mtu_with_the_rules(rounds: dict[str, Any]) -> None:
    [res] = rounds["results"]["default"]
    [after] = rounds["seen"]["default"]
    assert res["changed"] and not res.get("failed") and "deferred" not in res, res
    assert after["ip"] == ["ip link set dev ens1f0np0 mtu 9000",
                           "ip link set dev ib0 mtu 4092"]
    assert after["live"] == {"ens1f0np0": "9000", "ib0": "4092"}
    assert after["rules"] is not None
