"""The GPU stack's input refusals (container toolkit, DOCA), in the read-only first pass.

Each runs the real inputs pass (playbooks/inputs.yml) against this machine
over a local connection: it reads, never changes, and stops every host
before any play that changes anything. The cases it refuses share one run,
those it lets through another: one host per case (see inputs_pass), with the cases of
test_slurm_healthcheck_inputs where it is collected too (see shared_run).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_nodetune

ROOT = Path(__file__).resolve().parents[2]


Problems = list[tuple[str, str, str]]


def inputs_pass(tmp_path: Path, cases: dict[str, tuple[list[str], dict[str, object]]]) -> dict[
        str, tuple[Problems, Path]]:
    """Run the inputs pass once, one host per case: ``cases`` maps a host to the roles whose
    inputs it checks and its variables. A later play would touch a marker for each host.

    The inputs pass checks and reports every host on its own (its problems name their host),
    and a later play runs on a host only where no host had a problem: a run of cases that
    must pass, or of cases that must not, answers for each case as a run of its own would.
    Returns each host's problems (host, role, message) and its marker.
    """
    from nodetune.ansible.results import PlaybookOptions
    from nodetune.ansible.runner import run_playbook

    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {host: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "test_input_roles": roles, **host_vars} for host, (roles, host_vars) in cases.items()}}}))
    play = tmp_path / "play.yml"
    # The roles checked are each host's own (play variables are templated per host).
    play.write_text(
        f"- ansible.builtin.import_playbook: {ROOT / 'playbooks' / 'inputs.yml'}\n"
        "  vars: {nodetune_input_roles: '{{ test_input_roles }}'}\n"
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.file: {{path: '{tmp_path}/changed-{{{{ inventory_hostname }}}}', "
        "state: touch, mode: '0644'}\n")
    result = run_playbook(str(play), inv, options=PlaybookOptions(), artifact_dir=tmp_path / "r")
    # Each host checked its own roles, and only those.
    checked = {(e["event_data"]["host"], e["event_data"]["role"])
               for f in (tmp_path / "r").glob("**/job_events/*.json")
               for e in [json.loads(f.read_text())]
               if e.get("event") in ("runner_on_ok", "runner_on_failed")
               and e["event_data"].get("role")}
    assert checked == {(h, r) for h, (roles, _) in cases.items() for r in roles}, checked
    problems = [(p.host, p.role, p.message) for p in result.input_problems]
    assert {p[0] for p in problems} <= set(cases), problems
    return {host: ([p for p in problems if p[0] == host], tmp_path / f"changed-{host}")
            for host in cases}


Cases = dict[str, tuple[list[str], dict[str, object]]]
# Builders of the cases the inputs pass refuses ("refused") and lets through ("passed"), each
# given a directory of its own for the files its cases need: this module's, and those of
# modules that import it and add theirs at import (test_slurm_healthcheck_inputs), so that
# every collected module's cases share one run of each kind (see shared_run).
CASE_BUILDERS: dict[str, list[Callable[[Path], Cases]]] = {"refused": [], "passed": []}
_RUNS: dict[str, dict[str, tuple[Problems, Path]]] = {}


def shared_run(factory: pytest.TempPathFactory, kind: str) -> dict[str, tuple[Problems, Path]]:
    """The one run of the inputs pass, this session, of every registered case of ``kind``
    (its host names are unique across modules); each host's problems and marker."""
    if kind not in _RUNS:
        tmp = factory.mktemp(kind)
        cases: Cases = {}
        for i, build in enumerate(CASE_BUILDERS[kind]):
            built = build(tmp / f"cases-{i}")
            assert not built.keys() & cases.keys(), "a host name per case"
            cases.update(built)
        _RUNS[kind] = inputs_pass(tmp / "run", cases)
    return _RUNS[kind]


def _refused_cases(_tmp: Path) -> Cases:
    return {
        "toolkit_1174": (["nvidia_container_toolkit"],
                         {"nvidia_container_toolkit_version": "1.17.4-1"}),
        "doca_291": (["ofed"], {"ofed_source": "doca", "ofed_doca_repo_distro": "debian13",
                                "ofed_doca_version": "2.9.1"}),
    }


def _passed_cases(_tmp: Path) -> Cases:
    doca = {"ofed_source": "doca", "ofed_doca_repo_distro": "debian13"}
    return {
        "toolkit_allowed": (["nvidia_container_toolkit"], {
            "nvidia_container_toolkit_version": "1.17.3-1",
            "nvidia_container_toolkit_allow_vulnerable": True}),
        "toolkit_default": (["nvidia_container_toolkit"], {}),
        "doca_default": (["ofed"], doca),
        "doca_mirror": (["ofed"], {**doca, "ofed_doca_version": "2.9.1", "ofed_doca_repo_url":
                                   "https://mirror.example.invalid/doca/2.9.1/debian13/x86_64/"}),
    }


CASE_BUILDERS["refused"].append(_refused_cases)
CASE_BUILDERS["passed"].append(_passed_cases)


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Problems, Path]]:
    """The cases the inputs pass refuses, in one run (shared_run)."""
    return shared_run(tmp_path_factory, "refused")


@pytest.fixture(scope="module")
def passed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Problems, Path]]:
    """The cases the inputs pass lets through, in one run (shared_run)."""
    return shared_run(tmp_path_factory, "passed")


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


def test_toolkit_escape_checks_every_fixed_release(
        refused: dict[str, tuple[Problems, Path]],
        passed: dict[str, tuple[Problems, Path]]) -> None:
    """1.17.4 still has the 1.17.8 escapes; an explicit allow passes; the default passes."""
    problems, marker = refused["toolkit_1174"]
    [(host, role, message)] = problems
    assert (host, role) == ("toolkit_1174", "nvidia_container_toolkit")
    assert "CVE-2025-23266 (fixed in 1.17.8), CVE-2025-23267 (fixed in 1.17.8)" in message
    assert "CVE-2025-23359" not in message
    assert not marker.exists(), "a play after the inputs pass ran"

    allowed, marker = passed["toolkit_allowed"]
    assert allowed == [] and marker.exists(), allowed

    default, marker = passed["toolkit_default"]
    assert default == [] and marker.exists(), default


def test_doca_release_nvidia_does_not_build_for_the_os_is_refused(
        refused: dict[str, tuple[Problems, Path]],
        passed: dict[str, tuple[Problems, Path]]) -> None:
    """DOCA 2.9 has no Debian 13 build: refused, naming the variables; 3.2 (the default) or a
    mirror of your own passes."""
    problems, marker = refused["doca_291"]
    [(host, role, message)] = problems
    assert (host, role) == ("doca_291", "ofed")
    flat = " ".join(message.split())
    assert "NVIDIA publishes no DOCA 2.9.1 for debian13" in flat, flat
    assert "its builds start at DOCA 3.2.0" in flat
    assert "set ofed_doca_version to 3.2.0 or newer" in flat
    assert "ofed_doca_repo_url to a mirror" in flat and "ofed_source: inbox" in flat
    assert not marker.exists(), "a play after the inputs pass ran"

    for name in ("default", "mirror"):
        ok, marker = passed[f"doca_{name}"]
        assert ok == [] and marker.exists(), (name, ok)
