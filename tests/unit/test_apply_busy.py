"""apply's busy lookup: the Slurm nodes allocated to jobs, from the same sinfo/squeue
reading validate and tune use; unknown nodes and sites without Slurm as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host, Inventory
from nodetune.ansible.results import PlaybookOptions
from nodetune.apply import busy as busy_mod
from nodetune.errors import InputError
from nodetune.slurm.scontrol import Scontrol
from tests.unit.test_slurm import FixtureSession


def _hosts(*spec: tuple[str, dict[str, Any]]) -> tuple[Inventory, tuple[Host, ...]]:
    hosts = tuple(Host(name, ("gpu_nodes",), {"nodetune_slurm_controller": "ctl", **v})
                  for name, v in spec)
    ctl = Host("ctl", ("slurm_controller",), {})
    return Inventory(source=Path("inv"), hosts=(*hosts, ctl), groups=("gpu_nodes",)), hosts


@pytest.fixture()
def session(monkeypatch: pytest.MonkeyPatch) -> FixtureSession:
    fixture = FixtureSession({"sinfo": "sinfo-busy.json", "squeue": "squeue-busy.json"})

    @contextmanager
    def connect(_plan: object) -> Iterator[Scontrol]:
        yield Scontrol(fixture, "ctl")  # type: ignore[arg-type]

    monkeypatch.setattr(busy_mod, "connect", connect)
    return fixture


def test_busy_hosts_and_what_the_play_gets(session: FixtureSession) -> None:
    inv, hosts = _hosts(("gpu-1", {"nodetune_slurm_nodename": "nt-slurm-1"}),
                        ("gpu-2", {"nodetune_slurm_nodename": "nt-slurm-2"}),
                        ("not-in-slurm", {}), ("odd name@x", {}))
    found = busy_mod.find(inv, hosts, allow_busy=False)
    busy = found.busy
    assert [(b.node, b.state, b.jobs) for b in busy] == [("gpu-2", "ALLOCATED", ("6",))]
    # Applied as idle nodes, and said: Slurm lists neither under any name.
    assert found.unknown == ("not-in-slurm", "odd name@x")
    options = busy_mod.with_busy(PlaybookOptions(extra_vars=("a=1",)), busy)
    assert options.extra_vars == ("a=1", json.dumps({"nodetune_busy_hosts": ["gpu-2"]}))
    assert busy_mod.with_busy(options, ()) is options
    assert busy_mod.deferred(busy, {"gpu-2": ["x", "x"], "gpu-1": ["y"]}, reboot=["gpu-2"]) == {
        "gpu-2": {"slurm_node": "nt-slurm-2", "state": "ALLOCATED", "jobs": ["6"],
                  "deferred": ["x", "reboot (--reboot)"]}}


def test_allow_busy_asks_nothing(session: FixtureSession) -> None:
    inv, hosts = _hosts(("gpu-2", {"nodetune_slurm_nodename": "nt-slurm-2"}))
    assert busy_mod.find(inv, hosts, allow_busy=True).busy == ()
    assert session.asked == []


def test_a_bad_slurm_name_given_is_bad_input(session: FixtureSession) -> None:
    inv, hosts = _hosts(("gpu-2", {"nodetune_slurm_nodename": "nt-slurm-[1-2]"}))
    with pytest.raises(InputError, match="nodetune_slurm_nodename"):
        busy_mod.find(inv, hosts, allow_busy=False)
    assert session.asked == []
