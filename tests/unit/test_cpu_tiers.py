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
    """The process's path in cgroup v1's cpu hierarchy."""
    for line in Path("/proc", str(pid), "cgroup").read_text().splitlines():
        _n, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    raise AssertionError(f"{pid}: no cpu hierarchy")


@pytest.fixture
def tier() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("cgroups are made by root (scripts/test.sh runs as root)")
    path = cpu_tiers.create(f"nodetune-test-{os.getpid()}-unit")
    if path is None:
        pytest.skip("no cgroup v1 cpu hierarchy here: the suite runs untiered")
    yield path
    if path.exists():
        assert cpu_tiers.remove(path, grace=0) == []
    assert not path.exists()


def test_a_tier_has_its_weight_and_keeps_what_a_joined_process_starts(tier: Path) -> None:
    assert cpu_tiers.weight(tier) == cpu_tiers.SHARES
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
    assert f":cpu:/{tier.name}\n" in out.replace(":cpu,cpuacct:", ":cpu:"), out
    assert cpu_tiers.podman_parent(tier) == "/" + tier.name


def test_run_starts_the_command_in_the_tier_and_untiered_where_it_is_gone(tier: Path) -> None:
    here = _cpu_cgroup(os.getpid())
    argv = cpu_tiers.run_argv(str(tier), ["cat", "/proc/self/cgroup"])
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30,
                         cwd=runs.REPO).stdout
    assert f":/{tier.name}\n" in out, out
    gone = str(tier.with_name(tier.name + "x"))
    out = subprocess.run(cpu_tiers.run_argv(gone, ["cat", "/proc/self/cgroup"]),
                         capture_output=True, text=True, check=True, timeout=30,
                         cwd=runs.REPO).stdout
    assert f":{here}\n" in out and tier.name not in out, out
    # the command's own exit status comes back (a failing molecule scenario still fails)
    for where in (str(tier), gone):
        assert subprocess.run(cpu_tiers.run_argv(where, ["sh", "-c", "exit 3"]), cwd=runs.REPO,
                              timeout=30, check=False).returncode == 3


def test_a_molecule_scenario_starts_in_the_tier(tier: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_tiers.ENV, str(tier))
    argv = runs.command("network")
    assert argv == cpu_tiers.run_argv(str(tier), ["nice", "-n", str(runs.NICE), "molecule",
                                                  "test", "-s", "network"])
    monkeypatch.delenv(cpu_tiers.ENV)
    assert runs.command("network")[0] == "nice"


def test_removal_ends_what_is_left_and_takes_what_podman_made_beside_it(tier: Path) -> None:
    # podman's --cgroup-parent makes the tier's name in every v1 hierarchy, with a conmon
    # group and the container's; a process left there (a killed run's) is ended
    beside = [top / tier.name / "conmon" for top in cpu_tiers.CGROUP_ROOT.iterdir()
              if top.name in ("memory", "pids")]
    for path in beside:
        path.mkdir(parents=True)
    left = subprocess.Popen(["sleep", "60"])
    try:
        assert cpu_tiers.join(tier, left.pid)
        assert cpu_tiers.remove(tier, grace=0.5) == []
        assert left.wait(timeout=10) == -9
    finally:
        left.kill()
        left.wait()
    assert not tier.exists() and not any(path.parent.exists() for path in beside)


def test_a_dead_runs_tier_goes_when_the_next_is_made_and_a_live_ones_stays(tier: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = cpu_tiers.create(f"nodetune-test-{dead.pid}-background")
    assert stale is not None and stale.exists()
    again = cpu_tiers.create(f"nodetune-test-{os.getpid()}-other")
    assert again is not None
    try:
        assert not stale.exists(), "a tier of a test.sh that no longer runs is removed"
        assert tier.exists(), "the tier of a live run is kept"
    finally:
        assert cpu_tiers.remove(again, grace=0) == []


def test_only_the_suites_own_cgroups_are_made_joined_or_removed() -> None:
    with pytest.raises(ValueError, match="nodetune-test-PID-WORD"):
        cpu_tiers.create("a/b")
    with pytest.raises(ValueError, match="nodetune-test-PID-WORD"):
        cpu_tiers.create("system.slice")
    assert not cpu_tiers.join(cpu_tiers.V1_CPU / "libpod_parent", os.getpid())
    with pytest.raises(ValueError, match="not one of the suite's"):
        cpu_tiers.remove(cpu_tiers.V1_CPU / "libpod_parent")
