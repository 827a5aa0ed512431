"""playbooks/report.yml hands the roles' reboot needs to the controller (real ansible-runner)."""

from __future__ import annotations

import sys
from pathlib import Path

from nodetune.ansible.content import content_dir
from nodetune.ansible.results import PlaybookOptions
from nodetune.ansible.runner import run_playbook


def test_reboot_needs_reach_the_controller(tmp_path: Path) -> None:
    py = sys.executable
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"fresh ansible_connection=local ansible_python_interpreter={py} "
        "nvidia_driver_reboot_required=true "
        "nvidia_driver_reboot_reason='driver 550.90.07 installed, module not loaded' "
        "ofed_reboot_required=true "
        "net_mtu_deferred='[\"net_mtu: eth1 MTU 1500 → 9000\"]'\n"
        f"steady ansible_connection=local ansible_python_interpreter={py} "
        "nvidia_driver_reboot_required=false net_mtu_deferred='[]'\n"
        f"busy ansible_connection=local ansible_python_interpreter={py} "
        "net_sysctl_deferred='[\"net_sysctl: net.core.rmem_max 212992 → 268435456\"]'\n"
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
    # What waits on a busy node, from the same one task: a host with both reports, one
    # with deferred lines alone, none for a host whose lists are empty.
    assert result.custom_stats["nodetune_deferred"] == {
        "fresh": ["net_mtu: eth1 MTU 1500 → 9000"],
        "busy": ["net_sysctl: net.core.rmem_max 212992 → 268435456"],
    }


def test_the_one_reboot_guard_keeps_every_control_host(tmp_path: Path) -> None:
    # playbooks/reboot.yml and both roles' reboot handlers use the collection's
    # control_host test; this runs the playbook for real (the guard is an assert, so
    # no connection is made) on hosts that all need a reboot and are all the control host,
    # whatever spelling of the local connection plugin they use. Check mode: a host the
    # guard missed is reported as a reboot, never rebooted (it would be this machine).
    py = sys.executable
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  vars:\n"
        f"    ansible_python_interpreter: {py}\n"
        "    nvidia_driver_reboot_required: true\n"
        "    nvidia_driver_reboot_reason: stand-in\n"
        "  children:\n    gpu_nodes:\n      hosts:\n"
        "        ctl: {ansible_connection: local}\n"
        "        ctl-fqcn: {ansible_connection: ansible.builtin.local}\n"
        "        ctl-legacy: {ansible_connection: ansible.legacy.local}\n"
        "        localhost: {ansible_connection: ssh}\n"
        "        '127.0.0.1': {ansible_connection: ansible.builtin.ssh}\n"
        "        '::1': {ansible_connection: ssh}\n")
    options = PlaybookOptions(check=True, forks=6,
                              extra_vars=('{"nodetune_reboot_serial": 6}',))
    result = run_playbook("reboot.yml", inv, options=options, artifact_dir=tmp_path / "run")
    assert {h.host: h.state.value for h in result.hosts} == dict.fromkeys(
        ("ctl", "ctl-fqcn", "ctl-legacy", "localhost", "127.0.0.1", "::1"), "failed")
    assert {t.task for t in result.failed_tasks} == {"Refuse to reboot the control host"}
    assert all("nodetune does not reboot it" in t.message for t in result.failed_tasks)


def test_control_host_test() -> None:
    from tests.plugins import load_plugin

    control_host = load_plugin("plugins/test/control_host.py").control_host
    assert control_host("node-a", "local") and control_host("::1", "ssh")
    assert control_host("localhost") and control_host("127.0.0.1", "paramiko")
    assert control_host("node-a", "ansible.builtin.local")
    assert control_host("node-a", "ansible.legacy.local")
    assert not control_host("node-a", "ssh") and not control_host("10.0.0.1")
    assert not control_host("node-a", "ansible.builtin.ssh")
    assert not control_host("node-a", "community.docker.docker")


# Ansible runs one plugin for each row's spellings (ansible_builtin_runtime.yml, and
# the loader's alias paramiko -> paramiko_ssh).
SPELLINGS = {
    "local": ("local", "ansible.builtin.local", "ansible.legacy.local", " local"),
    "ssh": ("ssh", "ansible.builtin.ssh", "ansible.legacy.ssh"),
    "paramiko_ssh": ("paramiko", "paramiko_ssh", "ansible.builtin.paramiko_ssh",
                     "ansible.legacy.paramiko"),
    "community.docker.docker": ("community.docker.docker",),
}


def test_one_spelling_per_connection_plugin_on_both_sides() -> None:
    # The collection's rule (reboot guard, net_mtu) and nodetune's (validate, check)
    # are one rule: a host is local, or reached over SSH, for both or for neither.
    from nodetune.ansible.inventory import Host, connection_plugin
    from tests.plugins import load_plugin

    plugin_side = load_plugin("plugins/filter/connection.py").FilterModule().filters()[
        "connection_plugin"]
    for short, names in SPELLINGS.items():
        for name in names:
            assert connection_plugin(name) == plugin_side(name) == short, name
            assert Host("h", (), {"ansible_connection": name}).connection == short
    assert Host("h", (), {}).connection == "ssh"
