"""`nodetune check` as a command on this machine (ansible_connection: local): exit codes,
--json and the run record on every exit."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import run_nodetune

# This machine has no GPU; the sysctls it runs with are not the check's business here.
LOCAL = {"ansible_connection": "local", "net_sysctl_enabled": False}


def inventory(tmp_path: Path, **hosts: dict[str, Any]) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def record(runs_dir: Path) -> dict[str, Any]:
    (report,) = runs_dir.glob("*-check/report.json")
    doc: dict[str, Any] = json.loads(report.read_text())
    return doc


def test_a_clean_local_node_passes(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("check", str(inventory(tmp_path, here=LOCAL)), "--json",
                       runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert doc == record(runs_dir)
    assert doc["verb"] == "check" and doc["status"] == "pass"
    assert doc["nodes"]["here"]["verdict"] == "good"
    statuses = {c["name"]: c["status"] for c in doc["checks"]["here"]}
    assert statuses["gpu.count"] == "skip" and statuses["software.shm"] == "pass"


def test_a_planted_expectation_fails_clearly(tmp_path: Path, runs_dir: Path) -> None:
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_expected_gpus": 8})
    res = run_nodetune("check", str(inv), runs_dir=runs_dir, env={"COLUMNS": "200"})
    assert res.code == 1, res.stdout + res.stderr
    assert "0 GPU(s) visible to the driver, 8 expected" in res.stdout
    doc = record(runs_dir)
    count = next(c for c in doc["checks"]["here"] if c["name"] == "gpu.count")
    assert (count["status"], count["measured"], count["expected"], count["source"]) == (
        "fail", "0", "8", "nodetune_expected_gpus")
    assert doc["nodes"]["here"]["verdict"] == "bad"


def test_bad_input_exits_2_naming_host_and_variable(tmp_path: Path, runs_dir: Path) -> None:
    inv = inventory(tmp_path, here=LOCAL, gpu7={**LOCAL, "nodetune_min_shm": "lots"})
    res = run_nodetune("check", str(inv), "--json", runs_dir=runs_dir)
    assert res.code == 2
    doc = res.json()
    assert doc["error"]["host"] == "gpu7" and "nodetune_min_shm" in doc["error"]["message"]
    assert "checks" not in doc and record(runs_dir)["exit_code"] == 2


def test_an_unreachable_node_exits_3_and_the_others_are_still_checked(
        tmp_path: Path, runs_dir: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 1,
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"}
    res = run_nodetune("check", str(inventory(tmp_path, here=LOCAL, gone=gone)), "--json",
                       "--timeout", "10", runs_dir=runs_dir)
    assert res.code == 3, res.stdout + res.stderr
    doc = res.json()
    assert doc["nodes"]["gone"]["verdict"] == "unreachable"
    assert "cannot reach" in doc["nodes"]["gone"]["reason"]
    assert doc["nodes"]["here"]["verdict"] == "good"
    assert doc["summary"]["unreachable"] == 1


def test_fqcn_connection_names_mean_their_plugins(tmp_path: Path, runs_dir: Path) -> None:
    # ansible.builtin.local is this machine (checked locally, not over SSH to "here"),
    # and ansible.builtin.ssh is SSH (unreachable here: exit 3, not refused as bad input).
    known = tmp_path / "known_hosts"
    known.write_text("")
    gone = {"ansible_connection": "ansible.builtin.ssh", "ansible_host": "127.0.0.1",
            "ansible_port": 1, "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"}
    here = {**LOCAL, "ansible_connection": "ansible.builtin.local"}
    res = run_nodetune("check", str(inventory(tmp_path, here=here, gone=gone)), "--json",
                       "--timeout", "10", runs_dir=runs_dir)
    assert res.code == 3, res.stdout + res.stderr
    doc = res.json()
    assert doc["nodes"]["here"]["verdict"] == "good"
    assert doc["nodes"]["gone"]["verdict"] == "unreachable"
    assert "cannot reach" in doc["nodes"]["gone"]["reason"]


def test_help_lists_every_check_and_variable() -> None:
    res = run_nodetune("check", "--help", runs_dir=Path("/nonexistent"))
    assert res.code == 0
    for word in ("gpu.ecc", "fabric.sysctl", "nodetune_expected_gpus", "nodetune_min_shm",
                 "nodetune_expected_rdma_rate_gbps", "Azure NHC", "node.time_sync",
                 "node.global_env", "nodetune_max_clock_offset_ms"):
        assert word in res.stdout
    # the list of checks as the library makes it from the checks' modules, line for line
    from nodetune.check import listing

    for line in listing.text().splitlines():
        assert line.strip() in res.stdout


def test_a_hung_nvidia_smi_is_not_assessed_exit_5(tmp_path: Path, runs_dir: Path) -> None:
    """A stand-in nvidia-smi (a shell script on PATH) that never answers: the run ends
    within the probe's own timeout for it, exit 5, never a pass."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tool = bin_ / "nvidia-smi"
    tool.write_text('#!/bin/sh\nsleep 120 &\necho $! > "$CHILD_PID"\nwait\n')
    tool.chmod(0o755)
    child = tmp_path / "child.pid"
    res = run_nodetune("check", str(inventory(tmp_path, here=LOCAL)), "--json",
                       "--timeout", "10", "--skip-allreduce", runs_dir=runs_dir, timeout=60,
                       env={"PATH": f"{bin_}:{os.environ['PATH']}", "CHILD_PID": str(child)})
    assert res.code == 5, res.stdout + res.stderr
    doc = res.json()
    assert (doc["status"], doc["exit_code"]) == ("not_assessed", 5)
    assert doc["nodes"]["here"]["verdict"] == "not_assessed"
    assert doc["nodes"]["here"]["action"] == "re-run"
    count = next(c for c in doc["checks"]["here"] if c["name"] == "gpu.count")
    assert count["status"] == "unknown" and count["action"] == "re-run"
    assert "nvidia-smi gave no answer within 5 s (its process group was killed)" in \
        count["message"]
    assert not Path(f"/proc/{int(child.read_text())}/cmdline").exists() or \
        Path(f"/proc/{int(child.read_text())}/stat").read_text().rsplit(")", 1)[1].split()[0] \
        == "Z"
