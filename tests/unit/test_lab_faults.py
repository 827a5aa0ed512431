"""`nodetune lab fault` refuses bad input before touching any node."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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


@pytest.mark.parametrize("rate", ["200", "1.5gbit", "392gbit; id"])
def test_bad_rdma_port_rate_is_bad_input(no_podman: list[tuple[str, ...]], rate: str) -> None:
    with pytest.raises(InputError, match="--rate"):
        lab_faults.apply("n1", "rdma-port", rate=rate)
    assert no_podman == []


def test_rdma_port_rate_in_gbps() -> None:
    assert lab_faults.gbps("392gbit") == 392.0
    assert lab_faults.gbps("500mbit") == 0.5


def test_rdma_port_plants_a_port_and_the_standin_that_clear_removes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planting commands run in a real shell, with the stand-in paths under tmp_path."""
    from nodetune.lab import health_faults

    for name in ("RDMA_SYSFS", "IB_WRITE_BW", "IB_WRITE_BW_GBPS", "KMSG", "DCGMI", "LSPCI",
                 "DATA_DIR"):
        monkeypatch.setattr(health_faults, name, str(tmp_path / name))
    monkeypatch.setattr(health_faults, "PORT", str(tmp_path / "RDMA_SYSFS/mlx5_0/ports/1"))
    monkeypatch.setattr(health_faults, "PLANTED", {"rdma-port": str(tmp_path / "IB_WRITE_BW")})

    def run(argv: list[str], *, check: bool = True, rc: bool = False) -> str:
        proc = subprocess.run(argv, capture_output=True, text=True, check=check)
        return str(proc.returncode) if rc else proc.stdout

    said = health_faults.apply(run, "rdma-port", gbps=120.0)
    assert said.endswith("reporting 120 Gb/s")
    port = tmp_path / "RDMA_SYSFS/mlx5_0/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (port / "counters/link_downed").read_text() == "0\n"
    assert (tmp_path / "IB_WRITE_BW_GBPS").read_text() == "120\n"
    tool = tmp_path / "IB_WRITE_BW"
    assert os.access(tool, os.X_OK) and "Stand-in for perftest's ib_write_bw" in tool.read_text()
    assert health_faults.active(run) == ["rdma-port"]
    assert health_faults.clear(run) and not tool.exists() and not port.exists()
