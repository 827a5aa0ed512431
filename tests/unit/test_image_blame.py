"""``--image``: one rule for whose fault a probe that did not answer is, the same through
both launchers (:data:`nodetune.remote.executor.RULES`, whose stages
:mod:`nodetune.container.probe` explains).

Each case runs the real probe code of both launchers on this machine over one stand-in:

- over SSH: :func:`nodetune.container.probe.probe_node` (and ``check``'s
  :func:`~nodetune.container.probe.check_results`) through an executor over a local
  session, with a stand-in ``podman`` on PATH;
- under Slurm: :func:`nodetune.container.slurm_probe.probe_steps` and
  :func:`~nodetune.container.slurm_probe.judge_nodes` (and ``check``'s
  :func:`nodetune.check.slurm_image.with_image`) in an allocation whose controller is
  this machine, with a stand-in ``srun`` on PATH that runs each step's ``sh -c`` locally
  and, for pyxis's ``--container-image``, imports the image as the stand-in ``podman``
  pulls it.

The stand-ins are one script (:data:`STAND_IN`), named ``podman`` and ``srun``; they
share one image store and one fault: a pull that hangs or fails (no registry here), a
container whose probe hangs or whose Python is not there. A hang lasts until the test
releases it. The node's "broken Python" is a stand-in too (:data:`BROKEN_PYTHON`): a
Python whose shared library is gone, as after a half-done upgrade. The probe itself is
the real one, run by this test's Python on "the node" and "in the container".
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import slurm_image as check_slurm_image
from nodetune.check.model import NodeChecks, Status
from nodetune.collective import launch
from nodetune.collective import plan as plan_mod
from nodetune.collective.nodes import RunNode
from nodetune.container import probe as cp
from nodetune.container import runtime as ct
from nodetune.container import slurm_probe as sp
from nodetune.errors import ExitCode, ImageError, ImageTimeout, LaunchError, NodetuneError
from nodetune.remote.executor import RULES, Outcome, Stage, fault
from nodetune.remote.session import LocalSession, new_run_id
from nodetune.remote.ssh_config import ConnectSpec
from nodetune.remote.ssh_executor import SshExecutor, over_session
from nodetune.slurm.allocation import Allocation
from nodetune.validate import slurm_pair
from nodetune.validate.verb import blamed_host, left_alone
from nodetune.verdicts import NodeState

IMAGE = "registry.example/train:1"
RUN_ID = new_run_id()  # this process's own: never shared with another worker's tests
TIMEOUT = 5.0  # each probe step's limit; the pull's and the import's too (IMPORT_S below)
# The same limit where the case's fault is a hang, which each launcher waits out: short,
# yet many times what a step that does answer takes here (a whole case's eight or so
# steps end in under a second), so only the hung step runs past it.
HANG_TIMEOUT = 2.0

STAND_IN = r'''#!/usr/bin/env python3
"""Stand-in for a container runtime (named podman) and for srun with pyxis (named srun):
no runtime, registry or Slurm here. One image store and one fault, in STANDIN_DIR."""
import json, os, subprocess, sys, time
state = os.environ["STANDIN_DIR"]
fault = json.load(open(os.path.join(state, "fault.json")))
store = os.path.join(state, "images")

def hang():
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(state, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(1)

def images():
    return open(store).read().split() if os.path.exists(store) else []

def pull(image):  # podman pull, and pyxis's import: the same registry
    if fault.get("pull") == "hang":
        hang()
    if fault.get("pull") == "fail":
        return False
    with open(store, "a") as f:
        f.write(image + "\n")
    return True

def contained(argv):  # the command in the container: the probe by the image's Python
    if fault.get("probe") == "hang":
        hang()
    if fault.get("probe") == "no-python":
        print(f"Error: crun: executable file `{argv[0]}` not found in $PATH", file=sys.stderr)
        return 127
    return subprocess.run(argv).returncode

def podman(args):
    if args[:2] == ["image", "exists"]:
        return 0 if args[2] in images() else 1
    if args[0] == "pull":
        if pull(args[-1]):
            return 0
        print(f"Error: initializing source docker://{args[-1]}: pinging container registry "
              "registry.example: connect: connection refused", file=sys.stderr)
        return 125
    if args[:2] == ["image", "inspect"]:
        print("sha256:5ca1ab1e sha256:0ddba11")
        return 0
    if args[0] == "run":
        image = next(a for a in args if a in images())
        return contained(args[args.index(image) + 1:])
    if args[0] == "rm":
        return 0
    print(f"stand-in podman: {args[0]} not known", file=sys.stderr)
    return 125

def srun(args):
    nodes = args[args.index("-w") + 1].split(",")
    chdir = next((a.split("=", 1)[1] for a in args if a.startswith("--chdir=")), None)
    i = max(k for k in range(len(args) - 1) if args[k:k + 2] == ["sh", "-c"])
    image = args[args.index("--container-image") + 1] if "--container-image" in args else None
    if image is not None and image not in images() and not pull(image):
        print("slurmstepd: error: pyxis: failed to import docker image", flush=True)
        return 1
    sys.stdin.close()
    worst = 0  # srun exits with its tasks' highest exit code, and names each failed task
    for task, node in enumerate(nodes):
        env = {**os.environ, "SLURMD_NODENAME": node, "SLURM_JOB_ID": "42",
               "SLURM_STEP_ID": "3"}
        if image is not None:
            if fault.get("probe") == "hang":
                hang()
            if fault.get("probe") == "no-python":
                print("slurmstepd: error: execve(): python3: No such file or directory",
                      flush=True)
                continue
        out = subprocess.run(args[i:], env=env, cwd=chdir, capture_output=True, text=True)
        for line in (out.stdout + out.stderr).splitlines():
            print(f"{task}: {line}", flush=True)
        if out.returncode:
            print(f"srun: error: {node}: task {task}: Exited with exit code {out.returncode}",
                  file=sys.stderr, flush=True)
            worst = max(worst, out.returncode)
    return worst

name = os.path.basename(sys.argv[0])
sys.exit(podman(sys.argv[1:]) if name == "podman" else srun(sys.argv[1:]))
'''
BROKEN_PYTHON = """#!/bin/sh
# Stand-in for a node's Python whose shared library is gone.
echo "$0: error while loading shared libraries: libpython3.11.so.1.0: cannot open shared \
object file: No such file or directory" >&2
exit 127
"""

# name: (the stand-in's fault, image already on the node, the node's Python broken)
CASES = {
    "answers": ({}, True, False),
    "pull fails": ({"pull": "fail"}, False, False),
    "pull hangs": ({"pull": "hang"}, False, False),
    "probe hangs in the container": ({"probe": "hang"}, True, False),
    "no python in the container": ({"probe": "no-python"}, True, False),
    "the node's python is broken": ({}, True, True),
}


class Lab:
    """The stand-ins' directory, this "node"'s run directory, and each launcher's probe."""

    def __init__(self, root: Path, fault: dict[str, str], present: bool,
                 broken: bool) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        for name in ("podman", "srun"):
            (self.bin / name).write_text(STAND_IN)
            (self.bin / name).chmod(0o755)
        (root / "fault.json").write_text(json.dumps(fault))
        if present:
            (root / "images").write_text(IMAGE + "\n")
        python = sys.executable
        if broken:
            python = str(self.bin / "python3-broken")
            (self.bin / "python3-broken").write_text(BROKEN_PYTHON)
            (self.bin / "python3-broken").chmod(0o755)
        self.node_python = python
        self.timeout = HANG_TIMEOUT if "hang" in fault.values() else TIMEOUT
        self.workdir = root / "run"
        self.workdir.mkdir()
        (self.workdir / sp.PROBE_NAME).write_bytes(sp.staged_files(IMAGE)[sp.PROBE_NAME])

    def plan(self, runtime: str) -> plan_mod.Plan:
        """A pair of "nodes" (both this machine) as validate --image plans it."""
        def host(name: str) -> Host:
            return Host(name, ("gpu_nodes",), {
                "ansible_host": "127.0.0.1", "nodetune_container_runtime": runtime,
                "nodetune_python": self.node_python,
                "nodetune_container_python": sys.executable})
        return plan_mod.plan_pair(plan_mod.Pair(host("gpu-a"), host("gpu-b")),
                                  plan_mod.Options(image=IMAGE, timeout=self.timeout))

    def host(self, runtime: str) -> Host:
        return self.plan(runtime).nodes[0].host

    def session(self) -> LocalSession:
        return LocalSession(ConnectSpec(host="gpu-a", address="gpu-a", local=True))

    def executor(self) -> SshExecutor:
        """check's executor over gpu-a's session (check/run.py)."""
        return SshExecutor({"gpu-a": self.session()})

    def over_ssh(self) -> list[str]:
        """The SSH launcher's --image preflight on rank 0 (validate's launch): the
        probe, the checklist, then the worker's argv in the container."""
        session = self.session()
        node = RunNode(self.plan("podman").nodes[0], runner=over_session("gpu-a", session),
                       tmpdir=str(self.workdir))
        return launch._image_argv(node, IMAGE, "127.0.0.1", self.timeout, lambda _e: None,
                                  RUN_ID, {}, SshExecutor({node.name: session}))

    def allocation(self) -> Allocation:
        return Allocation(session=LocalSession(ConnectSpec(  # type: ignore[arg-type]
            host="ctl", address="ctl", local=True)), where="ctl", job="42",
            names={"gpu-a": "nid001", "gpu-b": "nid002"}, run_id=RUN_ID,
            workdir=str(self.workdir), lock=threading.Lock())

    def under_slurm(self) -> None:
        """The Slurm launcher's --image preflight (two probe steps, the judgement), as
        the pair's run raises its checklist's failure."""
        _, probed = slurm_pair.preflight(self.plan("pyxis"), self.allocation(), IMAGE)
        bad = sp.failed(probed)
        if bad is not None:
            raise bad


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             request: pytest.FixtureRequest) -> Iterator[Lab]:
    lab = Lab(tmp_path, *CASES[request.param])
    monkeypatch.setenv("PATH", f"{lab.bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_DIR", str(tmp_path))
    monkeypatch.setattr(ct, "IMPORT_S", lab.timeout)  # the pull's and the import's least time
    yield lab
    (tmp_path / "release").write_text("")  # ends what still hangs


def outcome(probe: Callable[[], object]) -> tuple[str, int, bool, str | None]:
    """What the run makes of one launcher's preflight: the error's class, exit code,
    whether it blames the node, and the node --drain-unreachable would drain."""
    with pytest.raises(NodetuneError) as err:
        probe()
    exc = err.value
    return type(exc).__name__, int(exc.exit_code), exc.blames_node, blamed_host(
        exc, ["gpu-a", "gpu-b"])


EXPECTED = {
    # this test's Python has no torch: the image's checklist fails on container.torch
    "answers": ("ImageCheckFailed", 1, False, None),
    "pull fails": ("ImageError", 3, False, None),
    "pull hangs": ("ImageTimeout", 4, False, None),
    "probe hangs in the container": ("ImageTimeout", 4, False, None),
    "no python in the container": ("ImageError", 3, False, None),
    "the node's python is broken": ("LaunchError", 3, True, "gpu-a"),
}


@pytest.mark.parametrize("stand_in", list(CASES), indirect=True)
def test_both_launchers_blame_the_same(stand_in: Lab, request: pytest.FixtureRequest) -> None:
    """A hung or failed pull or a hung or silent container is the image's (no node
    convicted, none drained even under --drain-unreachable); a node whose own Python
    cannot run the bare probe is the node's."""
    case = request.node.callspec.params["stand_in"]
    ssh = outcome(stand_in.over_ssh)
    slurm = outcome(stand_in.under_slurm)
    assert ssh == slurm == EXPECTED[case], (ssh, slurm)


@pytest.mark.parametrize("stand_in", ["pull hangs"], indirect=True)
def test_a_hung_pull_is_named_and_leaves_the_node_to_slurm(stand_in: Lab) -> None:
    with pytest.raises(ImageTimeout) as ssh:
        stand_in.over_ssh()
    assert ssh.value.host == "gpu-a" and f"podman pull {IMAGE} did not end" in ssh.value.message
    held = left_alone(ssh.value, ["gpu-a", "gpu-b"])
    assert held is not None and set(held) == {"gpu-a", "gpu-b"}
    with pytest.raises(ImageTimeout) as slurm:
        stand_in.under_slurm()
    assert f"the container probe in {IMAGE} did not end" in slurm.value.message
    assert left_alone(slurm.value, ["gpu-a", "gpu-b"]) is not None


@pytest.mark.parametrize("stand_in", ["the node's python is broken"], indirect=True)
def test_a_broken_node_python_is_the_nodes_in_check_through_both_launchers(
        stand_in: Lab) -> None:
    """check --image: over SSH the probe's error is the node's (check/run.py keeps
    exc.blames_node); under Slurm that node's check says what failed, blamed on it, and
    its own checks stay."""
    with pytest.raises(LaunchError) as ssh:
        cp.check_results(stand_in.executor(), ct.config(stand_in.host("podman"), IMAGE),
                         node_python=stand_in.node_python, timeout=stand_in.timeout)
    assert ssh.value.blames_node and ssh.value.host == "gpu-a"
    assert "libpython3.11.so.1.0" in ssh.value.message
    own = {"gpu-a": NodeChecks("gpu-a")}
    got = check_slurm_image.with_image(stand_in.allocation(), [stand_in.host("pyxis")],
                                       own, IMAGE, timeout=stand_in.timeout)["gpu-a"]
    assert got.error is not None and "did not run the container probe" in got.error
    assert "libpython3.11.so.1.0" in got.error
    assert got.error_exit_code == ExitCode.INFRASTRUCTURE and got.error_blames_node
    assert got.verdict().state is NodeState.UNREACHABLE and got.image_fault() is None


@pytest.mark.parametrize("stand_in", ["pull fails"], indirect=True)
def test_an_image_that_cannot_be_had_fails_container_image_through_both(
        stand_in: Lab) -> None:
    ssh = cp.check_results(stand_in.executor(), ct.config(stand_in.host("podman"), IMAGE),
                           node_python=stand_in.node_python, timeout=stand_in.timeout)
    got = check_slurm_image.with_image(stand_in.allocation(), [stand_in.host("pyxis")],
                                       {"gpu-a": NodeChecks("gpu-a")}, IMAGE,
                                       timeout=stand_in.timeout)["gpu-a"]
    for results in (ssh, got.results):
        image = next(r for r in results if r.name == "container.image")
        assert image.status is Status.FAIL
        assert {r.status for r in results if r is not image} == {Status.SKIP}
    assert got.error is None and got.image_fault() is not None


def test_the_rule_table_covers_every_stage_and_outcome() -> None:
    assert set(RULES) == {(s, o) for s in Stage for o in Outcome}
    for (stage, outcome_), kind in RULES.items():
        err = fault(stage, outcome_, "x", host="gpu-a")
        assert type(err) is kind and err.host == "gpu-a"
        assert err.blames_node is (stage is Stage.NODE)
        assert err.exit_code == (ExitCode.TIMEOUT if outcome_ is Outcome.HUNG
                                 else ExitCode.INFRASTRUCTURE)
    assert issubclass(ImageTimeout, type(fault(Stage.NODE, Outcome.HUNG, "x", host=None)))
    assert RULES[(Stage.CONTAINER, Outcome.FAILED)] is ImageError
