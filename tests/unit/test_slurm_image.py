"""``validate --image --launcher slurm``: the step argv per runtime (pyxis, OCI), its
quoting, the refusals before any allocation, and the checklist read from the probe steps.

``srun --help`` excerpts: Slurm 22.05's own help text (src/srun/libsrun/opt.c, "--container
Path to OCI container bundle") and pyxis's SPANK options as ``srun --help`` lists them
(NVIDIA/pyxis README, "--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH").

The step tests run a stand-in ``srun`` (no Slurm here): it runs the step's ``sh -c``
script once per ``-w`` node with ``SLURMD_NODENAME`` set and prints each task's lines
with srun ``--label``'s ``N: `` prefix, and records the options it was given.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
from pathlib import Path

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import plan as plan_mod
from nodetune.container import probe as cp
from nodetune.container import runtime as ct
from nodetune.container import slurm_probe as sp
from nodetune.errors import ImageCheckFailed, ImageError, InputError
from nodetune.remote.session import CommandResult, LocalSession, new_run_id, shell_command
from nodetune.remote.ssh_config import ConnectSpec
from nodetune.slurm import commands
from nodetune.slurm.allocation import Allocation
from nodetune.validate import slurm_pair
from nodetune.validate.slurm_pair import run_pair_slurm

IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"
BUNDLE = "/srv/bundles/pytorch"
WORKDIR = "/tmp/nodetune-validate.abcd1234"
SLURM_2205_HELP = """\
      --comment=name          arbitrary comment
      --compress[=library]    data compression library used with --bcast
      --container             Path to OCI container bundle
      --cpu-freq=min[-max[:gov]] requested cpu frequency (and governor)
"""
PYXIS_HELP = """\
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
                              filesystem. Can be either a docker image given as
      --container-mounts=SRC:DST[:FLAGS][,SRC:DST...]
                              [pyxis] bind mount[s] inside the container. Mount
"""
NODE = {"gpu": True, "shm": 2**30 * 32, "rdma": ["uverbs0"], "ibverbs": True,
        "torch": "2.3.0", "cuda": "12.4", "nccl": "2.21.5"}


def host(name: str, **vars_: object) -> Host:
    return Host(name, ("gpu_nodes",), dict(vars_))


def a_plan(**vars_: object) -> plan_mod.Plan:
    return plan_mod.plan_pair(plan_mod.Pair(host("a", ansible_host="10.0.0.1", **vars_),
                                            host("b", **vars_)),
                              plan_mod.Options(image=IMAGE))


# --- argv and refusals -------------------------------------------------------------------

def test_the_steps_srun_puts_the_container_options_before_the_command() -> None:
    pyxis = ct.config(host("a", nodetune_container_runtime="pyxis"), IMAGE, launcher="slurm")
    opts = sp.srun_options({"a": pyxis}, WORKDIR)
    argv = commands.srun("42", ["gpu-a", "gpu-b"], ["sh", "-c", "echo"], name="n",
                         chdir=WORKDIR, label=True, container=opts)
    assert argv[argv.index("--label") + 1:] == [
        "--container-image", IMAGE, "--container-mounts", f"{WORKDIR}:{WORKDIR}:ro",
        "--container-workdir", WORKDIR, "--no-container-remap-root", "sh", "-c", "echo"]
    assert shlex.split(shell_command(argv)) == argv  # '#' and ':' stay one word each
    oci = ct.config(host("a", nodetune_container_runtime="oci"), BUNDLE, launcher="slurm")
    argv = commands.srun("42", ["gpu-a"], ["sh"], name="n", container=sp.srun_options(
        {"a": oci}, WORKDIR))
    assert argv[-4:] == ["--container", BUNDLE, f"--chdir={WORKDIR}", "sh"]


def test_a_runtime_the_cluster_lacks_is_named_from_srun_help() -> None:
    assert ct.lacks_runtime(SLURM_2205_HELP + PYXIS_HELP, "pyxis") is None
    assert ct.lacks_runtime(SLURM_2205_HELP, "oci") is None
    why = ct.lacks_runtime(SLURM_2205_HELP, "pyxis")
    assert why is not None and "--container-image" in why and "pyxis" in why
    # pyxis's --container-image is not Slurm's own --container
    assert ct.lacks_runtime(PYXIS_HELP, "oci") is not None


class HelpSession:
    """Answers ``srun --help`` as a controller would (Slurm's text, as above)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ran: list[list[str]] = []

    def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        self.ran.append(argv)
        return CommandResult(0, self.text, "")


def test_require_runtime_refuses_with_exit_2_before_salloc() -> None:
    hosts = [host("a", nodetune_container_runtime="pyxis")]
    bare = HelpSession(SLURM_2205_HELP)
    with pytest.raises(InputError, match="srun --help lists no --container-image") as err:
        sp.require_runtime(bare, hosts, IMAGE, where="ctl")  # type: ignore[arg-type]
    assert err.value.host == "a" and bare.ran == [["srun", "--help"]]
    sp.require_runtime(HelpSession(SLURM_2205_HELP + PYXIS_HELP), hosts,  # type: ignore[arg-type]
                       IMAGE, where="ctl")


@pytest.mark.parametrize(("vars_b", "image", "match"), [
    ({"nodetune_container_runtime": "oci"}, BUNDLE, "must be the same on every host"),
    ({"nodetune_container_mounts": ["/data:/data"]}, IMAGE, "must be the same"),
    ({"nodetune_container_shm_size": "16g"}, IMAGE, "the host's .pyxis. or the OCI bundle's"),
    ({}, "nvcr.io/nvidia/pytorch:24.05-py3", None),
])
def test_one_step_needs_one_container_setup_on_every_host(
        vars_b: dict[str, object], image: str, match: str | None) -> None:
    hosts = [host("a", nodetune_container_runtime="pyxis"),
             host("b", nodetune_container_runtime="pyxis", **{
                 k: v for k, v in vars_b.items() if k != "nodetune_container_runtime"})]
    if "nodetune_container_runtime" in vars_b:
        hosts[1] = host("b", **vars_b)
    if match is None:
        ct.check_request(hosts, image, launcher="slurm")
        return
    with pytest.raises(InputError, match=match) as err:
        ct.check_request(hosts, image, launcher="slurm")
    assert err.value.host == "b"


def test_oci_takes_a_bundle_path_and_only_pyxis_takes_registry_hash() -> None:
    oci = [host("a", nodetune_container_runtime="oci")]
    with pytest.raises(InputError, match="absolute path of an OCI bundle"):
        ct.check_request(oci, "nvcr.io/nvidia/pytorch:24.05-py3", launcher="slurm")
    ct.check_request(oci, BUNDLE, launcher="slurm")
    with pytest.raises(InputError, match="REGISTRY#IMAGE is pyxis's form"):
        ct.check_request([host("a")], IMAGE, launcher="ssh")
    with pytest.raises(InputError):
        ct.check_request(oci, "/srv/b; reboot", launcher="slurm")


# --- the checklist from the probe steps --------------------------------------------------

def _lines(doc: dict[str, object]) -> list[str]:
    return ["some log line", cp.MARK + json.dumps(doc)]


class FakeAlloc:
    """Only the allocation's Slurm names (judge_nodes reads nothing else)."""

    def __init__(self) -> None:
        self.names = {"a": "a", "b": "b"}


def test_probe_lines_make_the_same_checklist_as_over_ssh() -> None:
    plan = a_plan(nodetune_container_runtime="pyxis")
    containers = {n: ct.config(host(n, nodetune_container_runtime="pyxis"), IMAGE,
                               launcher="slurm") for n in ("a", "b")}
    small = {**NODE, "shm": 64 * 2**20}
    probed = sp.judge_nodes(slurm_pair.probe_targets(plan), FakeAlloc(), containers,  # type: ignore[arg-type]
                            {"a": _lines(NODE), "b": _lines(NODE)},
                            {"a": _lines(NODE), "b": _lines(small)})
    assert not probed["a"].failures and probed["a"].to_dict()["node_nccl"] == "2.21.5"
    bad = sp.failed(probed)
    assert isinstance(bad, ImageCheckFailed) and bad.host == "b" and not bad.blames_node
    assert "/dev/shm inside the container is 64.0 MiB, below 1.0 GiB" in bad.message
    assert sp.failed({"a": probed["a"]}) is None
    other = {**NODE, "nccl": "2.20.3"}
    both = sp.judge_nodes(slurm_pair.probe_targets(plan), FakeAlloc(), containers,  # type: ignore[arg-type]
                          {"a": _lines(NODE), "b": _lines(NODE)},
                          {"a": _lines(other), "b": _lines(small)})
    said = sp.failed(both)
    assert said is not None and said.host == "a"
    assert "a: the image's NCCL 2.20.3 differs" in said.message and "b: " in said.message


def test_a_missing_bundle_or_a_silent_container_is_exit_3_naming_the_node() -> None:
    plan = a_plan(nodetune_container_runtime="oci")
    oci = {n: ct.config(host(n, nodetune_container_runtime="oci"), BUNDLE, launcher="slurm")
           for n in ("a", "b")}
    with pytest.raises(ImageError, match="OCI bundle /srv/bundles/pytorch is not on") as err:
        sp.judge_nodes(slurm_pair.probe_targets(plan), FakeAlloc(), oci,  # type: ignore[arg-type]
                       {"a": [f"{sp.BUNDLE_MARK}sha256:ab", *_lines(NODE)],
                        "b": [f"{sp.BUNDLE_MARK}missing", *_lines(NODE)]},
                       {"a": _lines(NODE), "b": _lines(NODE)})
    assert err.value.host == "b" and err.value.exit_code == 3 and not err.value.blames_node
    pyxis = {n: ct.config(host(n, nodetune_container_runtime="pyxis"), IMAGE,
                          launcher="slurm") for n in ("a", "b")}
    said = ["pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.05-py3",
            "slurmstepd: error: pyxis: failed to import docker image"]
    with pytest.raises(ImageError, match="failed to import docker image") as err:
        sp.judge_nodes(slurm_pair.probe_targets(plan), FakeAlloc(), pyxis,  # type: ignore[arg-type]
                       {"a": _lines(NODE), "b": _lines(NODE)}, {"a": said, "b": said})
    assert err.value.host == "a"


STAND_IN_SRUN = r'''#!/usr/bin/env python3
"""Stand-in for srun --label (no Slurm here): the step's sh -c once per -w node."""
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["SRUN_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
nodes = args[args.index("-w") + 1].split(",")
chdir = next((a.split("=", 1)[1] for a in args if a.startswith("--chdir=")), None)
i = max(k for k in range(len(args) - 1) if args[k:k + 2] == ["sh", "-c"])
sys.stdin.close()
for task, node in enumerate(nodes):
    env = {**os.environ, "SLURMD_NODENAME": node, "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3"}
    out = subprocess.run(args[i:], env=env, cwd=chdir, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        print(f"{task}: {line}", flush=True)
'''


def test_probe_steps_run_bare_then_in_the_container_and_judge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir, workdir = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    workdir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(STAND_IN_SRUN)
    srun.chmod(0o755)
    (workdir / sp.PROBE_NAME).write_bytes(sp.staged_files(IMAGE)[sp.PROBE_NAME])
    log = tmp_path / "srun.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SRUN_LOG", str(log))
    py = sys.executable
    plan = a_plan(nodetune_container_runtime="pyxis", nodetune_python=py,
                  nodetune_container_python=py)
    alloc = Allocation(session=LocalSession(ConnectSpec(host="ctl", address="ctl",
                                                        local=True)),  # type: ignore[arg-type]
                       where="ctl", job="42", names={"a": "a", "b": "b"},
                       run_id=new_run_id(), workdir=str(workdir), lock=threading.Lock())
    # This test's Python has no torch: the image's checklist fails on container.torch,
    # named, after both steps ran (no stand-in answers for the probe itself).
    _, probed = slurm_pair.preflight(plan, alloc, IMAGE)
    bad = sp.failed(probed)
    assert bad is not None and bad.host == "a" and "cannot import torch" in bad.message
    assert probed["b"].to_dict()["checks"][0]["name"] == "container.torch"
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(ran) == 2 and "--container-image" not in ran[0]
    assert ran[1][ran[1].index("--container-image") + 1] == IMAGE
    assert [s["name"] for s in alloc.steps] == ["nodetune-probe", "nodetune-probe-image"]
    # The pair's run stops there, before its worker step, and keeps the checklist.
    with pytest.raises(ImageCheckFailed) as err:
        run_pair_slurm(plan, alloc)
    assert err.value.sections is not None
    assert set(err.value.sections["container"]) == {"a", "b"}
    assert err.value.sections["container"]["a"]["runtime"] == "pyxis"
    assert len(log.read_text().splitlines()) == 4  # two probe steps again, no worker step
