"""`lab up`'s size decision, made before podman is asked to change anything (the real lab
run is tests/integration/test_slurm.py::test_lab_up_keeps_every_node_...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodetune.errors import InputError
from nodetune.lab import nodes as lab


@pytest.fixture()
def three_nodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """A lab of three running nodes; any podman call or image build is recorded."""
    calls: list[tuple[str, ...]] = []
    nodes = [lab.LabNode(f"{lab.PREFIX}{i}", f"10.0.0.{i}", "running") for i in (1, 2, 3)]
    monkeypatch.setattr(lab, "_require_root", lambda: None)
    monkeypatch.setattr(lab, "_list_nodes", lambda: nodes)

    def podman(*args: str, **_kw: Any) -> None:
        calls.append(args)
        raise RuntimeError("stop here: the decision is made")

    monkeypatch.setattr(lab, "_podman", podman)
    monkeypatch.setattr(lab, "build_image", lambda **_kw: calls.append(("build",)))
    return calls


def test_fewer_nodes_without_shrink_is_refused_before_any_change(
        three_nodes: list[tuple[str, ...]], tmp_path: Path) -> None:
    with pytest.raises(InputError, match=rf"--nodes 2: lab {lab.NAME} has 3 nodes; this would "
                                         rf"remove {lab.PREFIX}3\. Pass --shrink"):
        lab.up(tmp_path, nodes=2)
    assert three_nodes == []
