"""The GPU stack's input refusals (container toolkit, DOCA), in the read-only first pass.

Each runs the real inputs pass (playbooks/inputs.yml) against this machine
over a local connection: it reads, never changes, and stops every host
before any play that changes anything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from tests.conftest import run_nodetune

ROOT = Path(__file__).resolve().parents[2]


def _inputs(tmp_path: Path, roles: list[str], host_vars: dict[str, object]) -> tuple[
        list[tuple[str, str, str]], Path]:
    """Run the inputs pass for ``roles`` on host ``me``; a later play would touch a marker."""
    from nodetune.ansible.results import PlaybookOptions
    from nodetune.ansible.runner import run_playbook

    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"me": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        **host_vars}}}}))
    marker = tmp_path / "changed"
    play = tmp_path / "play.yml"
    play.write_text(
        f"- ansible.builtin.import_playbook: {ROOT / 'playbooks' / 'inputs.yml'}\n"
        f"  vars: {{nodetune_input_roles: {json.dumps(roles)}}}\n"
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.file: {{path: '{marker}', state: touch, mode: '0644'}}\n")
    result = run_playbook(str(play), inv, options=PlaybookOptions(), artifact_dir=tmp_path / "r")
    return [(p.host, p.role, p.message) for p in result.input_problems], marker


def test_toolkit_with_known_escapes_exits_2_naming_host_variable_and_cves(
        tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    runs_dir = tmp_path / "runs"
    # --check as well: even a regression could not touch this machine.
    res = run_nodetune("apply", str(inv), "--playbook", "drivers.yml", "--check",
                       "-t", "nvidia_container_toolkit",
                       "-e", "nvidia_container_toolkit_version=1.17.3-1", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "Bad input (nothing was changed on any node):" in res.stdout
    flat = " ".join(res.stdout.split())
    assert ("me: nvidia_container_toolkit: nvidia_container_toolkit_version 1.17.3-1 has known "
            "container escapes: CVE-2025-23359 (fixed in 1.17.4), CVE-2025-23266 (fixed in "
            "1.17.8), CVE-2025-23267 (fixed in 1.17.8)") in flat, res.stdout
    assert "nvidia_container_toolkit_allow_vulnerable: true" in flat
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert doc["exit_code"] == 2
    assert [(p["host"], p["role"]) for p in doc["input_problems"]] == [
        ("me", "nvidia_container_toolkit")]
    assert all(h["changed"] == 0 for h in doc["hosts"]), doc["hosts"]


def test_toolkit_escape_checks_every_fixed_release(tmp_path: Path) -> None:
    """1.17.4 still has the 1.17.8 escapes; an explicit allow passes; the default passes."""
    problems, marker = _inputs(tmp_path, ["nvidia_container_toolkit"],
                               {"nvidia_container_toolkit_version": "1.17.4-1"})
    [(host, role, message)] = problems
    assert (host, role) == ("me", "nvidia_container_toolkit")
    assert "CVE-2025-23266 (fixed in 1.17.8), CVE-2025-23267 (fixed in 1.17.8)" in message
    assert "CVE-2025-23359" not in message
    assert not marker.exists(), "a play after the inputs pass ran"

    allowed, marker = _inputs(tmp_path / "a", ["nvidia_container_toolkit"], {
        "nvidia_container_toolkit_version": "1.17.3-1",
        "nvidia_container_toolkit_allow_vulnerable": True})
    assert allowed == [] and marker.exists()

    default, marker = _inputs(tmp_path / "d", ["nvidia_container_toolkit"], {})
    assert default == [] and marker.exists()


def test_doca_release_nvidia_does_not_build_for_the_os_is_refused(tmp_path: Path) -> None:
    """DOCA 2.9 has no Debian 13 build: refused, naming the variables; 3.2 (the default) or a
    mirror of your own passes."""
    problems, marker = _inputs(tmp_path, ["ofed"], {
        "ofed_source": "doca", "ofed_doca_repo_distro": "debian13", "ofed_doca_version": "2.9.1"})
    [(host, role, message)] = problems
    assert (host, role) == ("me", "ofed")
    flat = " ".join(message.split())
    assert "NVIDIA publishes no DOCA 2.9.1 for debian13" in flat, flat
    assert "its builds start at DOCA 3.2.0" in flat
    assert "set ofed_doca_version to 3.2.0 or newer" in flat
    assert "ofed_doca_repo_url to a mirror" in flat and "ofed_source: inbox" in flat
    assert not marker.exists(), "a play after the inputs pass ran"

    for name, extra in {
        "default": {},
        "mirror": {"ofed_doca_version": "2.9.1",
                   "ofed_doca_repo_url": "https://mirror.example.invalid/doca/2.9.1/debian13/x86_64/"},
    }.items():
        passed, marker = _inputs(tmp_path / name, ["ofed"], {
            "ofed_source": "doca", "ofed_doca_repo_distro": "debian13", **extra})
        assert passed == [] and marker.exists(), (name, passed)
