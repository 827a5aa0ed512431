"""Every role's molecule scenario (podman driver): check, converge, idempotence, verify.

Scenarios use distinct container names, so they run three at a time; each
test waits for its own scenario's result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.plugins import collections_path

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
PARALLEL = int(os.environ.get("NODETUNE_MOLECULE_PARALLEL", "3"))


def _molecule(scenario: str) -> tuple[int, str, float]:
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "ANSIBLE_COLLECTIONS_PATH": collections_path(),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0"}
    started = time.monotonic()
    proc = subprocess.run(["molecule", "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1200, check=False)
    return proc.returncode, proc.stdout[-6000:] + proc.stderr[-3000:], time.monotonic() - started


@pytest.fixture(scope="session")
def molecule_runs() -> dict[str, Future[tuple[int, str, float]]]:
    pool = ThreadPoolExecutor(max_workers=PARALLEL)
    return {s: pool.submit(_molecule, s) for s in SCENARIOS}


def test_every_role_has_a_scenario() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    missing = [r for r in roles if r not in SCENARIOS and r != "node_facts"]
    assert not missing, f"roles without a molecule scenario: {missing}"


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, molecule_runs: dict[str, Future[tuple[int, str, float]]]
                  ) -> None:
    code, output, took = molecule_runs[scenario].result()
    print(f"molecule {scenario}: {took:.0f} s")
    assert code == 0, output
