"""playbooks/report.yml hands the roles' reboot needs to the controller (real ansible-runner)."""

from __future__ import annotations

import sys
from pathlib import Path

from nodetune.runner import ApplyOptions, content_dir, run_playbook


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
    result = run_playbook(str(play), inv, options=ApplyOptions(tags=("net_mtu",)),
                          artifact_dir=tmp_path / "run")
    assert result.custom_stats["nodetune_reboot_required"] == {
        "fresh": {"nvidia_driver": "driver 550.90.07 installed, module not loaded",
                  "ofed": "reboot required"},
    }
