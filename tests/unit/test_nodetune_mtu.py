"""Tests for the net_mtu role's nodetune_mtu module: its functions, and the module run
through Ansible on this machine against a stand-in sysfs tree and a STAND-IN `ip` on PATH
(it logs what it is asked and sets the MTU in that tree; no spare NIC here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.plugins import collections_path, load_plugin

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


def _run_module(tmp_path: Path, *extra: str, **args: Any) -> dict[str, Any]:
    """nodetune_mtu run for real (ansible, connection local) against _sys's tree, with
    `ip` a stand-in that logs its arguments and writes the MTU into that tree."""
    sysfs = tmp_path / "sys"
    if not sysfs.exists():
        _sys(sysfs)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    ip = bin_dir / "ip"
    ip.write_text(f'#!/bin/sh\necho "ip $*" >> {tmp_path}/ip.log\n'
                  '[ "$1 $2 $3" = "link set dev" ] && [ "$5" = mtu ] && '
                  f'echo "$6" > {sysfs}/class/net/"$4"/mtu\nexit 0\n')
    ip.chmod(0o755)
    module_args = {"interfaces": [{"name": "ens1f0np0", "mtu": 9000},
                                  {"name": "ib0", "mtu": 4092}],
                   "sysfs_root": str(sysfs), "network_manager": "udev",
                   "udev_rules": str(tmp_path / "rules.d" / "90-nodetune-mtu.rules"),
                   "udev_rules_dir": str(tmp_path / "rules.d"), "state": "applied", **args}
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": collections_path(),
           "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,",
         "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "nodetune.cluster.nodetune_mtu", "-a", json.dumps(module_args), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    return dict(json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"])


def _live(tmp_path: Path) -> dict[str, str]:
    net = tmp_path / "sys" / "class" / "net"
    return {name: (net / name / "mtu").read_text().strip() for name in ("ens1f0np0", "ib0")}


def _ip_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "ip.log"
    return log.read_text().splitlines() if log.exists() else []


def test_live_false_writes_the_rules_and_leaves_the_live_mtus(tmp_path: Path) -> None:
    """A node running jobs: the persistent configuration is written, no live MTU is set
    (check mode predicts the same), and the changes left are listed for a later call."""
    rules = tmp_path / "rules.d" / "90-nodetune-mtu.rules"
    waiting = [{"name": "ens1f0np0", "before": 1500, "after": 9000},
               {"name": "ib0", "before": 2044, "after": 4092}]
    checked = _run_module(tmp_path, "--check", live=False)
    assert checked["changed"] and not checked.get("failed"), checked
    assert checked["deferred"] == waiting and checked["files_changed"] == [str(rules)]
    assert not rules.exists()
    res = _run_module(tmp_path, live=False)
    assert res["changed"] and res["deferred"] == waiting, res
    assert 'KERNEL=="ens1f0np0", ATTR{mtu}="9000"' in rules.read_text()
    assert _ip_calls(tmp_path) == []
    assert _live(tmp_path) == {"ens1f0np0": "1500", "ib0": "2044"}
    # Nothing else to write: still listed, and nothing changed.
    again = _run_module(tmp_path, live=False)
    assert not again["changed"] and again["deferred"] == waiting, again
    # The next call on an idle node (live, the default) sets them.
    done = _run_module(tmp_path)
    assert done["changed"] and "deferred" not in done, done
    assert _ip_calls(tmp_path) == ["ip link set dev ens1f0np0 mtu 9000",
                                   "ip link set dev ib0 mtu 4092"]
    assert _live(tmp_path) == {"ens1f0np0": "9000", "ib0": "4092"}
    assert _run_module(tmp_path, live=False)["deferred"] == []


def test_the_default_still_sets_the_live_mtu_with_the_rules(tmp_path: Path) -> None:
    res = _run_module(tmp_path)
    assert res["changed"] and not res.get("failed") and "deferred" not in res, res
    assert _ip_calls(tmp_path) == ["ip link set dev ens1f0np0 mtu 9000",
                                   "ip link set dev ib0 mtu 4092"]
    assert _live(tmp_path) == {"ens1f0np0": "9000", "ib0": "4092"}
    assert (tmp_path / "rules.d" / "90-nodetune-mtu.rules").exists()
