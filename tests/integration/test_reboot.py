"""The reboot contract on real lab nodes: listed always, rebooted only with --reboot.

A lab node has no driver to install, so the need is injected: with -e (extra
vars win over the roles' set_fact, so report.yml and reboot.yml see it), or by
a playbook that sets the facts the way the driver roles do.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, run_nodetune
from tests.integration.conftest import Lab


def _pid1_start(lab: Lab, node: str) -> str:
    return lab.sh(node, "cut", "-d", " ", "-f22", "/proc/1/stat")


def test_need_is_listed_and_nothing_reboots_without_asking(lab: Lab, runs_dir: Path) -> None:
    node = lab.nodes[0]
    before = _pid1_start(lab, node)
    res = run_nodetune("apply", str(lab.inventory), "--limit", node, "--tags", "node_facts",
                       "-e", "nvidia_driver_reboot_required=true",
                       "-e", "nvidia_driver_reboot_reason='stand-in: driver 550.127.08 installed'",
                       runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    assert "Reboot needed" in res.stdout
    assert f"{node}: {{'nvidia_driver': 'stand-in: driver 550.127.08 installed'}}" in res.stdout
    assert _pid1_start(lab, node) == before, "no role or play rebooted the node"


def test_reboot_flag_reboots_only_hosts_that_need_it(lab: Lab, runs_dir: Path) -> None:
    """Through drivers.yml alone: the playbook that can cause a reboot publishes the need."""
    needy, other = lab.nodes[1], lab.nodes[0]
    before = {n: _pid1_start(lab, n) for n in lab.nodes}
    res = run_nodetune("apply", str(lab.inventory), "--playbook", "drivers.yml", "--limit", needy,
                       "--tags", "ofed", "--reboot", "-e", "ofed_reboot_required=true", "--json",
                       runs_dir=runs_dir, timeout=900)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert doc["reboot_required"] == {needy: {"ofed": "reboot required"}}
    assert doc["reboot"]["exit_code"] == 0, doc["reboot"]
    assert [h["host"] for h in doc["reboot"]["hosts"]] == [needy]
    assert _pid1_start(lab, needy) != before[needy], "the node rebooted"
    assert _pid1_start(lab, other) == before[other], "the other node did not"
    # It is back and reachable over SSH.
    again = run_nodetune("apply", str(lab.inventory), "--limit", needy, "--tags", "node_facts",
                         runs_dir=runs_dir)
    assert again.code == 0, again.stdout + again.stderr


def test_reboot_flag_acts_on_the_need_the_roles_set(lab: Lab, runs_dir: Path) -> None:
    """The roles' cacheable facts reach the reboot run (no -e): it shares the apply's fact cache."""
    needy, other = lab.nodes[0], lab.nodes[1]
    before = {n: _pid1_start(lab, n) for n in lab.nodes}
    play = REPO / "tests" / "fixtures" / "playbooks" / "reboot_need.yml"
    res = run_nodetune("apply", str(lab.inventory), "--playbook", str(play), "--limit", needy,
                       "--reboot", "--json", runs_dir=runs_dir, timeout=900)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert doc["reboot_required"] == {needy: {"ofed": "stand-in: new RDMA kernel modules"}}
    assert [(h["host"], h["changed"]) for h in doc["reboot"]["hosts"]] == [(needy, 1)], doc
    assert _pid1_start(lab, needy) != before[needy], "the node rebooted"
    assert _pid1_start(lab, other) == before[other], "the other node did not"
    # The next apply starts with no cached need: nothing is listed or rebooted.
    again = run_nodetune("apply", str(lab.inventory), "--limit", needy, "--tags", "node_facts",
                         "--reboot", "--json", runs_dir=runs_dir)
    assert again.code == 0, again.stdout + again.stderr
    assert again.json()["reboot_required"] == {}
    assert again.json().get("reboot") is None
