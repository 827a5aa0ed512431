"""What the bundled playbooks target and publish, read from ansible-playbook itself."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins import ansible_env

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ["site.yml", "drivers.yml", "network.yml", "facts.yml", "report.yml", "reboot.yml"]


def _list_hosts(playbooks: list[str], *extra: str) -> dict[str, list[set[str]]]:
    """Each playbook's plays' hosts, from one `ansible-playbook --list-hosts` of them all
    (it lists each playbook under a "playbook: PATH" line, in the order given)."""
    env = ansible_env()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--list-hosts",
         "-i", str(ROOT / "inventory" / "example"),
         *(str(ROOT / "playbooks" / playbook) for playbook in playbooks), *extra],
        capture_output=True, text=True, env=env, cwd=ROOT, check=True, timeout=120)
    listed: dict[str, list[set[str]]] = {}
    plays: list[set[str]] = []
    for line in proc.stdout.splitlines():
        if line.startswith("playbook: "):
            plays = listed.setdefault(Path(line.split(": ", 1)[1].strip()).name, [])
        elif re.match(r"\s+play #\d+", line):
            plays.append(set())
        elif plays and line.startswith("      ") and line.strip():
            plays[-1].add(line.strip())
    assert list(listed) == playbooks, proc.stdout
    return listed


@pytest.fixture(scope="module")
def listed_hosts() -> dict[str, list[set[str]]]:
    return _list_hosts(PLAYBOOKS)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_every_play_targets_the_gpu_node_group_not_all(
        playbook: str, listed_hosts: dict[str, list[set[str]]]) -> None:
    gpu = {"gpu-a001", "gpu-a002", "gpu-b001", "gpu-b002"}
    plays = listed_hosts[playbook]
    assert plays and all(hosts == gpu for hosts in plays), (playbook, plays)  # login-01 never


def test_the_group_is_configurable() -> None:
    plays = _list_hosts(["network.yml"], "-e", "nodetune_hosts=h100_rack_b")["network.yml"]
    assert all(hosts == {"gpu-b001", "gpu-b002"} for hosts in plays), plays


def test_every_playbook_that_can_need_a_reboot_publishes_it() -> None:
    """apply --reboot acts on set_stats from report.yml: drivers.yml (and so site.yml) import it."""
    def imports(name: str) -> set[str]:
        plays = yaml.safe_load((ROOT / "playbooks" / name).read_text())
        found = set()
        for play in plays:
            target = play.get("ansible.builtin.import_playbook")
            if target:
                found |= {target} | imports(target)
        return found

    for name in ("drivers.yml", "site.yml"):
        assert "report.yml" in imports(name), name
        assert "inputs.yml" in imports(name), name
    assert "inputs.yml" in imports("network.yml")


@pytest.fixture(scope="module")
def bad_input_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """One run of playbooks/inputs.yml and a play after it, for three tests below, each
    host one test's case: good, bad_tc and bad_cc the first's, me (a looped check that
    fails on an item) the looped-check test's, typed (argument spec errors) the argument
    spec test's. The roles checked are each host's own (play variables are templated per
    host): net_sysctl and nccl_config on bad_tc, bad_cc and me; net_sysctl, net_mtu,
    roce_qos and nccl_config on good and typed."""
    from nodetune.ansible.results import PlaybookOptions
    from nodetune.ansible.runner import run_playbook

    tmp_path = tmp_path_factory.mktemp("bad_input")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    two = {**local, "test_input_roles": ["net_sysctl", "nccl_config"]}
    four = {**local, "test_input_roles": ["net_sysctl", "net_mtu", "roce_qos", "nccl_config"]}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {
        "good": four,
        "bad_tc": {**two, "nccl_config_ib_tc": 300},
        "bad_cc": {**two, "net_sysctl_tcp_congestion_control": "nonexistent_cc"},
        "me": {**two, "net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 oops"}},
        "typed": {**four, "net_mtu_interfaces": "eth1:9000", "net_sysctl_enabled": "maybe",
                  "nccl_config_ib_tc": 300},
    }}}, sort_keys=False))
    marker = tmp_path / "changed"
    play = tmp_path / "play.yml"
    play.write_text(
        f"- ansible.builtin.import_playbook: {ROOT / 'playbooks' / 'inputs.yml'}\n"
        "  vars: {nodetune_input_roles: '{{ test_input_roles }}'}\n"
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.file: {{path: '{marker}-{{{{ inventory_hostname }}}}', "
        "state: touch, mode: '0644'}\n")
    result = run_playbook(str(play), inv, options=PlaybookOptions(forks=5),
                          artifact_dir=tmp_path / "run")
    return result, tmp_path


def test_bad_input_on_one_host_stops_every_host_before_any_change(
        bad_input_run: tuple[Any, Path]) -> None:
    """playbooks/inputs.yml: a variable check and a host probe fail; nothing runs after it.
    (The run's hosts me and typed are the other tests'; their problems are asserted there.)"""
    from nodetune.ansible.results import HostState

    result, tmp_path = bad_input_run
    ours = {"good", "bad_tc", "bad_cc"}
    problems = {(p.host, p.role): p.message for p in result.input_problems if p.host in ours}
    assert set(problems) == {("bad_tc", "nccl_config"), ("bad_cc", "net_sysctl")}, problems
    assert "nccl_config_ib_tc (NCCL_IB_TC): '300' is outside 0-255" in problems[
        ("bad_tc", "nccl_config")]
    assert "nonexistent_cc" in problems[("bad_cc", "net_sysctl")]
    assert {h.host: h.state for h in result.hosts} == {
        "good": HostState.FAILED, "bad_tc": HostState.FAILED, "bad_cc": HostState.FAILED,
        "me": HostState.FAILED, "typed": HostState.FAILED}
    assert not list(tmp_path.glob("changed-*")), "no play after the input checks ran"
    assert all(h.changed == 0 for h in result.hosts)
    good = next(t for t in result.failed_tasks if t.host == "good")
    assert "invalid input on bad_" in good.message


@pytest.fixture(scope="module")
def valid_input_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run of playbooks/inputs.yml and a play after it, every host's input valid, each
    host one test's case: good checks every network role (the valid-input test's), me and
    me_all none, me with the default fact subset and me_all with nodetune_gather_subset
    [all] (the fact-gathering test's). The roles checked are each host's own (play
    variables are templated per host); the play after the pass publishes, per host,
    whether it ran and which facts the pass gathered."""
    from nodetune.ansible.results import PlaybookOptions
    from nodetune.ansible.runner import run_playbook

    tmp_path = tmp_path_factory.mktemp("valid_input")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {
        "good": {**local, "test_input_roles": ["net_sysctl", "net_mtu", "roce_qos",
                                               "nccl_config"]},
        "me": {**local, "test_input_roles": []},
        "me_all": {**local, "test_input_roles": [], "nodetune_gather_subset": ["all"]},
    }}}, sort_keys=False))
    play = tmp_path / "play.yml"
    play.write_text(
        f"- ansible.builtin.import_playbook: {ROOT / 'playbooks' / 'inputs.yml'}\n"
        "  vars: {nodetune_input_roles: '{{ test_input_roles }}'}\n"
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.set_stats:\n"
        "        data: \"{{ {'after': {inventory_hostname: true}, 'seen': {inventory_hostname: {\n"
        "                 'distribution': ansible_facts.distribution is defined,\n"
        "                 'interfaces': ansible_facts.interfaces is defined,\n"
        "                 'memtotal_mb': ansible_facts.memtotal_mb is defined}}} }}\"\n")
    return run_playbook(str(play), inv, options=PlaybookOptions(forks=3),
                        artifact_dir=tmp_path / "r")


def test_valid_input_lets_the_run_go_on(valid_input_run: Any) -> None:
    """Host good of the shared run: net_sysctl, net_mtu, roce_qos and nccl_config checked
    on their defaults; no host has a problem, and the play after the pass runs."""
    assert valid_input_run.input_problems == ()
    assert valid_input_run.custom_stats.get("after", {}).get("good") is True, \
        valid_input_run.failed_tasks
    # Each host checked its own roles, and only those.
    checked = {(e["event_data"]["host"], e["event_data"]["role"])
               for f in (valid_input_run.artifacts / "job_events").glob("*.json")
               for e in [json.loads(f.read_text())]
               if e.get("event") in ("runner_on_ok", "runner_on_failed")
               and e["event_data"].get("role")}
    assert checked == {("good", role) for role in ("net_sysctl", "net_mtu", "roce_qos",
                                                    "nccl_config")}, checked


def test_a_looped_check_reports_the_items_own_message(
        bad_input_run: tuple[Any, Path]) -> None:
    """Host me of the shared run (net_sysctl and nccl_config selected; nccl_config's
    defaults pass): its one problem is the failed item's own message."""
    result, _tmp = bad_input_run
    [problem] = [p for p in result.input_problems if p.host == "me"]
    assert "net_sysctl_settings['net.ipv4.tcp_rmem'] must be three ascending integers" in \
        problem.message, problem


def test_argument_spec_errors_of_every_role_are_reported_per_role(
        bad_input_run: tuple[Any, Path]) -> None:
    """One task validates every selected role's argument spec; each role's errors are its own,
    a role whose spec failed skips its own checks, and a role that passed is still checked.
    (Host typed of the shared run, its four roles selected.)"""
    from nodetune.ansible.results import HostState

    result, tmp_path = bad_input_run
    problems = {(p.host, p.role): p.message for p in result.input_problems
                if p.host == "typed"}
    assert set(problems) == {("typed", "net_mtu"), ("typed", "net_sysctl"),
                             ("typed", "nccl_config")}, problems
    assert "Validation of arguments failed" in problems[("typed", "net_mtu")]
    assert "net_mtu_interfaces" in problems[("typed", "net_mtu")]
    assert "net_sysctl_enabled" in problems[("typed", "net_sysctl")]
    # nccl_config's spec passed (an int is an int): its own check still ran and failed.
    assert "'300' is outside 0-255" in problems[("typed", "nccl_config")]
    states = {h.host: h.state for h in result.hosts}
    assert (states["good"], states["typed"]) == (HostState.FAILED, HostState.FAILED)
    good = next(t for t in result.failed_tasks if t.host == "good")
    assert good.message.startswith("not changed: invalid input on "), good.message
    assert "typed" in good.message.removeprefix("not changed: invalid input on ").split(", ")
    assert not list(tmp_path.glob("changed-*")), "no play after the input checks ran"


@pytest.mark.parametrize(("host", "hardware"), [("me", False), ("me_all", True)])
def test_the_run_gathers_network_facts_and_hardware_only_when_asked(
        valid_input_run: Any, host: str, hardware: bool) -> None:
    """Hosts me (no nodetune_gather_subset) and me_all ([all]) of the shared run."""
    assert valid_input_run.custom_stats.get("seen", {}).get(host) == {
        "distribution": True, "interfaces": True, "memtotal_mb": hardware}, \
        valid_input_run.failed_tasks
