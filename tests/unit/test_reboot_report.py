"""playbooks/report.yml hands the roles' reboot needs to the controller (real ansible-runner)."""

from __future__ import annotations

import sys
from pathlib import Path

from nodetune.runner import ApplyOptions, run_playbook


def test_reboot_needs_reach_the_controller(tmp_path: Path) -> None:
    py = sys.executable
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        f"fresh ansible_connection=local ansible_python_interpreter={py} "
        "nvidia_driver_reboot_required=true "
        "nvidia_driver_reboot_reason='driver 550.90.07 installed, module not loaded' "
        "ofed_reboot_required=true\n"
        f"steady ansible_connection=local ansible_python_interpreter={py} "
        "nvidia_driver_reboot_required=false\n"
    )
    result = run_playbook("report.yml", inv, options=ApplyOptions(tags=("net_mtu",)),
                          artifact_dir=tmp_path / "run")
    assert result.custom_stats["nodetune_reboot_required"] == {
        "fresh": {"nvidia_driver": "driver 550.90.07 installed, module not loaded",
                  "ofed": "reboot required"},
    }
