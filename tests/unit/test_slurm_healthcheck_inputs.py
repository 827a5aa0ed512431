"""The health check role refuses a node Python the package cannot run, in the read-only first
pass (playbooks/inputs.yml), naming the host and the Python.

The Pythons are real interpreters of those versions where this machine has them (pyenv's
3.6 and 3.9, EL8's and EL9's python3); where it has none, a stand-in that answers the
version query as that Python does (named so). The refused Pythons share one run of the
inputs pass, one host each, and the suitable one another: with test_stack_inputs' cases
where both modules are collected (its shared_run).
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_nodetune
from tests.unit.test_stack_inputs import CASE_BUILDERS, Cases, Problems, shared_run


def _python(tmp_path: Path, version: str) -> str:
    """An interpreter of ``version`` (3.6, 3.9): a real one, else a stand-in."""
    found = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}")
                   + glob.glob(f"/usr/bin/python{version}"))
    if found:
        return found[0]
    stand_in = tmp_path / f"python{version}"  # stand-in: prints the version as sys would
    stand_in.write_text(f"#!/bin/sh\necho {version}.18\n")
    stand_in.chmod(0o755)
    return str(stand_in)


ROLES = ["slurm_healthcheck"]
PYTHONS = {"py36": "3.6", "py39": "3.9"}
MISSING = "/nonexistent/python3"


# Each refused host's Python, as _refused_cases gave it (when shared_run built the cases).
GIVEN: dict[str, str] = {}


def _refused_cases(tmp: Path) -> Cases:
    tmp.mkdir(parents=True, exist_ok=True)
    GIVEN.update({host: _python(tmp, version) for host, version in PYTHONS.items()},
                 missing=MISSING)
    return {host: (ROLES, {"slurm_healthcheck_python": python})
            for host, python in GIVEN.items()}


def _passed_cases(_tmp: Path) -> Cases:
    return {"ok": (ROLES, {"slurm_healthcheck_python": sys.executable})}


CASE_BUILDERS["refused"].append(_refused_cases)
CASE_BUILDERS["passed"].append(_passed_cases)


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Problems, Path, str]]:
    """The Pythons the inputs pass refuses, one host each, in one run (shared_run: with
    test_stack_inputs' refused cases where it is collected too), and each host's Python."""
    results = shared_run(tmp_path_factory, "refused")
    return {host: (*results[host], python) for host, python in GIVEN.items()}


@pytest.mark.parametrize("version", ["3.6", "3.9"])
def test_an_old_node_python_is_refused_naming_host_and_python(
        refused: dict[str, tuple[Problems, Path, str]], version: str) -> None:
    host = "py" + version.replace(".", "")
    problems, marker, python = refused[host]
    [(host_named, role, message)] = problems
    assert (host_named, role) == (host, "slurm_healthcheck")
    flat = " ".join(message.split())
    assert flat.startswith(f"slurm_healthcheck_python {python} is Python {version}."), flat
    assert "needs Python 3.11 or newer" in flat
    assert not marker.exists(), "a play after the inputs pass ran"


def test_a_missing_python_is_refused_and_a_suitable_one_passes(
        refused: dict[str, tuple[Problems, Path, str]],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    problems, marker, _python_path = refused["missing"]
    [(_host, _role, message)] = problems
    assert "slurm_healthcheck_python /nonexistent/python3 does not run" in \
        " ".join(message.split()), message
    assert not marker.exists()
    # A run without refused hosts (one would stop it too): shared_run's "passed" run.
    passed, marker = shared_run(tmp_path_factory, "passed")["ok"]
    assert passed == [] and marker.exists(), passed


def test_apply_of_the_health_check_playbook_exits_2_before_any_change(tmp_path: Path) -> None:
    python = _python(tmp_path, "3.9")
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    runs_dir = tmp_path / "runs"
    # --check as well: even a regression could not touch this machine.
    res = run_nodetune("apply", str(inv), "--playbook", "slurm_healthcheck.yml", "--check",
                       "-e", f"slurm_healthcheck_python={python}", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "Bad input (nothing was changed on any node):" in res.stdout
    flat = " ".join(res.stdout.split())
    assert f"me: slurm_healthcheck: slurm_healthcheck_python {python} is Python 3.9." in flat, \
        res.stdout
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert doc["exit_code"] == 2
    assert all(h["changed"] == 0 for h in doc["hosts"]), doc["hosts"]
