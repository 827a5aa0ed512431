"""The molecule scenarios, started as soon as pytest knows which of them it will run.

`molecule test` of every scenario takes most of the suite's CPU for many minutes; started at
collection, they run while the unit tests do, instead of after them. The longest scenarios
start first, so that the last minutes are not one long scenario running alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from tests import cpu_tiers
from tests.molecule import state_dir
from tests.plugins import collections_path

REPO = Path(__file__).resolve().parents[2]
# One scenario's limit: the longest (nvidia_driver, nvidia_container_toolkit) took 11-15 minutes
# alone and overran 25 beside other work on a loaded 2-core machine before their connection
# was pipelined (about half that now); they run beside the unit tests and the lab's
# integration tests (scripts/test.sh), and the limit is a backstop.
LIMIT_S = 3600
# Scenarios on a running lab's node rather than containers of their own: run by
# scripts/ansible-next.sh against the lab it starts, not here.
LAB_SCENARIOS = frozenset({"net_sysctl_lab"})
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")
                   if p.parent.name not in LAB_SCENARIOS)
PARALLEL = int(os.environ.get("NODETUNE_MOLECULE_PARALLEL", "3"))
# The scenarios run niced, in the suite's background CPU tier where there is one (command()):
# beside the lab's integration tests, the suite's critical path (scripts/test.sh), they
# take the CPU the lab's tests leave.
NICE = int(os.environ.get("NODETUNE_MOLECULE_NICE", "10"))
# Measured on a 2-core machine, longest first (2026-11-29, three at a time beside the lab's
# tests: 1223, 1194, 603, 513, 433 and 300 s); scenarios not named here start after
# these, by name (network: the four network roles, 760 s as four scenarios before).
LONGEST_FIRST = ("nvidia_container_toolkit", "nvidia_driver", "slurm_healthcheck",
                 "ofed_doca", "ofed", "net_mtu_netplan")

Result = tuple[int, str, float]
_runs: dict[str, Future[Result]] = {}
_procs: dict[str, subprocess.Popen[str]] = {}
_lock = threading.Lock()
_stopping = False
_pool: ThreadPoolExecutor | None = None


def failed_creating(scenario: str, output: str) -> bool:
    """Whether molecule failed while creating the scenario's containers, before any role ran.

    podman 4.3 with netavark 1.4 (Debian 12) sets up and tears down the default bridge without
    a lock: a container started while another scenario's last one is removed can fail with
    "netavark: No such file or directory". That is the host's container engine, not the role.
    """
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    return re.search(rf"\b{re.escape(scenario)} > create\]?:? Executed: Failed", plain) is not None


def _molecule(scenario: str) -> Result:
    code, output, took = _attempt(scenario)
    if code != 0 and failed_creating(scenario, output):
        # Once more: molecule's own create step failed, so no task of the role has run.
        again, output2, took2 = _attempt(scenario)
        return again, (f"first attempt failed creating the containers:\n{output[-3000:]}\n"
                       f"second attempt:\n{output2}"), took + took2
    return code, output, took


def _with_tools() -> dict[str, str]:
    """This environment with this Python's bin (molecule, ansible) first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                  f"{os.environ['PATH']}"}


def _attempt(scenario: str) -> Result:
    base = {**_with_tools(), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_COLLECTIONS_PATH": collections_path(),
            "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0"}
    started = time.monotonic()
    # A state directory of the run's own (tests/molecule/state_dir.py), removed once the run
    # has ended, failed or been stopped (stop(): communicate() returns once molecule and
    # what it started have ended).
    with state_dir.own(base) as env:
        with _lock:
            if _stopping:
                return -1, "not run: the session ended first", 0.0
            proc = subprocess.Popen(command(scenario), cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _procs[scenario] = proc
        try:
            out, err = proc.communicate(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            # Killed mid-scenario: its instances (fixed names) must not outlive it.
            subprocess.run(["molecule", "destroy", "-s", scenario], cwd=REPO, env=env,
                           capture_output=True, timeout=300, check=False)
            err += (f"\nkilled after {LIMIT_S} s; instances destroyed "
                    f"(molecule destroy -s {scenario})")
    return proc.returncode, out[-6000:] + err[-3000:], time.monotonic() - started


def command(scenario: str) -> list[str]:
    """``molecule test`` of ``scenario``, niced, and in the suite's background CPU tier where
    scripts/test.sh made one (tests/cpu_tiers.py: nice alone does not keep a scenario's
    work behind the lab's tests, which run in sessions and cgroups of their own)."""
    argv = ["nice", "-n", str(NICE), "molecule", "test", "-s", scenario]
    tier = os.environ.get(cpu_tiers.ENV)
    # molecule starts in the tier and what it starts stays there: its playbooks and every
    # task on its instances (entered with nsenter, accounted to the caller's cgroup). The
    # instances' own init and services stay in podman's cgroups, at the default weight.
    return cpu_tiers.run_argv(tier, argv) if tier else argv


def order(scenarios: Iterable[str]) -> list[str]:
    """The scenarios in the order they start: the known long ones first, then by name."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(set(scenarios), key=lambda s: (rank.get(s, len(rank)), s))


def start(scenarios: Iterable[str]) -> None:
    """Start the scenarios not started yet (PARALLEL at a time)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="molecule")
    for scenario in order(s for s in scenarios if s not in _runs):
        _runs[scenario] = _pool.submit(_molecule, scenario)


def result(scenario: str) -> Result:
    """The scenario's exit code, output tail and seconds, once it has run."""
    start([scenario])
    return _runs[scenario].result()


def timings() -> list[tuple[str, int, float]]:
    """Each scenario that has ended, longest first: its name, exit code and wall seconds
    (its retry included)."""
    ended = [(name, *run.result()) for name, run in _runs.items()
             if run.done() and not run.cancelled()]
    return sorted(((name, code, took) for name, code, _out, took in ended),
                  key=lambda row: -row[2])


def stop() -> None:
    """End of the session: a scenario still running (pytest stopped early) is stopped and
    its containers destroyed; none not started yet starts."""
    global _stopping
    with _lock:
        _stopping = True
        running = [(name, proc) for name, proc in _procs.items() if proc.poll() is None]
    for name, proc in running:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with state_dir.own(_with_tools()) as env:  # the destroy's own, as a run's
            subprocess.run(["molecule", "destroy", "-s", name], cwd=REPO, capture_output=True,
                           env=env, timeout=300, check=False)
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
