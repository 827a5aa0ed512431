"""`nodetune lab fault` refuses bad input before touching any node."""

from __future__ import annotations

import pytest

from nodetune.errors import InputError
from nodetune.lab import faults as lab_faults
from nodetune.lab import nodes as lab
from nodetune.lab import podman


@pytest.fixture
def no_podman(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def fake(*args: str, **_kw: object) -> object:
        calls.append(args)
        raise AssertionError(f"podman called: {args}")

    monkeypatch.setattr(podman, "run", fake)
    return calls


def test_unknown_fault_is_bad_input(no_podman: list[tuple[str, ...]]) -> None:
    with pytest.raises(InputError, match="choose one of slow-link"):
        lab_faults.apply("n1", "melt")
    assert no_podman == []


@pytest.mark.parametrize("rate", ["200", "fast", "0mbit", "200mbit; reboot", "-1gbit"])
def test_bad_rate_is_bad_input(no_podman: list[tuple[str, ...]], rate: str) -> None:
    with pytest.raises(InputError, match="--rate"):
        lab_faults.apply("n1", "slow-link", rate=rate)
    assert no_podman == []


def test_node_not_in_the_lab_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab, "_list_nodes",
                        lambda: [podman.LabNode(name="lab-1", address="10.0.0.1", state="running")])
    with pytest.raises(InputError) as exc:
        lab_faults.apply("lab-9", "slow-link")
    assert str(exc.value).startswith("lab-9: not a running node of lab")
