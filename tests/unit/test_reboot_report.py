"""playbooks/report.yml hands the roles' reboot needs to the controller (real ansible-runner)."""

from __future__ import annotations

import sys
from pathlib import Path

from nodetune.runner import PlaybookOptions, content_dir, run_playbook


def test_reboot_needs_reach_the_controller(tmp_path: Path) -> None:
    py = sys.executable
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"fresh ansible_connection=local ansible_python_interpreter={py} "
        "nvidia_driver_reboot_required=true "
        "nvidia_driver_reboot_reason='driver 550.90.07 installed, module not loaded' "
        "ofed_reboot_required=true\n"
        f"steady ansible_connection=local ansible_python_interpreter={py} "
        "nvidia_driver_reboot_required=false\n"
    )
    # The report runs whatever tags select (it is tagged always).
    play = tmp_path / "play.yml"
    play.write_text(
        f"- ansible.builtin.import_playbook: {content_dir() / 'playbooks' / 'report.yml'}\n"
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - {ansible.builtin.debug: {msg: other}, tags: [net_mtu]}\n")
    result = run_playbook(str(play), inv, options=PlaybookOptions(tags=("net_mtu",)),
                          artifact_dir=tmp_path / "run")
    assert result.custom_stats["nodetune_reboot_required"] == {
        "fresh": {"nvidia_driver": "driver 550.90.07 installed, module not loaded",
                  "ofed": "reboot required"},
    }


def test_the_one_reboot_guard_keeps_every_control_host(tmp_path: Path) -> None:
    # playbooks/reboot.yml and both roles' reboot handlers use the collection's
    # control_host test; this runs the playbook for real (the guard is an assert, so
    # no connection is made) on hosts that all need a reboot and are all the control host.
    py = sys.executable
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  vars:\n"
        f"    ansible_python_interpreter: {py}\n"
        "    nvidia_driver_reboot_required: true\n"
        "    nvidia_driver_reboot_reason: stand-in\n"
        "  children:\n    gpu_nodes:\n      hosts:\n"
        "        ctl: {ansible_connection: local}\n"
        "        localhost: {ansible_connection: ssh}\n"
        "        '127.0.0.1': {ansible_connection: ssh}\n"
        "        '::1': {ansible_connection: ssh}\n")
    options = PlaybookOptions(forks=4, extra_vars=('{"nodetune_reboot_serial": 4}',))
    result = run_playbook("reboot.yml", inv, options=options, artifact_dir=tmp_path / "run")
    assert {h.host: h.state.value for h in result.hosts} == dict.fromkeys(
        ("ctl", "localhost", "127.0.0.1", "::1"), "failed")
    assert {t.task for t in result.failed_tasks} == {"Refuse to reboot the control host"}
    assert all("nodetune does not reboot it" in t.message for t in result.failed_tasks)


def test_control_host_test() -> None:
    from tests.plugins import load_plugin

    control_host = load_plugin("plugins/test/control_host.py").control_host
    assert control_host("node-a", "local") and control_host("::1", "ssh")
    assert control_host("localhost") and control_host("127.0.0.1", "paramiko")
    assert not control_host("node-a", "ssh") and not control_host("10.0.0.1")
