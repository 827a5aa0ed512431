"""Every role's molecule scenario (podman driver): check, converge, idempotence, verify."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def test_every_role_has_a_scenario() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    missing = [r for r in roles if r not in SCENARIOS and r != "node_facts"]
    assert not missing, f"roles without a molecule scenario: {missing}"


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str) -> None:
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0"}
    started = time.monotonic()
    proc = subprocess.run(["molecule", "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    took = time.monotonic() - started
    print(f"molecule {scenario}: {took:.0f} s")
    assert proc.returncode == 0, (proc.stdout[-6000:] + proc.stderr[-3000:])
