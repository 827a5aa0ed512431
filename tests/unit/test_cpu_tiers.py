"""The suite's background CPU tier (tests/cpu_tiers.py), on this machine's real cgroups."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import cpu_tiers
from tests.molecule import runs


def _cpu_cgroup(pid: int | str) -> str:
    """The process's path in the cpu hierarchy (v1's ``cpu`` line, or v2's ``0::``)."""
    lines = Path("/proc", str(pid), "cgroup").read_text().splitlines()
    for line in lines:
        _n, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))


@pytest.fixture
def tier() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("cgroups are made by root (scripts/test.sh runs as root)")
    name = f"nodetune-test-{os.getpid()}-unit"
    path = cpu_tiers.create(name, 64)
    if path is None:
        pytest.skip("no cpu cgroup can be made on this machine")
    yield path
    assert cpu_tiers.remove(path) == []
    assert not path.exists()


def test_a_tier_has_its_weight_and_keeps_what_a_joined_process_starts(tier: Path) -> None:
    assert cpu_tiers.weight(tier) in (64, 6)  # v1 shares, or v2's weight on its 1-10000 scale
    proc = subprocess.Popen(["sh", "-c", "read _; cat /proc/self/cgroup"], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert cpu_tiers.join(tier, proc.pid)
        assert _cpu_cgroup(proc.pid) == "/" + tier.name
        out, _ = proc.communicate("go\n", timeout=10)
    finally:
        proc.kill()
        proc.wait()
    # the cat, started after the move, runs in the tier too
    assert any(line.endswith("/" + tier.name) for line in out.splitlines()
               if "cpu" in line.split(":")[1].split(",") or line.startswith("0::")), out
    assert cpu_tiers.podman_parent(tier) == "/" + tier.name


def test_a_gone_tier_refuses_the_move_and_the_process_runs_untiered(tier: Path) -> None:
    gone = tier.with_name(tier.name + "-gone")
    assert not cpu_tiers.join(gone, os.getpid())
    assert _cpu_cgroup(os.getpid()) != "/" + gone.name


def test_a_molecule_scenario_starts_in_the_tier(tier: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_tiers.ENV, str(tier))
    argv = runs.command("network")
    assert argv[-7:] == ["nice", "-n", str(runs.NICE), "molecule", "test", "-s", "network"]
    # The wrapper as runs.py starts it, with a command that tells where it runs instead of molecule.
    wrapper = argv[:-7]
    out = subprocess.run([*wrapper, "cat", "/proc/self/cgroup"], capture_output=True,
                         text=True, check=True, timeout=10).stdout
    assert f":/{tier.name}\n" in out, out
    monkeypatch.delenv(cpu_tiers.ENV)
    assert runs.command("network")[0] == "nice"


def test_removal_takes_what_podman_made_beside_it_and_a_dead_runs_tier_goes_at_create(
        tier: Path) -> None:
    # podman's --cgroup-parent makes the tier's name in every v1 hierarchy, with a conmon group
    beside = [top / tier.name / "conmon" for top in cpu_tiers.CGROUP_ROOT.iterdir()
              if top.name in ("memory", "pids") and top != tier.parent]
    for path in beside:
        path.mkdir(parents=True)
    stale_pid = _dead_pid()
    stale = cpu_tiers.create(f"nodetune-test-{stale_pid}-background", 64)
    assert stale is not None and stale.exists()
    again = cpu_tiers.create(f"nodetune-test-{os.getpid()}-other", 64)
    assert again is not None
    try:
        assert not stale.exists(), "a tier of a test.sh that no longer runs is removed"
        assert tier.exists(), "the tier of a live run is kept"
    finally:
        assert cpu_tiers.remove(again) == []
    assert cpu_tiers.remove(tier) == []
    assert not any(path.parent.exists() for path in beside)
    tier.mkdir()  # the fixture removes it once more


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(ValueError, match="one path component"):
        cpu_tiers.create("a/b", 64)
