"""How scripts/test.sh learns that the unit tests have ended (it then starts the 2.21 pass)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.molecule.conftest import UNIT_DONE_FILE_ENV


def _pytest(node_id: str, done: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           node_id], cwd=REPO, env={**os.environ, UNIT_DONE_FILE_ENV: str(done)},
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_first_molecule_test_says_the_unit_tests_have_ended(tmp_path: Path) -> None:
    done = tmp_path / "unit-done"
    unit = _pytest("tests/unit/test_cpu_tiers.py::"
                   "test_only_the_suites_own_cgroups_are_made_joined_or_removed", done)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert not done.exists(), "a unit test says nothing"
    # a molecule test that starts no scenario: the file appears as it starts
    mol = _pytest("tests/molecule/test_molecule.py::test_every_role_has_a_scenario", done)
    assert mol.returncode == 0, mol.stdout + mol.stderr
    assert done.exists()
