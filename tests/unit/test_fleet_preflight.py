"""The fleet's preflight (reach each node, import torch with its python) through the executor,
on this machine as a node (``ansible_connection: local``: a real local session)."""

from __future__ import annotations

import sys
from pathlib import Path

from nodetune.ansible.inventory import Host
from nodetune.collective.plan import Options
from nodetune.fleet.run import preflight
from nodetune.verdicts import NodeState


def _host(name: str, python: str) -> Host:
    return Host(name, ("gpu_nodes",), {"ansible_connection": "local", "nodetune_python": python})


def test_preflight_names_a_missing_python_a_torchless_one_and_a_good_one(tmp_path: Path) -> None:
    fake_torch = tmp_path / "site"
    (fake_torch / "torch").mkdir(parents=True)
    (fake_torch / "torch" / "__init__.py").write_text("")
    good = tmp_path / "python-with-torch"
    # STAND-IN: a python whose path has an empty torch package (this machine has no torch)
    good.write_text(f"#!/bin/sh\nPYTHONPATH={fake_torch} exec {sys.executable} \"$@\"\n")
    good.chmod(0o755)
    seen: list[tuple[str, str]] = []
    got = preflight([_host("missing", str(tmp_path / "no-such-python")),
                     _host("torchless", sys.executable), _host("good", str(good))],
                    Options(timeout=30.0), parallel=2,
                    progress=lambda host, msg: seen.append((host, msg)))
    assert got["missing"].state is NodeState.BAD
    assert "not found or not executable" in got["missing"].reason
    assert got["torchless"].state is NodeState.BAD
    assert "torch is not importable" in got["torchless"].reason
    assert "No module named 'torch'" in got["torchless"].reason
    assert got["good"].state is NodeState.GOOD, got["good"].reason
    assert {host for host, msg in seen if msg.startswith("preflight: connecting")} == {
        "missing", "torchless", "good"}


def test_preflight_of_an_unreachable_node_says_unreachable() -> None:
    host = Host("gone", ("gpu_nodes",), {"ansible_host": "127.0.0.1", "ansible_port": 1,
                                         "ansible_user": "root"})
    got = preflight([host], Options(timeout=5.0), parallel=1, progress=lambda *_: None)
    assert got["gone"].state is NodeState.UNREACHABLE
    assert got["gone"].reason.startswith("preflight: ")
