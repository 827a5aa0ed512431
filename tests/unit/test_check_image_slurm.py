"""``check --image --launcher slurm`` and ``check --image --drain``: the container checklist
in the node-local check's allocation (validate's probe steps, judged per node), and Slurm
leaving alone a node whose only faults are the training image's.

The probe lines are the container probe's own (``NODETUNE_CONTAINER {json}``), as the
lab's OCI bundle prints them (tests/integration/test_slurm_launcher.py); the node-local
check's ``software.nccl`` is shaped as :func:`nodetune.check.software.judge_nccl` writes it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import slurm_image, slurm_launch
from nodetune.check.model import CheckResult, NodeChecks, Status
from nodetune.check.run import CheckOptions, exit_code
from nodetune.container import probe as cp
from nodetune.container import slurm_probe as sp
from nodetune.errors import ExitCode, InputError, NodeTimeout
from nodetune.records import RunRecord
from nodetune.remote.ssh import CommandResult
from nodetune.slurm.act import act
from nodetune.slurm.allocation import Allocation, StepOutput
from nodetune.slurm.commands import AllocOptions
from nodetune.slurm.model import SlurmOptions, SlurmPlan
from nodetune.slurm.state import SlurmNode
from nodetune.verdicts import NodeState

BUNDLE = "/srv/bundles/pytorch"
PYXIS_IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"
NODE = {"gpu": True, "shm": 2**30 * 32, "rdma": ["uverbs0"], "ibverbs": True,
        "torch": "2.3.0", "cuda": "12.4", "nccl": "2.21.5"}
NCCL_OK = CheckResult("software.nccl", Status.PASS, "NCCL 2.21.5", "NCCL available",
                      "torch.distributed.is_nccl_available()")
MTU = CheckResult("fabric.mtu[eth1]", Status.FAIL, "1400", "9000", "net_mtu_interfaces",
                  "eth1's MTU is not what net_mtu sets")


def host(name: str, runtime: str = "oci") -> Host:
    return Host(name, ("gpu_nodes",), {"nodetune_container_runtime": runtime})


HOSTS = [host("gpu-a"), host("gpu-b")]


def _alloc() -> Allocation:
    return Allocation(session=None, where="ctl", job="42",  # type: ignore[arg-type]
                      names={"gpu-a": "nid001", "gpu-b": "nid002"}, run_id="ab12cd34" * 4,
                      workdir="/tmp/nodetune-validate.ab12cd34")


def probe(doc: dict[str, Any]) -> str:
    return cp.MARK + json.dumps(doc)


def steps(monkeypatch: pytest.MonkeyPatch, bare: dict[str, list[str]],
          inside: dict[str, list[str]], srun_inside: Sequence[str] = ()) -> list[Any]:
    """validate's two probe steps, answering with these lines (by Slurm name)."""
    asked: list[Any] = []

    def probe_steps(targets: Any, alloc: Any, image: str, *, timeout: float,
                    progress: Any) -> Any:
        asked.append((targets, image, timeout))
        containers = {t.name: sp.ct.config(t.host, image, launcher="slurm") for t in targets}
        return (containers, StepOutput(bare, [], 0),
                StepOutput(inside, list(srun_inside), 0))
    monkeypatch.setattr(slurm_image.sp, "probe_steps", probe_steps)
    return asked


def bundle_lines(doc: dict[str, Any]) -> list[str]:
    return [f"{sp.BUNDLE_MARK}sha256:ab12", probe(doc)]


def statuses(checks: NodeChecks) -> dict[str, str]:
    return {r.name: r.status.value for r in checks.results if r.name.startswith("container.")}


# --- step 1: the checklist in the check's allocation ------------------------------------

def test_the_checklist_joins_each_nodes_own_checks_with_the_node_local_nccl(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's NCCL is the node-local check's (software.nccl), not the bare probe's."""
    asked = steps(monkeypatch, {"nid001": bundle_lines({**NODE, "nccl": "2.18.1"}),
                                "nid002": bundle_lines(NODE)},
                  {"nid001": [probe(NODE)], "nid002": [probe({**NODE, "nccl": "2.20.3"})]})
    own = {h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in HOSTS}
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    ((targets, image, timeout),) = asked
    assert [t.name for t in targets] == ["gpu-a", "gpu-b"] and image == BUNDLE
    assert targets[0].python == "python3" and timeout == 90.0
    assert statuses(got["gpu-a"]) == dict.fromkeys(
        ("container.image", "container.torch", "container.shm", "container.rdma",
         "container.libibverbs", "container.nccl"), "pass")
    assert got["gpu-a"].get("container.image").measured == "sha256:ab12"  # type: ignore[union-attr]
    assert got["gpu-a"].get("software.nccl") == NCCL_OK  # its own checks stay
    (nccl,) = got["gpu-b"].failures
    assert nccl.name == "container.nccl" and nccl.measured == "2.20.3"
    assert "differs from the node's 2.21.5" in nccl.message
    assert exit_code(got) == ExitCode.CHECK_FAILED


def test_the_image_s_faults_are_named_as_over_ssh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small /dev/shm, no libibverbs: failed checks (exit 1); a bundle the node lacks fails
    container.image with the rest skipped, as a missing image over SSH."""
    steps(monkeypatch, {"nid001": bundle_lines(NODE),
                        "nid002": [f"{sp.BUNDLE_MARK}missing", probe(NODE)]},
          {"nid001": [probe({**NODE, "shm": 64 * 2**20, "ibverbs": False})], "nid002": []})
    own = {h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in HOSTS}
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    assert {r.name for r in got["gpu-a"].failures} == {"container.shm", "container.libibverbs"}
    shm = got["gpu-a"].get("container.shm")
    assert shm is not None and "/dev/shm inside the container is 64.0 MiB" in shm.message
    assert [r.name for r in got["gpu-b"].failures] == ["container.image"]
    assert "OCI bundle /srv/bundles/pytorch is not on the node" in got["gpu-b"].failures[0].message
    assert set(statuses(got["gpu-b"]).values()) == {"fail", "skip"}
    assert exit_code(got) == ExitCode.CHECK_FAILED


def test_an_image_pyxis_cannot_import_fails_container_image(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pyxis's own words (its slurm_error) on srun's stderr, no probe answer."""
    hosts = [host("gpu-a", "pyxis"), host("gpu-b", "pyxis")]
    said = ["slurmstepd: error: pyxis: child 185257 failed with error code: 1",
            "slurmstepd: error: pyxis: failed to import docker image"]
    steps(monkeypatch, {"nid001": [probe(NODE)], "nid002": [probe(NODE)]},
          {"nid001": [], "nid002": [probe(NODE)]}, srun_inside=said)
    own = {h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in hosts}
    got = slurm_image.with_image(_alloc(), hosts, own, PYXIS_IMAGE, timeout=90.0)
    (image,) = got["gpu-a"].failures
    assert image.name == "container.image" and "pyxis could not import image" in image.message
    assert not got["gpu-b"].failures  # it answered inside its container


def test_a_silent_container_is_exit_3_blaming_the_image_and_keeps_the_nodes_checks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    steps(monkeypatch, {"nid001": bundle_lines(NODE), "nid002": bundle_lines(NODE)},
          {"nid001": ["crun: executable file `python3` not found in $PATH"],
           "nid002": [probe(NODE)]})
    own = {"gpu-a": NodeChecks("gpu-a", results=(NCCL_OK, MTU)),
           "gpu-b": NodeChecks("gpu-b", error="the node-local check gave no report",
                               error_exit_code=3)}
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    a = got["gpu-a"]
    assert a.error is not None and "did not answer the probe" in a.error
    assert "python3` not found" in a.error and a.error_exit_code == 3
    assert not a.error_blames_node and a.results == (NCCL_OK, MTU)
    assert got["gpu-b"] == own["gpu-b"]  # not checked by the node-local check: left as is
    assert exit_code(got) == ExitCode.INFRASTRUCTURE


def test_a_nodes_python_that_cannot_run_the_probe_is_that_nodes_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One node's own Python fails the bare probe: that node's check says so and blames
    it (exit 3, its own checks kept); the other node keeps its checklist and verdict."""
    steps(monkeypatch, {"nid001": [f"{sp.BUNDLE_MARK}sha256:ab12",
                                   "/opt/venv/bin/python: error while loading shared "
                                   "libraries: libpython3.11.so.1.0"],
                        "nid002": bundle_lines(NODE)},
          {"nid001": [probe(NODE)], "nid002": [probe(NODE)]})
    own = {h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in HOSTS}
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    a, b = got["gpu-a"], got["gpu-b"]
    assert a.error is not None and "did not run the container probe on the node" in a.error
    assert "libpython3.11.so.1.0" in a.error
    assert a.error_exit_code == 3 and a.error_blames_node and a.results == (NCCL_OK,)
    assert a.verdict().state is NodeState.UNREACHABLE and a.image_fault() is None
    assert a.own().verdict().state is NodeState.UNREACHABLE  # Slurm judges it so too
    assert b.error is None and b.verdict().state is NodeState.GOOD
    assert set(statuses(b).values()) == {"pass"} and len(statuses(b)) == 6
    assert exit_code(got) == ExitCode.INFRASTRUCTURE


LATE = NodeTimeout("srun step nodetune-probe of job 42 did not end within 90 s", host="ctl")


def _raising(exc: Exception) -> Any:
    """A stand-in for the probe steps that raises ``exc``."""
    def steps(*_a: Any, **_k: Any) -> Any:
        raise exc
    return steps


def test_a_probe_step_past_the_timeout_is_exit_4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_image.sp, "probe_steps", _raising(LATE))
    own = {h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in HOSTS}
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    assert all(c.error_exit_code == 4 and c.results == (NCCL_OK,) for c in got.values())
    assert exit_code(got) == ExitCode.TIMEOUT


def test_the_allocation_asks_srun_for_the_runtime_first_and_stages_the_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One allocation: the runtime is asked of srun --help before salloc, the probe is
    staged beside the previous checks, the checklist follows the node-local step."""
    monkeypatch.setattr(slurm_launch.health, "load_history", lambda _d: [])
    seen: dict[str, Any] = {}

    @contextlib.contextmanager
    def allocated(_plan: Any, opts: AllocOptions, *, files: dict[str, bytes],
                  before: Any, **_: Any) -> Any:
        seen.update(files=files, before=before, run_s=opts.run_s)
        yield _alloc()
    monkeypatch.setattr(slurm_launch.allocation, "allocated", allocated)
    planned = type("P", (), {"names": {"gpu-a": "nid001", "gpu-b": "nid002"}, "where": "ctl"})()
    monkeypatch.setattr(slurm_launch, "check_in_step", lambda _a, hosts, *_x, **_k: {
        h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in hosts})
    monkeypatch.setattr(slurm_launch.slurm_image, "with_image", lambda _a, _h, results, image,
                        **_k: {**results, "image": image})

    class Held:
        alloc: Any = None
    got = slurm_launch.check_nodes_slurm(
        planned, HOSTS, CheckOptions(timeout=60, image=BUNDLE),
        AllocOptions(), held=Held())  # type: ignore[arg-type]
    assert got["image"] == BUNDLE  # type: ignore[comparison-overlap]
    assert seen["files"][sp.PROBE_NAME] == cp.PROBE.encode()
    assert seen["run_s"] == 60 + 2 * slurm_launch.STEP_MARGIN_S + 60 + sp.ct.IMPORT_S

    class Help:
        def run(self, argv: list[str], *, timeout: float) -> CommandResult:
            return CommandResult(0, "      --comment=name          arbitrary comment\n", "")
    with pytest.raises(InputError, match="srun --help lists no --container, ") as err:
        seen["before"](Help())
    assert err.value.host == "gpu-a"


# --- step 2: Slurm drains no node for the image's faults --------------------------------

SHM = CheckResult("container.shm", Status.FAIL, "64.0 MiB", ">= 1.0 GiB", "nodetune_min_shm",
                  "/dev/shm inside the container is 64.0 MiB, below 1.0 GiB")
IBV = CheckResult("container.libibverbs", Status.FAIL, "missing", "present", "NCCL guide",
                  "the image has no libibverbs.so.1: NCCL falls back to sockets")


def test_the_image_s_faults_alone_are_no_node_verdict_for_slurm() -> None:
    image_only = NodeChecks("gpu-a", results=(NCCL_OK, SHM, IBV))
    assert image_only.verdict().state is NodeState.BAD  # the run still fails, named
    assert image_only.own().verdict().state is NodeState.GOOD
    why = image_only.image_fault()
    assert why is not None and "training image's, not the node's" in why
    assert "container.shm (64.0 MiB" in why and "container.libibverbs (missing" in why
    both = NodeChecks("gpu-b", results=(NCCL_OK, SHM, MTU))
    assert both.image_fault() is None  # its own fault: drained for that, named alone
    mine = both.own().verdict()
    assert mine.state is NodeState.BAD and "fabric.mtu[eth1]" in mine.reason
    assert "container" not in mine.reason
    silent = NodeChecks("gpu-c", results=(NCCL_OK,), error="srun oci step did not answer",
                        error_exit_code=3, error_blames_node=False)
    assert silent.verdict().state is NodeState.UNREACHABLE
    assert silent.own().verdict().state is NodeState.GOOD
    assert "srun oci step did not answer" in (silent.image_fault() or "")
    down = NodeChecks("gpu-d", error="ssh: connection refused", error_exit_code=3)
    assert down.image_fault() is None and down.own().verdict().state is NodeState.UNREACHABLE
    assert NodeChecks("gpu-e", results=(NCCL_OK,)).image_fault() is None


class Controller:
    """Stands in for scontrol on the controller: two idle nodes, the commands asked."""

    def __init__(self) -> None:
        self.where = "ctl"
        self.ran: list[tuple[str, ...]] = []

    def nodes(self, names: Sequence[str]) -> dict[str, SlurmNode]:
        drained = {c[2].split("=", 1)[1] for c in self.ran if "state=drain" in c}
        return {n: SlurmNode(n, "idle+drain" if n in drained else "idle") for n in names}

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.ran.append(tuple(argv))
        return CommandResult(0, "", "")


@pytest.mark.parametrize("resume", [False, True])
def test_drain_passes_over_the_image_s_faults_and_still_drains_the_node_s(
        resume: bool) -> None:
    results = {"gpu-a": NodeChecks("gpu-a", results=(NCCL_OK, SHM)),
               "gpu-b": NodeChecks("gpu-b", results=(NCCL_OK, SHM, MTU))}
    plan = SlurmPlan(options=SlurmOptions(drain=True, resume=resume), controller=None,
                     names={"gpu-a": "nid001", "gpu-b": "nid002"})
    scontrol = Controller()
    run = RunRecord(path=Path("runs/r"), verb="check", started=datetime.now(UTC))
    report = act(plan, {n: c.own().verdict() for n, c in results.items()}, run=run,
                 scontrol=scontrol, runs=lambda _r: None,  # type: ignore[arg-type]
                 held={n: w for n, c in results.items() if (w := c.image_fault())})
    by_node = {a.node: a for a in report.actions}
    assert by_node["gpu-a"].action == "skip" and not by_node["gpu-a"].command
    assert by_node["gpu-a"].reason.startswith("not drained: its failures are the training "
                                              "image's")
    assert by_node["gpu-b"].action == "drain" and "fabric.mtu[eth1]" in by_node["gpu-b"].reason
    assert "container.shm" not in by_node["gpu-b"].reason
    assert [c[2] for c in scontrol.ran] == ["nodename=nid002"]


def test_the_image_steps_timeout_is_the_images_the_bare_steps_the_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A container step that hangs (an image import, a container that never answers) is
    the image's: no node is blamed (so none is drained, --drain-unreachable included); a
    bare step that hangs, or a node's Python that cannot run the probe, is the node's."""
    from nodetune.errors import ImageTimeout, LaunchError

    monkeypatch.setattr(slurm_image.sp, "probe_steps", _raising(ImageTimeout(
        "the container probe in /srv/bundles/pytorch did not end", host="ctl")))
    own = {h.name: NodeChecks(h.name, results=(NCCL_OK,)) for h in HOSTS}
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    assert all(c.error_exit_code == 4 and not c.error_blames_node for c in got.values())

    monkeypatch.setattr(slurm_image.sp, "probe_steps", _raising(LATE))
    got = slurm_image.with_image(_alloc(), HOSTS, own, BUNDLE, timeout=90.0)
    assert all(c.error_exit_code == 4 and c.error_blames_node for c in got.values())

    class Alloc:
        def __init__(self) -> None:
            self.names = {"gpu-a": "nid001", "gpu-b": "nid002"}
            self.run_id, self.workdir = "ab12cd34" * 4, "/tmp/nodetune-validate.ab12cd34"

        def run_step(self, _cmds: Any, *, name: str, **_k: Any) -> Any:
            if name == "nodetune-probe-image":
                raise NodeTimeout(f"srun step {name} of job 42 did not end within 900 s",
                                  host="ctl")
            return None
    monkeypatch.undo()
    with pytest.raises(ImageTimeout, match="container probe in /srv/bundles/pytorch") as err:
        slurm_image.sp.probe_steps([slurm_image.sp.Target(h, "python3") for h in HOSTS],
                                   Alloc(), BUNDLE, timeout=90.0)  # type: ignore[arg-type]
    assert not err.value.blames_node and err.value.exit_code == 4
    target = slurm_image.sp.Target(HOSTS[0], "/opt/venv/bin/python")
    oci = slurm_image.sp.ct.config(HOSTS[0], BUNDLE, launcher="slurm")
    with pytest.raises(LaunchError, match="did not run the container probe") as bare:
        slurm_image.sp.judge_node(target, oci, [f"{slurm_image.sp.BUNDLE_MARK}sha256:ab"],
                                  [], ["/opt/venv/bin/python: not found"], [])
    assert bare.value.blames_node and bare.value.host == "gpu-a"
