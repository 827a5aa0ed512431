"""The local_fact module (node_facts): install the fact script and gather it in one call."""

from __future__ import annotations

import getpass
import grp
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.plugins import ansible_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = '#!/bin/sh\necho \'{"gpus": 0, "where": "test"}\'\n'


def _run(tmp_path: Path, *extra: str, content: str = SCRIPT) -> dict[str, Any]:
    args = {"dir": str(tmp_path / "facts.d"), "name": "t.fact", "content": content,
            "mode": "0755", "owner": getpass.getuser(),
            "group": grp.getgrgid(os.getgid()).gr_name}
    env = ansible_env(json_output=True)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "nodetune.cluster.local_fact", "-a", json.dumps(args), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"])


def test_check_mode_on_a_fresh_node_predicts_writes_nothing_and_gives_the_facts(
        tmp_path: Path) -> None:
    """Later roles see in check mode the facts the script would give once installed."""
    res = _run(tmp_path, "--check", "--diff")
    assert res["changed"]
    assert not (tmp_path / "facts.d").exists()
    assert [d["after"] for d in res["diff"]][1] == SCRIPT
    assert res["ansible_facts"]["ansible_local"] == {"t": {"gpus": 0, "where": "test"}}


def test_installs_gathers_and_then_changes_nothing(tmp_path: Path) -> None:
    first = _run(tmp_path)
    fact = tmp_path / "facts.d" / "t.fact"
    assert first["changed"] and fact.read_text() == SCRIPT
    assert oct(fact.stat().st_mode & 0o777) == "0o755"
    assert first["ansible_facts"]["ansible_local"] == {"t": {"gpus": 0, "where": "test"}}
    again = _run(tmp_path, "--check")
    assert not again["changed"]
    assert again["ansible_facts"]["ansible_local"]["t"]["where"] == "test"


def test_content_and_mode_drift_are_shown_then_fixed(tmp_path: Path) -> None:
    _run(tmp_path)
    fact = tmp_path / "facts.d" / "t.fact"
    fact.chmod(0o700)
    res = _run(tmp_path, "--check", "--diff", content=SCRIPT.replace("test", "new"))
    assert res["changed"] and oct(fact.stat().st_mode & 0o777) == "0o700"
    assert any(isinstance(d["before"], dict) and d["before"].get("mode") == "0700"
               for d in res["diff"])
    # Check mode gathers what the new content would give, the installed file unchanged.
    assert res["ansible_facts"]["ansible_local"]["t"]["where"] == "new"
    assert "test" in fact.read_text()
    res = _run(tmp_path, content=SCRIPT.replace("test", "new"))
    assert res["changed"] and oct(fact.stat().st_mode & 0o777) == "0o755"
    assert res["ansible_facts"]["ansible_local"]["t"]["where"] == "new"
