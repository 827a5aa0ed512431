"""The suite owns its lab: an operator's running lab (what scripts/demo.sh leaves) is never
reused, resized or removed by the suite's lab fixture, and the suite's own lab is gone after
the session, so scripts/demo.sh and scripts/test.sh work in either order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodetune.lab import nodes as lab_mod
from tests.integration import cpu_log

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
# What the suite's lab fixture needs: its conftest files and the modules they import.
FIXTURE_FILES = ("pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/lab_name.py",
                 "tests/node_exec.py",
                 "tests/integration/__init__.py", "tests/integration/conftest.py",
                 "tests/integration/session_lab.py", "tests/integration/cpu_log.py")
PROBE = '''
import json, os
from pathlib import Path


def test_probe(lab):
    Path(os.environ["PROBE_OUT"]).write_text(json.dumps(
        {"nodes": list(lab.nodes), "inventory": str(lab.inventory)}))
'''

pytestmark = pytest.mark.integration


def lab_state(name: str, checkout: Path) -> dict[str, Any]:
    """Everything of lab ``name`` a suite could reuse, resize or remove."""
    ps = json.loads(subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=io.nodetune.lab={name}", "--format", "json"],
        capture_output=True, text=True, check=True, timeout=60).stdout or "[]")
    exists = {what: subprocess.run(["podman", kind, "exists", what], check=False,
                                   timeout=60).returncode == 0
              for kind, what in (("network", name), ("network", f"{name}-fabric"),
                                 ("volume", f"{name}-shared"))}
    files = {str(p.relative_to(checkout)): p.read_bytes()
             for d in ("inventory/lab", ".nodetune/lab") for p in (checkout / d).rglob("*")
             if p.is_file()}
    containers = sorted(f"{c['Id']} {c['Names'][0]} {c['State']} started {c['StartedAt']}"
                        for c in ps)
    return {"containers": containers, "exists": exists, "files": files}


def test_suite_lab_never_touches_the_operators_lab(tmp_path: Path) -> None:
    """A one-node lab stands for the operator's (its files in a checkout of its own); the
    suite's lab fixture runs there in a pytest of its own, as `scripts/test.sh` would after
    `scripts/demo.sh`. The fixture gets a two-node lab of its own, and afterwards the
    operator's containers, networks, volume, inventory and key are exactly as they were,
    and nothing of the suite's lab is left."""
    checkout = tmp_path / "checkout"
    for rel in FIXTURE_FILES:
        if (REPO / rel).exists():
            (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / rel, checkout / rel)
    (checkout / "tests" / "integration" / "test_probe.py").write_text(PROBE)
    operator = f"{lab_mod.NAME}-op"
    # The nested session is no lab test of this one: nor does it write this one's CPU log.
    env = {k: v for k, v in os.environ.items()
           if k not in ("NODETUNE_TEST_LAB", cpu_log.ENV)}
    env["NODETUNE_LAB"] = operator
    up = subprocess.run([str(NODETUNE), "lab", "up", "--nodes", "1"], cwd=checkout, env=env,
                        capture_output=True, text=True, timeout=300, check=False)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        before = lab_state(operator, checkout)
        assert len(before["containers"]) == 1 and " running" in before["containers"][0]
        probe = tmp_path / "probe.json"
        nested = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/integration/test_probe.py"], cwd=checkout,
            env={**env, "PROBE_OUT": str(probe)}, capture_output=True, text=True, timeout=600,
            check=False)
        assert nested.returncode == 0, nested.stdout[-3000:] + nested.stderr[-2000:]
        got = json.loads(probe.read_text())
        assert got["nodes"] == [f"{operator}-test-1", f"{operator}-test-2"], got
        assert not Path(got["inventory"]).is_relative_to(checkout / "inventory"), got
        assert lab_state(operator, checkout) == before
        after = lab_state(f"{operator}-test", checkout)
        assert after["containers"] == [] and not any(after["exists"].values()), after
        suite_root = checkout / ".nodetune" / "test-labs" / f"{operator}-test"
        assert not [p for p in suite_root.rglob("*") if p.is_file()]  # key, inventory: gone
    finally:
        subprocess.run([str(NODETUNE), "lab", "down"], cwd=checkout, env=env,
                       capture_output=True, timeout=300, check=False)
        subprocess.run([str(NODETUNE), "lab", "down"], cwd=checkout,
                       env={**env, "NODETUNE_LAB": f"{operator}-test"}, capture_output=True,
                       timeout=300, check=False)
