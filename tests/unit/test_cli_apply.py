"""`nodetune apply` end to end on the local machine (connection: local), real ansible-runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_nodetune

FIXTURES = Path(__file__).parent.parent / "fixtures" / "playbooks"


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.ini"
    py = sys.executable
    inv.write_text(
        f"ok_host ansible_connection=local ansible_python_interpreter={py}\n"
        f"changer ansible_connection=local ansible_python_interpreter={py}\n"
        f"failer ansible_connection=local ansible_python_interpreter={py}\n"
    )
    return inv


def test_failed_host_exits_1_and_names_the_task(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook",
                       str(FIXTURES / "mixed.yml"), runs_dir=runs_dir)
    assert res.code == 1, res.stdout + res.stderr
    assert "failer: [Fail on the failer] disk /dev/nvme9 is missing" in res.stdout
    assert "some hosts failed" in res.stdout
    report = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert report["exit_code"] == 1
    assert {h["host"]: h["state"] for h in report["hosts"]} == {
        "ok_host": "ok", "changer": "changed", "failer": "failed"}
    assert report["failed_tasks"][0]["message"] == "disk /dev/nvme9 is missing"
    assert report["changed_tasks"] == [{"host": "changer", "task": "Report a change on the changer",
                                        "role": "", "status": "changed", "message": ""}]
    assert report["duration_s"] > 0


def test_limit_and_json(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook",
                       str(FIXTURES / "mixed.yml"), "--limit", "ok_host,changer", "--json",
                       runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert [h["host"] for h in doc["hosts"]] == ["ok_host", "changer"]
    assert doc["options"]["limit"] == "ok_host,changer"
    assert doc["schema_version"] == 1


def test_timeout_exits_4(tmp_path: Path, runs_dir: Path) -> None:
    play = tmp_path / "slow.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.command: sleep 30\n")
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", str(play),
                       "--limit", "ok_host", "--timeout", "3", runs_dir=runs_dir, timeout=60)
    assert res.code == 4, res.stdout + res.stderr
    assert "timed out" in res.stdout


def test_bad_role_input_exits_2_naming_host_and_variable(tmp_path: Path, runs_dir: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    # --check as well: even a regression could not touch this machine.
    res = run_nodetune("apply", str(inv), "--playbook", "network.yml", "--check",
                       "-e", "nccl_config_ib_tc=300", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "Bad input (nothing was changed on any node):" in res.stdout
    assert "me: nccl_config: nccl_config_ib_tc (NCCL_IB_TC): '300' is outside 0-255" in res.stdout
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert doc["exit_code"] == 2
    assert doc["input_problems"][0]["host"] == "me"


def test_check_diff_prints_the_drift_and_where_the_full_diff_is(
        tmp_path: Path, runs_dir: Path) -> None:
    target = tmp_path / "settings.conf"
    target.write_text("a = 1\nb = 2\n")
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - name: Write the settings\n      ansible.builtin.copy:\n"
                    f"        dest: {target}\n        content: \"a = 1\\nb = 3\\n\"\n"
                    "        mode: '0644'\n")
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", str(play), "--limit",
                       "ok_host", "--check", "--diff", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    assert "=== ok_host: [Write the settings]" in res.stdout
    assert "-b = 2\n+b = 3" in res.stdout
    assert "1 diff(s) on 1 host(s); full diff: " in res.stdout
    full = next(runs_dir.glob("*-apply/diff.txt")).read_text()
    assert "+b = 3" in full
    assert target.read_text() == "a = 1\nb = 2\n", "check mode changed nothing"
